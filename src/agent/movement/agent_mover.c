/*
 * agent_mover.c - the app's releasable regions, their copy plan, and the
 * staging memory they go to on a suspend (see agent_mover.h). The order of
 * things and their undoing is agent_lifecycle.c's.
 *
 * Two staging modes (GPUSNAP_STAGING_MODE). bounce (default): the pool is
 * only populated, never pinned, and the copies go through a small ring of
 * pinned buffers plus a memcpy on the host (agent_ring.h), in 4 MiB chunks so
 * that the ring stays in the CPU's cache. With a reserved pool the ring is
 * kept across cycles (built in the background when the pool is made, freed
 * with it); without one each suspend and resume sets one up. pinned: the
 * pool is registered with the driver and the engine copies straight into it
 * (a direct end); a full suspend unpins each segment as its copies complete
 * (the driver's checkpoint costs time per pinned GiB) and resume pins it
 * again. An on-demand pool is freed after the resume by a background thread
 * the agent joins before the next suspend.
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_mover.h"
#include "agent/movement/gpu_copy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/intercept/agent_capture.h"
#include "agent/intercept/agent_contexts.h"
#include "agent/intercept/gate.h"
#include "agent/memory/memkind.h"
#include "agent/movement/agent_ring.h"
#include "agent/movement/agent_zero_scan.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/util.h"
#include "core/copy_plan.h"
#include "core/hostmem.h"
#include "core/staging.h"
#include "common/settings.h"

/* Lanes and pinned staging through the engine's GPU backend (gpu_copy.h). */
static const struct gs_gpu_copy *const gpu = &gs_gpu_copy_cuda;

#define CHUNK_BYTES (64ULL << 20) /* a suspend's chunks in pinned mode: one copy per chunk straight into the pool */
/*
 * A suspend's chunks in bounce mode, and so the ring's buffers: small enough
 * that the whole ring (threads x 2 x 4 MiB, 112 MiB with 14 threads) stays in
 * the last-level cache, so the DMA and the memcpy meet there instead of in
 * DRAM, large enough that a copy's fixed cost stays small (docs/benchmarks.md,
 * "Bounce staging in 4 MiB chunks"). GPUSNAP_CHUNK_SIZE overrides it (hosts
 * with a much smaller cache may want less).
 */
#define BOUNCE_CHUNK_BYTES (4ULL << 20)
#define SEGMENT_BYTES (256ULL << 20)
#define MAX_STAGING_THREADS 32

static struct {
	bool unpin; /* unpin staging while the driver holds the process (default; GPUSNAP_STAGING_UNPIN=0: keep it pinned) */
	/*
	 * GPUSNAP_STAGING_MODE: bounce (default) or pinned, for every pool. Bounce
	 * in 4 MiB chunks beat the pinned pool with its pipelined unpin for 8 and
	 * 32 GiB, on demand and reserved, on suspend and on resume (docs/benchmarks.md).
	 */
	enum { MODE_BOUNCE, MODE_PINNED } mode;
	/*
	 * GPUSNAP_STAGING_POPULATE=ahead: an on-demand pool in bounce mode is
	 * populated by its own workers ahead of the copies (the older way).
	 * Default (lazy): the ring's memcpy faults the fresh pages in
	 * itself (staging.h, config.lazy), measured faster. Pinned mode always
	 * populates (pinning needs the pages).
	 */
	bool populate_ahead;
	/*
	 * GPUSNAP_ZERO_CHUNKS=0: copy all-zero chunks like any other. By default
	 * a bounce suspend keeps none of them in host memory and resume sets them
	 * with a memset (agent_ring.h).
	 */
	bool no_zero_chunks;
	uint64_t chunk_bytes; /* per mode (BOUNCE_CHUNK_BYTES, CHUNK_BYTES) unless GPUSNAP_CHUNK_SIZE says otherwise */
	uint64_t reserve_bytes;
	struct gs_staging *reserve;
	pthread_t reaper;
	bool reaper_running;
	/*
	 * Bounce mode with a reserved pool: the ring kept with it, built by
	 * ring_builder off the app's critical path. ring_lock guards these three
	 * (a device's first use may start the builder while a control request
	 * runs); the builder thread touches none of them, it returns its ring.
	 */
	pthread_mutex_t ring_lock;
	struct gs_ring *ring;
	pthread_t ring_builder;
	bool ring_building;
} mover = { .chunk_bytes = BOUNCE_CHUNK_BYTES, .ring_lock = PTHREAD_MUTEX_INITIALIZER };

/* Staging threads have no current context; any device's will do for PORTABLE registrations. */
static void use_any_context(struct gs_agent *a)
{
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		if (a->devices[i].used) {
			gpu->use_device(a, i);
			return;
		}
}

