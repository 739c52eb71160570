/*
 * agent_hooks.c - the agent's own versions of the driver's allocation entry
 * points. They make every device allocation releasable (agent_vmm.c):
 * large ones get their own reservation and physical handle, small ones are
 * carved from slabs (core/suballoc.c), and the registry remembers them all
 * so suspend can copy, release and re-create them at the same addresses.
 *
 * Each replacement runs inside the gate (GS_GATED), like any app call into
 * the driver, so it never overlaps a suspend. Memory the agent cannot make
 * releasable (from IPC-capable pools) goes to the real driver and is counted
 * as unmanaged, which `gpusnap state` reports; the driver path moves it.
 */
#define LOG_PREFIX "agent: "
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/agent_app_vmm.h"
#include "agent/gate.h"
#include "agent/interpose.h"
#include "common/log.h"

/* cudaMallocPitch's pitch granularity */
#define PITCH_ALIGN 512
/* CU_STREAM_PER_THREAD: what stream 0 means in the _ptsz variants */
#define STREAM_PER_THREAD ((CUstream)0x2)

struct gs_deferred_free {
	uint64_t va;
	CUevent done;
	struct gs_deferred_free *next;
};

static struct {
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*cuMemPoolCreate)(CUmemoryPool *, const void *);
} real;

/* Pools created with an export handle type: their memory is shared with other processes, not ours to move. */
static struct {
	pthread_mutex_t lock;
	CUmemoryPool *pools;
	size_t n, cap;
} ipc_pools = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0 };

static bool is_ipc_pool(CUmemoryPool pool)
{
	bool found = false;
	pthread_mutex_lock(&ipc_pools.lock);
	for (size_t i = 0; i < ipc_pools.n && !found; i++)
		found = ipc_pools.pools[i] == pool;
	pthread_mutex_unlock(&ipc_pools.lock);
	return found;
}

/*
 * True while `stream` is being captured into a CUDA graph. Allocation there
 * belongs to the graph (memory nodes the driver owns), and the calls the agent
 * makes for its own memory (cuMemCreate, event queries) would invalidate the
 * capture: such requests go to the real driver.
 */
static bool capturing(struct gs_agent *a, CUstream stream, bool per_thread)
{
	int status = 0;
	if (!a->cuda_ready)
		return false;
	if (a->cu.cuStreamIsCapturing(stream == 0 && per_thread ? STREAM_PER_THREAD : stream, &status) != CUDA_SUCCESS)
		return false;
	return status != 0;
}

static void count_unmanaged(struct gs_agent *a, size_t size)
{
	__atomic_add_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&a->unmanaged_bytes, size, __ATOMIC_RELAXED);
}

/*
 * Allocates size bytes of releasable memory on the current context's device.
 * If the agent itself cannot work (a driver without the VMM entry points),
 * the allocation goes to the real driver, counted as unmanaged: the app runs
 * on and the driver path still moves that memory.
 */
