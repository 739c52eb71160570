/*
 * agent_vmm.c - device memory the agent can release and re-create at the
 * same virtual address: a reservation (cuMemAddressReserve) that lives as
 * long as the allocation, backed by physical memory (cuMemCreate + cuMemMap +
 * cuMemSetAccess) that suspend releases and resume creates again.
 *
 * All calls go to the real driver (a->cu), never through the gate.
 *
 * Access: the owning device reads and writes; a memory pool's access list
 * (cuMemPoolSetAccess) can give other devices access too. That extra access
 * is kept per reservation (a registry keyed by the reservation's address:
 * handle = devices that read and write, user = devices that only read), so a
 * mapping re-created on resume gets it again. Devices that enabled peer
 * access to the owning device (agent_peer.h) read and write too, and every
 * backing is recorded there, so an enable reaches the backings made before
 * it; the physical memory asks for GPUDirect RDMA where the device has it.
 */
#include "agent/base/agent.h"
#include "agent/memory/agent_peer.h"
#include "agent/memory/agent_vmm.h"

#include <pthread.h>
#include <string.h>

#include "common/util.h"

#define ACCESS_FLAGS_PROT_NONE 0
#define ACCESS_FLAGS_PROT_READ 1

static struct {
	pthread_mutex_t lock; /* for creating the registry; the registry locks itself */
	struct gs_alloc_registry *extra;
} access_table = { PTHREAD_MUTEX_INITIALIZER, NULL };

static bool access_extra(const struct gs_vmm_access *acc, int device)
{
	uint64_t own = device >= 0 && device < 64 ? 1ULL << device : 0;
	return acc && ((acc->rw | acc->ro) & ~own);
}

/* The extra access recorded for the reservation at va (none: zeros). */
static void access_get(uint64_t va, struct gs_vmm_access *acc)
{
	struct gs_alloc_rec rec;
	struct gs_alloc_registry *t = __atomic_load_n(&access_table.extra, __ATOMIC_ACQUIRE);
	memset(acc, 0, sizeof(*acc));
	if (t && gs_alloc_registry_get(t, va, &rec)) {
		acc->rw = rec.handle;
		acc->ro = rec.user;
	}
}

