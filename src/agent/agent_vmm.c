/*
 * agent_vmm.c - device memory the agent can release and re-create at the
 * same virtual address: a reservation (cuMemAddressReserve) that lives as
 * long as the allocation, backed by physical memory (cuMemCreate + cuMemMap +
 * cuMemSetAccess) that suspend releases and resume creates again.
 *
 * All calls go to the real driver (a->cu), never through the gate.
 */
#include "agent/agent.h"

#include <string.h>

#include "common/util.h"

static void device_prop(int device, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = device;
}

static CUresult map_physical(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
			     CUmemGenericAllocationHandle *handle)
{
	CUmemAllocationProp prop;
	device_prop(device, &prop);
	CUmemGenericAllocationHandle h;
	CUresult r = a->cu.cuMemCreate(&h, reserved, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = a->cu.cuMemMap(va, reserved, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		a->cu.cuMemRelease(h);
		return r;
	}
	CUmemAccessDesc access;
	memset(&access, 0, sizeof(access));
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = device;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = a->cu.cuMemSetAccess(va, reserved, &access, 1);
	if (r != CUDA_SUCCESS) {
		a->cu.cuMemUnmap(va, reserved);
		a->cu.cuMemRelease(h);
		return r;
	}
	*handle = h;
	return CUDA_SUCCESS;
}

CUresult gs_vmm_alloc(struct gs_agent_device *d, uint64_t size, uint64_t *va, uint64_t *reserved,
		      CUmemGenericAllocationHandle *handle)
{
	struct gs_agent *a = d->agent;
	uint64_t rsize = gs_round_up(size, d->granularity);
	CUdeviceptr base = 0;
	CUresult r = a->cu.cuMemAddressReserve(&base, rsize, d->granularity, 0, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = map_physical(a, d->ordinal, base, rsize, handle);
	if (r != CUDA_SUCCESS) {
		a->cu.cuMemAddressFree(base, rsize);
		return r;
	}
	*va = base;
	*reserved = rsize;
	return CUDA_SUCCESS;
}

CUresult gs_vmm_release_physical(struct gs_agent *a, uint64_t va, uint64_t reserved, CUmemGenericAllocationHandle handle)
{
	CUresult r = a->cu.cuMemUnmap(va, reserved);
	if (r != CUDA_SUCCESS)
		return r;
	return a->cu.cuMemRelease(handle);
}

CUresult gs_vmm_recreate_physical(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
				  CUmemGenericAllocationHandle *handle)
{
	return map_physical(a, device, va, reserved, handle);
}

CUresult gs_vmm_free(struct gs_agent *a, uint64_t va, uint64_t reserved, CUmemGenericAllocationHandle handle)
{
	CUresult r = handle ? gs_vmm_release_physical(a, va, reserved, handle) : CUDA_SUCCESS;
	CUresult r2 = a->cu.cuMemAddressFree(va, reserved);
	return r != CUDA_SUCCESS ? r : r2;
}
