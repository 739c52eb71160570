/*
 * driver.c - loading libcuda.so.1 and resolving the driver table (see driver.h).
 */
#define LOG_PREFIX "cuda: "
#include "cuda/driver.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/settings.h"

void *(*gs_cuda_dlsym)(void *handle, const char *name) = dlsym;

#define RESOLVE(cu, field, name) ((cu)->field = (__typeof__((cu)->field))gs_cuda_dlsym((cu)->lib, name))

int gs_cuda_load(struct gs_cuda *cu, struct gs_err *err)
{
	if (cu->lib)
		return 0;
	const char *path = gs_setting_str(GS_S_LIBCUDA);
	if (!path)
		path = "libcuda.so.1";
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return gs_fail(err, GS_E_NO_DRIVER, "no NVIDIA driver: cannot load %s (%s)", path, dlerror());
	memset(cu, 0, sizeof(*cu));
	cu->lib = lib;
	RESOLVE(cu, cuInit, "cuInit");
	RESOLVE(cu, cuDriverGetVersion, "cuDriverGetVersion");
	RESOLVE(cu, cuGetErrorName, "cuGetErrorName");
	RESOLVE(cu, cuGetErrorString, "cuGetErrorString");
	RESOLVE(cu, cuGetProcAddress, "cuGetProcAddress_v2");
	RESOLVE(cu, cuDeviceGetCount, "cuDeviceGetCount");
	RESOLVE(cu, cuDeviceGet, "cuDeviceGet");
	RESOLVE(cu, cuDeviceGetName, "cuDeviceGetName");
	RESOLVE(cu, cuDeviceGetUuid, "cuDeviceGetUuid_v2");
	if (!cu->cuDeviceGetUuid)
		RESOLVE(cu, cuDeviceGetUuid, "cuDeviceGetUuid");
	RESOLVE(cu, cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	RESOLVE(cu, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	RESOLVE(cu, cuCheckpointProcessGetState, "cuCheckpointProcessGetState");
	RESOLVE(cu, cuCheckpointProcessLock, "cuCheckpointProcessLock");
	RESOLVE(cu, cuCheckpointProcessCheckpoint, "cuCheckpointProcessCheckpoint");
	RESOLVE(cu, cuCheckpointProcessRestore, "cuCheckpointProcessRestore");
	RESOLVE(cu, cuCheckpointProcessUnlock, "cuCheckpointProcessUnlock");
	RESOLVE(cu, cuCheckpointProcessGetRestoreThreadId, "cuCheckpointProcessGetRestoreThreadId");

	if (!cu->cuInit || !cu->cuDriverGetVersion) {
		dlclose(lib);
		memset(cu, 0, sizeof(*cu));
		return gs_fail(err, GS_E_NO_DRIVER, "no NVIDIA driver: %s does not export cuInit", path);
	}
	if (cu->cuDriverGetVersion(&cu->driver_version) != CUDA_SUCCESS)
		cu->driver_version = 0;
	pr_debug("loaded %s, driver API version %d", path, cu->driver_version);
	return 0;
}

int gs_cuda_load_memory_api(struct gs_cuda *cu, struct gs_err *err)
{
	if (cu->memory_api)
		return 0;
	if (!cu->cuGetProcAddress)
		return gs_fail(err, GS_E_DRIVER_OLD, "NVIDIA driver too old: no cuGetProcAddress_v2 (needs CUDA 12 or newer)");
	static const struct {
		const char *name;
		size_t offset;
	} table[] = {
#define MEMBER(field) { #field, offsetof(struct gs_cuda, field) }
		MEMBER(cuCtxGetCurrent), MEMBER(cuCtxSetCurrent), MEMBER(cuCtxGetDevice), MEMBER(cuCtxSynchronize),
		MEMBER(cuDevicePrimaryCtxRetain), MEMBER(cuStreamCreate), MEMBER(cuStreamDestroy),
		MEMBER(cuStreamSynchronize), MEMBER(cuEventCreate), MEMBER(cuEventDestroy), MEMBER(cuEventRecord),
		MEMBER(cuEventQuery), MEMBER(cuEventSynchronize), MEMBER(cuMemcpyDtoHAsync), MEMBER(cuMemcpyHtoDAsync), MEMBER(cuMemsetD8Async),
		MEMBER(cuMemcpyDtoH), MEMBER(cuMemHostRegister), MEMBER(cuMemHostUnregister), MEMBER(cuMemAlloc),
		MEMBER(cuMemFree), MEMBER(cuMemGetInfo), MEMBER(cuMemAddressReserve), MEMBER(cuMemAddressFree),
		MEMBER(cuMemCreate), MEMBER(cuMemRelease), MEMBER(cuMemMap), MEMBER(cuMemUnmap), MEMBER(cuMemSetAccess),
		MEMBER(cuMemGetAllocationGranularity), MEMBER(cuStreamIsCapturing),
		MEMBER(cuCtxGetApiVersion), MEMBER(cuDevicePrimaryCtxGetState),
#undef MEMBER
	};
	/*
	 * The ABI asked for is CUDA 12.0's, the one the prototypes above follow: asking
	 * for the driver's own version would hand out newer signatures (CUDA 13's
	 * cuCtxGetDevice_v2 takes a context too).
	 */
	const int version = 12000;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		void *fn = NULL;
		int status = 0;
		CUresult r = cu->cuGetProcAddress(table[i].name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
		if (r != CUDA_SUCCESS || !fn)
			return gs_fail(err, GS_E_DRIVER_OLD, "NVIDIA driver lacks %s", table[i].name);
		memcpy((char *)cu + table[i].offset, &fn, sizeof(fn));
	}
	/* what the agent can do without, in groups: a group with a member missing is left out whole */
	static const struct {
		const char *name;
		size_t offset;
		int group; /* 0: the context's limits; 1: a kernel of the agent's own */
	} optional[] = {
#define OPTIONAL(field, group) { #field, offsetof(struct gs_cuda, field), group }
		OPTIONAL(cuCtxGetLimit, 0), OPTIONAL(cuCtxSetLimit, 0), OPTIONAL(cuModuleLoadData, 1),
		OPTIONAL(cuModuleGetFunction, 1), OPTIONAL(cuModuleUnload, 1), OPTIONAL(cuLaunchKernel, 1),
#undef OPTIONAL
	};
	const size_t noptional = sizeof(optional) / sizeof(optional[0]);
	bool group_missing[2] = { false, false };
	for (size_t i = 0; i < noptional; i++) {
		void *fn = NULL;
		int status = 0;
		if (cu->cuGetProcAddress(optional[i].name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
			fn = NULL;
		group_missing[optional[i].group] |= fn == NULL;
		memcpy((char *)cu + optional[i].offset, &fn, sizeof(fn));
	}
	for (size_t i = 0; i < noptional; i++)
		if (group_missing[optional[i].group])
			memset((char *)cu + optional[i].offset, 0, sizeof(void *));
	cu->memory_api = true;
	return 0;
}

int gs_cuda_init(struct gs_cuda *cu, struct gs_err *err)
{
	if (cu->initialized)
		return 0;
	CUresult r = cu->cuInit(0);
	if (r == CUDA_ERROR_NO_DEVICE)
		return gs_fail(err, GS_E_NO_DRIVER, "no NVIDIA GPU visible to the driver");
	if (r != CUDA_SUCCESS) {
		char b[128];
		return gs_fail(err, GS_E_NO_DRIVER, "cannot initialize the CUDA driver: %s", gs_cuda_strerror(cu, r, b, sizeof(b)));
	}
	cu->initialized = true;
	return 0;
}

int gs_cuda_require_checkpoint(const struct gs_cuda *cu, struct gs_err *err)
{
	if (!cu->cuCheckpointProcessGetState || !cu->cuCheckpointProcessLock || !cu->cuCheckpointProcessCheckpoint ||
	    !cu->cuCheckpointProcessRestore || !cu->cuCheckpointProcessUnlock)
		return gs_fail(err, GS_E_DRIVER_OLD,
			       "NVIDIA driver too old: the checkpoint API needs driver 570 or newer (this one speaks CUDA %d.%d)",
			       cu->driver_version / 1000, (cu->driver_version % 1000) / 10);
	return 0;
}

const char *gs_cuda_strerror(const struct gs_cuda *cu, CUresult r, char *buf, size_t n)
{
	const char *name = NULL, *desc = NULL;
	if (cu && cu->cuGetErrorName)
		cu->cuGetErrorName(r, &name);
	if (cu && cu->cuGetErrorString)
		cu->cuGetErrorString(r, &desc);
	if (name && desc)
		snprintf(buf, n, "%s (%s)", name, desc);
	else
		snprintf(buf, n, "CUDA error %d", r);
	return buf;
}

void gs_cuda_uuid_format(const CUuuid *u, char *buf, size_t n)
{
	const unsigned char *b = (const unsigned char *)u->bytes;
	snprintf(buf, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int gs_cuda_uuid_parse(const char *s, CUuuid *u)
{
	if (!strncmp(s, "GPU-", 4))
		s += 4;
	int nibbles = 0;
	unsigned char out[16] = { 0 };
	for (; *s; s++) {
		if (*s == '-')
			continue;
		int v = hexval(*s);
		if (v < 0 || nibbles >= 32)
			return -1;
		out[nibbles / 2] = (unsigned char)(out[nibbles / 2] | (v << (nibbles % 2 ? 0 : 4)));
		nibbles++;
	}
	if (nibbles != 32)
		return -1;
	memcpy(u->bytes, out, 16);
	return 0;
}

const char *gs_cuda_state_name(CUprocessState s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "suspended";
	case CU_PROCESS_STATE_FAILED: return "failed";
	default: return "unknown";
	}
}