/* Records (or, with nothing extra, forgets) the access of the reservation at va. */
static CUresult access_record(uint64_t va, uint64_t reserved, int device, const struct gs_vmm_access *acc)
{
	struct gs_alloc_registry *t = __atomic_load_n(&access_table.extra, __ATOMIC_ACQUIRE);
	if (t)
		gs_alloc_registry_remove(t, va, NULL);
	if (!access_extra(acc, device))
		return CUDA_SUCCESS;
	if (!t) {
		pthread_mutex_lock(&access_table.lock);
		if (!access_table.extra)
			__atomic_store_n(&access_table.extra, gs_alloc_registry_new(), __ATOMIC_RELEASE);
		t = access_table.extra;
		pthread_mutex_unlock(&access_table.lock);
		if (!t)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct gs_alloc_rec rec = { .va = va, .size = reserved, .kind = GS_ALLOC_DEVICE, .device = device,
				    .handle = acc->rw, .user = acc->ro };
	return gs_alloc_registry_insert(t, &rec, NULL) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/*
 * Gives device read and write access to [va, va+reserved), the devices of acc
 * theirs, the device's peers (agent_peer.h) read and write, and takes access
 * away from the devices of revoke that none of these name. Called with the
 * peer lock held (shared, or exclusively by agent_peer.c).
 */
static CUresult set_access(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
			   const struct gs_vmm_access *acc, uint64_t revoke)
{
	CUmemAccessDesc descs[GS_AGENT_MAX_DEVICES];
	uint64_t peers = gs_peer_devices(device);
	uint64_t rw = (acc ? acc->rw : 0) | peers, ro = acc ? acc->ro : 0;
	size_t n = 0;
	memset(descs, 0, sizeof(descs));
	descs[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	descs[n].location.id = device;
	descs[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (int i = 0; i < GS_AGENT_MAX_DEVICES && i < 64; i++) {
		uint64_t bit = 1ULL << i;
		if (i == device || !((rw | ro | revoke) & bit))
			continue;
		descs[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		descs[n].location.id = i;
		descs[n++].flags = (rw & bit)	? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
				   : (ro & bit) ? ACCESS_FLAGS_PROT_READ
						: ACCESS_FLAGS_PROT_NONE;
	}
	return a->cu.cuMemSetAccess(va, reserved, descs, n);
}

/* cudaMalloc's memory can be registered with a NIC where the device allows it: so can the agent's. */
static void device_prop(struct gs_agent *a, int device, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = device;
	prop->allocFlags.gpuDirectRDMACapable = gs_peer_rdma_capable(a, device);
}

static CUresult map_physical(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
			     CUmemGenericAllocationHandle *handle)
{
	CUmemAllocationProp prop;
	device_prop(a, device, &prop);
	CUmemGenericAllocationHandle h;
	CUresult r = a->cu.cuMemCreate(&h, reserved, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = a->cu.cuMemMap(va, reserved, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		a->cu.cuMemRelease(h);
		return r;
	}
	struct gs_vmm_access acc;
	access_get(va, &acc);
	r = set_access(a, device, va, reserved, &acc, 0);
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
	return gs_vmm_alloc_access(d, size, NULL, va, reserved, handle);
}

CUresult gs_vmm_alloc_access(struct gs_agent_device *d, uint64_t size, const struct gs_vmm_access *acc, uint64_t *va,
			     uint64_t *reserved, CUmemGenericAllocationHandle *handle)
{
	struct gs_agent *a = d->agent;
	uint64_t rsize = gs_round_up(size, d->granularity);
	CUdeviceptr base = 0;
	CUresult r = a->cu.cuMemAddressReserve(&base, rsize, d->granularity, 0, 0);
	if (r != CUDA_SUCCESS)
		return r;
	gs_peer_map_begin();
	r = access_record(base, rsize, d->ordinal, acc);
	if (r == CUDA_SUCCESS)
		r = map_physical(a, d->ordinal, base, rsize, handle);
	if (r == CUDA_SUCCESS && (r = gs_peer_backing_add(base, rsize, d->ordinal)) != CUDA_SUCCESS)
		gs_vmm_release_physical(a, base, rsize, *handle);
	if (r != CUDA_SUCCESS) {
		access_record(base, rsize, d->ordinal, NULL);
		a->cu.cuMemAddressFree(base, rsize);
	}
	gs_peer_map_end();
	if (r != CUDA_SUCCESS)
		return r;
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
	gs_peer_map_begin();
	CUresult r = map_physical(a, device, va, reserved, handle);
	gs_peer_map_end();
	return r;
}

CUresult gs_vmm_free(struct gs_agent *a, uint64_t va, uint64_t reserved, CUmemGenericAllocationHandle handle)
{
	gs_peer_map_begin(); /* an enable walking the backings never meets one half freed */
	CUresult r = handle ? gs_vmm_release_physical(a, va, reserved, handle) : CUDA_SUCCESS;
	CUresult r2 = a->cu.cuMemAddressFree(va, reserved);
	access_record(va, reserved, -1, NULL);
	gs_peer_backing_remove(va);
	gs_peer_map_end();
	return r != CUDA_SUCCESS ? r : r2;
}

void gs_vmm_get_access(uint64_t va, struct gs_vmm_access *acc)
{
	access_get(va, acc);
}

CUresult gs_vmm_set_access(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
			   const struct gs_vmm_access *acc)
{
	gs_peer_map_begin();
	CUresult r = set_access(a, device, va, reserved, acc, 0);
	if (r == CUDA_SUCCESS)
		r = access_record(va, reserved, device, acc);
	gs_peer_map_end();
	return r;
}

CUresult gs_vmm_apply_access(struct gs_agent *a, int device, uint64_t va, uint64_t reserved, uint64_t revoke)
{
	struct gs_vmm_access acc;
	access_get(va, &acc);
	return set_access(a, device, va, reserved, &acc, revoke);
}

void gs_vmm_forget_after_fork(void)
{
	pthread_mutex_init(&access_table.lock, NULL);
	access_table.extra = NULL; /* the parent's: left as it is */
}

/* The sub-allocator's slabs: releasable memory of their own, recorded in a->slabs. */
static int slab_alloc(void *ctx, uint64_t size, uint64_t *va)
{
	struct gs_agent_device *d = ctx;
	uint64_t reserved;
	CUmemGenericAllocationHandle h;
	if (gs_vmm_alloc(d, size, va, &reserved, &h) != CUDA_SUCCESS)
		return -1;
	struct gs_alloc_rec rec = { .va = *va, .size = reserved, .kind = GS_ALLOC_DEVICE, .device = d->ordinal,
				    .handle = h, .user = reserved };
	struct gs_err err = { 0 };
	if (gs_alloc_registry_insert(d->agent->slabs, &rec, &err)) {
		gs_vmm_free(d->agent, *va, reserved, h);
		return -1;
	}
	return 0;
}

static void slab_free(void *ctx, uint64_t va, uint64_t size)
{
	struct gs_agent_device *d = ctx;
	struct gs_alloc_rec rec;
	(void)size;
	if (gs_alloc_registry_remove(d->agent->slabs, va, &rec))
		gs_vmm_free(d->agent, rec.va, rec.user, (CUmemGenericAllocationHandle)rec.handle);
}

/* A device's first use: its sub-allocator, slabs of the device's granularity. */
static int vmm_device_setup(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	(void)a;
	struct gs_suballoc_config cfg = { .slab_size = d->granularity, .threshold = d->granularity / 2 };
	struct gs_suballoc_ops ops = { .slab_alloc = slab_alloc, .slab_free = slab_free, .ctx = d };
	return gs_suballoc_new(&cfg, &ops, &d->sub, err);
}

const struct gs_agent_listener gs_vmm_listener = {
	.name = "vmm",
	.device_setup = vmm_device_setup,
};
