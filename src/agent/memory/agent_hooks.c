/*
 * agent_hooks.c - the agent's own versions of the driver's allocation entry
 * points. They make every device allocation releasable (agent_vmm.c):
 * large ones get their own reservation and physical handle, small ones are
 * carved from slabs (core/suballoc.c), and the registry remembers them all
 * so suspend can copy, release and re-create them at the same addresses.
 *
 * Each replacement runs inside the gate (GS_GATED), like any app call into
 * the driver, so it never overlaps a suspend. Memory the agent cannot make
 * releasable goes to the real driver and is counted as unmanaged (until it
 * is freed), which `gpusnap state -v` reports; the driver path moves it:
 * managed memory (cuMemAllocManaged), allocations inside a CUDA graph
 * capture (the graph's memory nodes), and memory of pools the agent cannot
 * stand in for: pools located in host memory, pools with an export handle
 * type (shared with other processes), pools it does not know, and pools of a
 * device the agent has no context for.
 *
 * Memory pools: stream-ordered allocation takes memory from the current pool
 * of the stream's device (cuDeviceGetMemPool: the default pool, or the one
 * cuDeviceSetMemPool set), cuMemAllocFromPoolAsync from the pool named. The
 * agent serves both for device pools, on the pool's device and with the
 * pool's access list (cuMemPoolSetAccess; kept up to date for allocations
 * made before a change). An allocation from a pool that gives other devices
 * access gets a mapping of its own; others may share slabs, which a later
 * cuMemPoolSetAccess then widens (access is only ever added to a shared
 * slab: its neighbours may come from pools that need it).
 *
 * A stream-ordered free of the agent's memory during a graph capture is
 * captured as a host node that frees it when the graph runs, as the driver's
 * free node would (a graph that never runs never frees it, as with the
 * driver). The node's record is never freed, since a graph may run again;
 * running again frees nothing more.
 */
#define LOG_PREFIX "agent: memory: "
#include <stdlib.h>
#include <string.h>

#include "agent/base/agent.h"
#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "agent/memory/agent_hooks.h"
#include "agent/memory/agent_peer.h"
#include "agent/memory/agent_pointer.h"
#include "agent/memory/agent_vmm.h"
#include "agent/memory/memkind.h"
#include "common/fault.h"
#include "common/log.h"

/* cudaMallocPitch's pitch granularity */
#define PITCH_ALIGN 512
/* CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the default streams by handle */
#define STREAM_LEGACY ((CUstream)0x1)
#define STREAM_PER_THREAD ((CUstream)0x2)
/* CUmemLocationType and CUmemAccess_flags values of cuda.h */
#define LOCATION_DEVICE 1
#define ACCESS_PROT_READ 1
#define ACCESS_PROT_READWRITE 3

struct gs_deferred_free {
	uint64_t va;
	CUevent done;
	struct gs_deferred_free *next;
};

static struct {
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
	CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*cuMemPoolCreate)(CUmemoryPool *, const void *);
	CUresult (*cuMemPoolDestroy)(CUmemoryPool);
	CUresult (*cuMemPoolSetAccess)(CUmemoryPool, const CUmemAccessDesc *, size_t);
} real;