static CUresult managed_alloc(CUdeviceptr *dptr, size_t size)
{
	struct gs_agent *a = gs_agent_get();
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	struct gs_err agent_err = { 0 };
	if (gs_agent_cuda(a, &agent_err)) {
		static int warned;
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			pr_warn("allocations go straight to the driver (suspend uses the driver path): %s", agent_err.msg);
		r = real.cuMemAlloc(dptr, size);
		if (r == CUDA_SUCCESS)
			count_unmanaged(a, size);
		return r;
	}
	struct gs_agent_device *d = gs_agent_current_device(a, &r);
	if (!d)
		return r;
	gs_agent_drain_deferred(a, false);
	struct gs_err err = { 0 };
	struct gs_alloc_rec rec = { .size = size, .device = d->ordinal };
	if (gs_suballoc_serves(d->sub, size)) {
		uint64_t va;
		if (gs_suballoc_alloc(d->sub, size, &va, &err))
			return CUDA_ERROR_OUT_OF_MEMORY;
		rec.va = va;
		rec.kind = GS_ALLOC_SUBALLOC;
	} else {
		uint64_t va, reserved;
		CUmemGenericAllocationHandle h;
		r = gs_vmm_alloc(d, size, &va, &reserved, &h);
		if (r != CUDA_SUCCESS)
			return r;
		rec.va = va;
		rec.kind = GS_ALLOC_DEVICE;
		rec.handle = h;
		rec.user = reserved;
	}
	if (gs_alloc_registry_insert(a->allocs, &rec, &err)) {
		pr_err("allocation registry: %s", err.msg);
		if (rec.kind == GS_ALLOC_SUBALLOC)
			gs_suballoc_free(d->sub, rec.va, NULL, &err);
		else
			gs_vmm_free(a, rec.va, rec.user, rec.handle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = rec.va;
	return CUDA_SUCCESS;
}

/* Frees an allocation of ours now (its stream work is known to be done). False if it is not ours. */
static bool managed_free_now(struct gs_agent *a, CUdeviceptr dptr, CUresult *r)
{
	struct gs_alloc_rec rec;
	if (!gs_alloc_registry_remove(a->allocs, dptr, &rec))
		return false;
	*r = CUDA_SUCCESS;
	if (rec.kind == GS_ALLOC_SUBALLOC) {
		struct gs_err err = { 0 };
		struct gs_agent_device *d = &a->devices[rec.device];
		if (gs_suballoc_free(d->sub, rec.va, NULL, &err)) {
			pr_err("free of %#llx: %s", (unsigned long long)dptr, err.msg);
			*r = CUDA_ERROR_INVALID_VALUE;
		}
	} else {
		*r = gs_vmm_free(a, rec.va, rec.user, (CUmemGenericAllocationHandle)rec.handle);
	}
	return true;
}

static CUresult hook_cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
	return GS_GATED(managed_alloc(dptr, size));
}

static CUresult hook_cuMemFree(CUdeviceptr dptr)
{
	struct gs_agent *a = gs_agent_get();
	if (dptr == 0)
		return CUDA_SUCCESS;
	int t = gs_gate_enter_c();
	CUresult r;
	struct gs_alloc_rec rec;
	/* no registry yet: the agent made nothing (or could not work), so the pointer is the driver's */
	if (a->allocs && gs_alloc_registry_get(a->allocs, dptr, &rec)) {
		/* cuMemFree waits for the device like the driver's own does: kernels may still use the memory */
		a->cu.cuCtxSynchronize();
		if (!managed_free_now(a, dptr, &r))
			r = CUDA_ERROR_INVALID_VALUE;
	} else {
		r = real.cuMemFree(dptr);
	}
	gs_gate_exit_c(t);
	return r;
}

static CUresult hook_cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
	if (!pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (height > SIZE_MAX / p)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = GS_GATED(managed_alloc(dptr, p * height));
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

/* Stream-ordered allocation: the memory is ready at once, which satisfies any stream order. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream, bool per_thread,
			    CUresult (*real_alloc)(CUdeviceptr *, size_t, CUstream))
{
	struct gs_agent *a = gs_agent_get();
	if (capturing(a, stream, per_thread)) {
		CUresult r = GS_GATED(real_alloc(dptr, size, stream));
		if (r == CUDA_SUCCESS)
			count_unmanaged(a, size);
		return r;
	}
	return hook_cuMemAlloc(dptr, size);
}

static CUresult hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	return alloc_async(dptr, size, stream, false, real.cuMemAllocAsync);
}

static CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	return alloc_async(dptr, size, stream, true, real.cuMemAllocAsync_ptsz);
}

/* Stream-ordered free: released once the stream's earlier work is done (an event marks the point). */
static CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread,
			   CUresult (*real_free)(CUdeviceptr, CUstream))
{
	struct gs_agent *a = gs_agent_get();
	if (dptr == 0)
		return CUDA_SUCCESS;
	int t = gs_gate_enter_c();
	CUresult r;
	struct gs_alloc_rec rec;
	if (!a->allocs || !gs_alloc_registry_get(a->allocs, dptr, &rec)) {
		r = real_free(dptr, stream);
		goto out;
	}
	if (capturing(a, stream, per_thread)) {
		/*
		 * A graph cannot free memory the agent owns: the block stays allocated
		 * (and correct for the graph, which only stops using it) until the app
		 * frees it again outside a capture or exits.
		 */
		pr_debug("free of %#llx during graph capture left to the app's next free", (unsigned long long)dptr);
		r = CUDA_SUCCESS;
		goto out;
	}
	struct gs_deferred_free *df = malloc(sizeof(*df));
	if (!df) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = a->cu.cuEventCreate(&df->done, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = a->cu.cuEventRecord(df->done, stream == 0 && per_thread ? STREAM_PER_THREAD : stream);
	if (r != CUDA_SUCCESS) {
		free(df);
		goto out;
	}
	df->va = dptr;
	pthread_mutex_lock(&a->deferred_lock);
	df->next = a->deferred;
	a->deferred = df;
	pthread_mutex_unlock(&a->deferred_lock);
	gs_agent_drain_deferred(a, false);
out:
	gs_gate_exit_c(t);
	return r;
}

static CUresult hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	return free_async(dptr, stream, false, real.cuMemFreeAsync);
}

static CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
	return free_async(dptr, stream, true, real.cuMemFreeAsync_ptsz);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream,
				CUresult (*real_alloc)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))
{
	if (is_ipc_pool(pool)) {
		struct gs_agent *a = gs_agent_get();
		CUresult r = GS_GATED(real_alloc(dptr, size, pool, stream));
		if (r == CUDA_SUCCESS)
			count_unmanaged(a, size);
		return r;
	}
	return hook_cuMemAlloc(dptr, size);
}

static CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
	return alloc_from_pool(dptr, size, pool, stream, real.cuMemAllocFromPoolAsync);
}

static CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
	return alloc_from_pool(dptr, size, pool, stream, real.cuMemAllocFromPoolAsync_ptsz);
}

/* CUmemPoolProps: allocType, handleTypes, ... — only handleTypes matters here */
struct pool_props_head {
	int alloc_type;
	int handle_types;
};

static CUresult hook_cuMemPoolCreate(CUmemoryPool *pool, const void *props)
{
	CUresult r = GS_GATED(real.cuMemPoolCreate(pool, props));
	if (r == CUDA_SUCCESS && props && ((const struct pool_props_head *)props)->handle_types != CU_MEM_HANDLE_TYPE_NONE) {
		pthread_mutex_lock(&ipc_pools.lock);
		if (ipc_pools.n == ipc_pools.cap) {
			size_t cap = ipc_pools.cap ? ipc_pools.cap * 2 : 8;
			CUmemoryPool *np = realloc(ipc_pools.pools, cap * sizeof(*np));
			if (np) {
				ipc_pools.pools = np;
				ipc_pools.cap = cap;
			}
		}
		if (ipc_pools.n < ipc_pools.cap)
			ipc_pools.pools[ipc_pools.n++] = *pool;
		pthread_mutex_unlock(&ipc_pools.lock);
	}
	return r;
}

/* Sub-allocated blocks share a slab's mapping: the driver would answer with the slab, so answer from the registry. */
static CUresult hook_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	struct gs_agent *a = gs_agent_get();
	struct gs_alloc_rec rec;
	if (a->allocs && gs_alloc_registry_find(a->allocs, dptr, &rec)) {
		if (base)
			*base = rec.va;
		if (size)
			*size = rec.size;
		return CUDA_SUCCESS;
	}
	return GS_GATED(real.cuMemGetAddressRange(base, size, dptr));
}

void gs_agent_drain_deferred(struct gs_agent *a, bool all)
{
	pthread_mutex_lock(&a->deferred_lock);
	struct gs_deferred_free **pp = &a->deferred;
	while (*pp) {
		struct gs_deferred_free *df = *pp;
		CUresult q = all ? a->cu.cuEventSynchronize(df->done) : a->cu.cuEventQuery(df->done);
		if (q == CUDA_ERROR_NOT_READY) {
			pp = &df->next;
			continue;
		}
		*pp = df->next;
		CUresult r;
		managed_free_now(a, df->va, &r);
		a->cu.cuEventDestroy(df->done);
		free(df);
	}
	pthread_mutex_unlock(&a->deferred_lock);
}

int gs_agent_install_hooks(struct gs_err *err)
{
	static const struct {
		const char *name;
		void *hook;
		void **real;
	} hooks[] = {
		{ "cuMemAlloc_v2", (void *)hook_cuMemAlloc, (void **)&real.cuMemAlloc },
		{ "cuMemFree_v2", (void *)hook_cuMemFree, (void **)&real.cuMemFree },
		{ "cuMemAllocPitch_v2", (void *)hook_cuMemAllocPitch, (void **)&real.cuMemAllocPitch },
		{ "cuMemAllocAsync", (void *)hook_cuMemAllocAsync, (void **)&real.cuMemAllocAsync },
		{ "cuMemAllocAsync_ptsz", (void *)hook_cuMemAllocAsync_ptsz, (void **)&real.cuMemAllocAsync_ptsz },
		{ "cuMemFreeAsync", (void *)hook_cuMemFreeAsync, (void **)&real.cuMemFreeAsync },
		{ "cuMemFreeAsync_ptsz", (void *)hook_cuMemFreeAsync_ptsz, (void **)&real.cuMemFreeAsync_ptsz },
		{ "cuMemAllocFromPoolAsync", (void *)hook_cuMemAllocFromPoolAsync, (void **)&real.cuMemAllocFromPoolAsync },
		{ "cuMemAllocFromPoolAsync_ptsz", (void *)hook_cuMemAllocFromPoolAsync_ptsz,
		  (void **)&real.cuMemAllocFromPoolAsync_ptsz },
		{ "cuMemGetAddressRange_v2", (void *)hook_cuMemGetAddressRange, (void **)&real.cuMemGetAddressRange },
		{ "cuMemPoolCreate", (void *)hook_cuMemPoolCreate, (void **)&real.cuMemPoolCreate },
	};
	for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
		int rc = gs_interpose_replace(hooks[i].name, hooks[i].hook, hooks[i].real, err);
		if (rc)
			return gs_err_wrap(err, "cannot install the replacement of %s", hooks[i].name);
	}
	/* the app's own cuMemCreate/cuMemMap memory: virtual handles (agent_app_vmm.c) */
	return gs_app_vmm_install_hooks(err);
}