/*
 * A pinned pool's workers pin and unpin on their own threads, also while
 * the app runs (a reserved pool's first pinning, after a resume), which
 * would break a global-mode capture of the app's (agent_capture.h): each
 * waits for the app's captures to end first. During a suspend or resume
 * none is open (the gate holds the app, a suspend refuses while one is).
 */
static int staging_register(void *ctx, void *addr, uint64_t len)
{
	struct gs_agent *a = ctx;
	(void)gs_fault(GS_FI_AGENT_STAGING_PIN); /* hold: a window for a test to begin a capture in */
	gs_capture_bg_begin_wait();
	use_any_context(a);
	int rc = gpu->pin(a, addr, len) ? -1 : 0;
	gs_capture_bg_end();
	return rc;
}

static void staging_unregister(void *ctx, void *addr, uint64_t len)
{
	struct gs_agent *a = ctx;
	(void)len;
	(void)gs_fault(GS_FI_AGENT_STAGING_PIN);
	gs_capture_bg_begin_wait();
	use_any_context(a);
	gpu->unpin(a, addr);
	gs_capture_bg_end();
}

/*
 * Threads that populate, pin and unpin staging memory: GPUSNAP_STAGING_THREADS,
 * else all CPUs but two, from 4 to 16: more threads than 8 shortened a
 * reserved 32 GiB suspend and resume (docs/benchmarks.md).
 */
static int staging_threads(void)
{
	int n;
	if (gs_setting_is_set(GS_S_STAGING_THREADS)) {
		n = gs_setting_int(GS_S_STAGING_THREADS);
	} else {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus > 6 ? (int)cpus - 2 : 4;
		if (n > 16)
			n = 16;
	}
	return n < 1 ? 1 : n > MAX_STAGING_THREADS ? MAX_STAGING_THREADS : n;
}

/* An on-demand pool is populated by the copies themselves (no workers). */
static bool on_demand_lazy(void)
{
	return mover.mode == MODE_BOUNCE && !mover.populate_ahead;
}

/*
 * Threads for a suspend into an on-demand pool. Lazy (the default): the
 * ring's threads fault the pool in as they copy, so as many as for a reserved
 * pool. Populated ahead: the same number for populating the pool and for the
 * ring, which waits for fresh memory there, and population and memcpy threads
 * together beyond the CPUs only compete (mmap lock, CPU time): the data rate
 * peaked near half the CPUs (docs/benchmarks.md). So (CPUs + 4) / 2 there.
 * GPUSNAP_STAGING_THREADS overrides both.
 */
static int on_demand_threads(void)
{
	int n = staging_threads();
	if (gs_setting_is_set(GS_S_STAGING_THREADS) || on_demand_lazy())
		return n; /* said: for every pool alike */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int half = cpus > 0 ? (int)(cpus + 4) / 2 : 4;
	if (half < 4)
		half = 4;
	return half < n ? half : n;
}

static int make_pool(struct gs_agent *a, uint64_t bytes, int workers, bool lazy, struct gs_staging **out,
		     struct gs_err *err)
{
	struct gs_staging_config cfg = { .segment_size = SEGMENT_BYTES, .workers = workers, .lazy = lazy };
	struct gs_staging_ops ops = { .reg = staging_register, .unreg = staging_unregister, .ctx = a };
	if (mover.mode == MODE_BOUNCE)
		ops = (struct gs_staging_ops){ 0 }; /* populated only: the ring does the DMA */
	return gs_staging_create(bytes, &cfg, &ops, out, err);
}

/*
 * GPUSNAP_HOST_MEMORY_MARGIN: host memory a suspend leaves free, a size
 * ("2G") or a share of the host's total memory ("10%"). The driver's copy of
 * a context, other work starting meanwhile and the page cache come out of it.
 */
#define DEFAULT_MARGIN "1G"

/*
 * The margin in bytes (said: as the user wrote it): a size, or a share of the
 * host's memory (total). The settings table refused any other value when
 * the agent started and kept the default instead.
 */
static uint64_t host_memory_margin(uint64_t total, char *said, size_t n)
{
	const char *v = gs_setting_str(GS_S_HOST_MEMORY_MARGIN);
	if (!v || !*v)
		v = DEFAULT_MARGIN;
	snprintf(said, n, "%s", v);
	size_t len = strlen(v);
	uint64_t margin = 0;
	if (len > 1 && v[len - 1] == '%')
		return total == UINT64_MAX ? 0 : (uint64_t)((double)total * strtod(v, NULL) / 100.0);
	gs_parse_size(v, &margin);
	return margin;
}

/* MemTotal of /proc/meminfo in bytes, UINT64_MAX when unreadable: what a margin in percent is of. */
static uint64_t host_memory_total(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long kib = 0;
	char line[128];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = sscanf(line, "MemTotal: %llu kB", &kib) == 1;
	if (f)
		fclose(f);
	return found ? (uint64_t)kib * 1024 : UINT64_MAX;
}

