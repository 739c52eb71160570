/*
 * nvml.c - the few NVML calls gpusnap needs, declared here so no nvml.h is needed.
 */
#define LOG_PREFIX "nvml: "
#include "cuda/nvml.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/settings.h"

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvml_memory_t;
/* nvmlProcessInfo_v2_t, the layout the _v3 process queries fill */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvml_process_info_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE_ULL (~0ULL)

struct gs_nvml {
	void *lib;
	int (*init)(void);
	int (*shutdown)(void);
	int (*count)(unsigned *);
	int (*handle)(unsigned, nvmlDevice_t *);
	int (*uuid)(nvmlDevice_t, char *, unsigned);
	int (*name)(nvmlDevice_t, char *, unsigned);
	int (*memory)(nvmlDevice_t, nvml_memory_t *);
	int (*compute_procs)(nvmlDevice_t, unsigned *, nvml_process_info_t *);
};

struct gs_nvml *gs_nvml_open(void)
{
	/* GPUSNAP_LIBNVML: the tests' fake driver answers NVML's questions too */
	const char *path = gs_setting_str(GS_S_LIBNVML);
	void *lib = dlopen(path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return NULL;
	struct gs_nvml *n = calloc(1, sizeof(*n));
	if (!n) {
		dlclose(lib);
		return NULL;
	}
	n->lib = lib;
	n->init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
	n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
	n->count = (int (*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
	n->handle = (int (*)(unsigned, nvmlDevice_t *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	n->uuid = (int (*)(nvmlDevice_t, char *, unsigned))dlsym(lib, "nvmlDeviceGetUUID");
	n->name = (int (*)(nvmlDevice_t, char *, unsigned))dlsym(lib, "nvmlDeviceGetName");
	n->memory = (int (*)(nvmlDevice_t, nvml_memory_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
	n->compute_procs =
		(int (*)(nvmlDevice_t, unsigned *, nvml_process_info_t *))dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!n->init || !n->count || !n->handle || !n->memory || n->init() != NVML_SUCCESS) {
		pr_debug("NVML present but unusable");
		dlclose(lib);
		free(n);
		return NULL;
	}
	return n;
}

void gs_nvml_close(struct gs_nvml *n)
{
	if (!n)
		return;
	if (n->shutdown)
		n->shutdown();
	dlclose(n->lib);
	free(n);
}

int gs_nvml_gpus(struct gs_nvml *n, struct gs_nvml_gpu *gpus, int max)
{
	unsigned count = 0;
	if (!n || n->count(&count) != NVML_SUCCESS)
		return 0;
	for (unsigned i = 0; i < count && (int)i < max; i++) {
		struct gs_nvml_gpu *g = &gpus[i];
		memset(g, 0, sizeof(*g));
		g->index = i;
		nvmlDevice_t dev;
		if (n->handle(i, &dev) != NVML_SUCCESS)
			continue;
		if (n->uuid)
			n->uuid(dev, g->uuid, sizeof(g->uuid));
		if (n->name)
			n->name(dev, g->name, sizeof(g->name));
		nvml_memory_t m;
		if (n->memory(dev, &m) == NVML_SUCCESS) {
			g->total_bytes = m.total;
			g->used_bytes = m.used;
		}
	}
	return (int)count;
}

bool gs_nvml_process_bytes(struct gs_nvml *n, unsigned index, pid_t pid, uint64_t *bytes)
{
	*bytes = 0;
	if (!n || !n->compute_procs)
		return false;
	nvmlDevice_t dev;
	if (n->handle(index, &dev) != NVML_SUCCESS)
		return false;
	/* The list can grow between calls: retry with a larger buffer. */
	unsigned cap = 64;
	for (int attempt = 0; attempt < 4; attempt++) {
		nvml_process_info_t *infos = calloc(cap, sizeof(*infos));
		if (!infos)
			return false;
		unsigned cnt = cap;
		int r = n->compute_procs(dev, &cnt, infos);
		if (r == NVML_SUCCESS) {
			for (unsigned i = 0; i < cnt; i++)
				if ((pid_t)infos[i].pid == pid && infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL)
					*bytes += infos[i].usedGpuMemory;
			free(infos);
			return true;
		}
		free(infos);
		if (r != NVML_ERROR_INSUFFICIENT_SIZE)
			return false;
		cap = cnt > cap ? cnt + 16 : cap * 2;
	}
	return false;
}
