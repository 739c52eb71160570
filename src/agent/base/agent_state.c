/*
 * agent_state.c - the one `struct gs_agent` (base/agent.h): the real driver
 * table loaded on first use, each device's state made at its first use, and
 * the listeners through which the parts above hear of both. Base calls no
 * part above it: what a device's first use sets up beyond the context and
 * the registries (a sub-allocator, the context record, the reserved pool) is
 * done by the listeners the constructor registered.
 */
#define LOG_PREFIX "agent: base: "
#include <string.h>

#include "agent/base/agent.h"
#include "common/log.h"

static struct gs_agent the_agent = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.setup_lock = PTHREAD_MUTEX_INITIALIZER,
	.deferred_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Registered by the constructor before the first CUDA call, read-only afterwards. */
static const struct gs_agent_listener *listeners[GS_AGENT_MAX_LISTENERS];
static int nlisteners;

struct gs_agent *gs_agent_get(void) { return &the_agent; }

int gs_agent_listen(const struct gs_agent_listener *l)
{
	if (nlisteners == GS_AGENT_MAX_LISTENERS)
		return -1;
	listeners[nlisteners++] = l;
	return 0;
}

void gs_agent_notify_context_changed(struct gs_agent *a, struct gs_agent_device *d)
{
	for (int i = 0; i < nlisteners; i++)
		if (listeners[i]->context_changed)
			listeners[i]->context_changed(a, d);
}

static int notify_device_setup(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	for (int i = 0; i < nlisteners; i++)
		if (listeners[i]->device_setup && listeners[i]->device_setup(a, d, err))
			return -1;
	return 0;
}

static bool announce_held(struct gs_agent *a)
{
	for (int i = 0; i < nlisteners; i++)
		if (listeners[i]->hold_announce && listeners[i]->hold_announce(a))
			return true;
	return false;
}

static void notify_device_ready(struct gs_agent *a, struct gs_agent_device *d)
{
	for (int i = 0; i < nlisteners; i++)
		if (listeners[i]->device_ready)
			listeners[i]->device_ready(a, d);
}

int gs_agent_cuda(struct gs_agent *a, struct gs_err *err)
{
	if (__atomic_load_n(&a->cuda_ready, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&a->setup_lock);
	int rc = 0;
	if (!a->cuda_ready && !a->cuda_failure.code) {
		/* one attempt: a driver that lacks what the agent needs will not grow it */
		rc = gs_cuda_load(&a->cu, &a->cuda_failure);
		if (!rc)
			rc = gs_cuda_load_memory_api(&a->cu, &a->cuda_failure);
		if (!rc)
			__atomic_store_n(&a->cuda_ready, true, __ATOMIC_RELEASE);
	}
	if (!a->cuda_ready) {
		rc = a->cuda_failure.code;
		if (err)
			*err = a->cuda_failure;
	}
	pthread_mutex_unlock(&a->setup_lock);
	return rc;
}

struct gs_agent_device *gs_agent_current_device(struct gs_agent *a, CUresult *cuerr)
{
	struct gs_err err = { 0 };
	if (gs_agent_cuda(a, &err)) {
		pr_err("%s", err.msg);
		*cuerr = CUDA_ERROR_NOT_INITIALIZED;
		return NULL;
	}
	CUdevice dev;
	CUresult r = a->cu.cuCtxGetDevice(&dev);
	if (r != CUDA_SUCCESS) {
		*cuerr = r;
		return NULL;
	}
	if (dev < 0 || dev >= GS_AGENT_MAX_DEVICES) {
		*cuerr = CUDA_ERROR_INVALID_DEVICE;
		return NULL;
	}
	struct gs_agent_device *d = &a->devices[dev];
	if (__atomic_load_n(&d->used, __ATOMIC_ACQUIRE) && __atomic_load_n(&d->announced, __ATOMIC_RELAXED))
		return d;
	/* not a->lock: a suspend holds that while it waits for this thread to leave the gate */
	pthread_mutex_lock(&a->setup_lock);
	if (!d->used) {
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = dev;
		size_t gran = 0;
		r = a->cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
		CUcontext ctx = NULL;
		if (r == CUDA_SUCCESS)
			r = a->cu.cuCtxGetCurrent(&ctx);
		if (r == CUDA_SUCCESS && !a->allocs)
			a->allocs = gs_alloc_registry_new();
		if (r == CUDA_SUCCESS && !a->slabs)
			a->slabs = gs_alloc_registry_new();
		if (r == CUDA_SUCCESS && (!a->allocs || !a->slabs))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		d->agent = a;
		d->ordinal = dev;
		d->granularity = gran;
		d->ctx = ctx;
		if (r == CUDA_SUCCESS && notify_device_setup(a, d, &err)) {
			pr_err("%s", err.msg);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (r == CUDA_SUCCESS)
			__atomic_store_n(&d->used, true, __ATOMIC_RELEASE);
	}
	/*
	 * What device_ready starts (the reserved pool and its ring) must not run
	 * alongside a suspend that waits at the closed gate for this thread: a
	 * listener holds the announcement then, and the next allocation after the
	 * resume makes it.
	 */
	bool fresh = r == CUDA_SUCCESS && d->used && !d->announced && !announce_held(a);
	if (fresh)
		__atomic_store_n(&d->announced, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&a->setup_lock);
	if (!d->used) {
		*cuerr = r != CUDA_SUCCESS ? r : CUDA_ERROR_UNKNOWN;
		return NULL;
	}
	if (fresh)
		notify_device_ready(a, d);
	return d;
}

void gs_agent_forget_after_fork(struct gs_agent *a)
{
	pthread_mutex_init(&a->lock, NULL);
	pthread_mutex_init(&a->setup_lock, NULL);
	pthread_mutex_init(&a->deferred_lock, NULL);
	/* as if the driver were never loaded: a child loads it again if it ever allocates */
	__atomic_store_n(&a->cuda_ready, false, __ATOMIC_RELEASE);
	memset(a->devices, 0, sizeof(a->devices));
	a->allocs = a->slabs = NULL; /* the parent's records: left as they are, not freed */
	a->held = NULL;
	a->state = GS_AGENT_RUNNING;
	a->unmanaged_allocs = a->unmanaged_bytes = 0;
	a->deferred = NULL;
}