/* Driver entry points the agent calls but does not replace, looked up at first use (the driver is loaded then). */
static struct {
	CUresult (*cuDeviceGetMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
	CUresult (*cuLaunchHostFunc)(CUstream, void (*)(void *), void *);
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void resolve_driver_once(void)
{
	*(void **)&drv.cuDeviceGetMemPool = gs_interpose_real("cuDeviceGetMemPool");
	*(void **)&drv.cuDeviceGetDefaultMemPool = gs_interpose_real("cuDeviceGetDefaultMemPool");
	*(void **)&drv.cuStreamGetCtx = gs_interpose_real("cuStreamGetCtx");
	*(void **)&drv.cuLaunchHostFunc = gs_interpose_real("cuLaunchHostFunc");
}

static void resolve_driver(void)
{
	pthread_once(&drv_once, resolve_driver_once);
}

/* ------------------------------------------------------------------ memory pools */

/* What the agent knows of a memory pool. */
struct pool_info {
	CUmemoryPool pool;
	int loc_type, loc_id;        /* CUmemLocation: where its memory lives */
	int handle_types;            /* exportable to other processes when not CU_MEM_HANDLE_TYPE_NONE */
	struct gs_vmm_access access; /* devices besides loc_id that may use its memory */
};

/* CUmemPoolProps: allocType, handleTypes, location, ... (the rest does not change where memory lives) */
struct pool_props_head {
	int alloc_type;
	int handle_types;
	int loc_type, loc_id;
};

static struct {
	pthread_mutex_t lock;
	struct pool_info *v; /* pools created by the app, and default pools once met */
	size_t n, cap;
	/* allocations the agent made from a pool: handle = the pool, for cuMemPoolSetAccess */
	struct gs_alloc_registry *members;
} pools = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, NULL };

/* Lock held. */
static struct pool_info *pool_slot(CUmemoryPool pool)
{
	for (size_t i = 0; i < pools.n; i++)
		if (pools.v[i].pool == pool)
			return &pools.v[i];
	return NULL;
}

static void pool_put(const struct pool_info *pi)
{
	pthread_mutex_lock(&pools.lock);
	struct pool_info *slot = pool_slot(pi->pool);
	if (!slot && pools.n == pools.cap) {
		size_t cap = pools.cap ? pools.cap * 2 : 8;
		struct pool_info *nv = realloc(pools.v, cap * sizeof(*nv));
		if (nv) {
			pools.v = nv;
			pools.cap = cap;
		}
	}
	if (!slot && pools.n < pools.cap)
		slot = &pools.v[pools.n++];
	if (slot)
		*slot = *pi;
	else
		pr_warn("out of memory recording a memory pool: its allocations go to the driver");
	pthread_mutex_unlock(&pools.lock);
}

static void pool_forget(CUmemoryPool pool)
{
	pthread_mutex_lock(&pools.lock);
	struct pool_info *slot = pool_slot(pool);
	if (slot)
		*slot = pools.v[--pools.n];
	pthread_mutex_unlock(&pools.lock);
}

/* What is known of pool: a pool the app created, or a device's default pool (recorded when first met). */
static bool pool_lookup(struct gs_agent *a, CUmemoryPool pool, struct pool_info *out)
{
	pthread_mutex_lock(&pools.lock);
	struct pool_info *slot = pool_slot(pool);
	if (slot)
		*out = *slot;
	pthread_mutex_unlock(&pools.lock);
	if (slot)
		return true;
	int n = 0;
	resolve_driver();
	if (!pool || !drv.cuDeviceGetDefaultMemPool || a->cu.cuDeviceGetCount(&n) != CUDA_SUCCESS)
		return false;
	for (int dev = 0; dev < n; dev++) {
		CUmemoryPool p = NULL;
		if (drv.cuDeviceGetDefaultMemPool(&p, dev) == CUDA_SUCCESS && p == pool) {
			*out = (struct pool_info){ .pool = pool, .loc_type = LOCATION_DEVICE, .loc_id = dev };
			pool_put(out);
			return true;
		}
	}
	return false;
}

/* Records that the agent's allocation [va, va+size) came from pool. */
static int pool_member_add(CUmemoryPool pool, uint64_t va, uint64_t size, int device)
{
	pthread_mutex_lock(&pools.lock);
	if (!pools.members)
		pools.members = gs_alloc_registry_new();
	struct gs_alloc_registry *m = pools.members;
	pthread_mutex_unlock(&pools.lock);
	struct gs_alloc_rec rec = { .va = va, .size = size, .kind = GS_ALLOC_POOL, .device = device,
				    .handle = (uint64_t)(uintptr_t)pool };
	return m ? gs_alloc_registry_insert(m, &rec, NULL) : -1;
}

static void pool_member_remove(uint64_t va)
{
	struct gs_alloc_registry *m = __atomic_load_n(&pools.members, __ATOMIC_ACQUIRE);
	if (m)
		gs_alloc_registry_remove(m, va, NULL);
}

/* Applies a pool's new access list to the agent's allocations from it. */
static CUresult pool_members_set_access(struct gs_agent *a, CUmemoryPool pool, const struct gs_vmm_access *acc)
{
	struct gs_alloc_registry *m = __atomic_load_n(&pools.members, __ATOMIC_ACQUIRE);
	struct gs_alloc_rec *recs = NULL;
	size_t n = 0;
	if (!m)
		return CUDA_SUCCESS;
	if (gs_alloc_registry_snapshot(m, 0, &recs, &n, NULL))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult first = CUDA_SUCCESS;
	for (size_t i = 0; i < n; i++) {
		if (recs[i].handle != (uint64_t)(uintptr_t)pool)
			continue;
		struct gs_alloc_rec rec;
		CUresult r = CUDA_SUCCESS;
		if (gs_alloc_registry_get(a->allocs, recs[i].va, &rec) && rec.kind == GS_ALLOC_DEVICE) {
			r = gs_vmm_set_access(a, rec.device, rec.va, rec.user, acc);
		} else if (gs_alloc_registry_find(a->slabs, recs[i].va, &rec)) {
			/* a shared slab: access is added, never taken away */
			struct gs_vmm_access cur;
			gs_vmm_get_access(rec.va, &cur);
			cur.rw |= acc->rw;
			cur.ro = (cur.ro | acc->ro) & ~cur.rw;
			r = gs_vmm_set_access(a, rec.device, rec.va, rec.user, &cur);
		}
		if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
			pr_err("cannot give %#llx the access of its memory pool (error %d)", (unsigned long long)recs[i].va, r);
			first = r;
		}
	}
	free(recs);
	return first;
}

