/*
 * driver.h - the CUDA driver reached through dlopen("libcuda.so.1").
 *
 * gs_cuda_load() fills one table of function pointers; everything in gpusnap
 * that talks to the driver goes through that table. Nothing here needs cuda.h
 * or links the CUDA runtime.
 */
#ifndef GPUSNAP_CUDA_DRIVER_H
#define GPUSNAP_CUDA_DRIVER_H

#include <stdbool.h>

#include "common/err.h"
#include "cuda/driver_api.h"

struct gs_cuda {
	void *lib;
	int driver_version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
	bool initialized;   /* cuInit(0) succeeded */

	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t, void *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);

	/* checkpoint API: NULL when the driver is older than 570 */
	CUresult (*cuCheckpointProcessGetState)(int, CUprocessState *);
	CUresult (*cuCheckpointProcessLock)(int, CUcheckpointLockArgs *);
	CUresult (*cuCheckpointProcessCheckpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (*cuCheckpointProcessRestore)(int, CUcheckpointRestoreArgs *);
	CUresult (*cuCheckpointProcessUnlock)(int, CUcheckpointUnlockArgs *);
	CUresult (*cuCheckpointProcessGetRestoreThreadId)(int, int *);

	/* memory and streams, for the agent: filled by gs_cuda_load_memory_api() */
	bool memory_api;
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxGetDevice)(CUdevice *);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemHostRegister)(void *, size_t, unsigned int);
	CUresult (*cuMemHostUnregister)(void *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
	CUresult (*cuStreamIsCapturing)(CUstream, int *); /* status 0 = not capturing */
	/* the app's contexts (agent_contexts.c): is it still there, is a primary one active */
	CUresult (*cuCtxGetApiVersion)(CUcontext, unsigned int *);
	CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
	/* optional (NULL when the driver lacks them): the current context's limits, for the stack shrink before a checkpoint */
	CUresult (*cuCtxGetLimit)(size_t *, CUlimit);
	CUresult (*cuCtxSetLimit)(CUlimit, size_t);
	/* optional (NULL when the driver lacks any of them): a kernel of the agent's own, from PTX (agent_zero_scan.c) */
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				   CUstream, void **, void **);
};

/* Hook for the agent, which must reach the real dlsym past its own interposer. */
extern void *(*gs_cuda_dlsym)(void *handle, const char *name);

/*
 * Loads libcuda.so.1 (GPUSNAP_LIBCUDA overrides the path, for tests) and
 * resolves the table. GS_E_NO_DRIVER when the library is absent.
 */
int gs_cuda_load(struct gs_cuda *cu, struct gs_err *err);
/*
 * Resolves the memory/stream part of the table through the real
 * cuGetProcAddress (versioned names as of this driver). GS_E_DRIVER_OLD if any is missing.
 */
int gs_cuda_load_memory_api(struct gs_cuda *cu, struct gs_err *err);
/* cuInit(0) once; needed before cuDevice* calls and before a restore. */
int gs_cuda_init(struct gs_cuda *cu, struct gs_err *err);
/* Fails with GS_E_DRIVER_OLD unless the checkpoint API is present. */
int gs_cuda_require_checkpoint(const struct gs_cuda *cu, struct gs_err *err);
/* "CUDA_ERROR_NOT_READY (device not ready)" for messages. */
const char *gs_cuda_strerror(const struct gs_cuda *cu, CUresult r, char *buf, size_t n);
/* Formats a UUID as NVIDIA does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
void gs_cuda_uuid_format(const CUuuid *u, char *buf, size_t n);
/* Parses "GPU-..." (prefix optional) into u. Returns 0 or -1. */
int gs_cuda_uuid_parse(const char *s, CUuuid *u);
const char *gs_cuda_state_name(CUprocessState s);

#endif
