/*
 * agent_app_vmm.c - the app's own cuMemCreate/cuMemMap memory, made
 * releasable through virtual allocation handles (see agent_app_vmm.h).
 *
 * cuMemCreate gives the app a virtual handle (core/vmm_handles.h) and keeps
 * the driver's; every entry point that takes a handle translates it, and a
 * value the agent does not know (memory made before the agent was ready,
 * with GPUSNAP_AGENT_HOOKS=0, a multicast object, an imported handle) goes to
 * the driver unchanged. Mappings and the access given to them are recorded
 * so that resume can rebuild exactly what suspend tore down.
 *
 * Not releasable, counted as unmanaged (`gpusnap state` reports them, the
 * driver path moves them): handles exported to a shareable handle other than
 * a POSIX file descriptor or as a dma-buf, bound to a multicast object,
 * mapped into a sparse array, located on the host, or on a device the agent
 * has no context for. A handle exported as a POSIX file descriptor stays
 * releasable and a handle imported from one gets a virtual handle too: both
 * are agent_share.c's to coordinate with the other processes (other imports
 * are passed through untranslated: the memory is the exporter's).
 *
 * The agent holds one driver reference per record, released when the app has
 * released the handle and unmapped it everywhere, which is when the driver
 * would free the memory too.
 */
#define LOG_PREFIX "agent: memory: "
#include "agent/memory/agent_app_vmm.h"

#include <stdlib.h>
#include <string.h>

#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "agent/memory/agent_peer.h"
#include "agent/memory/agent_share.h"
#include "common/log.h"
#include "core/vmm_handles.h"

static struct {
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
	CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
	CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
	CUresult (*cuMemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
	CUresult (*cuMulticastBindMem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t,
				       unsigned long long);
	CUresult (*cuMulticastBindAddr)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t, unsigned long long);
	CUresult (*cuMemMapArrayAsync)(CUarrayMapInfo *, unsigned int, CUstream);
	CUresult (*cuMemMapArrayAsync_ptsz)(CUarrayMapInfo *, unsigned int, CUstream);
} real;

static struct {
	pthread_mutex_t lock;
	struct gs_vh_table *t; /* made at the first cuMemCreate the agent records */
} vt = { PTHREAD_MUTEX_INITIALIZER, NULL };

/* Records a handle under vt.lock, making the table at the first one: 0 with *vh, or a GS_E_* code with err. */
static int add_locked(const struct gs_vh_handle *init, uint64_t *vh, struct gs_err *err)
{
	if (!vt.t && !(vt.t = gs_vh_table_new()))
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	return gs_vh_add(vt.t, init, vh, err);
}

static void count_unmanaged(size_t n, uint64_t bytes)
{
	struct gs_agent *a = gs_agent_get();
	__atomic_add_fetch(&a->unmanaged_allocs, n, __ATOMIC_RELAXED);
	__atomic_add_fetch(&a->unmanaged_bytes, bytes, __ATOMIC_RELAXED);
}

/* A record is gone: it no longer counts as unmanaged memory. */
static void uncount(const struct gs_vh_handle *h)
{
	if (h->releasable || h->imported)
		return;
	struct gs_agent *a = gs_agent_get();
	__atomic_sub_fetch(&a->unmanaged_allocs, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&a->unmanaged_bytes, h->size, __ATOMIC_RELAXED);
}

/* Releases the driver's handle of a dead record and forgets it. Lock held. */
static CUresult drop_record(struct gs_vh_handle *h)
{
	CUresult r = h->real ? real.cuMemRelease(h->real) : CUDA_SUCCESS;
	uncount(h);
	gs_share_forget_locked(h->vh);
	gs_vh_remove(vt.t, h->vh);
	return r;
}

/* The handle the app may use now: NULL (pass the value through) when it is not ours. Lock held. */
static struct gs_vh_handle *live(CUmemGenericAllocationHandle v, CUresult *r)
{
	struct gs_vh_handle *h = vt.t ? gs_vh_get(vt.t, v) : NULL;
	*r = CUDA_SUCCESS;
	if (h && h->refs == 0)
		*r = CUDA_ERROR_INVALID_VALUE; /* released by the app: the driver would refuse it too */
	return h;
}

