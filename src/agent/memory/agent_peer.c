/*
 * agent_peer.c - peer access, GPUDirect RDMA and dma-buf pins for the
 * agent's memory (see agent_peer.h).
 *
 * The pairs of contexts the app enabled are kept as the driver keeps them
 * (per context pair: two contexts of one device can each enable and disable
 * on their own); what a mapping needs is per device, so each change
 * recomputes, for every owning device, the devices some enabled pair gives
 * access (peer_mask, read without a lock). A context destroyed without
 * disabling leaves its pairs recorded: its device keeps access it no longer
 * uses, which costs nothing and is never less than the driver gives.
 */
#define LOG_PREFIX "agent: memory: "
#include "agent/memory/agent_peer.h"
#include "agent/memory/agent_vmm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "core/alloc_registry.h"
#include "common/settings.h"

/* cuda.h values not in driver_api.h */
#define ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED 110
#define ACCESS_PROT_NONE 0

static struct {
	CUresult (*cuCtxEnablePeerAccess)(CUcontext, unsigned);
	CUresult (*cuCtxDisablePeerAccess)(CUcontext);
} real;

struct peer_pair {
	CUcontext from, to; /* from's device may use memory of to's */
	int from_dev, to_dev;
};

static struct {
	pthread_rwlock_t lock; /* see agent_peer.h: exclusive for enable/disable, shared around a mapping */
	struct peer_pair *pairs;
	size_t npairs, cap;
	uint64_t peer_mask[GS_AGENT_MAX_DEVICES]; /* atomic: devices with access to memory of device i */
	pthread_mutex_t backings_lock;             /* for creating the registry */
	/* the agent's backings: va, size = reserved, device, handle = 1 when pinned (dma-buf) */
	struct gs_alloc_registry *backings;
	signed char rdma[GS_AGENT_MAX_DEVICES]; /* atomic: 0 not asked, 1 capable, -1 not */
} peer = { .lock = PTHREAD_RWLOCK_INITIALIZER, .backings_lock = PTHREAD_MUTEX_INITIALIZER };

/* ------------------------------------------------------------------ pairs */

/* Recomputes peer_mask from the pairs. Lock held exclusively. */
static void recompute_masks(void)
{
	uint64_t m[GS_AGENT_MAX_DEVICES] = { 0 };
	for (size_t i = 0; i < peer.npairs; i++) {
		const struct peer_pair *p = &peer.pairs[i];
		if (p->to_dev >= 0 && p->to_dev < GS_AGENT_MAX_DEVICES && p->from_dev >= 0 && p->from_dev < 64 &&
		    p->from_dev != p->to_dev)
			m[p->to_dev] |= 1ULL << p->from_dev;
	}
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		__atomic_store_n(&peer.peer_mask[i], m[i], __ATOMIC_RELEASE);
}

/* Lock held exclusively. */
static ssize_t pair_find(CUcontext from, CUcontext to)
{
	for (size_t i = 0; i < peer.npairs; i++)
		if (peer.pairs[i].from == from && peer.pairs[i].to == to)
			return (ssize_t)i;
	return -1;
}

uint64_t gs_peer_devices(int device)
{
	if (device < 0 || device >= GS_AGENT_MAX_DEVICES)
		return 0;
	return __atomic_load_n(&peer.peer_mask[device], __ATOMIC_ACQUIRE);
}

void gs_peer_map_begin(void)
{
	pthread_rwlock_rdlock(&peer.lock);
}

void gs_peer_map_end(void)
{
	pthread_rwlock_unlock(&peer.lock);
}

/* ------------------------------------------------------------------ backings */

static struct gs_alloc_registry *backings(bool create)
{
	struct gs_alloc_registry *t = __atomic_load_n(&peer.backings, __ATOMIC_ACQUIRE);
	if (t || !create)
		return t;
	pthread_mutex_lock(&peer.backings_lock);
	if (!peer.backings)
		__atomic_store_n(&peer.backings, gs_alloc_registry_new(), __ATOMIC_RELEASE);
	t = peer.backings;
	pthread_mutex_unlock(&peer.backings_lock);
	return t;
}

int gs_peer_backing_add(uint64_t va, uint64_t reserved, int device)
{
	struct gs_alloc_registry *t = backings(true);
	struct gs_alloc_rec rec = { .va = va, .size = reserved, .kind = GS_ALLOC_DEVICE, .device = device };
	if (!t || gs_alloc_registry_insert(t, &rec, NULL))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

void gs_peer_backing_remove(uint64_t va)
{
	struct gs_alloc_registry *t = backings(false);
	struct gs_alloc_rec rec;
	if (!t || !gs_alloc_registry_remove(t, va, &rec) || !rec.handle)
		return;
	struct gs_agent *a = gs_agent_get();
	__atomic_sub_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&a->unmanaged_bytes, rec.size, __ATOMIC_RELAXED);
}