static CUresult hook_cuMemPoolCreate(CUmemoryPool *pool, const void *props)
{
	CUresult r = GS_GATED(real.cuMemPoolCreate(pool, props));
	if (r == CUDA_SUCCESS && props) {
		const struct pool_props_head *p = props;
		struct pool_info pi = { .pool = *pool, .loc_type = p->loc_type, .loc_id = p->loc_id,
					.handle_types = p->handle_types };
		pool_put(&pi);
	}
	return r;
}

static CUresult hook_cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult r = GS_GATED(real.cuMemPoolDestroy(pool));
	if (r == CUDA_SUCCESS)
		pool_forget(pool);
	return r;
}

static CUresult hook_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	struct gs_agent *a = gs_agent_get();
	int t = gs_gate_enter_c();
	CUresult r = real.cuMemPoolSetAccess(pool, map, count);
	struct pool_info pi;
	if (r == CUDA_SUCCESS && map && a->cuda_ready && pool_lookup(a, pool, &pi) && pi.loc_type == LOCATION_DEVICE) {
		for (size_t i = 0; i < count; i++) {
			int dev = map[i].location.id;
			if (map[i].location.type != LOCATION_DEVICE || dev == pi.loc_id || dev < 0 || dev >= 64)
				continue;
			uint64_t bit = 1ULL << dev;
			pi.access.rw &= ~bit;
			pi.access.ro &= ~bit;
			if (map[i].flags == ACCESS_PROT_READWRITE)
				pi.access.rw |= bit;
			else if (map[i].flags == ACCESS_PROT_READ)
				pi.access.ro |= bit;
		}
		pool_put(&pi);
		r = pool_members_set_access(a, pool, &pi.access);
	}
	gs_gate_exit_c(t);
	return r;
}

/* ------------------------------------------------------------------ memory the driver holds */

/* The driver's allocations made through these hooks: counted as unmanaged until freed. */
static struct {
	pthread_mutex_t lock;
	struct gs_alloc_registry *r;
} driver_allocs = { PTHREAD_MUTEX_INITIALIZER, NULL };

static void count_unmanaged(struct gs_agent *a, CUdeviceptr va, size_t size)
{
	__atomic_add_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&a->unmanaged_bytes, size, __ATOMIC_RELAXED);
	if (!va || !size)
		return;
	pthread_mutex_lock(&driver_allocs.lock);
	if (!driver_allocs.r)
		driver_allocs.r = gs_alloc_registry_new();
	struct gs_alloc_registry *r = driver_allocs.r;
	pthread_mutex_unlock(&driver_allocs.lock);
	struct gs_alloc_rec rec = { .va = va, .size = size, .kind = GS_ALLOC_DEVICE }, old;
	/* an overlap means the driver reused addresses of memory freed where no hook saw it (a graph's) */
	while (r && gs_alloc_registry_insert(r, &rec, NULL) == GS_E_STATE &&
	       (gs_alloc_registry_find(r, va, &old) || gs_alloc_registry_find(r, va + size - 1, &old)) &&
	       gs_alloc_registry_remove(r, old.va, NULL)) {
		__atomic_sub_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&a->unmanaged_bytes, old.size, __ATOMIC_RELAXED);
	}
}

