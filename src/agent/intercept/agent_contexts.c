/*
 * agent_contexts.c - the app's CUDA contexts and the bounded wait for their
 * GPU work (see agent_contexts.h).
 *
 * Why a thread for the wait: cuCtxSynchronize has no timeout, and events
 * cannot stand in for it (the app's streams are not ours to know, and a
 * context's legacy stream and its other streams all hold work). So the
 * synchronize runs on a thread of ours while the control thread waits on a
 * condition variable with the deadline. If the deadline passes first, the
 * suspend gives up (the gate reopens, the app runs on) and the thread stays
 * blocked in the driver until the work it waits for ends: a persistent
 * kernel, or a collective whose peer is not running. It is still ours: the
 * next suspend waits for it (within its own timeout) and joins it before
 * starting another, so there is never more than one.
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/agent_contexts.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/base/agent.h"
#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "common/settings.h"

#define CONTEXT_IS_DESTROYED 709 /* CUDA_ERROR_CONTEXT_IS_DESTROYED */

struct known_ctx {
	CUcontext ctx;
	int dev;
	bool primary; /* a device's primary context: it counts while active */
	bool created; /* seen created by the app (cuCtxCreate): alive until cuCtxDestroy */
};

/* Every context the app has shown us. lock: app threads (hooks) and the control thread. */
static struct {
	pthread_mutex_t lock;
	struct known_ctx *v;
	size_t n, cap;
} known = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Contexts whose stack limit a suspend set to 0, with what it was (gs_ctx_shrink_stacks). Control thread, a->lock. */
struct shrunk_ctx {
	CUcontext ctx;
	int dev;
	size_t stack;
};
static struct {
	struct shrunk_ctx *v;
	size_t n, cap;
} shrunk;

/* One context to synchronize, and what its synchronize returned. */
struct live_ctx {
	CUcontext ctx;
	int dev;
	CUresult r;
};

/* The waiting thread and what it works on. lock guards all but list[i].r, which the thread hands over when done. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool cond_ready;
	pthread_t thread;
	bool running; /* a thread exists and was not joined */
	bool done;    /* it has gone through its list */
	struct gs_cuda *cu;
	struct live_ctx *list;
	size_t n, at; /* at: the context it is synchronizing */
} waiter = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct {
	CUresult (*cuCtxCreate_v2)(CUcontext *, unsigned, CUdevice);
	CUresult (*cuCtxCreate_v3)(CUcontext *, void *, int, unsigned, CUdevice);
	CUresult (*cuCtxCreate_v4)(CUcontext *, void *, unsigned, CUdevice);
	CUresult (*cuCtxDestroy_v2)(CUcontext);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
} real;

static void note(int dev, CUcontext ctx, bool primary, bool created)
{
	if (!ctx || dev < 0)
		return;
	pthread_mutex_lock(&known.lock);
	for (size_t i = 0; i < known.n; i++)
		if (known.v[i].ctx == ctx) {
			/* a handle of a destroyed context may come back for a new one */
			known.v[i].dev = dev;
			known.v[i].primary |= primary;
			known.v[i].created |= created;
			pthread_mutex_unlock(&known.lock);
			return;
		}
	if (gs_grow_array((void **)&known.v, &known.cap, known.n, sizeof(*known.v), 8) == 0)
		known.v[known.n++] = (struct known_ctx){ .ctx = ctx, .dev = dev, .primary = primary, .created = created };
	else
		pr_warn("out of memory noting a CUDA context: a suspend will not wait for its work");
	pthread_mutex_unlock(&known.lock);
}

static void forget(CUcontext ctx)
{
	pthread_mutex_lock(&known.lock);
	for (size_t i = 0; i < known.n; i++)
		if (known.v[i].ctx == ctx) {
			known.v[i] = known.v[--known.n];
			break;
		}
	pthread_mutex_unlock(&known.lock);
}

void gs_ctx_note(int dev, CUcontext ctx)
{
	note(dev, ctx, false, false);
}

/* After fork the child has no waiting thread and none of the parent's contexts. */
static void after_fork_in_child(void)
{
	pthread_mutex_init(&waiter.lock, NULL);
	waiter.running = false;
	waiter.done = false;
	waiter.list = NULL; /* the parent's; its memory is the child's copy, not worth a free that could race */
	waiter.n = waiter.at = 0;
	pthread_mutex_init(&known.lock, NULL);
	known.n = 0;
	shrunk.n = 0; /* the parent's contexts: none of them is the child's */
}

/* ---- hooks: each runs inside the gate, like the call it replaces ---- */