/*
 * Admission of a pool that will hold `bytes` (what it will really touch: the
 * chunks not known to be zero), before any data moves: a lazy pool's pages
 * fault in during the copy, where running out means the OOM killer, not an
 * error (core/hostmem.h). What every other suspended process already holds
 * is out of MemAvailable: the kernel keeps that ledger. The margin stays
 * free of what the host has; GPUSNAP_HOST_MEMORY_LIMIT, where set, caps what
 * this suspend takes, whatever the host has.
 */
static int check_host_memory(uint64_t bytes, uint64_t zero_bytes, struct gs_err *err)
{
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	char said[64], need[32], have[32], keep[32], zero[32];
	uint64_t margin = host_memory_margin(host_memory_total(), said, sizeof(said));
	gs_format_bytes(bytes, need, sizeof(need));
	gs_format_bytes(zero_bytes, zero, sizeof(zero));
	uint64_t cap = gs_setting_size(GS_S_HOST_MEMORY_LIMIT);
	if (gs_setting_is_set(GS_S_HOST_MEMORY_LIMIT) && bytes > cap)
		return gs_fail(err, GS_E_NO_SPACE,
			       "not enough host memory to hold the GPU data: %s needed (%s more are zero and stay on the "
			       "GPU), %s available (GPUSNAP_HOST_MEMORY_LIMIT); the process keeps running on the GPU",
			       need, zero, gs_format_bytes(cap, have, sizeof(have)));
	if (m.avail == UINT64_MAX || (m.avail > margin && bytes <= m.avail - margin))
		return 0;
	return gs_fail(err, GS_E_NO_SPACE,
		       "not enough host memory to hold the GPU data: %s needed (%s more are zero and stay on the GPU), "
		       "%s available (%s) less a margin of %s (GPUSNAP_HOST_MEMORY_MARGIN=%s); the process keeps running on "
		       "the GPU",
		       need, zero, gs_format_bytes(m.avail, have, sizeof(have)), m.limit,
		       gs_format_bytes(margin, keep, sizeof(keep)), said);
}

/* What a suspend may take of host memory now: available less the margin, at most GPUSNAP_HOST_MEMORY_LIMIT. */
static uint64_t host_memory_room(void)
{
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	char said[64];
	uint64_t margin = host_memory_margin(host_memory_total(), said, sizeof(said));
	uint64_t room = m.avail == UINT64_MAX ? UINT64_MAX : m.avail > margin ? m.avail - margin : 0;
	uint64_t cap = gs_setting_size(GS_S_HOST_MEMORY_LIMIT);
	if (gs_setting_is_set(GS_S_HOST_MEMORY_LIMIT) && cap < room)
		room = cap;
	return room;
}

/* The reserved pool (GPUSNAP_RESERVE): populated ahead by all staging threads, kept across cycles. */
static int make_reserve(struct gs_agent *a, struct gs_err *err)
{
	return make_pool(a, mover.reserve_bytes, staging_threads(), false, &mover.reserve, err);
}

/* An on-demand pool of bytes (admitted by the caller). */
static int make_on_demand_pool(struct gs_agent *a, uint64_t bytes, struct gs_staging **out, struct gs_err *err)
{
	return make_pool(a, bytes, on_demand_threads(), on_demand_lazy(), out, err);
}

/*
 * The kept ring: one set of buffers per staging thread (the memcpy is the CPU's
 * share of a bounce transfer), each buffer one chunk, but no more sets than
 * the reserve holds chunk pairs: a small reserve gets a small ring.
 */
static unsigned kept_ring_threads(void)
{
	uint64_t sets = mover.reserve_bytes / (2 * mover.chunk_bytes);
	unsigned n = (unsigned)staging_threads();
	if (sets < n)
		n = sets ? (unsigned)sets : 1;
	return n;
}

static void *build_ring(void *arg)
{
	struct gs_agent *a = arg;
	struct gs_ring *r = NULL;
	struct gs_err err = { 0 };
	(void)gs_fault(GS_FI_AGENT_RING_BUILD); /* hold: a window for a test to begin a capture in */
	/* pinning memory now would break a global-mode capture of the app's (agent_capture.h) */
	if (!gs_capture_bg_begin()) {
		pr_info("the copy ring is not set up ahead: the app is capturing a CUDA graph (the next suspend sets one up)");
		return NULL;
	}
	if (gs_ring_create(a, kept_ring_threads(), mover.chunk_bytes, &r, &err))
		pr_warn("cannot set up the copy ring ahead of suspends (the next suspend sets one up): %s", err.msg);
	gs_capture_bg_end();
	return r;
}

/* Bounce mode with a reserved pool and no ring yet: builds the kept ring in the background. */
static void start_ring_builder(struct gs_agent *a)
{
	pthread_mutex_lock(&mover.ring_lock);
	if (mover.reserve && !gs_staging_registers(mover.reserve) && !mover.ring && !mover.ring_building) {
		mover.ring_building = gs_thread_start(&mover.ring_builder, build_ring, a) == 0;
	}
	pthread_mutex_unlock(&mover.ring_lock);
}