static void mark_unreleasable(struct gs_vh_handle *h, const char *why)
{
	uint64_t bytes = 0;
	size_t n = gs_vh_mark_exported(h, &bytes);
	if (n) {
		pr_debug("allocation handle %#llx (%llu bytes) %s: left to the driver path", (unsigned long long)h->vh,
			 (unsigned long long)h->size, why);
		count_unmanaged(n, bytes);
	}
}

static void mark_range_unreleasable(CUdeviceptr va, size_t size, const char *why)
{
	uint64_t bytes = 0;
	size_t n = vt.t ? gs_vh_mark_range_exported(vt.t, va, size, &bytes) : 0;
	if (n) {
		pr_debug("%zu allocation handle(s) at %#llx %s: left to the driver path", n, (unsigned long long)va, why);
		count_unmanaged(n, bytes);
	}
}

/* Whether the agent can move memory of `device`: it has the device's context (made on first use). */
static bool device_served(struct gs_agent *a, int device)
{
	if (device < 0 || device >= GS_AGENT_MAX_DEVICES)
		return false;
	CUresult cr;
	struct gs_agent_device *d = gs_agent_current_device(a, &cr);
	if (d && d->ordinal == device)
		return true;
	return __atomic_load_n(&a->devices[device].used, __ATOMIC_ACQUIRE);
}

static CUresult app_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			   unsigned long long flags)
{
	struct gs_agent *a = gs_agent_get();
	if (!handle || !prop)
		return real.cuMemCreate(handle, size, prop, flags);
	CUmemGenericAllocationHandle h;
	CUresult r = real.cuMemCreate(&h, size, prop, flags);
	if (r != CUDA_SUCCESS)
		return r;
	if (gs_agent_cuda(a, NULL)) {
		/* the agent cannot work here: the app gets the driver's handle, the driver path moves the memory */
		count_unmanaged(1, size);
		*handle = h;
		return CUDA_SUCCESS;
	}
	bool on_device = prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
	struct gs_vh_handle init = { .real = h, .size = size, .device = prop->location.id, .prop_len = sizeof(*prop) };
	init.releasable = on_device && device_served(a, prop->location.id);
	memcpy(init.prop, prop, sizeof(*prop));
	uint64_t vh = 0;
	struct gs_err err = { 0 };
	pthread_mutex_lock(&vt.lock);
	int rc = add_locked(&init, &vh, &err);
	pthread_mutex_unlock(&vt.lock);
	if (rc) {
		pr_err("cannot record an allocation handle: %s", err.msg);
		real.cuMemRelease(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!init.releasable)
		count_unmanaged(1, size);
	*handle = vh;
	return CUDA_SUCCESS;
}

static CUresult app_release(CUmemGenericAllocationHandle v)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r;
	struct gs_vh_handle *h = live(v, &r);
	if (!h) {
		pthread_mutex_unlock(&vt.lock);
		return real.cuMemRelease(v);
	}
	if (r == CUDA_SUCCESS && gs_vh_release(h))
		r = drop_record(h);
	pthread_mutex_unlock(&vt.lock);
	return r;
}

static CUresult app_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle v,
			unsigned long long flags)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r;
	struct gs_vh_handle *h = live(v, &r);
	if (!h) {
		pthread_mutex_unlock(&vt.lock);
		return real.cuMemMap(va, size, offset, v, flags);
	}
	if (r == CUDA_SUCCESS)
		r = real.cuMemMap(va, size, offset, h->real, flags);
	struct gs_err err = { 0 };
	if (r == CUDA_SUCCESS && gs_vh_map(vt.t, v, va, size, offset, &err)) {
		/* mapped, but resume could not map it again: leave this memory to the driver */
		pr_warn("mapping at %#llx not recorded: %s", (unsigned long long)va, err.msg);
		mark_unreleasable(h, "has a mapping the agent could not record");
	}
	pthread_mutex_unlock(&vt.lock);
	return r;
}