static CUresult hook_cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	if (!real.cuCtxCreate_v2)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = GS_GATED(real.cuCtxCreate_v2(pctx, flags, dev));
	if (r == CUDA_SUCCESS)
		note(dev, *pctx, false, true);
	return r;
}

static CUresult hook_cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned flags, CUdevice dev)
{
	if (!real.cuCtxCreate_v3)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = GS_GATED(real.cuCtxCreate_v3(pctx, params, n, flags, dev));
	if (r == CUDA_SUCCESS)
		note(dev, *pctx, false, true);
	return r;
}

static CUresult hook_cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned flags, CUdevice dev)
{
	if (!real.cuCtxCreate_v4)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = GS_GATED(real.cuCtxCreate_v4(pctx, params, flags, dev));
	if (r == CUDA_SUCCESS)
		note(dev, *pctx, false, true);
	return r;
}

static CUresult hook_cuCtxDestroy_v2(CUcontext ctx)
{
	if (!real.cuCtxDestroy_v2)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = GS_GATED(real.cuCtxDestroy_v2(ctx));
	if (r == CUDA_SUCCESS)
		forget(ctx);
	return r;
}

static CUresult hook_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!real.cuDevicePrimaryCtxRetain)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = GS_GATED(real.cuDevicePrimaryCtxRetain(pctx, dev));
	if (r == CUDA_SUCCESS)
		note(dev, *pctx, true, false);
	return r;
}