/* Waits for the builder, if one runs, and keeps its ring. */
static void join_ring_builder(void)
{
	pthread_mutex_lock(&mover.ring_lock);
	if (mover.ring_building) {
		void *r = NULL;
		pthread_join(mover.ring_builder, &r);
		mover.ring_building = false;
		if (mover.ring)
			gs_ring_destroy(r);
		else
			mover.ring = r;
	}
	pthread_mutex_unlock(&mover.ring_lock);
}

/* Frees the kept ring (unpinned before the call returns: a dump must not carry it). */
static void drop_ring(void)
{
	join_ring_builder();
	pthread_mutex_lock(&mover.ring_lock);
	gs_ring_destroy(mover.ring);
	mover.ring = NULL;
	pthread_mutex_unlock(&mover.ring_lock);
}

/*
 * The ring for a bounce transfer: the kept one (made now if a reserved pool
 * exists and the background build failed or was dropped), else NULL, and the
 * transfer sets up its own.
 */
static struct gs_ring *ring_for_transfer(struct gs_agent *a)
{
	join_ring_builder();
	pthread_mutex_lock(&mover.ring_lock);
	if (!mover.ring && mover.reserve) {
		struct gs_err e = { 0 };
		if (gs_ring_create(a, kept_ring_threads(), mover.chunk_bytes, &mover.ring, &e))
			pr_warn("cannot set up a kept copy ring (this transfer sets up its own): %s", e.msg);
	}
	struct gs_ring *r = mover.ring;
	pthread_mutex_unlock(&mover.ring_lock);
	return r;
}

void gs_mover_init_from_env(struct gs_agent *a)
{
	(void)a;
	mover.unpin = gs_setting_bool(GS_S_STAGING_UNPIN);
	mover.mode = gs_setting_choice(GS_S_STAGING_MODE) ? MODE_PINNED : MODE_BOUNCE; /* bounce|pinned */
	mover.no_zero_chunks = !gs_setting_bool(GS_S_ZERO_CHUNKS);
	mover.populate_ahead = gs_setting_choice(GS_S_STAGING_POPULATE) == 1; /* lazy|ahead */
	uint64_t dflt = mover.mode == MODE_BOUNCE ? BOUNCE_CHUNK_BYTES : CHUNK_BYTES;
	/* the row's range, 1M to 256M, is SEGMENT_BYTES at most */
	mover.chunk_bytes = gs_setting_is_set(GS_S_CHUNK_SIZE) ? gs_setting_size(GS_S_CHUNK_SIZE) : dflt;
	mover.reserve_bytes = gs_setting_size(GS_S_RESERVE);
}

static void mover_device_ready(struct gs_agent *a, struct gs_agent_device *d)
{
	(void)d;
	if (!mover.reserve_bytes || mover.reserve)
		return;
	struct gs_err err = { 0 };
	if (make_reserve(a, &err))
		pr_err("cannot reserve %llu bytes of staging memory: %s", (unsigned long long)mover.reserve_bytes, err.msg);
	else
		start_ring_builder(a);
}

void gs_mover_forget_after_fork(void)
{
	/* their memory is MADV_DONTFORK (not mapped in the child), their threads were not copied */
	mover.reserve = NULL;
	mover.ring = NULL;
	mover.ring_building = false;
	mover.reaper_running = false;
	pthread_mutex_init(&mover.ring_lock, NULL);
}

bool gs_mover_has_reserve(struct gs_agent *a)
{
	(void)a;
	return mover.reserve != NULL;
}

static void *reap_pool(void *arg)
{
	gs_staging_destroy(arg);
	return NULL;
}

/* Frees an on-demand pool off the critical path: unmapping tens of GiB takes a while. */
static void retire_pool(struct gs_staging *pool)
{
	if (!pool)
		return;
	if (mover.reaper_running)
		pthread_join(mover.reaper, NULL);
	mover.reaper_running = pthread_create(&mover.reaper, NULL, reap_pool, pool) == 0;
	if (!mover.reaper_running)
		gs_staging_destroy(pool);
}

static void join_reaper(void)
{
	if (mover.reaper_running) {
		pthread_join(mover.reaper, NULL);
		mover.reaper_running = false;
	}
}

/* The kind that described a region releases it and makes it again (memory/memkind.h). */
static CUresult release_region(struct gs_agent *a, const struct held_region *r)
{
	return r->kind->release(a, r);
}

static CUresult recreate_region(struct gs_agent *a, struct held_region *r)
{
	return r->kind->recreate(a, r);
}

static int cmp_region(const void *x, const void *y)
{
	const struct held_region *a = x, *b = y;
	if (a->device != b->device)
		return a->device - b->device;
	return a->va < b->va ? -1 : a->va > b->va;
}

