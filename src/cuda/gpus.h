/*
 * gpus.h - the GPUs of this machine as the CUDA driver sees them, and GPU maps
 * for restoring onto other GPUs (`--map 0=1`, `--map GPU-uuid=GPU-uuid`).
 *
 * Indexes are PCI bus order, the order nvidia-smi shows: the command line sets
 * CUDA_DEVICE_ORDER=PCI_BUS_ID and ignores CUDA_VISIBLE_DEVICES before cuInit.
 */
#ifndef GPUSNAP_CUDA_GPUS_H
#define GPUSNAP_CUDA_GPUS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "cuda/driver.h"

struct gs_gpu {
	int index;
	CUuuid uuid;
	char uuid_str[48];
	char name[96];
	int cc_major, cc_minor;
	uint64_t total_bytes;
};

/* Lists all GPUs (cuInit must have succeeded). *gpus is malloc'd. */
int gs_gpus_list(struct gs_cuda *cu, struct gs_gpu **gpus, int *count, struct gs_err *err);

/* Index of the GPU with this UUID (16 raw bytes) among gpus, or -1. */
int gs_gpus_find_uuid(const struct gs_gpu *gpus, int ngpus, const void *uuid16);
/* Index of the GPU a command-line word names (an index or a UUID, "GPU-" optional), or -1. */
int gs_gpus_find(const struct gs_gpu *gpus, int ngpus, const char *word);

/*
 * Parses map specs "FROM=TO" (each side an index or a UUID) against this
 * machine's GPUs into driver pairs. `used`/`nused`: the UUIDs the process was
 * using, when known (NULL otherwise); the map must then cover each of them.
 * Errors: GS_E_GPU_MAP (syntax, unknown GPU, duplicate, not covering),
 * GS_E_GPU_MISMATCH (different GPU types).
 */
int gs_gpu_map_parse(const char *const *specs, int nspecs, const struct gs_gpu *gpus, int ngpus, const CUuuid *used,
		     int nused, CUcheckpointGpuPair **pairs, unsigned *npairs, struct gs_err *err);

/*
 * Completes a GPU map so every GPU of this machine is a source exactly once:
 * the driver wants a pair for each GPU it checkpointed, which is every GPU the
 * process could see, not only those it held memory on. A GPU not named keeps
 * its place when that target is free, else takes a free GPU of its type
 * (`--map 0=1` on two GPUs becomes 0=1, 1=0). GS_E_GPU_MAP if one is left
 * with nowhere to go. *pairs is reallocated.
 */
int gs_gpu_pairs_complete(CUcheckpointGpuPair **pairs, unsigned *npairs, const struct gs_gpu *gpus, int ngpus,
			  struct gs_err *err);

#endif
