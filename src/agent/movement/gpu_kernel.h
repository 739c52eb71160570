/*
 * gpu_kernel.h - a kernel of the agent's own (PTX text) on one GPU: loaded
 * into the device's context, its entry found, launched with the two device
 * pointers the agent's kernels take, unloaded. Shared by agent_fingerprint.c
 * and agent_zero_scan.c, which keep their own tables, failure handling and
 * log lines; GS_GPU_STEP is the step macro both write their passes with.
 */
#ifndef GPUSNAP_AGENT_MOVEMENT_GPU_KERNEL_H
#define GPUSNAP_AGENT_MOVEMENT_GPU_KERNEL_H

#include "cuda/driver.h"

/*
 * One step of a pass: names it in `what`, keeps its result in `r` and jumps
 * to `out` when it failed, so the caller's exit path says which step failed.
 * Needs the locals `const char *what`, `CUresult r` and the label `out`.
 */
#define GS_GPU_STEP(name, call)                    \
	do {                                       \
		what = (name);                     \
		if ((r = (call)) != CUDA_SUCCESS)  \
			goto out;                  \
	} while (0)

struct gs_gpu_kernel {
	CUmodule mod; /* NULL: not loaded */
	CUfunction fn;
};

/*
 * Makes ctx current, loads ptx into it and finds entry in it. On failure
 * *what names the step that failed (the words GS_GPU_STEP callers log) and
 * whatever was loaded stays in k for gs_gpu_kernel_unload.
 */
CUresult gs_gpu_kernel_load(struct gs_cuda *cu, CUcontext ctx, const char *ptx, const char *entry,
			    struct gs_gpu_kernel *k, const char **what);

/* Launches k on stream over grid_x * grid_y blocks of threads, its parameters the device pointers p0 and p1. */
CUresult gs_gpu_kernel_launch(struct gs_cuda *cu, const struct gs_gpu_kernel *k, unsigned grid_x, unsigned grid_y,
			      unsigned threads, CUstream stream, CUdeviceptr p0, CUdeviceptr p1);

/* Unloads k's module if it was loaded; k is then empty. */
void gs_gpu_kernel_unload(struct gs_cuda *cu, struct gs_gpu_kernel *k);

#endif