static CUresult app_unmap(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&vt.lock);
	if (!vt.t || !gs_vh_range_known(vt.t, va, size)) {
		pthread_mutex_unlock(&vt.lock);
		return real.cuMemUnmap(va, size);
	}
	CUresult r = real.cuMemUnmap(va, size);
	if (r == CUDA_SUCCESS) {
		uint64_t *dead = NULL;
		size_t ndead = 0;
		struct gs_err err = { 0 };
		if (gs_vh_unmap(vt.t, va, size, &dead, &ndead, &err))
			pr_err("unmap of %#llx not recorded: %s", (unsigned long long)va, err.msg);
		for (size_t i = 0; i < ndead; i++) {
			struct gs_vh_handle *h = gs_vh_get(vt.t, dead[i]);
			CUresult rr = h ? drop_record(h) : CUDA_SUCCESS;
			if (rr != CUDA_SUCCESS)
				pr_warn("release of allocation handle %#llx after its last unmap failed (error %d)",
					(unsigned long long)dead[i], rr);
		}
		free(dead);
	}
	pthread_mutex_unlock(&vt.lock);
	return r;
}

static CUresult app_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r = real.cuMemSetAccess(va, size, desc, count);
	if (r == CUDA_SUCCESS && vt.t && desc && count && gs_vh_range_known(vt.t, va, size)) {
		struct gs_vh_access *acc = malloc(count * sizeof(*acc));
		struct gs_err err = { 0 };
		for (size_t i = 0; acc && i < count; i++)
			acc[i] = (struct gs_vh_access){ desc[i].location.type, desc[i].location.id, desc[i].flags };
		if (!acc)
			gs_fail(&err, GS_E_FAILURE, "out of memory");
		if (err.code || gs_vh_set_access(vt.t, va, size, acc, count, &err)) {
			pr_warn("access to %#llx not recorded: %s", (unsigned long long)va, err.msg);
			mark_range_unreleasable(va, size, "has access the agent could not record");
		}
		free(acc);
	}
	pthread_mutex_unlock(&vt.lock);
	return r;
}

static CUresult app_retain(CUmemGenericAllocationHandle *handle, void *addr)
{
	struct gs_agent *a = gs_agent_get();
	pthread_mutex_lock(&vt.lock);
	struct gs_vh_mapping *m = handle && vt.t ? gs_vh_mapping_at(vt.t, (uint64_t)(uintptr_t)addr) : NULL;
	struct gs_vh_handle *h = m ? gs_vh_get(vt.t, m->vh) : NULL;
	if (h) {
		gs_vh_retain(h);
		*handle = h->vh;
	}
	pthread_mutex_unlock(&vt.lock);
	if (h)
		return CUDA_SUCCESS;
	/* the agent's own memory behind cuMemAlloc is no VMM memory to the app, as without the agent */
	struct gs_alloc_rec rec;
	if (a->allocs && gs_alloc_registry_find(a->allocs, (uint64_t)(uintptr_t)addr, &rec))
		return CUDA_ERROR_INVALID_VALUE;
	return real.cuMemRetainAllocationHandle(handle, addr);
}

static CUresult app_get_properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle v)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r;
	struct gs_vh_handle *h = live(v, &r);
	if (h && r == CUDA_SUCCESS)
		r = real.cuMemGetAllocationPropertiesFromHandle(prop, h->real);
	pthread_mutex_unlock(&vt.lock);
	return h ? r : real.cuMemGetAllocationPropertiesFromHandle(prop, v);
}

static CUresult app_export(void *shareable, CUmemGenericAllocationHandle v, int type, unsigned long long flags)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r;
	struct gs_vh_handle *h = live(v, &r);
	if (h && r == CUDA_SUCCESS) {
		r = real.cuMemExportToShareableHandle(shareable, h->real, type, flags);
		/* a POSIX descriptor of releasable memory: agent_share.c moves it with its importers */
		bool shared = r == CUDA_SUCCESS && type == GS_SHARE_POSIX_FD && h->releasable && !h->imported &&
			      gs_share_note_export_locked(h->vh, *(int *)shareable) == 0;
		if (r == CUDA_SUCCESS && !shared)
			mark_unreleasable(h, "is exported");
	}
	pthread_mutex_unlock(&vt.lock);
	return h ? r : real.cuMemExportToShareableHandle(shareable, v, type, flags);
}

/*
 * A POSIX descriptor's import gets a virtual handle (the memory is the
 * exporter's: never copied, let go and imported again around a suspend, see
 * agent_share.h); anything else, or an import the agent cannot record, is the
 * driver's handle passed through.
 */
