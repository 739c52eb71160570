/*
 * agent_mover.c - moves the app's releasable device memory to host staging
 * memory and back (see agent_mover.h).
 *
 * Suspend: close the gate (no app thread inside the driver, new calls wait),
 * synchronize each device, plan the copy (core/copy_plan.c: chunks dealt to
 * GS_AGENT_LANES streams per device, placed in staging order so copies
 * follow the population of an on-demand pool), copy device to host, then
 * release the physical memory. A failure before the release reopens the gate
 * and leaves everything as it was; a failure during the release re-creates
 * what was released and refills it, so the app never loses data.
 * Resume: re-create physical memory at the same addresses (all or nothing:
 * on a shortage what was re-created is released again and the app stays
 * suspended), copy back, open the gate. An on-demand staging pool is freed
 * afterwards by a background thread the agent joins before the next suspend.
 *
 * Two staging modes (GPUSNAP_STAGING_MODE). bounce (default): the pool is
 * only populated, never pinned, and the copies go through a small ring of
 * pinned buffers plus a memcpy on the host (agent_ring.h), in 4 MiB chunks so
 * that the ring stays in the CPU's cache. With a reserved pool the ring is
 * kept across cycles (built in the background when the pool is made, freed
 * with it); without one each suspend and resume sets one up. pinned: the
 * pool is registered with the driver and the copies go straight into it; a
 * full suspend unpins it as the copies complete (the driver's checkpoint
 * costs time per pinned GiB) and resume pins it again.
 */
#define LOG_PREFIX "agent: "
#include "agent/agent_mover.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_app_vmm.h"
#include "agent/agent_ring.h"
#include "agent/gate.h"
#include "common/log.h"
#include "common/options.h"
#include "common/util.h"
#include "core/copy_plan.h"
#include "core/hostmem.h"
#include "core/staging.h"

#define CHUNK_BYTES (64ULL << 20) /* a suspend's chunks in pinned mode: one copy per chunk straight into the pool */
/*
 * A suspend's chunks in bounce mode, and so the ring's buffers: small enough
 * that the whole ring (threads x 2 x 4 MiB, 112 MiB with 14 threads) stays in
 * the last-level cache, so the DMA and the memcpy meet there instead of in
 * DRAM, large enough that a copy's fixed cost stays small. Measured for 32
 * GiB on the H100 host (300 MiB L3): 2 MiB 38/43 GB/s out/in, 4 MiB 50/49,
 * 8 MiB 40/47, 64 MiB 36/36. GPUSNAP_CHUNK_SIZE overrides it (hosts with a
 * much smaller cache may want less).
 */
#define BOUNCE_CHUNK_BYTES (4ULL << 20)
#define SEGMENT_BYTES (256ULL << 20)
#define GS_AGENT_MAX_UNPIN_THREADS 32

