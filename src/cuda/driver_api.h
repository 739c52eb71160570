/*
 * driver_api.h - the part of the CUDA driver API gpusnap uses, declared here
 * so nothing needs cuda.h to build (CI machines have no CUDA toolkit) and
 * nothing links libcuda: every function is reached through dlopen.
 *
 * Types and constants mirror cuda.h of CUDA 13.0 (driver 580); the driver's
 * ABI keeps them stable. Only add what is used.
 */
#ifndef GPUSNAP_CUDA_DRIVER_API_H
#define GPUSNAP_CUDA_DRIVER_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef int CUlimit;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
/* cuCtxGetLimit/cuCtxSetLimit: bytes of stack per GPU thread; the context's local memory is sized from it */
#define CU_LIMIT_STACK_SIZE 0x00

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_OPERATING_SYSTEM 304
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_TIMEOUT 909
#define CUDA_ERROR_UNKNOWN 999

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

typedef enum CUprocessState_enum {
	CU_PROCESS_STATE_RUNNING = 0,
	CU_PROCESS_STATE_LOCKED = 1,
	CU_PROCESS_STATE_CHECKPOINTED = 2,
	CU_PROCESS_STATE_FAILED = 3,
} CUprocessState;

typedef struct CUcheckpointLockArgs_st {
	unsigned int timeoutMs; /* 0: no timeout */
	unsigned int reserved0;
	cuuint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct CUcheckpointCheckpointArgs_st {
	cuuint64_t reserved[8];
} CUcheckpointCheckpointArgs;

typedef struct CUcheckpointGpuPair_st {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;

typedef struct CUcheckpointRestoreArgs_st {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(CUcheckpointGpuPair *)];
	cuuint64_t reserved1;
} CUcheckpointRestoreArgs;

typedef struct CUcheckpointUnlockArgs_st {
	cuuint64_t reserved[8];
} CUcheckpointUnlockArgs;

/* Virtual memory management (cuMemCreate family) */
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_HANDLE_TYPE_NONE 0
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1

typedef struct CUmemLocation_st {
	int type;
	int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	int type;
	int requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	int flags;
} CUmemAccessDesc;

/* cuMemMapArrayAsync's element (96 bytes); only the handle fields are named, the rest is carried as is. */
#define CU_MEM_HANDLE_TYPE_GENERIC 0
typedef struct CUarrayMapInfo_st {
	unsigned char resource_and_subresource[56];
	int memOperationType;
	int memHandleType; /* CU_MEM_HANDLE_TYPE_GENERIC: memHandle is a cuMemCreate handle */
	CUmemGenericAllocationHandle memHandle;
	unsigned long long offset;
	unsigned int deviceBitMask;
	unsigned int flags;
	unsigned int reserved[2];
} CUarrayMapInfo;

#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2

#define CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102

#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* The first driver with the checkpoint API, and the first with GPU remap on restore. */
#define GS_DRIVER_CHECKPOINT_MIN 12080 /* CUDA 12.8 driver API = driver 570 */
#define GS_DRIVER_REMAP_MIN 13000      /* CUDA 13.0 driver API = driver 580 */

#endif