bool gs_peer_backing_pinned(uint64_t va)
{
	struct gs_alloc_registry *t = backings(false);
	struct gs_alloc_rec rec;
	return t && gs_alloc_registry_get(t, va, &rec) && rec.handle;
}

struct pin_ctx {
	uint64_t *vas;
	size_t n, cap;
};

static int collect_unpinned(void *ctx, const struct gs_alloc_rec *rec)
{
	struct pin_ctx *c = ctx;
	if (rec->handle)
		return 0;
	if (gs_grow_array((void **)&c->vas, &c->cap, c->n, sizeof(*c->vas), 8))
		return -1;
	c->vas[c->n++] = rec->va;
	return 0;
}

size_t gs_peer_pin_range(uint64_t va, uint64_t size)
{
	struct gs_alloc_registry *t = backings(false);
	struct pin_ctx c = { 0 };
	if (!t || !size || va + size < va)
		return 0;
	if (gs_alloc_registry_foreach(t, va, va + size, 0, collect_unpinned, &c))
		pr_err("out of memory marking exported memory at %#llx: it may be released on suspend",
		       (unsigned long long)va);
	struct gs_agent *a = gs_agent_get();
	size_t pinned = 0;
	for (size_t i = 0; i < c.n; i++) {
		struct gs_alloc_rec rec;
		/* the registry's own lock keeps two exports of one backing from both counting it */
		if (!gs_alloc_registry_get(t, c.vas[i], &rec) || rec.handle ||
		    !gs_alloc_registry_update(t, rec.va, 1, rec.user))
			continue;
		__atomic_add_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&a->unmanaged_bytes, rec.size, __ATOMIC_RELAXED);
		pr_debug("GPU memory at %#llx (%llu bytes) is exported as a dma-buf: never released, left to the driver path",
			 (unsigned long long)rec.va, (unsigned long long)rec.size);
		pinned++;
	}
	free(c.vas);
	return pinned;
}

/* ------------------------------------------------------------------ enable and disable */

/*
 * Sets the access of every backing of device `owner` again (its own, its
 * pool's, its peers'), taking access away from the devices of `revoke` that
 * nothing gives it any more. Lock held exclusively. The first error, after
 * trying them all.
 */
static CUresult apply_to_owner(struct gs_agent *a, int owner, uint64_t revoke)
{
	struct gs_alloc_registry *t = backings(false);
	struct gs_alloc_rec *recs = NULL;
	size_t n = 0;
	if (!t)
		return CUDA_SUCCESS;
	if (gs_alloc_registry_snapshot(t, 0, &recs, &n, NULL))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult first = CUDA_SUCCESS;
	for (size_t i = 0; i < n; i++) {
		if (recs[i].device != owner)
			continue;
		CUresult r = !revoke && gs_fault(GS_FI_AGENT_PEER_ACCESS)
				     ? CUDA_ERROR_OUT_OF_MEMORY
				     : gs_vmm_apply_access(a, owner, recs[i].va, recs[i].size, revoke);
		if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
			pr_err("cannot set the peer access of GPU memory at %#llx (error %d)", (unsigned long long)recs[i].va,
			       r);
			first = r;
		}
	}
	free(recs);
	return first;
}