int gs_ctx_install_hooks(struct gs_err *err)
{
	/* a fork child has none of its parent's contexts (CUDA does not carry over fork) */
	pthread_atfork(NULL, NULL, after_fork_in_child);
	static const struct gs_interpose_hook hooks[] = {
		{ "cuCtxCreate_v2", (void *)hook_cuCtxCreate_v2, (void **)&real.cuCtxCreate_v2 },
		{ "cuCtxCreate_v3", (void *)hook_cuCtxCreate_v3, (void **)&real.cuCtxCreate_v3 },
		{ "cuCtxCreate_v4", (void *)hook_cuCtxCreate_v4, (void **)&real.cuCtxCreate_v4 },
		{ "cuCtxDestroy_v2", (void *)hook_cuCtxDestroy_v2, (void **)&real.cuCtxDestroy_v2 },
		{ "cuDevicePrimaryCtxRetain", (void *)hook_cuDevicePrimaryCtxRetain, (void **)&real.cuDevicePrimaryCtxRetain },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

/* ---- which contexts are alive now ---- */

/* Whether a known context can still hold work: a primary one while active, a created one until destroyed. */
static bool alive(struct gs_agent *a, const struct known_ctx *k)
{
	if (k->primary) {
		unsigned flags = 0;
		int active = 0;
		return a->cu.cuDevicePrimaryCtxGetState(k->dev, &flags, &active) == CUDA_SUCCESS && active;
	}
	if (k->created)
		return true;
	/* seen only at an allocation (made through a path without hooks): ask the driver */
	unsigned version = 0;
	return a->cu.cuCtxGetApiVersion(k->ctx, &version) == CUDA_SUCCESS;
}

/* The live contexts, in a list the waiting thread takes over. */
static int snapshot(struct gs_agent *a, struct live_ctx **out, size_t *n, struct gs_err *err)
{
	pthread_mutex_lock(&known.lock);
	struct known_ctx *copy = known.n ? malloc(known.n * sizeof(*copy)) : NULL;
	size_t total = copy ? known.n : 0;
	if (copy)
		memcpy(copy, known.v, total * sizeof(*copy));
	bool oom = known.n && !copy;
	pthread_mutex_unlock(&known.lock);
	if (oom)
		return gs_fail(err, GS_E_AGENT, "out of memory listing the app's CUDA contexts");
	struct live_ctx *list = calloc(total ? total : 1, sizeof(*list));
	if (!list) {
		free(copy);
		return gs_fail(err, GS_E_AGENT, "out of memory listing the app's CUDA contexts");
	}
	size_t m = 0;
	for (size_t i = 0; i < total; i++)
		if (alive(a, &copy[i]))
			list[m++] = (struct live_ctx){ .ctx = copy[i].ctx, .dev = copy[i].dev };
		else if (!copy[i].primary)
			forget(copy[i].ctx); /* gone for good; an inactive primary context may come back */
	free(copy);
	*out = list;
	*n = m;
	return 0;
}

/* ---- the waiting thread ---- */

static void *waiter_main(void *arg)
{
	(void)arg;
	struct gs_cuda *cu = waiter.cu;
	for (size_t i = 0; i < waiter.n; i++) {
		pthread_mutex_lock(&waiter.lock);
		waiter.at = i;
		pthread_mutex_unlock(&waiter.lock);
		CUresult r = cu->cuCtxSetCurrent(waiter.list[i].ctx);
		if (r == CUDA_SUCCESS)
			r = gs_fault(GS_FI_AGENT_QUIESCE) ? CUDA_ERROR_UNKNOWN : cu->cuCtxSynchronize();
		waiter.list[i].r = r;
	}
	cu->cuCtxSetCurrent(NULL);
	pthread_mutex_lock(&waiter.lock);
	waiter.done = true;
	pthread_cond_broadcast(&waiter.cond);
	pthread_mutex_unlock(&waiter.lock);
	return NULL;
}

static pthread_once_t waiter_once = PTHREAD_ONCE_INIT;

static void waiter_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are gs_now()'s */
	waiter.cond_ready = pthread_cond_init(&waiter.cond, &ca) == 0;
	pthread_condattr_destroy(&ca);
}

/*
 * Waits for the waiting thread to finish its list, until deadline (< 0: no
 * limit); joins it when it has. true when it finished (the list is then the
 * caller's to read and free).
 */
static bool wait_waiter(double deadline)
{
	pthread_mutex_lock(&waiter.lock);
	while (!waiter.done) {
		if (deadline < 0) {
			pthread_cond_wait(&waiter.cond, &waiter.lock);
			continue;
		}
		double left = deadline - gs_now();
		if (left <= 0)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		double when = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + left;
		ts.tv_sec = (time_t)when;
		ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
		pthread_cond_timedwait(&waiter.cond, &waiter.lock, &ts);
	}
	bool done = waiter.done;
	pthread_mutex_unlock(&waiter.lock);
	if (done) {
		pthread_join(waiter.thread, NULL);
		waiter.running = false;
	}
	return done;
}

static int timed_out(struct gs_agent *a, double timeout_s, bool earlier, struct gs_err *err)
{
	(void)a;
	pthread_mutex_lock(&waiter.lock);
	size_t at = waiter.at, n = waiter.n;
	CUcontext ctx = n ? waiter.list[at].ctx : NULL;
	int dev = n ? waiter.list[at].dev : -1;
	pthread_mutex_unlock(&waiter.lock);
	return gs_fail(err, GS_E_TIMEOUT,
		       "GPU work %sstill running on GPU %d after %.1f s (context %p, %zu of %zu contexts done); the app was "
		       "left running",
		       earlier ? "an earlier suspend waited for is " : "", dev, timeout_s, (void *)ctx, at, n);
}

/* Gives device d a live context to copy in; nothing to change when its own still lives. */
static int choose_copy_context(struct gs_agent *a, struct gs_agent_device *d, const struct live_ctx *list, size_t n,
			       struct gs_err *err)
{
	CUcontext pick = NULL;
	for (size_t i = 0; i < n; i++)
		if (list[i].dev == d->ordinal && list[i].r == CUDA_SUCCESS) {
			if (list[i].ctx == d->ctx)
				return 0;
			if (!pick)
				pick = list[i].ctx;
		}
	if (!pick) {
		/* the app ended every context on this device but keeps memory there: the agent needs one to copy */
		CUresult r = a->cu.cuDevicePrimaryCtxRetain(&pick, d->ordinal);
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(err, GS_E_AGENT, "no CUDA context left on GPU %d to copy its memory in: %s", d->ordinal,
				       gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
		note(d->ordinal, pick, true, false);
	}
	pr_info("GPU %d: copying in context %p (the context %p is gone)", d->ordinal, (void *)pick, (void *)d->ctx);
	d->ctx = pick;
	gs_agent_notify_context_changed(a, d);
	return 0;
}

int gs_ctx_quiesce(struct gs_agent *a, double timeout_s, struct gs_err *err)
{
	pthread_once(&waiter_once, waiter_init);
	if (!waiter.cond_ready)
		return gs_fail(err, GS_E_AGENT, "cannot wait for GPU work: no condition variable");
	double t0 = gs_now();
	double deadline = timeout_s > 0 ? t0 + timeout_s : -1;
	if (waiter.running) {
		/* a suspend gave up on this thread's work earlier: it must end before another wait starts */
		if (!wait_waiter(deadline))
			return timed_out(a, timeout_s, true, err);
		free(waiter.list);
		waiter.list = NULL;
	}
	struct live_ctx *list = NULL;
	size_t n = 0;
	int rc = snapshot(a, &list, &n, err);
	if (rc)
		return rc;
	waiter.cu = &a->cu;
	waiter.list = list;
	waiter.n = n;
	waiter.at = 0;
	waiter.done = false;
	int cr = gs_thread_start(&waiter.thread, waiter_main, NULL);
	if (cr) {
		free(list);
		waiter.list = NULL;
		return gs_fail_errno(err, GS_E_AGENT, cr, "cannot start a thread to wait for GPU work");
	}
	waiter.running = true;
	if (!wait_waiter(deadline))
		return timed_out(a, timeout_s, false, err);
	for (size_t i = 0; i < n && !rc; i++) {
		CUresult r = list[i].r;
		if (r == CUDA_ERROR_INVALID_CONTEXT || r == CONTEXT_IS_DESTROYED) {
			forget(list[i].ctx); /* destroyed behind our back: nothing of it runs */
		} else if (r != CUDA_SUCCESS) {
			char b[128];
			rc = gs_fail(err, GS_E_AGENT, "GPU %d reported an error while synchronizing context %p: %s",
				     list[i].dev, (void *)list[i].ctx, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
	}
	for (int d = 0; d < GS_AGENT_MAX_DEVICES && !rc; d++)
		if (a->devices[d].used)
			rc = choose_copy_context(a, &a->devices[d], list, n, err);
	free(list);
	waiter.list = NULL;
	return rc;
}

void gs_ctx_use_copy_context(struct gs_agent *a)
{
	for (int d = 0; d < GS_AGENT_MAX_DEVICES; d++)
		if (a->devices[d].used && a->devices[d].ctx) {
			a->cu.cuCtxSetCurrent(a->devices[d].ctx);
			return;
		}
}

unsigned gs_ctx_shrink_stacks(struct gs_agent *a)
{
	if (!a->cu.cuCtxSetLimit || !gs_setting_bool(GS_S_SHRINK_STACK) || shrunk.n)
		return 0;
	struct live_ctx *list = NULL;
	size_t n = 0;
	struct gs_err e = { 0 };
	if (snapshot(a, &list, &n, &e)) {
		pr_warn("contexts keep their stacks through the checkpoint: %s", e.msg);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		size_t stack = 0;
		if (a->cu.cuCtxSetCurrent(list[i].ctx) != CUDA_SUCCESS ||
		    a->cu.cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE) != CUDA_SUCCESS || !stack)
			continue;
		if (gs_grow_array((void **)&shrunk.v, &shrunk.cap, shrunk.n, sizeof(*shrunk.v), 4)) {
			pr_warn("out of memory listing contexts to shrink: the rest keep their stacks");
			break;
		}
		CUresult r = a->cu.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0);
		if (r != CUDA_SUCCESS) {
			char b[128];
			pr_debug("context %p on GPU %d keeps its stack: %s", (void *)list[i].ctx, list[i].dev,
				 gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
			continue;
		}
		shrunk.v[shrunk.n++] = (struct shrunk_ctx){ .ctx = list[i].ctx, .dev = list[i].dev, .stack = stack };
	}
	free(list);
	gs_ctx_use_copy_context(a);
	return (unsigned)shrunk.n;
}

int gs_ctx_restore_stacks(struct gs_agent *a, struct gs_err *err)
{
	int rc = 0;
	size_t kept = 0;
	for (size_t i = 0; i < shrunk.n; i++) {
		struct shrunk_ctx *c = &shrunk.v[i];
		CUresult r = rc ? CUDA_SUCCESS : a->cu.cuCtxSetCurrent(c->ctx);
		if (!rc && r == CUDA_SUCCESS)
			r = gs_fault(GS_FI_AGENT_STACK) ? CUDA_ERROR_OUT_OF_MEMORY
							  : a->cu.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, c->stack);
		if (!rc && (r == CUDA_ERROR_INVALID_CONTEXT || r == CONTEXT_IS_DESTROYED))
			continue; /* gone (a context the app destroyed cannot be: the gate was closed): nothing to give back */
		if (!rc && r == CUDA_SUCCESS)
			continue;
		if (!rc) {
			char b[128];
			rc = gs_fail(err, r == CUDA_ERROR_OUT_OF_MEMORY ? GS_E_NO_VRAM : GS_E_AGENT,
				     "cannot give the CUDA context on GPU %d its stack back (%zu bytes per thread): %s",
				     c->dev, c->stack, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
		shrunk.v[kept++] = *c; /* this one and the rest: a retry gives them back */
	}
	shrunk.n = kept;
	gs_ctx_use_copy_context(a);
	return rc;
}

/* A device's first use: the context current then is the first the mover copies in; kept alive here. */
static int ctx_device_setup(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	(void)a;
	(void)err;
	gs_ctx_note(d->ordinal, d->ctx);
	return 0;
}

const struct gs_agent_listener gs_ctx_listener = {
	.name = "contexts",
	.device_setup = ctx_device_setup,
};