static CUresult app_import(CUmemGenericAllocationHandle *handle, void *os_handle, int type)
{
	struct gs_agent *a = gs_agent_get();
	CUmemGenericAllocationHandle h;
	if (!handle || type != GS_SHARE_POSIX_FD || gs_agent_cuda(a, NULL))
		return real.cuMemImportFromShareableHandle(handle, os_handle, type);
	CUresult r = real.cuMemImportFromShareableHandle(&h, os_handle, type);
	if (r != CUDA_SUCCESS)
		return r;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	struct gs_vh_handle init = { .real = h, .size = UINT64_MAX / 2, .imported = true, .prop_len = sizeof(prop) };
	if (real.cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
		/* host memory (NCCL's proxy buffers) is never released by an exporter's agent: the driver's as it is */
		*handle = h;
		return CUDA_SUCCESS;
	}
	init.device = prop.location.id;
	memcpy(init.prop, &prop, sizeof(prop));
	uint64_t vh = 0;
	struct gs_err err = { 0 };
	pthread_mutex_lock(&vt.lock);
	int rc = add_locked(&init, &vh, &err);
	if (!rc && gs_share_note_import_locked(vh, (int)(intptr_t)os_handle)) {
		gs_vh_remove(vt.t, vh);
		rc = gs_fail(&err, GS_E_FAILURE, "cannot keep a duplicate of the descriptor");
	}
	pthread_mutex_unlock(&vt.lock);
	if (rc) {
		pr_warn("import of shared GPU memory not recorded (left to the driver path): %s", err.msg);
		*handle = h;
		return CUDA_SUCCESS;
	}
	*handle = vh;
	return CUDA_SUCCESS;
}

static CUresult app_handle_for_range(void *out, CUdeviceptr va, size_t size, int type, unsigned long long flags)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r = real.cuMemGetHandleForAddressRange(out, va, size, type, flags);
	if (r == CUDA_SUCCESS) {
		mark_range_unreleasable(va, size, "is exported as a dma-buf");
		gs_peer_pin_range(va, size); /* the agent's own memory there (cudaMalloc's) */
	}
	pthread_mutex_unlock(&vt.lock);
	return r;
}

static CUresult app_multicast_bind_mem(CUmemGenericAllocationHandle mc, size_t mc_offset, CUmemGenericAllocationHandle v,
				       size_t mem_offset, size_t size, unsigned long long flags)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r;
	struct gs_vh_handle *h = live(v, &r);
	if (h && r == CUDA_SUCCESS) {
		r = real.cuMulticastBindMem(mc, mc_offset, h->real, mem_offset, size, flags);
		if (r == CUDA_SUCCESS)
			mark_unreleasable(h, "is bound to a multicast object");
	}
	pthread_mutex_unlock(&vt.lock);
	return h ? r : real.cuMulticastBindMem(mc, mc_offset, v, mem_offset, size, flags);
}

static CUresult app_multicast_bind_addr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr va, size_t size,
					unsigned long long flags)
{
	pthread_mutex_lock(&vt.lock);
	CUresult r = real.cuMulticastBindAddr(mc, mc_offset, va, size, flags);
	if (r == CUDA_SUCCESS)
		mark_range_unreleasable(va, size, "is bound to a multicast object");
	pthread_mutex_unlock(&vt.lock);
	return r;
}

/* Sparse arrays: handles are translated in a copy of the list; memory mapped into an array stays put. */
static CUresult map_array(CUarrayMapInfo *list, unsigned int count, CUstream stream,
			  CUresult (*real_fn)(CUarrayMapInfo *, unsigned int, CUstream))
{
	if (!list || !count)
		return real_fn(list, count, stream);
	CUarrayMapInfo *copy = malloc(count * sizeof(*copy));
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(copy, list, count * sizeof(*copy));
	pthread_mutex_lock(&vt.lock);
	CUresult r = CUDA_SUCCESS;
	for (unsigned int i = 0; i < count && r == CUDA_SUCCESS; i++) {
		if (copy[i].memHandleType != CU_MEM_HANDLE_TYPE_GENERIC)
			continue;
		struct gs_vh_handle *h = live(copy[i].memHandle, &r);
		if (h && r == CUDA_SUCCESS) {
			copy[i].memHandle = h->real;
			mark_unreleasable(h, "is mapped into a sparse array");
		}
	}
	if (r == CUDA_SUCCESS)
		r = real_fn(copy, count, stream);
	pthread_mutex_unlock(&vt.lock);
	free(copy);
	return r;
}