static int set_device(struct gs_agent *a, int device, struct gs_err *err)
{
	int r = gpu->use_device(a, device);
	if (r) {
		char b[128];
		return gs_fail(err, GS_E_AGENT, "cannot use the context of GPU %d: %s", device,
			       gpu->strerror(a, r, b, sizeof(b)));
	}
	return 0;
}

static int ensure_lanes(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	if (d->lanes_ready)
		return 0;
	int rc = set_device(a, d->ordinal, err);
	for (int i = 0; !rc && i < GS_AGENT_LANES; i++) {
		int r = gpu->make_lane(a, d->ordinal, i);
		if (r)
			rc = gs_fail(err, GS_E_AGENT, "cannot create copy streams on GPU %d (error %d)", d->ordinal, r);
	}
	d->lanes_ready = rc == 0;
	return rc;
}

static void update_registry(struct gs_agent *a, const struct held_region *r)
{
	if (r->kind->recreated)
		r->kind->recreated(a, r);
}

void gs_mover_drop_pool(struct gs_agent *a, struct gs_agent_held *h)
{
	(void)a;
	/*
	 * A reserved pool goes too: the point is a small process for CRIU to dump
	 * (tens of GiB of staging would be dumped otherwise). It is made again
	 * after the next resume.
	 */
	if (h->pool && h->pool_is_reserve && h->pool == mover.reserve)
		mover.reserve = NULL;
	if (h->pool)
		gs_staging_destroy(h->pool);
	if (!mover.reserve)
		drop_ring(); /* it goes with the reserved pool: pinned, CRIU would carry it too; resume builds it again */
	h->pool = NULL;
	h->pool_is_reserve = false;
	h->unpinned = false;
}

void gs_mover_free_held(struct gs_agent *a, struct gs_agent_held *h)
{
	gs_memkind_finish(a); /* what the kinds prepared for the plan (the app's handles' copy windows) goes with it */
	if (!h)
		return;
	if (h->pool && !h->pool_is_reserve)
		retire_pool(h->pool);
	gs_ring_destroy(h->ring); /* nothing is in flight: every transfer synchronized */
	gs_copy_plan_free(&h->plan);
	free(h->regions);
	free(h->zero_chunks);
	free(h->image_dir);
	free(h);
}

/*
 * One GPU's regions (h's regions are sorted by device), released in order.
 * Each GPU has its own lane and, beyond the first, its own thread: the driver
 * unmaps and frees region after region, and two GPUs need not wait for each
 * other. A lane stops at its first failure.
 */
struct release_lane {
	struct gs_agent *a;
	struct gs_agent_held *h;
	size_t from, to;
	size_t failed_at; /* to: none failed */
	CUresult res;
	pthread_t thread;
	bool started;
};

static void *release_lane_main(void *arg)
{
	struct release_lane *l = arg;
	l->failed_at = l->to;
	CUcontext ctx = l->a->devices[l->h->regions[l->from].device].ctx;
	l->res = CUDA_SUCCESS;
	if (ctx)
		l->res = l->a->cu.cuCtxSetCurrent(ctx);
	else
		gs_ctx_use_copy_context(l->a); /* any context unmaps: the address space is one */
	for (size_t i = l->from; i < l->to && l->res == CUDA_SUCCESS; i++) {
		struct held_region *r = &l->h->regions[i];
		if (r->released)
			continue;
		l->res = gs_fault(GS_FI_AGENT_RELEASE) ? CUDA_ERROR_INVALID_VALUE : release_region(l->a, r);
		if (l->res != CUDA_SUCCESS) {
			l->failed_at = i;
			break;
		}
		r->released = true;
		r->handle = 0;
	}
	if (l->res != CUDA_SUCCESS && l->failed_at == l->to)
		l->failed_at = l->from; /* the context could not be made current: nothing of this lane released */
	return NULL;
}

int gs_mover_release(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err)
{
	struct release_lane lanes[GS_AGENT_MAX_DEVICES];
	size_t nlanes = 0;
	for (size_t i = 0; i < h->nregions; i++)
		if (!nlanes || h->regions[i].device != h->regions[lanes[nlanes - 1].from].device)
			lanes[nlanes++] = (struct release_lane){ .a = a, .h = h, .from = i, .to = h->nregions };
	for (size_t k = 0; k + 1 < nlanes; k++)
		lanes[k].to = lanes[k + 1].from;
	pr_debug("releasing %zu regions on %zu GPU(s)", h->nregions, nlanes);
	for (size_t k = 1; k < nlanes; k++)
		lanes[k].started = gs_thread_start(&lanes[k].thread, release_lane_main, &lanes[k]) == 0;
	for (size_t k = 0; k < nlanes; k++) {
		if (k == 0 || !lanes[k].started)
			release_lane_main(&lanes[k]); /* the first GPU's here; another's here too if its thread did not start */
		else
			pthread_join(lanes[k].thread, NULL);
	}
	gs_ctx_use_copy_context(a);
	const struct release_lane *failed = NULL;
	for (size_t k = 0; k < nlanes; k++) {
		for (size_t i = lanes[k].from; i < lanes[k].to; i++)
			if (h->regions[i].released)
				update_registry(a, &h->regions[i]);
		if (!failed && lanes[k].res != CUDA_SUCCESS)
			failed = &lanes[k];
	}
	if (!failed)
		return 0;
	char b[128];
	return gs_fail(err, GS_E_AGENT, "cannot release GPU memory at %#llx: %s",
		       (unsigned long long)h->regions[failed->failed_at].va, gs_cuda_strerror(&a->cu, failed->res, b, sizeof(b)));
}