/* The driver freed va: no longer unmanaged memory, if it was counted. */
static void uncount_unmanaged(struct gs_agent *a, CUdeviceptr va)
{
	struct gs_alloc_registry *r = __atomic_load_n(&driver_allocs.r, __ATOMIC_ACQUIRE);
	struct gs_alloc_rec rec;
	if (r && gs_alloc_registry_remove(r, va, &rec)) {
		__atomic_sub_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&a->unmanaged_bytes, rec.size, __ATOMIC_RELAXED);
	}
}

/* ------------------------------------------------------------------ streams and devices */

static CUstream stream_handle(CUstream stream, bool per_thread)
{
	return stream == 0 && per_thread ? STREAM_PER_THREAD : stream;
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
	if (a->cu.cuStreamIsCapturing(stream_handle(stream, per_thread), &status) != CUDA_SUCCESS)
		return false;
	return status != 0;
}

/* The device a stream belongs to: its context's. False when that is not known (a context the agent has not seen). */
static bool stream_device(struct gs_agent *a, CUstream stream, int *dev)
{
	CUdevice cur;
	if (stream == 0 || stream == STREAM_LEGACY || stream == STREAM_PER_THREAD) {
		if (a->cu.cuCtxGetDevice(&cur) != CUDA_SUCCESS)
			return false;
		*dev = cur;
		return true;
	}
	resolve_driver();
	CUcontext sctx = NULL, cctx = NULL;
	if (!drv.cuStreamGetCtx || drv.cuStreamGetCtx(stream, &sctx) != CUDA_SUCCESS)
		return false;
	if (a->cu.cuCtxGetCurrent(&cctx) == CUDA_SUCCESS && cctx == sctx && a->cu.cuCtxGetDevice(&cur) == CUDA_SUCCESS) {
		*dev = cur;
		return true;
	}
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		if (__atomic_load_n(&a->devices[i].used, __ATOMIC_ACQUIRE) && a->devices[i].ctx == sctx) {
			*dev = i;
			return true;
		}
	return false;
}

/* The agent's state for device dev: the current context's device, or one it has a context for; else NULL. */
static struct gs_agent_device *device_state(struct gs_agent *a, int dev)
{
	CUresult r;
	struct gs_agent_device *d = gs_agent_current_device(a, &r);
	if (d && d->ordinal == dev)
		return d;
	if (dev >= 0 && dev < GS_AGENT_MAX_DEVICES && __atomic_load_n(&a->devices[dev].used, __ATOMIC_ACQUIRE))
		return &a->devices[dev];
	return NULL;
}

/*
 * Where an allocation from pool goes: the agent's state of the pool's device
 * (*pi filled), or NULL when the driver must serve it.
 */
static struct gs_agent_device *pool_target(struct gs_agent *a, CUmemoryPool pool, struct pool_info *pi)
{
	if (gs_agent_cuda(a, NULL) || !pool_lookup(a, pool, pi))
		return NULL;
	if (pi->handle_types != CU_MEM_HANDLE_TYPE_NONE || pi->loc_type != LOCATION_DEVICE)
		return NULL; /* shared with other processes, or host memory */
	return device_state(a, pi->loc_id);
}

/* ------------------------------------------------------------------ allocation */

/*
 * Allocates size bytes of releasable memory on device d; from pool pi (NULL:
 * none), with its access list. Gate entered by the caller.
 */
