/*
 * nvml.h - GPU memory figures from NVML (libnvidia-ml.so.1 through dlopen):
 * memory used on each GPU and by each process. Optional: without NVML,
 * gpusnap works and reports no VRAM figures.
 */
#ifndef GPUSNAP_CUDA_NVML_H
#define GPUSNAP_CUDA_NVML_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_NVML_MAX_NAME 96

struct gs_nvml_gpu {
	unsigned index; /* NVML index = nvidia-smi index = PCI bus order */
	char uuid[96];  /* "GPU-xxxxxxxx-..." */
	char name[GS_NVML_MAX_NAME];
	uint64_t total_bytes, used_bytes;
};

struct gs_nvml;

/* NULL when NVML is unavailable; never an error for the caller. */
struct gs_nvml *gs_nvml_open(void);
void gs_nvml_close(struct gs_nvml *n);
/* Number of GPUs; fills up to max entries of gpus (memory read now). */
int gs_nvml_gpus(struct gs_nvml *n, struct gs_nvml_gpu *gpus, int max);
/*
 * Bytes of GPU memory the process holds on GPU `index` (0 if it holds none or
 * is not listed). Returns false if NVML could not answer.
 */
bool gs_nvml_process_bytes(struct gs_nvml *n, unsigned index, pid_t pid, uint64_t *bytes);

#endif