static CUresult hook_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags)
{
	return GS_GATED(app_create(handle, size, prop, flags));
}

static CUresult hook_cuMemRelease(CUmemGenericAllocationHandle v) { return GS_GATED(app_release(v)); }

static CUresult hook_cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle v,
			      unsigned long long flags)
{
	return GS_GATED(app_map(va, size, offset, v, flags));
}

static CUresult hook_cuMemUnmap(CUdeviceptr va, size_t size) { return GS_GATED(app_unmap(va, size)); }

static CUresult hook_cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	return GS_GATED(app_set_access(va, size, desc, count));
}

static CUresult hook_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	return GS_GATED(app_retain(handle, addr));
}

static CUresult hook_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle v)
{
	return GS_GATED(app_get_properties(prop, v));
}

static CUresult hook_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle v, int type,
						  unsigned long long flags)
{
	return GS_GATED(app_export(shareable, v, type, flags));
}

static CUresult hook_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle, int type)
{
	return GS_GATED(app_import(handle, os_handle, type));
}

static CUresult hook_cuMemGetHandleForAddressRange(void *out, CUdeviceptr va, size_t size, int type,
						   unsigned long long flags)
{
	return GS_GATED(app_handle_for_range(out, va, size, type, flags));
}

static CUresult hook_cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_offset,
					CUmemGenericAllocationHandle v, size_t mem_offset, size_t size,
					unsigned long long flags)
{
	return GS_GATED(app_multicast_bind_mem(mc, mc_offset, v, mem_offset, size, flags));
}

static CUresult hook_cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr va, size_t size,
					 unsigned long long flags)
{
	return GS_GATED(app_multicast_bind_addr(mc, mc_offset, va, size, flags));
}

static CUresult hook_cuMemMapArrayAsync(CUarrayMapInfo *list, unsigned int count, CUstream stream)
{
	return GS_GATED(map_array(list, count, stream, real.cuMemMapArrayAsync));
}

static CUresult hook_cuMemMapArrayAsync_ptsz(CUarrayMapInfo *list, unsigned int count, CUstream stream)
{
	return GS_GATED(map_array(list, count, stream, real.cuMemMapArrayAsync_ptsz));
}