static CUresult alloc_on(struct gs_agent *a, struct gs_agent_device *d, CUdeviceptr *dptr, size_t size,
			 const struct pool_info *pi)
{
	if (!dptr || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	gs_agent_drain_deferred(a, false);
	uint64_t own = d->ordinal < 64 ? 1ULL << d->ordinal : 0;
	bool peers = pi && ((pi->access.rw | pi->access.ro) & ~own);
	struct gs_err err = { 0 };
	struct gs_alloc_rec rec = { .size = size, .device = d->ordinal };
	if (!peers && gs_suballoc_serves(d->sub, size)) {
		uint64_t va;
		if (gs_suballoc_alloc(d->sub, size, &va, &err))
			return CUDA_ERROR_OUT_OF_MEMORY;
		rec.va = va;
		rec.kind = GS_ALLOC_SUBALLOC;
	} else {
		uint64_t va, reserved;
		CUmemGenericAllocationHandle h;
		CUresult r = gs_vmm_alloc_access(d, size, pi ? &pi->access : NULL, &va, &reserved, &h);
		if (r != CUDA_SUCCESS)
			return r;
		rec.va = va;
		rec.kind = GS_ALLOC_DEVICE;
		rec.handle = h;
		rec.user = reserved;
	}
	int rc = gs_alloc_registry_insert(a->allocs, &rec, &err);
	if (!rc && pi && (rc = pool_member_add(pi->pool, rec.va, size, d->ordinal)))
		gs_alloc_registry_remove(a->allocs, rec.va, NULL);
	if (rc) {
		pr_err("allocation registry: %s", err.code ? err.msg : "out of memory");
		if (rec.kind == GS_ALLOC_SUBALLOC)
			gs_suballoc_free(d->sub, rec.va, NULL, &err);
		else
			gs_vmm_free(a, rec.va, rec.user, rec.handle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = rec.va;
	return CUDA_SUCCESS;
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
	if (gs_fault(GS_FI_AGENT_ALLOC))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = CUDA_SUCCESS;
	struct gs_err agent_err = { 0 };
	if (gs_agent_cuda(a, &agent_err)) {
		static int warned;
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			pr_warn("allocations go straight to the driver (suspend uses the driver path): %s", agent_err.msg);
		r = real.cuMemAlloc(dptr, size);
		if (r == CUDA_SUCCESS)
			count_unmanaged(a, *dptr, size);
		return r;
	}
	struct gs_agent_device *d = gs_agent_current_device(a, &r);
	if (!d)
		return r;
	return alloc_on(a, d, dptr, size, NULL);
}

/* Frees an allocation of ours now (its stream work is known to be done). False if it is not ours. */
static bool managed_free_now(struct gs_agent *a, CUdeviceptr dptr, CUresult *r)
{
	struct gs_alloc_rec rec;
	if (!gs_alloc_registry_remove(a->allocs, dptr, &rec))
		return false;
	pool_member_remove(dptr);
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
		if (r == CUDA_SUCCESS)
			uncount_unmanaged(a, dptr);
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

/* Managed (unified) memory migrates between host and GPUs on its own: the driver keeps it. */
static CUresult hook_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
	struct gs_agent *a = gs_agent_get();
	int t = gs_gate_enter_c();
	CUresult r = real.cuMemAllocManaged(dptr, size, flags);
	if (r == CUDA_SUCCESS)
		count_unmanaged(a, *dptr, size);
	gs_gate_exit_c(t);
	return r;
}

/*
 * Stream-ordered allocation from pool (NULL: the current pool of the stream's
 * device) or by the driver where the agent cannot serve it. The agent's
 * memory is ready at once, which satisfies any stream order.
 */
static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, bool current_pool, CUstream stream,
				bool per_thread, CUresult (*to_driver)(void *ctx), void *ctx)
{
	struct gs_agent *a = gs_agent_get();
	int t = gs_gate_enter_c();
	struct gs_agent_device *d = NULL;
	struct pool_info pi = { 0 };
	CUresult r;
	int dev;
	if (gs_fault(GS_FI_AGENT_ALLOC)) {
		gs_gate_exit_c(t);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!capturing(a, stream, per_thread) && !gs_agent_cuda(a, NULL)) {
		resolve_driver();
		if (!current_pool) {
			d = pool_target(a, pool, &pi);
		} else if (stream_device(a, stream_handle(stream, per_thread), &dev)) {
			CUmemoryPool cur = NULL;
			if (drv.cuDeviceGetMemPool && drv.cuDeviceGetMemPool(&cur, dev) == CUDA_SUCCESS)
				d = pool_target(a, cur, &pi);
			else if (!drv.cuDeviceGetMemPool)
				d = device_state(a, dev); /* a driver without pools: the device's memory */
		}
	}
	if (d) {
		r = alloc_on(a, d, dptr, size, pi.pool ? &pi : NULL);
	} else {
		r = to_driver(ctx);
		if (r == CUDA_SUCCESS && dptr)
			count_unmanaged(a, *dptr, size);
	}
	gs_gate_exit_c(t);
	return r;
}

struct driver_async {
	CUresult (*alloc)(CUdeviceptr *, size_t, CUstream);
	CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUdeviceptr *dptr;
	size_t size;
	CUmemoryPool pool;
	CUstream stream;
};

static CUresult driver_async_alloc(void *ctx)
{
	struct driver_async *d = ctx;
	return d->alloc ? d->alloc(d->dptr, d->size, d->stream) : d->from_pool(d->dptr, d->size, d->pool, d->stream);
}

static CUresult hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	struct driver_async c = { .alloc = real.cuMemAllocAsync, .dptr = dptr, .size = size, .stream = stream };
	return alloc_from_pool(dptr, size, NULL, true, stream, false, driver_async_alloc, &c);
}

static CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	struct driver_async c = { .alloc = real.cuMemAllocAsync_ptsz, .dptr = dptr, .size = size, .stream = stream };
	return alloc_from_pool(dptr, size, NULL, true, stream, true, driver_async_alloc, &c);
}

static CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
	struct driver_async c = { .from_pool = real.cuMemAllocFromPoolAsync, .dptr = dptr, .size = size, .pool = pool,
				  .stream = stream };
	return alloc_from_pool(dptr, size, pool, false, stream, false, driver_async_alloc, &c);
}

static CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
	struct driver_async c = { .from_pool = real.cuMemAllocFromPoolAsync_ptsz, .dptr = dptr, .size = size,
				  .pool = pool, .stream = stream };
	return alloc_from_pool(dptr, size, pool, false, stream, true, driver_async_alloc, &c);
}

/* ------------------------------------------------------------------ stream-ordered and graph frees */

/* A free captured into a graph: the graph's host node fires it (once) when the graph runs. */
struct graph_free {
	uint64_t va, size;
	int fired;                /* atomic */
	struct graph_free *next;  /* on the fired list */
};
/* Fired and not yet freed: pushed by the driver's callback thread without a lock, taken by drains. */
static struct graph_free *graph_fired;

static void graph_free_fire(void *arg)
{
	struct graph_free *g = arg;
	if (__atomic_exchange_n(&g->fired, 1, __ATOMIC_ACQ_REL))
		return; /* the graph ran again: its free was done the first time */
	struct graph_free *head = __atomic_load_n(&graph_fired, __ATOMIC_RELAXED);
	do
		g->next = head;
	while (!__atomic_compare_exchange_n(&graph_fired, &head, g, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

/* Captures the free of our allocation rec on the capturing stream as a host node. */
static CUresult capture_free(const struct gs_alloc_rec *rec, CUstream stream)
{
	resolve_driver();
	struct graph_free *g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->va = rec->va;
	g->size = rec->size;
	CUresult r = drv.cuLaunchHostFunc ? drv.cuLaunchHostFunc(stream, graph_free_fire, g) : CUDA_ERROR_NOT_FOUND;
	if (r != CUDA_SUCCESS) {
		free(g);
		static int warned;
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			pr_warn("cannot capture the free of %#llx into the graph (error %d): it stays allocated",
				(unsigned long long)rec->va, r);
		return CUDA_SUCCESS; /* the graph is still right; only the memory is not given back */
	}
	return CUDA_SUCCESS;
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
		if (r == CUDA_SUCCESS)
			uncount_unmanaged(a, dptr);
		goto out;
	}
	if (capturing(a, stream, per_thread)) {
		r = capture_free(&rec, stream_handle(stream, per_thread));
		goto out;
	}
	struct gs_deferred_free *df = malloc(sizeof(*df));
	if (!df) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = a->cu.cuEventCreate(&df->done, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = a->cu.cuEventRecord(df->done, stream_handle(stream, per_thread));
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
	/* frees that graphs ran: their records stay (the graph may run again), the memory goes */
	for (struct graph_free *g = __atomic_exchange_n(&graph_fired, NULL, __ATOMIC_ACQUIRE); g; g = g->next) {
		struct gs_alloc_rec rec;
		CUresult r;
		if (a->allocs && gs_alloc_registry_get(a->allocs, g->va, &rec) && rec.size == g->size)
			managed_free_now(a, g->va, &r);
	}
	pthread_mutex_unlock(&a->deferred_lock);
}

static void alloc_forget_after_fork(void)
{
	pthread_mutex_init(&pools.lock, NULL);
	pools.v = NULL; /* the parent's: left as they are */
	pools.n = pools.cap = 0;
	pools.members = NULL;
	pthread_mutex_init(&driver_allocs.lock, NULL);
	driver_allocs.r = NULL;
	graph_fired = NULL;
	gs_vmm_forget_after_fork();
}

static int alloc_install_hooks(struct gs_err *err)
{
	static const struct gs_interpose_hook hooks[] = {
		{ "cuMemAlloc_v2", (void *)hook_cuMemAlloc, (void **)&real.cuMemAlloc },
		{ "cuMemFree_v2", (void *)hook_cuMemFree, (void **)&real.cuMemFree },
		{ "cuMemAllocPitch_v2", (void *)hook_cuMemAllocPitch, (void **)&real.cuMemAllocPitch },
		{ "cuMemAllocManaged", (void *)hook_cuMemAllocManaged, (void **)&real.cuMemAllocManaged },
		{ "cuMemAllocAsync", (void *)hook_cuMemAllocAsync, (void **)&real.cuMemAllocAsync },
		{ "cuMemAllocAsync_ptsz", (void *)hook_cuMemAllocAsync_ptsz, (void **)&real.cuMemAllocAsync_ptsz },
		{ "cuMemFreeAsync", (void *)hook_cuMemFreeAsync, (void **)&real.cuMemFreeAsync },
		{ "cuMemFreeAsync_ptsz", (void *)hook_cuMemFreeAsync_ptsz, (void **)&real.cuMemFreeAsync_ptsz },
		{ "cuMemAllocFromPoolAsync", (void *)hook_cuMemAllocFromPoolAsync, (void **)&real.cuMemAllocFromPoolAsync },
		{ "cuMemAllocFromPoolAsync_ptsz", (void *)hook_cuMemAllocFromPoolAsync_ptsz,
		  (void **)&real.cuMemAllocFromPoolAsync_ptsz },
		{ "cuMemGetAddressRange_v2", (void *)hook_cuMemGetAddressRange, (void **)&real.cuMemGetAddressRange },
		{ "cuMemPoolCreate", (void *)hook_cuMemPoolCreate, (void **)&real.cuMemPoolCreate },
		{ "cuMemPoolDestroy", (void *)hook_cuMemPoolDestroy, (void **)&real.cuMemPoolDestroy },
		{ "cuMemPoolSetAccess", (void *)hook_cuMemPoolSetAccess, (void **)&real.cuMemPoolSetAccess },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

/* The memory kind of the agent's own allocations and slabs (memory/memkind.h). */
struct describe_ctx {
	struct gs_region_list *out;
	bool is_slab;
};

static int describe_one(void *ctx, const struct gs_alloc_rec *rec)
{
	struct describe_ctx *c = ctx;
	if (rec->kind != GS_ALLOC_DEVICE)
		return 0;
	if (gs_peer_backing_pinned(rec->va))
		return 0; /* exported as a dma-buf (agent_peer.h): a NIC may write it, never released */
	struct held_region r = { .va = rec->va, .size = rec->size, .reserved = rec->user, .handle = rec->handle,
				 .device = rec->device, .is_slab = c->is_slab };
	return gs_held_add(c->out, &r);
}

static int alloc_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	struct describe_ctx c = { out, false };
	int walk = gs_alloc_registry_foreach(a->allocs, 0, UINT64_MAX, GS_ALLOC_MASK(GS_ALLOC_DEVICE), describe_one, &c);
	c.is_slab = true;
	if (!walk)
		walk = gs_alloc_registry_foreach(a->slabs, 0, UINT64_MAX, 0, describe_one, &c);
	return walk ? gs_fail(err, GS_E_AGENT, "out of memory listing allocations") : 0;
}

static CUresult alloc_release(struct gs_agent *a, const struct held_region *r)
{
	return gs_vmm_release_physical(a, r->va, r->reserved, r->handle);
}

static CUresult alloc_recreate(struct gs_agent *a, struct held_region *r)
{
	return gs_vmm_recreate_physical(a, r->device, r->va, r->reserved, &r->handle);
}

static void alloc_recreated(struct gs_agent *a, const struct held_region *r)
{
	gs_alloc_registry_update(r->is_slab ? a->slabs : a->allocs, r->va, r->handle, r->reserved);
}

static void alloc_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes)
{
	if (a->allocs)
		gs_alloc_registry_stats(a->allocs, count, bytes);
}

static void alloc_quiesce(struct gs_agent *a)
{
	gs_agent_drain_deferred(a, true);
}

const struct gs_memkind gs_alloc_kind = {
	.name = "alloc",
	.install_hooks = alloc_install_hooks,
	.forget_after_fork = alloc_forget_after_fork,
	.stats = alloc_stats,
	.quiesce = alloc_quiesce,
	.describe = alloc_describe,
	.release = alloc_release,
	.recreate = alloc_recreate,
	.recreated = alloc_recreated,
};