int gs_mover_recreate(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err)
{
	for (size_t i = 0; i < h->nregions; i++) {
		struct held_region *r = &h->regions[i];
		if (!r->released)
			continue;
		CUresult cr = gs_fault(GS_FI_AGENT_RECREATE) ? CUDA_ERROR_OUT_OF_MEMORY : recreate_region(a, r);
		if (cr != CUDA_SUCCESS) {
			for (size_t j = 0; j < i; j++) {
				struct held_region *q = &h->regions[j];
				if (q->released && q->handle && release_region(a, q) == CUDA_SUCCESS)
					q->handle = 0;
			}
			if (cr == CUDA_ERROR_OUT_OF_MEMORY)
				return gs_fail(err, GS_E_NO_VRAM, "not enough free GPU memory on GPU %d to resume (%llu bytes needed)",
					       r->device, (unsigned long long)h->bytes);
			char b[128];
			return gs_fail(err, GS_E_AGENT, "cannot re-create GPU memory at %#llx: %s", (unsigned long long)r->va,
				       gs_cuda_strerror(&a->cu, cr, b, sizeof(b)));
		}
	}
	for (size_t i = 0; i < h->nregions; i++)
		if (h->regions[i].released) {
			h->regions[i].released = false;
			update_registry(a, &h->regions[i]);
		}
	return 0;
}

int gs_mover_plan(struct gs_agent *a, uint64_t chunk_bytes, struct gs_agent_held **out, struct gs_err *err)
{
	*out = NULL;
	if (!chunk_bytes)
		chunk_bytes = mover.chunk_bytes;
	struct gs_agent_held *h = calloc(1, sizeof(*h));
	if (!h)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	/* every kind's regions; on failure nothing of theirs stays prepared */
	struct gs_region_list list = { 0 };
	int rc = gs_memkind_describe(a, &list, err);
	h->regions = list.r;
	h->nregions = list.n;
	if (rc)
		goto fail;
	if (h->nregions) /* none when every allocation was freed: qsort must not get NULL */
		qsort(h->regions, h->nregions, sizeof(*h->regions), cmp_region);
	struct gs_copy_region *cr = calloc(h->nregions ? h->nregions : 1, sizeof(*cr));
	if (!cr) {
		rc = gs_fail(err, GS_E_AGENT, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < h->nregions; i++) {
		cr[i].va = h->regions[i].va;
		cr[i].size = h->regions[i].size;
		h->bytes += h->regions[i].size;
	}
	struct gs_copy_params params = { .chunk_size = chunk_bytes, .lanes = GS_AGENT_LANES, .staging_align = 4096,
					 .staging_segment = SEGMENT_BYTES };
	rc = gs_copy_plan_build(cr, h->nregions, &params, &h->plan, err);
	free(cr);
	for (int i = 0; i < GS_AGENT_MAX_DEVICES && !rc; i++)
		if (a->devices[i].used)
			rc = ensure_lanes(a, &a->devices[i], err);
	if (rc)
		goto fail;
	*out = h;
	return 0;
fail:
	gs_mover_free_held(a, h);
	return rc;
}


/*
 * The ring of an on-demand bounce suspend, made before its pool: set up while
 * the pool's workers populate tens of GiB, its fault-in and pinning costs far
 * more than alone (docs/benchmarks.md). NULL on failure (the transfer then
 * sets up its own); *setup_s is the time it took.
 */
static struct gs_ring *ring_before_pool(struct gs_agent *a, const struct gs_agent_held *h, double *setup_s)
{
	double t0 = gs_now();
	unsigned n = (unsigned)on_demand_threads();
	if (n > h->plan.nchunks)
		n = (unsigned)h->plan.nchunks;
	struct gs_ring *r = NULL;
	struct gs_err e = { 0 };
	if (gs_ring_create(a, n ? n : 1, mover.chunk_bytes, &r, &e))
		pr_warn("cannot set up the copy ring ahead of the staging pool: %s", e.msg);
	*setup_s = gs_now() - t0;
	return r;
}

/*
 * The zero scan of a bounce suspend, before its pool is chosen: what it finds
 * all zero never crosses PCIe and takes no host memory (agent_zero_scan.h).
 * A pinned pool is copied into directly, every chunk: nothing to scan for.
 */
static void scan_zero_chunks(struct gs_agent *a, struct gs_agent_held *h, struct gs_msg *reply)
{
	free(h->zero_chunks);
	h->zero_chunks = NULL;
	h->zero_bytes = 0;
	if (mover.mode != MODE_BOUNCE || mover.no_zero_chunks || !h->plan.nchunks)
		return;
	if (!(h->zero_chunks = calloc(h->plan.nchunks, 1))) {
		pr_warn("no memory to track zero chunks: every chunk is copied");
		return;
	}
	gs_zero_scan(a, h, h->zero_chunks, reply);
}

/*
 * The host memory a pool for h will take: a lazy pool's pages fault in only
 * where a chunk is copied, so the chunks not known zero (each rounded up to
 * the page, as the plan lays them out); a pool populated ahead or pinned, all
 * of it.
 */
static uint64_t pool_needs(const struct gs_agent_held *h, uint64_t *zero)
{
	*zero = 0;
	if (!on_demand_lazy() || !h->zero_chunks)
		return h->plan.staging_bytes;
	uint64_t need = 0;
	for (size_t k = 0; k < h->plan.nchunks; k++) {
		uint64_t size = h->plan.chunks[k].size;
		if (h->zero_chunks[k])
			*zero += size;
		else
			need += (size + 4095) & ~(uint64_t)4095;
	}
	return need < h->plan.staging_bytes ? need : h->plan.staging_bytes;
}

int gs_mover_take_pool(struct gs_agent *a, struct gs_agent_held *h, struct gs_msg *reply, struct gs_err *err)
{
	if (h->pool || !h->plan.staging_bytes)
		return 0;
	scan_zero_chunks(a, h, reply);
	if (mover.reserve && gs_staging_size(mover.reserve) >= h->plan.staging_bytes) {
		h->pool = mover.reserve;
		h->pool_is_reserve = true;
		return 0;
	}
	uint64_t zero = 0, need = pool_needs(h, &zero);
	int rc = check_host_memory(need, zero, err);
	if (rc)
		return rc;
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "admitted_bytes", need);
	if (mover.mode == MODE_BOUNCE && !h->ring)
		h->ring = ring_before_pool(a, h, &h->ring_setup_s);
	double t = gs_now();
	if ((rc = make_on_demand_pool(a, h->plan.staging_bytes, &h->pool, err)))
		return rc;
	h->pool_is_reserve = false;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "pool_create", gs_now() - t);
	return 0;
}