static struct {
	bool unpin; /* unpin staging while the driver holds the process (default; GPUSNAP_STAGING_UNPIN=0: keep it pinned) */
	/*
	 * GPUSNAP_STAGING_MODE: bounce (default) or pinned, for every pool. Measured
	 * on the H100 (docs/benchmarks.md, 05:53): bounce in 4 MiB chunks beat the
	 * pinned pool with its pipelined unpin for 8 and 32 GiB, on demand and
	 * reserved, on suspend and on resume.
	 */
	enum { MODE_BOUNCE, MODE_PINNED } mode;
	/*
	 * GPUSNAP_STAGING_POPULATE=ahead: an on-demand pool in bounce mode is
	 * populated by its own workers ahead of the copies, as before 2026-11-23
	 * 08:00. Default (lazy): the ring's memcpy faults the fresh pages in
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
			a->cu.cuCtxSetCurrent(a->devices[i].ctx);
			return;
		}
}

static int staging_register(void *ctx, void *addr, uint64_t len)
{
	struct gs_agent *a = ctx;
	use_any_context(a);
	return a->cu.cuMemHostRegister(addr, len, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS ? 0 : -1;
}

static void staging_unregister(void *ctx, void *addr, uint64_t len)
{
	struct gs_agent *a = ctx;
	(void)len;
	use_any_context(a);
	a->cu.cuMemHostUnregister(addr);
}

/*
 * Threads that populate, pin and unpin staging memory: GPUSNAP_STAGING_THREADS,
 * else all CPUs but two, from 4 to 16. On the 16-core H100 machine 14 threads
 * made a 32 GiB suspend/resume 1.55/1.48 s against 1.64/1.54 s with 8.
 */
static int staging_threads(void)
{
	const char *v = getenv("GPUSNAP_STAGING_THREADS");
	int n;
	if (v && *v) {
		n = atoi(v);
	} else {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus > 6 ? (int)cpus - 2 : 4;
		if (n > 16)
			n = 16;
	}
	return n < 1 ? 1 : n > GS_AGENT_MAX_UNPIN_THREADS ? GS_AGENT_MAX_UNPIN_THREADS : n;
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
 * together beyond the CPUs only compete (mmap lock, CPU time). Measured for 8
 * GiB on 16 CPUs, populated ahead, data part out, median of 3 cycles: 4
 * threads 16.5 GB/s, 6 18.0, 8 19.8, 10 19.3, 14 16.6, 16 17.4. So (CPUs +
 * 4) / 2 there. GPUSNAP_STAGING_THREADS overrides both.
 */
static int on_demand_threads(void)
{
	int n = staging_threads();
	const char *v = getenv("GPUSNAP_STAGING_THREADS");
	if ((v && *v) || on_demand_lazy())
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
 * Refuses a pool the host cannot hold, before any data moves: a lazy pool's
 * pages fault in during the copy, where running out means the OOM killer, not
 * an error (core/hostmem.h). GPUSNAP_HOST_MEMORY_LIMIT caps it further, for
 * hosts that keep memory for other work.
 */
static int check_host_memory(uint64_t bytes, struct gs_err *err)
{
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	const char *v = getenv("GPUSNAP_HOST_MEMORY_LIMIT");
	uint64_t cap;
	if (v && *v && gs_parse_size(v, &cap))
		pr_warn("ignoring GPUSNAP_HOST_MEMORY_LIMIT='%s': not a size", v);
	else if (v && *v && cap < m.avail) {
		m.avail = cap;
		snprintf(m.limit, sizeof(m.limit), "GPUSNAP_HOST_MEMORY_LIMIT");
	}
	if (m.avail == UINT64_MAX || bytes <= m.avail)
		return 0;
	char need[32], have[32];
	return gs_fail(err, GS_E_NO_SPACE,
		       "not enough host memory to hold the GPU data: %s needed, %s available (%s); the process keeps "
		       "running on the GPU",
		       gs_format_bytes(bytes, need, sizeof(need)), gs_format_bytes(m.avail, have, sizeof(have)), m.limit);
}

/* The reserved pool (GPUSNAP_RESERVE): populated ahead by all staging threads, kept across cycles. */
static int make_reserve(struct gs_agent *a, struct gs_err *err)
{
	return make_pool(a, mover.reserve_bytes, staging_threads(), false, &mover.reserve, err);
}

int gs_mover_make_pool(struct gs_agent *a, uint64_t bytes, struct gs_staging **out, struct gs_err *err)
{
	int rc = check_host_memory(bytes, err);
	return rc ? rc : make_pool(a, bytes, on_demand_threads(), on_demand_lazy(), out, err);
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
	if (gs_ring_create(a, kept_ring_threads(), mover.chunk_bytes, &r, &err))
		pr_warn("cannot set up the copy ring ahead of suspends (the next suspend sets one up): %s", err.msg);
	return r;
}

/* Bounce mode with a reserved pool and no ring yet: builds the kept ring in the background. */
static void start_ring_builder(struct gs_agent *a)
{
	pthread_mutex_lock(&mover.ring_lock);
	if (mover.reserve && !gs_staging_registers(mover.reserve) && !mover.ring && !mover.ring_building) {
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old); /* the app's signal handlers never run on our threads */
		mover.ring_building = pthread_create(&mover.ring_builder, NULL, build_ring, a) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
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

/* A pool that is not pinned takes the ring: h's data to it (to_host) or back to the GPU. */
static int bounce_copy(struct gs_agent *a, struct gs_agent_held *h, struct gs_ring *own, bool to_host, double timeout_s,
		       struct gs_ring_stats *st, struct gs_err *err)
{
	struct gs_ring *ring = own ? own : ring_for_transfer(a);
	unsigned threads = (unsigned)staging_threads();
	if (!to_host)
		return gs_ring_from_staging(a, h, h->pool, ring, threads, h->zero_chunks, st, err);
	free(h->zero_chunks);
	h->zero_chunks = NULL;
	h->zero_bytes = 0;
	if (!mover.no_zero_chunks && h->plan.nchunks && !(h->zero_chunks = calloc(h->plan.nchunks, 1)))
		pr_warn("no memory to track zero chunks: every chunk is copied");
	int rc = gs_ring_to_staging(a, h, h->pool, ring, threads, timeout_s, h->zero_chunks, st, err);
	h->zero_bytes = st->zero_bytes;
	return rc;
}

void gs_mover_init_from_env(struct gs_agent *a)
{
	(void)a;
	const char *u = getenv("GPUSNAP_STAGING_UNPIN");
	mover.unpin = !(u && !strcmp(u, "0"));
	const char *m = getenv("GPUSNAP_STAGING_MODE");
	mover.mode = MODE_BOUNCE;
	if (m && !strcmp(m, "pinned"))
		mover.mode = MODE_PINNED;
	else if (m && *m && strcmp(m, "bounce"))
		pr_warn("ignoring GPUSNAP_STAGING_MODE='%s': not 'bounce' or 'pinned'", m);
	const char *z = getenv("GPUSNAP_ZERO_CHUNKS");
	mover.no_zero_chunks = z && !strcmp(z, "0");
	const char *pop = getenv("GPUSNAP_STAGING_POPULATE");
	mover.populate_ahead = pop && !strcmp(pop, "ahead");
	if (pop && *pop && strcmp(pop, "ahead") && strcmp(pop, "lazy"))
		pr_warn("ignoring GPUSNAP_STAGING_POPULATE='%s': not 'lazy' or 'ahead'", pop);
	uint64_t dflt = mover.mode == MODE_BOUNCE ? BOUNCE_CHUNK_BYTES : CHUNK_BYTES;
	const char *c = getenv("GPUSNAP_CHUNK_SIZE");
	mover.chunk_bytes = dflt;
	if (c && *c && (gs_parse_size(c, &mover.chunk_bytes) || mover.chunk_bytes < (1ULL << 20) ||
			mover.chunk_bytes > SEGMENT_BYTES)) {
		pr_warn("ignoring GPUSNAP_CHUNK_SIZE='%s': not a size from 1M to 256M", c);
		mover.chunk_bytes = dflt;
	}
	const char *v = getenv("GPUSNAP_RESERVE");
	if (v && *v && gs_parse_size(v, &mover.reserve_bytes))
		pr_warn("ignoring GPUSNAP_RESERVE='%s': not a size", v);
}

void gs_mover_device_ready(struct gs_agent *a, struct gs_agent_device *d)
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

struct collect_ctx {
	struct held_region *r;
	size_t n, cap;
	bool is_slab;
};

static int collect(void *ctx, const struct gs_alloc_rec *rec)
{
	struct collect_ctx *c = ctx;
	if (rec->kind != GS_ALLOC_DEVICE)
		return 0;
	if (gs_grow_array((void **)&c->r, &c->cap, c->n, sizeof(*c->r), 256))
		return -1;
	c->r[c->n++] = (struct held_region){
		.va = rec->va, .size = rec->size, .reserved = rec->user, .handle = rec->handle,
		.device = rec->device, .is_slab = c->is_slab,
	};
	return 0;
}

/* One of the app's own VMM handles (agent_app_vmm.c): copied whole through va, a mapping that covers it. */
static int collect_app(void *ctx, uint64_t vh, uint64_t va, uint64_t size, int device)
{
	struct collect_ctx *c = ctx;
	struct gs_alloc_rec rec = { .va = va, .size = size, .kind = GS_ALLOC_DEVICE, .device = device, .user = size };
	c->is_slab = false;
	if (collect(ctx, &rec))
		return -1;
	c->r[c->n - 1].app_handle = vh;
	return 0;
}

static CUresult release_region(struct gs_agent *a, const struct held_region *r)
{
	if (r->app_handle)
		return gs_app_vmm_release(a, r->app_handle);
	return gs_vmm_release_physical(a, r->va, r->reserved, r->handle);
}

static CUresult recreate_region(struct gs_agent *a, struct held_region *r)
{
	if (r->app_handle)
		return gs_app_vmm_recreate(a, r->app_handle, &r->handle);
	return gs_vmm_recreate_physical(a, r->device, r->va, r->reserved, &r->handle);
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
	CUresult r = a->cu.cuCtxSetCurrent(a->devices[device].ctx);
	if (r != CUDA_SUCCESS) {
		char b[128];
		return gs_fail(err, GS_E_AGENT, "cannot use the context of GPU %d: %s", device,
			       gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
	}
	return 0;
}

static int ensure_lanes(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	if (d->lanes_ready)
		return 0;
	int rc = set_device(a, d->ordinal, err);
	for (int i = 0; !rc && i < GS_AGENT_LANES; i++) {
		CUresult r = a->cu.cuStreamCreate(&d->lanes[i], CU_STREAM_NON_BLOCKING);
		if (r != CUDA_SUCCESS)
			rc = gs_fail(err, GS_E_AGENT, "cannot create copy streams on GPU %d (error %d)", d->ordinal, r);
	}
	d->lanes_ready = rc == 0;
	return rc;
}

static int sync_devices(struct gs_agent *a, bool lanes_only, struct gs_err *err)
{
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++) {
		struct gs_agent_device *d = &a->devices[i];
		if (!d->used)
			continue;
		int rc = set_device(a, i, err);
		if (rc)
			return rc;
		CUresult r = CUDA_SUCCESS;
		if (lanes_only) {
			for (int l = 0; l < GS_AGENT_LANES && r == CUDA_SUCCESS; l++)
				r = a->cu.cuStreamSynchronize(d->lanes[l]);
		} else {
			r = a->cu.cuCtxSynchronize();
		}
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(err, GS_E_AGENT, "GPU %d reported an error while synchronizing: %s", i,
				       gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
	}
	return 0;
}

/*
 * Unpinning the staging pool while the copy out runs. The driver's own
 * checkpoint and restore take time in proportion to the pinned host memory of
 * the process (about 0.03 s per GiB on the H100), so a full suspend unpins the
 * pool, and unpinning 32 GiB takes longer than copying it (8 threads, 0.76 s).
 * Overlapped: once every copy into a segment has been issued, an event is
 * recorded on every lane; unpin threads wait for a segment's events and
 * unpin it while later segments are still being copied. Segments beyond the
 * data (a reserved pool larger than needed) are unpinned as well.
 */
struct unpin_pipe {
	struct gs_agent *a;
	struct gs_staging *pool;
	uint32_t nsegs;
	int nlanes;             /* lanes of every used device */
	int *lane_device;       /* [nlanes] */
	CUstream *lane_stream;  /* [nlanes] */
	CUevent *events;        /* [nsegs * nlanes]; NULL entries: nothing copied into that segment */
	pthread_mutex_t lock;
	pthread_cond_t issued_cond;
	uint32_t issued;        /* segments [0, issued) have all their copies issued */
	bool abort;
	uint32_t next;          /* atomic: next segment for an unpin thread */
	int failed;             /* atomic */
	pthread_t tid[GS_AGENT_MAX_UNPIN_THREADS];
	int nthreads;
};

static void *unpin_main(void *arg)
{
	struct unpin_pipe *u = arg;
	use_any_context(u->a);
	for (;;) {
		uint32_t seg = __atomic_fetch_add(&u->next, 1, __ATOMIC_RELAXED);
		if (seg >= u->nsegs)
			return NULL;
		pthread_mutex_lock(&u->lock);
		while (u->issued <= seg && !u->abort)
			pthread_cond_wait(&u->issued_cond, &u->lock);
		bool abort = u->abort;
		pthread_mutex_unlock(&u->lock);
		if (abort)
			return NULL;
		for (int l = 0; l < u->nlanes; l++) {
			CUevent e = u->events[(size_t)seg * (size_t)u->nlanes + (size_t)l];
			if (e && u->a->cu.cuEventSynchronize(e) != CUDA_SUCCESS)
				__atomic_store_n(&u->failed, 1, __ATOMIC_RELAXED);
		}
		struct gs_err e = { 0 };
		if (gs_staging_unpin_segment(u->pool, seg, &e))
			__atomic_store_n(&u->failed, 1, __ATOMIC_RELAXED);
	}
}

/* Publishes segments [0, upto) as issued, recording their events first (context of each lane set). */
static int pipe_issue_upto(struct unpin_pipe *u, uint32_t upto, uint32_t first_with_copies, struct gs_err *err)
{
	pthread_mutex_lock(&u->lock);
	uint32_t from = u->issued;
	pthread_mutex_unlock(&u->lock);
	if (upto <= from)
		return 0;
	/* only the segments that had copies need events: the last of them, first_with_copies, covers the rest */
	if (first_with_copies < upto && first_with_copies >= from) {
		for (int l = 0; l < u->nlanes; l++) {
			CUevent *e = &u->events[(size_t)first_with_copies * (size_t)u->nlanes + (size_t)l];
			int rc = set_device(u->a, u->lane_device[l], err);
			if (rc)
				return rc;
			CUresult r = u->a->cu.cuEventCreate(e, CU_EVENT_DISABLE_TIMING);
			if (r == CUDA_SUCCESS)
				r = u->a->cu.cuEventRecord(*e, u->lane_stream[l]);
			if (r != CUDA_SUCCESS)
				return gs_fail(err, GS_E_AGENT, "cannot record a copy event on GPU %d (error %d)", u->lane_device[l], r);
		}
	}
	pthread_mutex_lock(&u->lock);
	u->issued = upto;
	pthread_cond_broadcast(&u->issued_cond);
	pthread_mutex_unlock(&u->lock);
	return 0;
}

static int pipe_start(struct gs_agent *a, struct gs_staging *pool, struct unpin_pipe *u, struct gs_err *err)
{
	memset(u, 0, sizeof(*u));
	u->a = a;
	u->pool = pool;
	u->nsegs = gs_staging_segments(pool);
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		u->nlanes += a->devices[i].used ? GS_AGENT_LANES : 0;
	u->lane_device = calloc((size_t)u->nlanes + 1, sizeof(*u->lane_device));
	u->lane_stream = calloc((size_t)u->nlanes + 1, sizeof(*u->lane_stream));
	u->events = calloc((size_t)u->nsegs * (size_t)u->nlanes + 1, sizeof(*u->events));
	if (!u->lane_device || !u->lane_stream || !u->events) {
		free(u->lane_device);
		free(u->lane_stream);
		free(u->events);
		return gs_fail(err, GS_E_AGENT, "out of memory");
	}
	int l = 0;
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		for (int k = 0; a->devices[i].used && k < GS_AGENT_LANES; k++, l++) {
			u->lane_device[l] = i;
			u->lane_stream[l] = a->devices[i].lanes[k];
		}
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->issued_cond, NULL);
	int want = staging_threads();
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the app's signal handlers never run on our threads */
	for (; u->nthreads < want; u->nthreads++)
		if (pthread_create(&u->tid[u->nthreads], NULL, unpin_main, u))
			break;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return 0;
}

/* Joins the unpin threads (after an abort they stop at once) and frees the events. 0 if every segment was unpinned. */
static int pipe_finish(struct unpin_pipe *u, bool abort)
{
	pthread_mutex_lock(&u->lock);
	u->abort = abort;
	pthread_cond_broadcast(&u->issued_cond);
	pthread_mutex_unlock(&u->lock);
	for (int i = 0; i < u->nthreads; i++)
		pthread_join(u->tid[i], NULL);
	if (!u->nthreads && !abort)
		unpin_main(u); /* no thread could be started: this one does it */
	for (size_t i = 0; i < (size_t)u->nsegs * (size_t)u->nlanes; i++)
		if (u->events[i])
			u->a->cu.cuEventDestroy(u->events[i]);
	free(u->events);
	free(u->lane_device);
	free(u->lane_stream);
	pthread_cond_destroy(&u->issued_cond);
	pthread_mutex_destroy(&u->lock);
	return u->failed ? -1 : 0;
}

/*
 * Issues every chunk's copy in staging order, waiting for each chunk's
 * segment (populated, or pinned again after a suspend that unpinned it),
 * then waits for the lanes. With unpin (to host only), segments are unpinned
 * as their copies complete (see unpin_pipe).
 */
static int copy_all(struct gs_agent *a, struct gs_agent_held *h, bool to_host, double timeout_s, struct unpin_pipe *unpin,
		    struct gs_err *err)
{
	int cur = -1;
	uint64_t seg_size = gs_staging_segment_size(h->pool);
	uint32_t last_seg = UINT32_MAX;
	for (size_t i = 0; i < h->plan.nchunks; i++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[i];
		int dev = h->regions[c->region].device;
		int rc;
		uint32_t seg = (uint32_t)(c->staging_offset / seg_size);
		if (unpin && seg != last_seg && last_seg != UINT32_MAX && (rc = pipe_issue_upto(unpin, seg, last_seg, err)))
			return rc;
		last_seg = seg;
		if ((dev != cur || unpin) && (rc = set_device(a, dev, err)))
			return rc;
		cur = dev;
		if ((rc = gs_staging_wait(h->pool, seg, timeout_s, err)))
			return rc;
		void *host = gs_staging_ptr(h->pool, c->staging_offset);
		CUstream s = a->devices[dev].lanes[c->lane];
		CUresult r = to_host ? a->cu.cuMemcpyDtoHAsync(host, c->va, c->size, s)
				     : a->cu.cuMemcpyHtoDAsync(c->va, host, c->size, s);
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(err, GS_E_AGENT, "copy of %llu bytes at %#llx %s failed: %s", (unsigned long long)c->size,
				       (unsigned long long)c->va, to_host ? "to host" : "to the GPU",
				       gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
	}
	int rc;
	if (unpin && (rc = pipe_issue_upto(unpin, unpin->nsegs, last_seg, err)))
		return rc;
	return sync_devices(a, true, err);
}

static void update_registry(struct gs_agent *a, const struct held_region *r)
{
	if (r->app_handle)
		return; /* agent_app_vmm.c keeps its handles */
	gs_alloc_registry_update(r->is_slab ? a->slabs : a->allocs, r->va, r->handle, r->reserved);
}

void gs_mover_drop_pool(struct gs_agent_held *h)
{
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

static void held_free(struct gs_agent_held *h)
{
	if (!h)
		return;
	if (h->pool && !h->pool_is_reserve)
		retire_pool(h->pool);
	gs_copy_plan_free(&h->plan);
	free(h->regions);
	free(h->zero_chunks);
	free(h);
}

int gs_mover_recreate(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err)
{
	for (size_t i = 0; i < h->nregions; i++) {
		struct held_region *r = &h->regions[i];
		if (!r->released)
			continue;
		CUresult cr = recreate_region(a, r);
		if (cr != CUDA_SUCCESS) {
			for (size_t j = 0; j < i; j++) {
				struct held_region *q = &h->regions[j];
				if (q->released && q->handle) {
					release_region(a, q);
					q->handle = 0;
				}
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

int gs_mover_quiesce(struct gs_agent *a, double timeout_s, struct gs_err *err)
{
	int rc = gs_gate_close(timeout_s, err);
	if (rc || !a->cuda_ready)
		return rc;
	if ((rc = sync_devices(a, false, err))) {
		gs_gate_open();
		return rc;
	}
	gs_agent_drain_deferred(a, true);
	return 0;
}

int gs_mover_plan(struct gs_agent *a, uint64_t chunk_bytes, struct gs_agent_held **out, struct gs_err *err)
{
	*out = NULL;
	struct gs_agent_held *h = calloc(1, sizeof(*h));
	if (!h)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	struct collect_ctx cc = { 0 };
	cc.is_slab = false;
	int walk = gs_alloc_registry_foreach(a->allocs, 0, UINT64_MAX, GS_ALLOC_MASK(GS_ALLOC_DEVICE), collect, &cc);
	cc.is_slab = true;
	if (!walk)
		walk = gs_alloc_registry_foreach(a->slabs, 0, UINT64_MAX, 0, collect, &cc);
	h->regions = cc.r;
	h->nregions = cc.n;
	int rc = 0;
	if (walk) {
		rc = gs_fail(err, GS_E_AGENT, "out of memory listing allocations");
		goto fail;
	}
	/* the app's own VMM handles (agent_app_vmm.c); on failure nothing of theirs stays prepared */
	rc = gs_app_vmm_prepare(a, collect_app, &cc, err);
	h->regions = cc.r;
	h->nregions = cc.n;
	if (rc) {
		held_free(h);
		return rc;
	}
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

/* Copies the staging pool back to the GPU: straight from a pinned pool, through the ring from one that is not. */
static int copy_back(struct gs_agent *a, struct gs_agent_held *h, struct gs_ring_stats *st, struct gs_err *err)
{
	memset(st, 0, sizeof(*st));
	if (gs_staging_registers(h->pool))
		return copy_all(a, h, false, -1, NULL, err);
	return bounce_copy(a, h, NULL, false, -1, st, err);
}

int gs_mover_release(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err)
{
	for (size_t i = 0; i < h->nregions; i++) {
		struct held_region *r = &h->regions[i];
		CUresult res = release_region(a, r);
		if (res != CUDA_SUCCESS) {
			char b[128];
			int rc = gs_fail(err, GS_E_AGENT, "cannot release GPU memory at %#llx: %s", (unsigned long long)r->va,
					 gs_cuda_strerror(&a->cu, res, b, sizeof(b)));
			/* put back what was released, with its data: the app must not notice */
			struct gs_err e2 = { 0 };
			struct gs_ring_stats st;
			if (gs_mover_recreate(a, h, &e2) || (h->pool && copy_back(a, h, &st, &e2)))
				pr_err("could not undo a partial release: %s", e2.msg);
			return rc;
		}
		r->released = true;
		r->handle = 0;
		update_registry(a, r);
	}
	return 0;
}

void gs_mover_free_held(struct gs_agent *a, struct gs_agent_held *h)
{
	gs_app_vmm_finish(a); /* the copy windows of the app's handles go with the plan */
	held_free(h);
}

/*
 * The ring of an on-demand bounce suspend, made before its pool: set up while
 * the pool's workers populate tens of GiB, its fault-in and pinning took
 * 0.27 s for 112 MiB on the H100 (8 GiB suspend), alone a few ms. NULL on
 * failure (the transfer then sets up its own); *setup_s is the time it took.
 */
static struct gs_ring *ring_before_pool(struct gs_agent *a, const struct gs_agent_held *h, double *setup_s)
{
	double t0 = gs_now();
	unsigned n = (unsigned)on_demand_threads();
	if (n > h->plan.nchunks)
		n = (unsigned)h->plan.nchunks;
	struct gs_ring *r = NULL;
	struct gs_err e = { 0 };
	if (gs_ring_create(a, n, mover.chunk_bytes, &r, &e))
		pr_warn("cannot set up the copy ring ahead of the staging pool: %s", e.msg);
	*setup_s = gs_now() - t0;
	return r;
}

int gs_mover_suspend(struct gs_agent *a, double timeout_s, bool keep_context, struct gs_msg *reply, struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_agent_held *h = NULL;
	struct gs_ring *own_ring = NULL; /* on demand, bounce mode: this suspend's ring */
	bool gate_closed = false;
	if (a->state != GS_AGENT_RUNNING) {
		rc = gs_fail(err, GS_E_STATE, "the process is already suspended");
		goto out;
	}
	join_reaper();
	join_ring_builder(); /* its CUDA calls end before the gate closes; a suspend uses its ring */
	double t0 = gs_now();
	if ((rc = gs_mover_quiesce(a, timeout_s, err)))
		goto out;
	gate_closed = true;
	double t_quiesce = gs_now();
	if (!a->cuda_ready) {
		/* the app never allocated: nothing of ours to move */
		a->state = keep_context ? GS_AGENT_DATA_RELEASED : GS_AGENT_SUSPENDED;
		a->held = NULL;
		gs_msg_add_named_f64(reply, GS_F_TIMING, "quiesce", t_quiesce - t0);
		goto out;
	}
	double t_sync = gs_now();
	if ((rc = gs_mover_plan(a, mover.chunk_bytes, &h, err)))
		goto out;

	double t_pool0 = gs_now();
	struct gs_ring_stats rs = { 0 };
	double own_ring_setup = 0;
	if (h->plan.staging_bytes) {
		if (mover.reserve && gs_staging_size(mover.reserve) >= h->plan.staging_bytes) {
			h->pool = mover.reserve;
			h->pool_is_reserve = true;
		} else {
			if (mover.mode == MODE_BOUNCE)
				own_ring = ring_before_pool(a, h, &own_ring_setup);
			double t = gs_now();
			if ((rc = gs_mover_make_pool(a, h->plan.staging_bytes, &h->pool, err)))
				goto out;
			gs_msg_add_named_f64(reply, GS_F_TIMING, "pool_create", gs_now() - t);
		}
	}
	if (h->pool && !gs_staging_registers(h->pool)) {
		/* bounce: nothing of the pool is pinned, so nothing to unpin for the driver's checkpoint */
		rc = bounce_copy(a, h, own_ring, true, timeout_s, &rs, err);
		if (own_ring) {
			rs.setup_s = own_ring_setup;
			double t = gs_now();
			gs_ring_destroy(own_ring); /* nothing is in flight: the transfer synchronized */
			own_ring = NULL;
			gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_free", gs_now() - t);
		}
		if (rc)
			goto out;
	} else if (h->pool) {
		/* a full suspend unpins the staging as the copies complete: see unpin_pipe */
		struct unpin_pipe pipe;
		bool pipelined = mover.unpin && !keep_context && pipe_start(a, h->pool, &pipe, err) == 0;
		rc = copy_all(a, h, true, timeout_s, pipelined ? &pipe : NULL, err);
		if (pipelined) {
			h->unpinned = true; /* even partly: resume pins what is not */
			if (pipe_finish(&pipe, rc != 0) && !rc)
				pr_warn("some staging memory could not be unpinned: the driver's checkpoint takes longer");
		}
		if (rc) {
			if (h->unpinned && !h->pool_is_reserve)
				h->unpinned = false; /* an on-demand pool is freed */
			else if (h->unpinned) {
				struct gs_err e2 = { 0 };
				if (gs_staging_set_pinned(h->pool, true, &e2))
					pr_warn("the reserved staging pool stays partly unpinned: %s", e2.msg);
			}
			goto out;
		}
	}
	double t_copy = gs_now();
	if ((rc = gs_mover_release(a, h, err)))
		goto out;
	double t_release = gs_now();

	h->keep_context = keep_context;
	a->held = h;
	h = NULL;
	a->state = keep_context ? GS_AGENT_DATA_RELEASED : GS_AGENT_SUSPENDED;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "quiesce", t_quiesce - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "sync", t_sync - t_quiesce);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "copy_out", t_copy - t_pool0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "release", t_release - t_copy);
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_unpinned", a->held->unpinned);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_bounce", a->held->pool && !gs_staging_registers(a->held->pool));
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", a->held->zero_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", a->held->bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "regions", a->held->nregions);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "reserved_pool", a->held->pool_is_reserve);
out:
	gs_ring_destroy(own_ring); /* made, but the pool could not be */
	if (h) /* a failure after the plan (and after any undo of a partial release): the copy windows go last */
		gs_mover_free_held(a, h);
	if (rc && gate_closed)
		gs_gate_open();
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_mover_resume(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	if (a->state != GS_AGENT_SUSPENDED && a->state != GS_AGENT_DATA_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended");
		goto out;
	}
	struct gs_agent_held *h = a->held;
	double t0 = gs_now();
	if (h && !h->pool && h->plan.nchunks) {
		rc = gs_fail(err, GS_E_STATE, "the process's GPU data is in an image: restore it with gpusnap restore");
		goto out;
	}
	if (h) {
		/* pinning again runs on the pool's workers while the memory is re-created and the copies go in */
		if (h->unpinned && (rc = gs_staging_repin_start(h->pool, err)))
			goto out;
		if ((rc = gs_mover_recreate(a, h, err)))
			goto out;
		double t_map = gs_now();
		gs_msg_add_named_f64(reply, GS_F_TIMING, "map", t_map - t0);
		struct gs_ring_stats rs = { 0 };
		if (h->plan.nchunks && (rc = copy_back(a, h, &rs, err))) {
			/* the data is still in staging: stay suspended so a retry can copy it again */
			goto out;
		}
		h->unpinned = false;
		double t_copy = gs_now();
		gs_msg_add_named_f64(reply, GS_F_TIMING, "copy_in", t_copy - t_map);
		gs_ring_stats_report(&rs, reply);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", h->bytes);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "staging_bounce", h->pool && !gs_staging_registers(h->pool));
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", rs.zero_bytes);
		a->held = NULL;
		gs_mover_free_held(a, h);
	}
	a->state = GS_AGENT_RUNNING;
	gs_gate_open();
	/* a reserved pool dropped for a dump comes back, filled in the background */
	if (mover.reserve_bytes && !mover.reserve) {
		struct gs_err e2 = { 0 };
		if (make_reserve(a, &e2))
			pr_warn("cannot reserve staging memory again: %s", e2.msg);
	}
	start_ring_builder(a); /* bounce mode: a ring dropped with the reserved pool comes back too */
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/*
 * For callers that move the data without a staging pool (agent_image.c's
 * streamed dump). join_background: waits for the background freeing of an
 * earlier pool, so none of its CUDA calls runs after a DUMP reply.
 * drop_reserve: frees the reserved pool, which a streamed dump does not use
 * and CRIU must not carry; gs_mover_resume makes it again.
 */
void gs_mover_join_background(struct gs_agent *a)
{
	(void)a;
	join_reaper();
	join_ring_builder();
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
