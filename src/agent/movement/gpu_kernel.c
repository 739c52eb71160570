/*
 * gpu_kernel.c - loading, launching and unloading the agent's own kernels
 * (see gpu_kernel.h).
 */
#include "agent/movement/gpu_kernel.h"

CUresult gs_gpu_kernel_load(struct gs_cuda *cu, CUcontext ctx, const char *ptx, const char *entry,
			    struct gs_gpu_kernel *k, const char **what)
{
	k->mod = NULL;
	k->fn = NULL;
	CUresult r = cu->cuCtxSetCurrent(ctx);
	*what = "making the context current";
	if (r == CUDA_SUCCESS) {
		*what = "loading its kernel";
		r = cu->cuModuleLoadData(&k->mod, ptx);
	}
	if (r == CUDA_SUCCESS) {
		*what = "finding its kernel";
		r = cu->cuModuleGetFunction(&k->fn, k->mod, entry);
	}
	return r;
}

CUresult gs_gpu_kernel_launch(struct gs_cuda *cu, const struct gs_gpu_kernel *k, unsigned grid_x, unsigned grid_y,
			      unsigned threads, CUstream stream, CUdeviceptr p0, CUdeviceptr p1)
{
	void *args[] = { &p0, &p1 };
	return cu->cuLaunchKernel(k->fn, grid_x, grid_y, 1, threads, 1, 1, 0, stream, args, NULL);
}

void gs_gpu_kernel_unload(struct gs_cuda *cu, struct gs_gpu_kernel *k)
{
	if (k->mod)
		cu->cuModuleUnload(k->mod);
	k->mod = NULL;
	k->fn = NULL;
}