int gs_mover_take_pool_split(struct gs_agent *a, struct gs_agent_held *h, uint8_t **to_image, struct gs_msg *reply,
			     struct gs_err *err)
{
	*to_image = NULL;
	/* the split goes through the ring into a pool whose pages fault in where a chunk lands: bounce, lazy */
	if (h->pool || !h->plan.nchunks || !on_demand_lazy() || mover.no_zero_chunks)
		return 0;
	scan_zero_chunks(a, h, reply);
	uint64_t room = host_memory_room();
	if (!h->zero_chunks)
		return 0;
	uint8_t *where = calloc(h->plan.nchunks, 1);
	if (!where)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	/*
	 * The plan's first chunks while they fit, the rest to the image: the
	 * plan follows the regions in order, so each part is a few long runs
	 * (the image's reads stay sequential, the pool's pages a prefix), and
	 * only the cut depends on what the host has.
	 */
	uint64_t need = 0, zero = 0;
	size_t k = 0;
	for (; k < h->plan.nchunks; k++) {
		uint64_t size = h->plan.chunks[k].size, page = (size + 4095) & ~(uint64_t)4095;
		if (h->zero_chunks[k]) {
			zero += size;
			continue;
		}
		if (page > room - need)
			break;
		need += page;
	}
	for (size_t i = k; i < h->plan.nchunks; i++)
		where[i] = 1;
	if (!need) {
		free(where); /* not one chunk fits: the whole of it goes to the image */
		return 0;
	}
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "admitted_bytes", need);
	double t = gs_now();
	int rc = make_on_demand_pool(a, h->plan.staging_bytes, &h->pool, err);
	if (rc) {
		free(where);
		return rc;
	}
	h->pool_is_reserve = false;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "pool_create", gs_now() - t);
	pr_info("host memory holds %llu bytes of this suspend's data (%llu more are zero), the rest goes to the spill",
		(unsigned long long)need, (unsigned long long)zero);
	*to_image = where;
	return 0;
}