int gs_app_vmm_install_hooks(struct gs_err *err)
{
	static const struct gs_interpose_hook hooks[] = {
#define HOOK(name) { #name, (void *)hook_##name, (void **)&real.name }
		HOOK(cuMemCreate),
		HOOK(cuMemRelease),
		HOOK(cuMemMap),
		HOOK(cuMemUnmap),
		HOOK(cuMemSetAccess),
		HOOK(cuMemRetainAllocationHandle),
		HOOK(cuMemGetAllocationPropertiesFromHandle),
		HOOK(cuMemExportToShareableHandle),
		HOOK(cuMemImportFromShareableHandle),
		HOOK(cuMemGetHandleForAddressRange),
		HOOK(cuMulticastBindMem),
		HOOK(cuMulticastBindAddr),
		HOOK(cuMemMapArrayAsync),
		HOOK(cuMemMapArrayAsync_ptsz),
#undef HOOK
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

void gs_app_vmm_stats(uint64_t *count, uint64_t *bytes)
{
	*count = *bytes = 0;
	pthread_mutex_lock(&vt.lock);
	if (vt.t)
		gs_vh_stats(vt.t, count, bytes);
	pthread_mutex_unlock(&vt.lock);
}

void gs_app_vmm_forget_after_fork(void)
{
	pthread_mutex_init(&vt.lock, NULL);
	vt.t = NULL; /* the parent's table: left as it is */
}

/* ------------------------------------------------------------------ the mover's side (gate closed) */

static CUresult replay_access(struct gs_agent *a, const struct gs_vh_mapping *m)
{
	for (size_t i = 0; i < m->nops; i++) {
		const struct gs_vh_access_op *o = &m->ops[i];
		if (!o->n)
			continue;
		CUmemAccessDesc *d = calloc(o->n, sizeof(*d));
		if (!d)
			return CUDA_ERROR_OUT_OF_MEMORY;
		for (size_t k = 0; k < o->n; k++) {
			d[k].location.type = o->desc[k].loc_type;
			d[k].location.id = o->desc[k].loc_id;
			d[k].flags = o->desc[k].flags;
		}
		CUresult r = a->cu.cuMemSetAccess(m->va + o->offset, o->size, d, o->n);
		free(d);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

static CUresult window_access(struct gs_agent *a, const struct gs_vh_handle *h)
{
	CUmemAccessDesc d;
	memset(&d, 0, sizeof(d));
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = h->device;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return a->cu.cuMemSetAccess(h->window_va, h->size, &d, 1);
}

/* Unmaps the first `n` mappings of h and, if `window`, its own window. */
static void unmap_some(struct gs_agent *a, struct gs_vh_handle *h, size_t n, bool window)
{
	for (size_t i = 0; i < n; i++)
		a->cu.cuMemUnmap(h->maps[i]->va, h->maps[i]->size);
	if (window)
		a->cu.cuMemUnmap(h->window_va, h->size);
}

/* Maps h->real everywhere it belongs, with its access; on failure unmaps what it mapped. */
static CUresult map_all(struct gs_agent *a, struct gs_vh_handle *h)
{
	CUresult r = CUDA_SUCCESS;
	for (size_t i = 0; i < h->nmaps; i++) {
		const struct gs_vh_mapping *m = h->maps[i];
		r = a->cu.cuMemMap(m->va, m->size, m->offset, h->real, 0);
		if (r == CUDA_SUCCESS && (r = replay_access(a, m)) != CUDA_SUCCESS)
			a->cu.cuMemUnmap(m->va, m->size);
		if (r != CUDA_SUCCESS) {
			unmap_some(a, h, i, false);
			return r;
		}
	}
	if (h->window_own) {
		r = a->cu.cuMemMap(h->window_va, h->size, 0, h->real, 0);
		if (r == CUDA_SUCCESS && (r = window_access(a, h)) != CUDA_SUCCESS)
			a->cu.cuMemUnmap(h->window_va, h->size);
		if (r != CUDA_SUCCESS)
			unmap_some(a, h, h->nmaps, false);
	}
	return r;
}

/* A mapping of the app through which the whole handle can be copied both ways, or 0. */
static uint64_t app_window(const struct gs_vh_handle *h)
{
	for (size_t i = 0; i < h->nmaps; i++) {
		const struct gs_vh_mapping *m = h->maps[i];
		if (m->offset == 0 && m->size == h->size &&
		    gs_vh_mapping_writable_by(m, CU_MEM_LOCATION_TYPE_DEVICE, h->device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
			return m->va;
	}
	return 0;
}

struct prepare_ctx {
	struct gs_agent *a;
	gs_app_vmm_region_fn fn;
	void *ctx;
	struct gs_err *err;
};

static int prepare_one(void *arg, struct gs_vh_handle *h)
{
	struct prepare_ctx *p = arg;
	struct gs_agent *a = p->a;
	if (!h->releasable || !a->devices[h->device].used || !h->real)
		return 0;
	h->window_va = app_window(h);
	if (!h->window_va) {
		/* only partly mapped, or not writable as a whole: a window of the agent's own */
		CUdeviceptr va = 0;
		CUresult r = a->cu.cuMemAddressReserve(&va, h->size, 0, 0, 0);
		if (r == CUDA_SUCCESS) {
			r = a->cu.cuMemMap(va, h->size, 0, h->real, 0);
			if (r != CUDA_SUCCESS)
				a->cu.cuMemAddressFree(va, h->size);
		}
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(p->err, GS_E_AGENT, "cannot map the app's allocation %#llx for copying: %s",
				       (unsigned long long)h->vh, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
		h->window_va = va;
		h->window_own = true;
		r = window_access(a, h);
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(p->err, GS_E_AGENT, "cannot give the agent access to the app's allocation %#llx: %s",
				       (unsigned long long)h->vh, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
	}
	return p->fn(p->ctx, h->vh, h->window_va, h->size, h->device) ? gs_fail(p->err, GS_E_AGENT, "out of memory") : 0;
}

static int finish_one(void *arg, struct gs_vh_handle *h)
{
	struct gs_agent *a = arg;
	if (h->window_own) {
		if (h->real)
			a->cu.cuMemUnmap(h->window_va, h->size);
		a->cu.cuMemAddressFree(h->window_va, h->size);
	}
	h->window_va = 0;
	h->window_own = false;
	return 0;
}

void gs_app_vmm_finish(struct gs_agent *a)
{
	pthread_mutex_lock(&vt.lock);
	if (vt.t)
		gs_vh_foreach(vt.t, finish_one, a);
	pthread_mutex_unlock(&vt.lock);
}

int gs_app_vmm_prepare(struct gs_agent *a, gs_app_vmm_region_fn fn, void *ctx, struct gs_err *err)
{
	struct prepare_ctx p = { a, fn, ctx, err };
	pthread_mutex_lock(&vt.lock);
	int rc = vt.t ? gs_vh_foreach(vt.t, prepare_one, &p) : 0;
	pthread_mutex_unlock(&vt.lock);
	if (rc)
		gs_app_vmm_finish(a);
	return rc;
}

/* Unmaps every mapping of h (and its own window) and releases its driver handle; on failure h is as before. Lock held. */
static CUresult release_locked(struct gs_agent *a, struct gs_vh_handle *h)
{
	CUresult r = CUDA_SUCCESS;
	size_t unmapped = 0;
	for (; unmapped < h->nmaps; unmapped++)
		if ((r = a->cu.cuMemUnmap(h->maps[unmapped]->va, h->maps[unmapped]->size)) != CUDA_SUCCESS)
			break;
	bool window_unmapped = false;
	if (r == CUDA_SUCCESS && h->window_own)
		window_unmapped = (r = a->cu.cuMemUnmap(h->window_va, h->size)) == CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		r = a->cu.cuMemRelease(h->real);
	if (r == CUDA_SUCCESS) {
		h->real = 0;
	} else {
		/* the handle is still alive: put back what was unmapped */
		for (size_t k = 0; k < unmapped; k++)
			if (a->cu.cuMemMap(h->maps[k]->va, h->maps[k]->size, h->maps[k]->offset, h->real, 0) != CUDA_SUCCESS ||
			    replay_access(a, h->maps[k]) != CUDA_SUCCESS)
				pr_err("cannot map the app's memory at %#llx again", (unsigned long long)h->maps[k]->va);
		if (window_unmapped && (a->cu.cuMemMap(h->window_va, h->size, 0, h->real, 0) != CUDA_SUCCESS ||
					window_access(a, h) != CUDA_SUCCESS))
			pr_err("cannot map the copy window at %#llx again", (unsigned long long)h->window_va);
	}
	return r;
}

CUresult gs_app_vmm_release(struct gs_agent *a, uint64_t vh)
{
	pthread_mutex_lock(&vt.lock);
	struct gs_vh_handle *h = vt.t ? gs_vh_get(vt.t, vh) : NULL;
	CUresult r = h && h->real ? release_locked(a, h) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		gs_share_released_locked(vh); /* an export created early for its importers is gone again */
	pthread_mutex_unlock(&vt.lock);
	return r;
}

CUresult gs_app_vmm_recreate(struct gs_agent *a, uint64_t vh, CUmemGenericAllocationHandle *real_out)
{
	pthread_mutex_lock(&vt.lock);
	struct gs_vh_handle *h = vt.t ? gs_vh_get(vt.t, vh) : NULL;
	/* an exported one may have been created already, for its importers (gs_app_vmm_create_exported_locked) */
	bool early = h && h->real && gs_share_created_early_locked(vh);
	CUresult r = h && (!h->real || early) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	CUmemGenericAllocationHandle nh = early ? h->real : 0;
	/* exported memory its importers still map (suspended, not yet SHARE_RELEASE'd): that very memory again */
	int own = r == CUDA_SUCCESS && !early ? gs_share_export_fd_locked(vh) : -1;
	if (own >= 0) {
		r = real.cuMemImportFromShareableHandle(&nh, (void *)(intptr_t)own, GS_SHARE_POSIX_FD);
	} else if (r == CUDA_SUCCESS && !early) {
		CUmemAllocationProp prop;
		memcpy(&prop, h->prop, sizeof(prop));
		r = a->cu.cuMemCreate(&nh, h->size, &prop, 0);
	}
	if (r == CUDA_SUCCESS) {
		h->real = nh;
		r = map_all(a, h);
		if (r != CUDA_SUCCESS && !early) {
			a->cu.cuMemRelease(nh);
			h->real = 0;
		}
	}
	pthread_mutex_unlock(&vt.lock);
	if (r == CUDA_SUCCESS)
		*real_out = nh;
	return r;
}

/* ------------------------------------------------------------------ for agent_share.c (lock held) */

void gs_app_vmm_lock(void) { pthread_mutex_lock(&vt.lock); }

void gs_app_vmm_unlock(void) { pthread_mutex_unlock(&vt.lock); }

struct gs_vh_handle *gs_app_vmm_get_locked(uint64_t vh) { return vt.t ? gs_vh_get(vt.t, vh) : NULL; }

void gs_app_vmm_mark_unreleasable_locked(struct gs_vh_handle *h, const char *why) { mark_unreleasable(h, why); }

CUresult gs_app_vmm_let_go_locked(struct gs_agent *a, struct gs_vh_handle *h)
{
	CUresult r = h->real ? release_locked(a, h) : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		h->real = 0;
	return r;
}

CUresult gs_app_vmm_import_again_locked(struct gs_agent *a, struct gs_vh_handle *h, int fd)
{
	CUmemGenericAllocationHandle nh = 0;
	CUresult r = real.cuMemImportFromShareableHandle(&nh, (void *)(intptr_t)fd, GS_SHARE_POSIX_FD);
	if (r != CUDA_SUCCESS)
		return r;
	h->real = nh;
	if ((r = map_all(a, h)) != CUDA_SUCCESS) {
		a->cu.cuMemRelease(nh);
		h->real = 0;
	}
	return r;
}

CUresult gs_app_vmm_create_exported_locked(struct gs_agent *a, struct gs_vh_handle *h, int *fd)
{
	CUmemAllocationProp prop;
	memcpy(&prop, h->prop, sizeof(prop));
	CUmemGenericAllocationHandle nh = 0;
	CUresult r = a->cu.cuMemCreate(&nh, h->size, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r;
	int out = -1;
	if ((r = real.cuMemExportToShareableHandle(&out, nh, GS_SHARE_POSIX_FD, 0)) != CUDA_SUCCESS) {
		a->cu.cuMemRelease(nh);
		return r;
	}
	h->real = nh;
	*fd = out;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ the memory kind (memory/memkind.h) */

/* Each handle is copied whole through va, a mapping that covers it. */
static int describe_handle(void *ctx, uint64_t vh, uint64_t va, uint64_t size, int device)
{
	if (gs_peer_backing_pinned(va))
		return 0; /* exported as a dma-buf (agent_peer.h): a NIC may write it, never released */
	struct held_region r = { .va = va, .size = size, .reserved = size, .device = device, .app_handle = vh };
	return gs_held_add(ctx, &r);
}

static int app_vmm_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	return gs_app_vmm_prepare(a, describe_handle, out, err);
}

static CUresult app_vmm_release(struct gs_agent *a, const struct held_region *r)
{
	return gs_app_vmm_release(a, r->app_handle);
}

static CUresult app_vmm_recreate(struct gs_agent *a, struct held_region *r)
{
	return gs_app_vmm_recreate(a, r->app_handle, &r->handle);
}

static void app_vmm_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes)
{
	(void)a;
	gs_app_vmm_stats(count, bytes);
}

/* No `recreated`: this file keeps its handles' records itself. */
const struct gs_memkind gs_app_vmm_kind = {
	.name = "app-vmm",
	.install_hooks = gs_app_vmm_install_hooks,
	.forget_after_fork = gs_app_vmm_forget_after_fork,
	.stats = app_vmm_stats,
	.describe = app_vmm_describe,
	.finish = gs_app_vmm_finish,
	.release = app_vmm_release,
	.recreate = app_vmm_recreate,
};