/* The device of context ctx: made current for the question, the caller's context current again after. */
static bool context_device(struct gs_agent *a, CUcontext ctx, int *dev)
{
	CUcontext cur = NULL;
	CUdevice d = -1;
	if (a->cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
		return false;
	bool ok = a->cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS && a->cu.cuCtxGetDevice(&d) == CUDA_SUCCESS;
	a->cu.cuCtxSetCurrent(cur);
	*dev = d;
	return ok && d >= 0 && d < GS_AGENT_MAX_DEVICES;
}

/*
 * The driver enabled access from the current context to `to`: the agent's
 * memory of to's device follows. On failure the driver's enable is undone
 * too, so the app, which hears the error, finds neither enabled.
 */
static CUresult follow_enable(struct gs_agent *a, CUcontext to)
{
	CUcontext from = NULL;
	CUdevice from_dev = -1;
	int to_dev = -1;
	if (a->cu.cuCtxGetCurrent(&from) != CUDA_SUCCESS || a->cu.cuCtxGetDevice(&from_dev) != CUDA_SUCCESS ||
	    from_dev < 0 || from_dev >= GS_AGENT_MAX_DEVICES || !context_device(a, to, &to_dev)) {
		real.cuCtxDisablePeerAccess(to);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	pthread_rwlock_wrlock(&peer.lock);
	CUresult r = CUDA_SUCCESS;
	if (pair_find(from, to) < 0) {
		if (gs_grow_array((void **)&peer.pairs, &peer.cap, peer.npairs, sizeof(*peer.pairs), 8)) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			peer.pairs[peer.npairs++] = (struct peer_pair){ from, to, from_dev, to_dev };
			recompute_masks();
		}
	}
	if (r == CUDA_SUCCESS)
		r = apply_to_owner(a, to_dev, 0);
	if (r != CUDA_SUCCESS) {
		/* undo: the app hears the enable failed, so neither the agent nor the driver keeps it */
		ssize_t i = pair_find(from, to);
		if (i >= 0) {
			peer.pairs[i] = peer.pairs[--peer.npairs];
			recompute_masks();
		}
		apply_to_owner(a, to_dev, 1ULL << from_dev);
	}
	pthread_rwlock_unlock(&peer.lock);
	if (r != CUDA_SUCCESS)
		real.cuCtxDisablePeerAccess(to);
	return r;
}

/* The driver disabled access from the current context to `to`: what no other pair gives is taken away. */
static CUresult follow_disable(struct gs_agent *a, CUcontext to)
{
	CUcontext from = NULL;
	if (a->cu.cuCtxGetCurrent(&from) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_rwlock_wrlock(&peer.lock);
	CUresult r = CUDA_SUCCESS;
	ssize_t i = pair_find(from, to);
	if (i >= 0) {
		struct peer_pair p = peer.pairs[i];
		peer.pairs[i] = peer.pairs[--peer.npairs];
		recompute_masks();
		if (!(gs_peer_devices(p.to_dev) & (1ULL << p.from_dev)))
			r = apply_to_owner(a, p.to_dev, 1ULL << p.from_dev);
	}
	pthread_rwlock_unlock(&peer.lock);
	return r;
}

static CUresult hook_cuCtxEnablePeerAccess(CUcontext to, unsigned flags)
{
	struct gs_agent *a = gs_agent_get();
	int t = gs_gate_enter_c();
	CUresult r = real.cuCtxEnablePeerAccess(to, flags);
	/* no driver table: the agent made no memory and makes none (it goes to the driver) */
	if (r == CUDA_SUCCESS && !gs_agent_cuda(a, NULL))
		r = follow_enable(a, to);
	gs_gate_exit_c(t);
	return r;
}

static CUresult hook_cuCtxDisablePeerAccess(CUcontext to)
{
	struct gs_agent *a = gs_agent_get();
	int t = gs_gate_enter_c();
	CUresult r = real.cuCtxDisablePeerAccess(to);
	if (r == CUDA_SUCCESS && a->cuda_ready)
		r = follow_disable(a, to);
	gs_gate_exit_c(t);
	return r;
}

int gs_peer_install_hooks(struct gs_err *err)
{
	static const struct gs_interpose_hook hooks[] = {
		{ "cuCtxEnablePeerAccess", (void *)hook_cuCtxEnablePeerAccess, (void **)&real.cuCtxEnablePeerAccess },
		{ "cuCtxDisablePeerAccess", (void *)hook_cuCtxDisablePeerAccess, (void **)&real.cuCtxDisablePeerAccess },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

/* ------------------------------------------------------------------ GPUDirect RDMA */

bool gs_peer_rdma_capable(struct gs_agent *a, int device)
{
	if (device < 0 || device >= GS_AGENT_MAX_DEVICES)
		return false;
	signed char v = __atomic_load_n(&peer.rdma[device], __ATOMIC_ACQUIRE);
	if (!v) {
		/* GPUSNAP_RDMA=0: never ask (a driver that handled such memory worse would otherwise leave no way out) */
		int supported = 0;
		CUresult r = !gs_setting_bool(GS_S_RDMA)
				     ? CUDA_ERROR_NOT_SUPPORTED
				     : a->cu.cuDeviceGetAttribute(&supported, ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device);
		v = r == CUDA_SUCCESS && supported ? 1 : -1;
		__atomic_store_n(&peer.rdma[device], v, __ATOMIC_RELEASE);
	}
	return v > 0;
}

void gs_peer_forget_after_fork(void)
{
	pthread_rwlock_init(&peer.lock, NULL);
	pthread_mutex_init(&peer.backings_lock, NULL);
	peer.pairs = NULL; /* the parent's: left as they are */
	peer.npairs = peer.cap = 0;
	memset(peer.peer_mask, 0, sizeof(peer.peer_mask));
	peer.backings = NULL;
	memset(peer.rdma, 0, sizeof(peer.rdma));
}

/* Peer access (memory/memkind.h): hooks, and records a fork child forgets; its memory is the other kinds'. */
const struct gs_memkind gs_peer_kind = {
	.name = "peer",
	.install_hooks = gs_peer_install_hooks,
	.forget_after_fork = gs_peer_forget_after_fork,
};