int gs_mover_stage_out(struct gs_agent *a, struct gs_agent_held *h, double timeout_s, bool unpin,
		       struct gs_msg *reply, struct gs_err *err)
{
	if (!h->pool)
		return 0;
	bool direct = gs_staging_registers(h->pool);
	/* the zero scan ran before the pool was chosen (gs_mover_take_pool): its finds are in h->zero_chunks */
	struct gs_ring_staging_end end;
	int rc = gs_ring_staging_end(&end, h, h->pool, timeout_s, h->zero_chunks, unpin && mover.unpin, err);
	if (rc)
		return rc;
	struct gs_ring_stats st = { 0 };
	struct gs_ring *ring = direct ? NULL : h->ring ? h->ring : ring_for_transfer(a);
	rc = gs_ring_out(a, h, &end.end, ring, (unsigned)staging_threads(), &st, err);
	if (end.unpin) {
		h->unpinned = true; /* even partly: resume pins what is not */
		if (gs_ring_staging_end_finish(&end) && !rc)
			pr_warn("some staging memory could not be unpinned: the driver's checkpoint takes longer");
	} else {
		gs_ring_staging_end_finish(&end);
	}
	h->zero_bytes = atomic_load(&end.zero_bytes); /* the GPU's finds included: the transfer put them as zero */
	if (h->ring) {
		st.setup_s = h->ring_setup_s;
		double t = gs_now();
		gs_ring_destroy(h->ring); /* nothing is in flight: the transfer synchronized */
		h->ring = NULL;
		gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_free", gs_now() - t);
	}
	if (rc && h->unpinned && h->pool_is_reserve) {
		/* the reserved pool stays, pinned as it was; an on-demand one is freed with the plan */
		struct gs_err e2 = { 0 };
		if (gs_staging_set_pinned(h->pool, true, &e2))
			pr_warn("the reserved staging pool stays partly unpinned: %s", e2.msg);
		h->unpinned = false;
	}
	if (rc)
		return rc;
	gs_ring_stats_report(&st, reply);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_unpinned", h->unpinned);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_bounce", !direct);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", st.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", h->zero_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "reserved_pool", h->pool_is_reserve);
	h->held_bytes = gs_mover_held_bytes(h);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "held_bytes", h->held_bytes);
	return 0;
}

uint64_t gs_mover_held_bytes(const struct gs_agent_held *h)
{
	if (!h || h->bytes < h->zero_bytes)
		return 0;
	return h->bytes - h->zero_bytes;
}

int gs_mover_stage_in(struct gs_agent *a, struct gs_agent_held *h, struct gs_msg *reply, struct gs_err *err)
{
	if (!h->pool || !h->plan.nchunks)
		return 0;
	bool direct = gs_staging_registers(h->pool);
	/* pinning again runs on the pool's workers while the copies go in, segment by segment */
	int rc = h->unpinned ? gs_staging_repin_start(h->pool, err) : 0;
	if (rc)
		return rc;
	struct gs_ring_staging_end end;
	if ((rc = gs_ring_staging_end(&end, h, h->pool, -1, h->zero_chunks, false, err)))
		return rc;
	struct gs_ring_stats st = { 0 };
	rc = gs_ring_in(a, h, &end.end, direct ? NULL : ring_for_transfer(a), (unsigned)staging_threads(), &st, err);
	gs_ring_staging_end_finish(&end);
	if (rc)
		return rc; /* the data is still in staging */
	h->unpinned = false;
	gs_ring_stats_report(&st, reply);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_bounce", !direct);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", st.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", st.zero_bytes);
	return 0;
}

void gs_mover_join_background(struct gs_agent *a)
{
	(void)a;
	join_reaper();
	join_ring_builder(); /* its CUDA calls end before the gate closes; a suspend uses its ring */
}

void gs_mover_drop_reserve(struct gs_agent *a)
{
	(void)a;
	if (mover.reserve) {
		gs_staging_destroy(mover.reserve);
		mover.reserve = NULL;
	}
	drop_ring();
}

void gs_mover_after_resume(struct gs_agent *a)
{
	/* a reserved pool dropped for a dump comes back, filled in the background */
	if (mover.reserve_bytes && !mover.reserve) {
		struct gs_err e2 = { 0 };
		if (make_reserve(a, &e2))
			pr_warn("cannot reserve staging memory again: %s", e2.msg);
	}
	start_ring_builder(a); /* bounce mode: a ring dropped with the reserved pool comes back too */
}

static void mover_context_changed(struct gs_agent *a, struct gs_agent_device *d)
{
	(void)a;
	/* the old context took its streams with it: nothing to destroy, only to make again */
	d->lanes_ready = false;
	/* the kept ring was pinned with the first device's context, which may be the one gone */
	drop_ring();
}

/* While a suspend waits at the closed gate, the reserved pool and its ring must not start alongside it. */
static bool mover_hold_announce(struct gs_agent *a)
{
	(void)a;
	return gs_gate_is_closed();
}

const struct gs_agent_listener gs_mover_listener = {
	.name = "mover",
	.hold_announce = mover_hold_announce,
	.device_ready = mover_device_ready,
	.context_changed = mover_context_changed,
};
