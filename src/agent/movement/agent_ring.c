/*
 * agent_ring.c - the transfer engine: the plan's chunks between the GPU and
 * an end, through a ring of pinned buffers or straight into an end's pinned
 * memory, and between two ends on the host (see agent_ring.h). The ends
 * (staging memory, image writer, image reader) are at the bottom.
 *
 * Why a ring and not a staging pool as large as the data: a pool must be
 * faulted in (slow, per thread, for fresh memory) and pinned before the
 * first byte moves, and the host must have the data's size free. The ring is
 * a few hundred MiB that each IO thread maps and pins for itself, in
 * parallel, and the copies over PCIe overlap the end's work (file I/O, or a
 * memcpy into a staging pool that is populated but never pinned: the
 * driver's checkpoint and restore take time in proportion to the pinned host
 * memory, and unpinning and pinning again tens of GiB costs more than the
 * copies).
 *
 * Buffer life: free -> copy issued (event recorded on the chunk's lane) ->
 * event waited for -> handed to (or refilled from) the end -> free. A buffer
 * is unpinned and unmapped only once nothing can be in flight into or out of
 * it: when a CUDA call failed part way, every lane is synchronized before the
 * buffers are torn down. A kept ring (struct gs_ring) lends its buffers to the
 * workers; a transfer destroys only the events it made. A direct end has no
 * buffers: a slot then only carries the event of a copy into the end's memory.
 *
 * Threads: started and joined by each transfer; the caller's thread works as
 * one of them. Events are created with BLOCKING_SYNC, so waiting threads
 * sleep instead of spinning beside the threads doing I/O or memcpy.
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_ring.h"
#include "agent/movement/gpu_copy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/first_err.h"
#include "common/log.h"
#include "common/util.h"
#include "core/copy_plan.h"
#include "core/host_copy.h"
#include "common/settings.h"

/* The engine reaches the GPU only through its backend (gpu_copy.h): CUDA's in this build. */
static const struct gs_gpu_copy *const gpu = &gs_gpu_copy_cuda;

#define RING_DEPTH 2          /* buffers per thread: one with the copy engine, one with the end */
#define RING_THREADS_OUT 8    /* dump: the storage is the bottleneck; 8 writers fill it */
#define RING_THREADS_IN_MIN 8 /* restore: reads and checksums scale with cores, up to RING_THREADS_MAX */
#define RING_THREADS_MAX 32
#define RING_ALIGN (2ULL << 20) /* buffers in whole huge pages */

struct ring_slot {
	void *buf;
	size_t len;                          /* mapped bytes */
	bool pinned;
	bool busy;                           /* a copy was issued and not yet waited for */
	size_t chunk;
	int dev;
	void *ev[GS_AGENT_MAX_DEVICES]; /* per device: an event lives in one context (gpu_copy.h) */
};

struct gs_ring {
	struct gs_agent *a;
	unsigned threads;
	uint64_t buf_size;
	struct ring_slot *slots; /* threads * RING_DEPTH; thread i's are [i * RING_DEPTH, (i + 1) * RING_DEPTH) */
};

struct ring_job;

struct ring_worker {
	struct ring_job *job;
	pthread_t thread;
	bool clean; /* every copy it issued was waited for: it tore its own buffers down */
	bool borrowed; /* slots belong to a gs_ring: only their events are this transfer's */
	int cur_dev;
	double setup_s;
	double wait_s; /* in cuEventSynchronize */
	double host_s; /* in the end's put or get */
	double issue_s; /* in issue */
	struct ring_slot *slots; /* own, or a gs_ring's */
	struct ring_slot own[RING_DEPTH];
};

struct ring_job {
	struct gs_agent *a;
	const struct gs_agent_held *h;
	bool to_host;
	struct gs_ring_end *end;
	size_t buf_size; /* 0: the end is direct, no buffers */
	atomic_size_t next;
	/*
	 * The order chunks are taken in (NULL: staging order): with several GPUs,
	 * one chunk of each in turn, so every GPU's link moves at once instead
	 * of one GPU after the other (core/copy_plan.h, gs_copy_plan_interleave).
	 */
	size_t *order;
	struct gs_first_err fail;
	atomic_uint_fast64_t zero_bytes; /* towards the GPU: chunks set to zero instead of copied */
};

static bool job_failed(struct ring_job *j) { return gs_first_err_any(&j->fail); }

/* The next chunk for a worker to take; >= the chunk count when none is left. */
static size_t job_claim(struct ring_job *j)
{
	size_t i = atomic_fetch_add(&j->next, 1);
	return j->order && i < j->h->plan.nchunks ? j->order[i] : i;
}

static void job_fail(struct ring_job *j, const struct gs_err *e) { gs_first_err_set(&j->fail, e); }

static void cuda_fail(struct ring_job *j, const char *what, int dev, int r)
{
	char b[128];
	struct gs_err e = { 0 };
	gs_fail(&e, GS_E_AGENT, "%s on GPU %d failed: %s", what, dev, gpu->strerror(j->a, r, b, sizeof(b)));
	job_fail(j, &e);
}

unsigned gs_ring_image_threads(bool out)
{
	if (gs_setting_is_set(GS_S_IO_THREADS))
		return (unsigned)gs_setting_int(GS_S_IO_THREADS);
	if (out)
		return RING_THREADS_OUT;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned c = cpus > 0 ? (unsigned)cpus : 1;
	return c < RING_THREADS_IN_MIN ? RING_THREADS_IN_MIN : c > RING_THREADS_MAX ? RING_THREADS_MAX : c;
}

static int use_device(struct ring_worker *wk, int dev)
{
	if (wk->cur_dev == dev)
		return 0;
	struct gs_agent *a = wk->job->a;
	int r = gpu->use_device(a, dev);
	if (r) {
		cuda_fail(wk->job, "making the context current", dev, r);
		return -1;
	}
	wk->cur_dev = dev;
	return 0;
}

/* Writes every page of [p, p + len) into memory (MADV_POPULATE_WRITE, or a store per page before Linux 5.14). */
static void prefault(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	long page = sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < len; off += (size_t)(page > 0 ? page : 4096))
		((volatile char *)p)[off] = 0;
}

/* Maps one buffer of len bytes and faults it in: no CUDA call. On failure s holds what to undo. */
static int slot_map(struct ring_slot *s, size_t len, struct gs_err *err)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return gs_fail_errno(err, GS_E_NO_SPACE, errno, "cannot map %zu bytes for the copy ring", len);
	s->buf = p;
	s->len = len;
	madvise(p, len, MADV_HUGEPAGE); /* a hint: fewer faults and pins where transparent huge pages are on */
	madvise(p, len, MADV_DONTFORK); /* the agent's, not a fork child's (nor shared copy-on-write with one) */
	/*
	 * Fault the buffer in here, on this thread, before pinning: cuMemHostRegister
	 * faulting it in itself is several times slower for all threads together
	 * than registering populated memory (docs/benchmarks.md).
	 */
	prefault(p, len);
	return 0;
}

/* Pins a mapped buffer; a context must be current. */
static int slot_pin(struct gs_agent *a, struct ring_slot *s, int dev, struct gs_err *err)
{
	/* for every device's context: the buffer serves them all */
	int r = gpu->pin(a, s->buf, s->len);
	if (r) {
		char b[128];
		return gs_fail(err, GS_E_AGENT, "pinning the copy ring on GPU %d failed: %s", dev,
			       gpu->strerror(a, r, b, sizeof(b)));
	}
	s->pinned = true;
	return 0;
}

/* Maps, faults in and pins one buffer of len bytes; a context must be current. On failure s holds what to undo. */
static int slot_setup(struct gs_agent *a, struct ring_slot *s, size_t len, int dev, struct gs_err *err)
{
	int rc = slot_map(s, len, err);
	return rc ? rc : slot_pin(a, s, dev, err);
}

/* Destroys a slot's events; with `buffer`, unpins and unmaps its buffer too. Nothing may be in flight. */
static void slot_teardown(struct gs_agent *a, struct ring_slot *s, bool buffer)
{
	for (int d = 0; d < GS_AGENT_MAX_DEVICES; d++)
		if (s->ev[d]) {
			gpu->event_destroy(a, s->ev[d]);
			s->ev[d] = NULL;
		}
	s->busy = false;
	if (!buffer)
		return;
	if (s->pinned)
		gpu->unpin(a, s->buf);
	if (s->buf)
		munmap(s->buf, s->len);
	memset(s, 0, sizeof(*s));
}

/*
 * Pins a borrowed slot that is not pinned yet (a prepared ring's), with dev's
 * context current; the time counts as this thread's setup.
 */
static int pin_borrowed(struct ring_worker *wk, struct ring_slot *s, int dev)
{
	if (s->pinned || !s->buf)
		return 0;
	struct ring_job *j = wk->job;
	double t0 = gs_now();
	struct gs_err e = { 0 };
	if (use_device(wk, dev))
		return -1;
	if (slot_pin(j->a, s, dev, &e)) {
		job_fail(j, &e);
		return -1;
	}
	wk->setup_s += gs_now() - t0;
	return 0;
}

/* Maps and pins this thread's buffers (in parallel with the other threads: fault-in is per thread). */
static int setup(struct ring_worker *wk, int first_dev)
{
	struct ring_job *j = wk->job;
	double t0 = gs_now();
	if (!j->buf_size)
		return 0; /* direct: the end's memory is pinned already */
	if (wk->borrowed) {
		/*
		 * A prepared ring (gs_ring_prepare) is mapped and faulted in, but not
		 * pinned yet; a kept one is ready. Toward the GPU a buffer is pinned
		 * when first filled (run_from_host): the driver serializes pinning,
		 * so the other threads read while one pins, instead of all waiting
		 * for every pin before the first read.
		 */
		if (!j->to_host)
			return 0;
		for (int i = 0; i < RING_DEPTH; i++)
			if (pin_borrowed(wk, &wk->slots[i], first_dev))
				return -1;
		return 0;
	}
	if (use_device(wk, first_dev))
		return -1;
	for (int i = 0; i < RING_DEPTH; i++) {
		struct gs_err e = { 0 };
		if (slot_setup(j->a, &wk->slots[i], j->buf_size, first_dev, &e)) {
			job_fail(j, &e);
			return -1;
		}
	}
	wk->setup_s = gs_now() - t0;
	return 0;
}

/* Unpins and unmaps the buffers (only the events of a borrowed ring's) ; nothing may be in flight. */
static void teardown(struct ring_worker *wk)
{
	for (int i = 0; i < RING_DEPTH; i++)
		slot_teardown(wk->job->a, &wk->slots[i], !wk->borrowed);
}

static int lane_of(struct ring_job *j, const struct gs_copy_chunk *c, int *dev)
{
	*dev = j->h->regions[c->region].device;
	return (int)c->lane;
}

/*
 * Starts chunk k's copy between the GPU and host (or, host NULL, the memset
 * of chunk k on the GPU) on its lane and records s's event behind it.
 */
static int start_copy(struct ring_worker *wk, struct ring_slot *s, size_t k, void *host)
{
	struct ring_job *j = wk->job;
	struct gs_agent *a = j->a;
	const struct gs_copy_chunk *c = &j->h->plan.chunks[k];
	int dev;
	int lane = lane_of(j, c, &dev);
	if (use_device(wk, dev))
		return -1;
	int r = 0;
	if (!s->ev[dev] && (r = gpu->event_create(a, &s->ev[dev]))) {
		s->ev[dev] = NULL;
		cuda_fail(j, "creating an event", dev, r);
		return -1;
	}
	if (gs_fault(j->to_host ? GS_FI_AGENT_COPY_OUT : GS_FI_AGENT_COPY_IN))
		r = gpu->injected;
	else
		r = !host	 ? gpu->zero(a, c->va, c->size, dev, lane)
		    : j->to_host ? gpu->to_host(a, host, c->va, c->size, dev, lane)
				 : gpu->to_device(a, c->va, host, c->size, dev, lane);
	if (r) {
		char what[96];
		snprintf(what, sizeof(what), "%s of %llu bytes at %#llx%s", !host ? "memset" : "copy",
			 (unsigned long long)c->size, (unsigned long long)c->va,
			 !host ? "" : j->to_host ? " to host" : " to the GPU");
		cuda_fail(j, what, dev, r);
		wk->clean = false; /* an error may leave earlier work of the lane behind */
		return -1;
	}
	s->busy = true; /* from here the host memory may be in use by the copy engine */
	s->chunk = k;
	s->dev = dev;
	if ((r = gpu->event_record(a, s->ev[dev], dev, lane))) {
		cuda_fail(j, "recording an event", dev, r);
		wk->clean = false; /* the copy runs, but nothing says when it is done: the caller syncs the lanes */
		return -1;
	}
	return 0;
}

/* start_copy, with its time counted in wk->issue_s */
static int issue(struct ring_worker *wk, struct ring_slot *s, size_t k, void *host)
{
	double t0 = gs_now();
	int rc = start_copy(wk, s, k, host);
	wk->issue_s += gs_now() - t0;
	return rc;
}

/* Waits until slot s's copy is done; a direct end hears of it. */
static int wait_slot(struct ring_worker *wk, struct ring_slot *s)
{
	struct ring_job *j = wk->job;
	if (use_device(wk, s->dev)) {
		wk->clean = false;
		return -1;
	}
	double t0 = gs_now();
	int r = gpu->event_wait(j->a, s->ev[s->dev]);
	wk->wait_s += gs_now() - t0;
	if (r) {
		const struct gs_copy_chunk *c = &j->h->plan.chunks[s->chunk];
		char what[96];
		snprintf(what, sizeof(what), "copy of %llu bytes at %#llx", (unsigned long long)c->size,
			 (unsigned long long)c->va);
		cuda_fail(j, what, s->dev, r);
		wk->clean = false;
		return -1;
	}
	s->busy = false;
	struct gs_err e = { 0 };
	if (j->end->direct && j->end->ops->done) {
		int rc = j->end->ops->done(j->end, j->h, s->chunk, &e);
		wk->cur_dev = -1; /* the end may have made another context current (unpinning needs one) */
		if (rc) {
			job_fail(j, &e);
			return -1;
		}
	}
	return 0;
}

/* The end's memory for chunk k (direct ends); NULL after a failure, which is recorded. */
static void *direct_at(struct ring_job *j, size_t k)
{
	struct gs_err e = { 0 };
	void *p = j->end->ops->at(j->end, j->h, k, &e);
	if (!p)
		job_fail(j, e.code ? &e : &(struct gs_err){ GS_E_AGENT, "no memory for a chunk of the copy" });
	return p;
}

/* GPU -> buffer (or the end's memory) -> end: keeps RING_DEPTH copies in flight, hands on the oldest when done. */
static void run_to_host(struct ring_worker *wk)
{
	struct ring_job *j = wk->job;
	size_t n = j->h->plan.nchunks, head = 0, count = 0;
	for (;;) {
		while (count < RING_DEPTH && !job_failed(j)) {
			size_t k = job_claim(j);
			if (k >= n)
				break;
			if (j->end->ops->zero && j->end->ops->zero(j->end, k)) {
				/* found all zero on the GPU before the transfer: nothing crosses PCIe, the end hears so */
				struct gs_err e = { 0 };
				if (j->end->ops->put(j->end, j->h, k, NULL, &e))
					job_fail(j, &e);
				continue;
			}
			struct ring_slot *s = &wk->slots[(head + count) % RING_DEPTH];
			void *host = j->end->direct ? direct_at(j, k) : s->buf;
			if (!host || issue(wk, s, k, host))
				break;
			count++;
		}
		if (!count)
			return;
		struct ring_slot *s = &wk->slots[head];
		head = (head + 1) % RING_DEPTH;
		count--;
		if (wait_slot(wk, s) || job_failed(j) || j->end->direct)
			continue; /* after a failure: only wait for what is in flight */
		struct gs_err e = { 0 };
		double t0 = gs_now();
		if (j->end->ops->put(j->end, j->h, s->chunk, s->buf, &e))
			job_fail(j, &e);
		wk->host_s += gs_now() - t0;
	}
}

/* End -> buffer (or the end's memory) -> GPU: fills a buffer once its previous copy is done, then starts the copy. */
static void run_from_host(struct ring_worker *wk)
{
	struct ring_job *j = wk->job;
	size_t n = j->h->plan.nchunks;
	for (size_t i = 0; !job_failed(j); i++) {
		size_t k = job_claim(j);
		if (k >= n)
			break;
		struct ring_slot *s = &wk->slots[i % RING_DEPTH];
		if (s->busy && wait_slot(wk, s))
			break;
		if (j->end->ops->zero && j->end->ops->zero(j->end, k)) {
			/* all zero when it was copied out: set on the GPU, nothing is read */
			if (issue(wk, s, k, NULL))
				break;
			atomic_fetch_add(&j->zero_bytes, j->h->plan.chunks[k].size);
			continue;
		}
		void *host = s->buf;
		if (j->end->direct) {
			if (!(host = direct_at(j, k)))
				break;
		} else {
			struct gs_err e = { 0 };
			double t0 = gs_now();
			int frc = j->end->ops->get(j->end, j->h, k, s->buf, &e);
			wk->host_s += gs_now() - t0;
			if (frc) {
				job_fail(j, &e);
				break;
			}
			if (pin_borrowed(wk, s, j->h->regions[j->h->plan.chunks[k].region].device))
				break;
		}
		if (issue(wk, s, k, host))
			break;
	}
	for (int i = 0; i < RING_DEPTH; i++)
		if (wk->slots[i].busy)
			wait_slot(wk, &wk->slots[i]);
}

static void *worker_main(void *arg)
{
	struct ring_worker *wk = arg;
	struct ring_job *j = wk->job;
	int first_dev = j->h->regions[j->h->plan.chunks[0].region].device;
	if (!setup(wk, first_dev) && !job_failed(j)) {
		if (j->to_host)
			run_to_host(wk);
		else
			run_from_host(wk);
	}
	for (int i = 0; i < RING_DEPTH; i++)
		if (wk->slots[i].busy)
			wk->clean = false;
	if (wk->clean)
		teardown(wk);
	return NULL;
}

/* Synchronizes every lane of every device: after it nothing of ours is in flight. */
static void sync_lanes(struct gs_agent *a)
{
	for (int d = 0; d < GS_AGENT_MAX_DEVICES; d++) {
		struct gs_agent_device *dev = &a->devices[d];
		if (!dev->used || !dev->lanes_ready)
			continue;
		gpu->sync_lanes(a, d);
	}
}

/*
 * A per-transfer ring for h's plan: buffers of its largest chunk, and no more
 * threads than chunks nor a ring much larger than the data (each thread has
 * RING_DEPTH buffers). Returns the threads.
 */
static unsigned ring_shape(const struct gs_agent_held *h, unsigned want, uint64_t *buf_size)
{
	uint64_t largest = 0;
	for (size_t k = 0; k < h->plan.nchunks; k++)
		if (h->plan.chunks[k].size > largest)
			largest = h->plan.chunks[k].size;
	*buf_size = gs_round_up(largest ? largest : 1, RING_ALIGN);
	uint64_t filled = (h->plan.total_bytes + *buf_size - 1) / *buf_size;
	unsigned n = want < 1 ? 1 : want > RING_THREADS_MAX ? RING_THREADS_MAX : want;
	if (n > filled)
		n = filled ? (unsigned)filled : 1;
	if (n > h->plan.nchunks && h->plan.nchunks)
		n = (unsigned)h->plan.nchunks;
	return n;
}

/* j->order for a plan whose regions lie on several GPUs; NULL (staging order) on one. */
static int order_by_device(struct ring_job *j, struct gs_err *err)
{
	const struct gs_agent_held *h = j->h;
	bool several = false;
	j->order = NULL;
	for (size_t r = 1; r < h->nregions && !several; r++)
		several = h->regions[r].device != h->regions[0].device;
	if (!several)
		return 0;
	uint32_t *dev = malloc(h->nregions * sizeof(*dev));
	if (!dev)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	for (size_t r = 0; r < h->nregions; r++)
		dev[r] = (uint32_t)h->regions[r].device;
	int rc = gs_copy_plan_interleave(&h->plan, dev, &j->order, err);
	free(dev);
	return rc;
}

/* Runs the transfer j describes with `want` threads, on buffers of its own or borrowed from ring (none: direct). */
static int run(struct ring_job *j, struct gs_ring *ring, unsigned want, struct gs_ring_stats *st, struct gs_err *err)
{
	struct gs_agent *a = j->a;
	const struct gs_agent_held *h = j->h;
	memset(st, 0, sizeof(*st));
	if (!h->plan.nchunks)
		return 0;
	uint64_t largest = 0;
	for (size_t k = 0; k < h->plan.nchunks; k++)
		if (h->plan.chunks[k].size > largest)
			largest = h->plan.chunks[k].size;
	unsigned n;
	if (j->end->direct) {
		ring = NULL;
		j->buf_size = 0;
		n = want < 1 ? 1 : want > RING_THREADS_MAX ? RING_THREADS_MAX : want;
	} else if (ring) {
		if (largest > ring->buf_size)
			return gs_fail(err, GS_E_AGENT, "a chunk of %llu bytes does not fit the copy ring's buffers of %llu bytes",
				       (unsigned long long)largest, (unsigned long long)ring->buf_size);
		j->buf_size = ring->buf_size;
		n = ring->threads;
	} else {
		uint64_t bs;
		n = ring_shape(h, want, &bs);
		j->buf_size = bs;
	}
	if (n > h->plan.nchunks)
		n = (unsigned)h->plan.nchunks;
	struct ring_worker *wk = calloc(n, sizeof(*wk));
	if (!wk)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	int orc = order_by_device(j, err);
	if (orc) {
		free(wk);
		return orc;
	}
	atomic_init(&j->next, 0);
	atomic_init(&j->zero_bytes, 0);
	gs_first_err_init(&j->fail);
	double t_run = gs_now();
	unsigned started = 0;
	for (unsigned i = 0; i < n; i++) {
		wk[i] = (struct ring_worker){ .job = j, .clean = true, .cur_dev = -1, .borrowed = ring != NULL };
		wk[i].slots = ring ? &ring->slots[(size_t)i * RING_DEPTH] : wk[i].own;
		/* the caller's thread is worker 0; fewer threads is slower, not wrong */
		if (i > 0 && gs_thread_start(&wk[i].thread, worker_main, &wk[i]) != 0)
			break;
		started = i + 1;
	}
	/* the caller keeps its current context: worker 0 changes it, so put it back afterwards */
	void *saved = gpu->get_context(a);
	worker_main(&wk[0]);
	for (unsigned i = 1; i < started; i++)
		pthread_join(wk[i].thread, NULL);
	st->run_s = gs_now() - t_run;
	bool all_clean = true;
	for (unsigned i = 0; i < started; i++)
		all_clean &= wk[i].clean;
	if (!all_clean) {
		sync_lanes(a); /* a copy may still run into or out of a buffer: nothing may be freed before this */
		for (unsigned i = 0; i < started; i++)
			if (!wk[i].clean)
				teardown(&wk[i]);
	}
	gpu->set_context(a, saved);
	st->threads = started;
	st->zero_bytes = atomic_load(&j->zero_bytes);
	st->ring_bytes = ring ? gs_ring_bytes(ring) : (uint64_t)started * RING_DEPTH * j->buf_size;
	for (unsigned i = 0; i < started; i++) {
		if (wk[i].setup_s > st->setup_s)
			st->setup_s = wk[i].setup_s;
		st->wait_s += wk[i].wait_s / started;
		st->host_s += wk[i].host_s / started;
		st->issue_s += wk[i].issue_s / started;
	}
	free(wk);
	free(j->order);
	j->order = NULL;
	int rc = gs_first_err_take(&j->fail, err);
	gs_first_err_destroy(&j->fail);
	return rc;
}

int gs_ring_out(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring_end *to, struct gs_ring *ring,
		unsigned threads, struct gs_ring_stats *st, struct gs_err *err)
{
	struct ring_job j = { .a = a, .h = h, .to_host = true, .end = to };
	return run(&j, ring, threads, st, err);
}

int gs_ring_in(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring_end *from, struct gs_ring *ring,
	       unsigned threads, struct gs_ring_stats *st, struct gs_err *err)
{
	struct ring_job j = { .a = a, .h = h, .to_host = false, .end = from };
	return run(&j, ring, threads, st, err);
}

/* ---- end -> end, on the host ---- */

struct host_job {
	const struct gs_agent_held *h;
	struct gs_ring_end *from, *to;
	atomic_size_t next;
	struct gs_first_err fail;
};

static void *host_worker(void *arg)
{
	struct host_job *j = arg;
	for (;;) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->h->plan.nchunks || gs_first_err_any(&j->fail))
			return NULL;
		struct gs_err e = { 0 };
		bool zero = j->from->ops->zero && j->from->ops->zero(j->from, k);
		const void *p = zero ? NULL : j->from->ops->at(j->from, j->h, k, &e);
		if ((!zero && !p) || j->to->ops->put(j->to, j->h, k, p, &e))
			gs_first_err_set(&j->fail, e.code ? &e : &(struct gs_err){ GS_E_AGENT, "a chunk could not be moved" });
	}
}

int gs_ring_host(const struct gs_agent_held *h, struct gs_ring_end *from, struct gs_ring_end *to, unsigned threads,
		 struct gs_ring_stats *st, struct gs_err *err)
{
	memset(st, 0, sizeof(*st));
	if (!h->plan.nchunks)
		return 0;
	if (!from->ops->at)
		return gs_fail(err, GS_E_USAGE, "a host transfer needs a source that holds its chunks in memory");
	struct host_job j = { .h = h, .from = from, .to = to };
	atomic_init(&j.next, 0);
	gs_first_err_init(&j.fail);
	size_t n = threads < 1 ? 1 : threads > RING_THREADS_MAX ? RING_THREADS_MAX : threads;
	if (n > h->plan.nchunks)
		n = h->plan.nchunks;
	pthread_t t[RING_THREADS_MAX];
	size_t started = 0;
	double t0 = gs_now();
	for (size_t i = 1; i < n; i++) {
		if (gs_thread_start(&t[started], host_worker, &j) != 0)
			break; /* fewer threads: the ones running take every chunk */
		started++;
	}
	host_worker(&j);
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	st->threads = (unsigned)started + 1;
	st->run_s = st->host_s = gs_now() - t0;
	int rc = gs_first_err_take(&j.fail, err);
	gs_first_err_destroy(&j.fail);
	return rc;
}

/* ---- the ends ---- */

/*
 * The host copy into and out of a staging pool (GPUSNAP_HOST_COPY). Into the
 * pool (a suspend) the default writes with non-temporal stores: an ordinary
 * store reads each line of the pool before writing it, so memcpy moves twice
 * the bytes the copy needs over the memory bus, and with two GPUs draining
 * into one host that bus is the limit (bench/host_fault reserve /
 * reserve-stream: non-temporal stores about twice memcpy's speed). Out of
 * the pool (a resume) it stays memcpy: non-temporal stores into the ring's
 * buffer would push it out of the cache the DMA reads it from. "memcpy" and
 * "stream" use one kind both ways. Read once: the environment does not change
 * under a running transfer.
 */
enum host_copy_mode { HOST_COPY_UNKNOWN, HOST_COPY_AUTO, HOST_COPY_MEMCPY, HOST_COPY_STREAM };

static enum host_copy_mode host_copy_mode(void)
{
	static atomic_int mode; /* enum host_copy_mode */
	int m = atomic_load_explicit(&mode, memory_order_relaxed);
	if (m == HOST_COPY_UNKNOWN) {
		static const int modes[] = { HOST_COPY_AUTO, HOST_COPY_MEMCPY, HOST_COPY_STREAM }; /* the row's choices */
		m = modes[gs_setting_choice(GS_S_HOST_COPY)];
		atomic_store_explicit(&mode, m, memory_order_relaxed);
	}
	return (enum host_copy_mode)m;
}

/*
 * From a ring buffer into the pool. A lazy pool's pages are fresh: the
 * kernel has just zeroed each one through the cache when the copy's first
 * write faulted it in, so the read for ownership costs nothing there and
 * memcpy stays (auto).
 */
static void host_copy_into_pool(void *dst, const void *src, size_t n, bool lazy_pool)
{
	enum host_copy_mode m = host_copy_mode();
	if (m == HOST_COPY_MEMCPY || (m == HOST_COPY_AUTO && lazy_pool))
		memcpy(dst, src, n);
	else
		gs_host_copy_stream(dst, src, n);
}

/* From the pool into a ring buffer. */
static void host_copy_from_pool(void *dst, const void *src, size_t n)
{
	if (host_copy_mode() == HOST_COPY_STREAM)
		gs_host_copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}

/* Chunk k's place in the staging pool, once the pool's workers have populated its segment; NULL on failure. */
static void *staging_at(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, struct gs_err *e)
{
	struct gs_ring_staging_end *s = (struct gs_ring_staging_end *)end;
	const struct gs_copy_chunk *c = &h->plan.chunks[k];
	uint32_t seg = (uint32_t)(c->staging_offset / gs_staging_segment_size(s->pool));
	if (gs_staging_wait(s->pool, seg, s->timeout_s > 0 ? s->timeout_s : -1, e))
		return NULL;
	void *p = gs_staging_ptr(s->pool, c->staging_offset);
	if (!p || c->staging_offset + c->size > gs_staging_size(s->pool)) {
		gs_fail(e, GS_E_AGENT, "chunk at staging offset %llu (%llu bytes) lies past the staging pool's end",
			(unsigned long long)c->staging_offset, (unsigned long long)c->size);
		return NULL;
	}
	return p;
}

static int staging_put(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, const void *buf,
		       struct gs_err *e)
{
	struct gs_ring_staging_end *s = (struct gs_ring_staging_end *)end;
	const struct gs_copy_chunk *c = &h->plan.chunks[k];
	if (s->zero && (!buf || gs_all_zero(buf, c->size))) {
		/* nothing to keep: the pool's pages for it are never touched (a lazy pool never faults them in) */
		s->zero[k] = 1;
		atomic_fetch_add(&s->zero_bytes, c->size);
		return 0;
	}
	void *dst = staging_at(end, h, k, e);
	if (!dst)
		return e->code ? e->code : GS_E_FAILURE;
	host_copy_into_pool(dst, buf, c->size, gs_staging_lazy(s->pool));
	return 0;
}

static int staging_get(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, void *buf, struct gs_err *e)
{
	const struct gs_copy_chunk *c = &h->plan.chunks[k];
	const void *src = staging_at(end, h, k, e);
	if (!src)
		return e->code ? e->code : GS_E_FAILURE;
	host_copy_from_pool(buf, src, c->size);
	return 0;
}

static bool staging_zero(struct gs_ring_end *end, size_t k)
{
	struct gs_ring_staging_end *s = (struct gs_ring_staging_end *)end;
	return s->zero && s->zero[k];
}

/* A direct copy into segment seg completed: the segment's last one unpins it. */
static int staging_done(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, struct gs_err *e)
{
	struct gs_ring_staging_end *s = (struct gs_ring_staging_end *)end;
	if (!s->unpin)
		return 0;
	uint32_t seg = (uint32_t)(h->plan.chunks[k].staging_offset / gs_staging_segment_size(s->pool));
	if (atomic_fetch_sub(&s->seg_left[seg], 1) != 1)
		return 0;
	struct gs_err ue = { 0 };
	if (gs_staging_unpin_segment(s->pool, seg, &ue))
		atomic_store(&s->unpin_failed, 1); /* slower checkpoint, not a failed copy */
	(void)e;
	return 0;
}

static const struct gs_ring_end_ops staging_ops = {
	.put = staging_put, .get = staging_get, .zero = staging_zero, .at = staging_at, .done = staging_done,
};

int gs_ring_staging_end(struct gs_ring_staging_end *e, const struct gs_agent_held *h, struct gs_staging *pool,
			double timeout_s, uint8_t *zero, bool unpin, struct gs_err *err)
{
	memset(e, 0, sizeof(*e));
	e->end.ops = &staging_ops;
	e->end.direct = gs_staging_registers(pool);
	e->pool = pool;
	e->timeout_s = timeout_s;
	e->zero = e->end.direct ? NULL : zero; /* a direct copy never sees the bytes */
	atomic_init(&e->zero_bytes, 0);
	atomic_init(&e->unpin_failed, 0);
	e->unpin = unpin && e->end.direct;
	if (!e->unpin)
		return 0;
	uint32_t nseg = gs_staging_segments(pool);
	e->seg_left = calloc(nseg ? nseg : 1, sizeof(*e->seg_left));
	if (!e->seg_left)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	uint64_t seg_size = gs_staging_segment_size(pool);
	for (size_t k = 0; k < h->plan.nchunks; k++)
		atomic_fetch_add(&e->seg_left[h->plan.chunks[k].staging_offset / seg_size], 1);
	return 0;
}

int gs_ring_staging_end_finish(struct gs_ring_staging_end *e)
{
	if (e->unpin) {
		/* segments no copy reached (a reserved pool larger than the data) */
		for (uint32_t seg = 0; seg < gs_staging_segments(e->pool); seg++) {
			struct gs_err ue = { 0 };
			if (atomic_load(&e->seg_left[seg]) == 0 && gs_staging_pinned(e->pool, seg) &&
			    gs_staging_unpin_segment(e->pool, seg, &ue))
				atomic_store(&e->unpin_failed, 1);
		}
	}
	free(e->seg_left);
	e->seg_left = NULL;
	return atomic_load(&e->unpin_failed) ? -1 : 0;
}

static int image_put(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, const void *buf,
		     struct gs_err *e)
{
	struct gs_ring_image_end *s = (struct gs_ring_image_end *)end;
	const struct gs_copy_chunk *c = &h->plan.chunks[k];
	uint64_t off = c->va - h->regions[c->region].va;
	if (!buf && s->parent_ref && s->parent_ref[k].index1)
		return gs_image_write_parent_chunk(s->w, c->region, off, c->size, s->parent_ref[k].index1 - 1,
						   s->parent_ref[k].crc32c, s->fp[k].lo, s->fp[k].hi, e);
	if (!buf && s->store_ref && s->store_ref[k])
		return gs_image_write_stored_chunk(s->w, c->region, off, c->size, (uint32_t)(s->store_ref[k] - 1),
						   s->fp[k].lo, s->fp[k].hi, e);
	if (!buf)
		return gs_image_write_zero_chunk(s->w, c->region, off, c->size, e);
	__atomic_fetch_add(&s->copied_bytes, c->size, __ATOMIC_RELAXED);
	struct gs_fp fp = s->fp ? s->fp[k] : (struct gs_fp){ 0, 0 };
	if (gs_fp_none(fp))
		fp = gs_fp_of(buf, c->size);
	return gs_image_write_chunk_fp(s->w, c->region, off, buf, c->size, fp.lo, fp.hi, e);
}

static int image_get(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, void *buf, struct gs_err *e)
{
	(void)h;
	return gs_image_read_chunk(((struct gs_ring_image_end *)end)->img, k, buf, e);
}

static bool image_known_zero(struct gs_ring_end *end, size_t k)
{
	const struct gs_ring_image_end *s = (const struct gs_ring_image_end *)end;
	/* nothing crosses PCIe for it: all zero on the GPU, equal to the parent's chunk, or in the chunk store */
	return (s->known_zero && s->known_zero[k]) || (s->parent_ref && s->parent_ref[k].index1) ||
	       (s->store_ref && s->store_ref[k]);
}

/* A chunk the image records as ZERO: set on the GPU, neither read nor carried over PCIe. */
static bool image_zero_chunk(struct gs_ring_end *end, size_t k)
{
	const struct gs_image_chunk *c = gs_image_chunk_at(((struct gs_ring_image_end *)end)->img, k);
	return c && (c->flags & GS_CHUNK_F_ZERO);
}

static const struct gs_ring_end_ops image_writer_ops = { .put = image_put, .zero = image_known_zero };
static const struct gs_ring_end_ops image_reader_ops = { .get = image_get, .zero = image_zero_chunk };

void gs_ring_image_writer_end(struct gs_ring_image_end *e, struct gs_image_writer *w)
{
	*e = (struct gs_ring_image_end){ .end = { .ops = &image_writer_ops }, .w = w };
}

void gs_ring_image_reader_end(struct gs_ring_image_end *e, struct gs_image *img)
{
	*e = (struct gs_ring_image_end){ .end = { .ops = &image_reader_ops }, .img = img };
}

/* ---- a suspend split between host memory and a spill ---- */

static int split_put(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, const void *buf,
		     struct gs_err *e)
{
	struct gs_ring_split_end *s = (struct gs_ring_split_end *)end;
	if (s->to_image[k])
		return image_put(&s->img->end, h, k, buf, e);
	int rc = staging_put(&s->mem->end, h, k, buf, e);
	if (rc)
		return rc;
	const struct gs_copy_chunk *c = &h->plan.chunks[k];
	return gs_image_write_elsewhere_chunk(s->img->w, c->region, c->va - h->regions[c->region].va, c->size, e);
}

static int split_get(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, void *buf, struct gs_err *e)
{
	struct gs_ring_split_end *s = (struct gs_ring_split_end *)end;
	return s->to_image[k] ? image_get(&s->img->end, h, k, buf, e) : staging_get(&s->mem->end, h, k, buf, e);
}

static bool split_zero(struct gs_ring_end *end, size_t k)
{
	struct gs_ring_split_end *s = (struct gs_ring_split_end *)end;
	struct gs_ring_end *to = s->to_image[k] ? &s->img->end : &s->mem->end;
	return to->ops->zero && to->ops->zero(to, k);
}

static const struct gs_ring_end_ops split_ops = { .put = split_put, .get = split_get, .zero = split_zero };

void gs_ring_split_end(struct gs_ring_split_end *e, struct gs_ring_staging_end *mem, struct gs_ring_image_end *img,
		       const uint8_t *to_image)
{
	*e = (struct gs_ring_split_end){ .end = { .ops = &split_ops }, .mem = mem, .img = img, .to_image = to_image };
}

uint8_t *gs_ring_split_from_image(const struct gs_image *img)
{
	size_t n = gs_image_chunk_count(img);
	uint8_t *to_image = malloc(n ? n : 1);
	for (size_t k = 0; to_image && k < n; k++)
		to_image[k] = !(gs_image_chunk_at(img, k)->flags & GS_CHUNK_F_ELSEWHERE);
	return to_image;
}

/* ---- kept and prepared rings ---- */

/*
 * Building a ring: one thread per set of RING_DEPTH buffers maps and faults
 * them in, and pins them too when given a context (dev >= 0); a prepared ring
 * (dev < 0) makes no CUDA call.
 */
struct ring_build {
	struct gs_ring *r;
	void *ctx;
	int dev;
	unsigned index;
	pthread_t thread;
	struct gs_err err;
};

static void *build_main(void *arg)
{
	struct ring_build *b = arg;
	struct gs_agent *a = b->r->a;
	if (b->dev >= 0) {
		int cr = gpu->set_context(a, b->ctx);
		if (cr) {
			char m[128];
			gs_fail(&b->err, GS_E_AGENT, "making the context of GPU %d current failed: %s", b->dev,
				gpu->strerror(a, cr, m, sizeof(m)));
			return NULL;
		}
	}
	for (int i = 0; i < RING_DEPTH && !b->err.code; i++) {
		struct ring_slot *s = &b->r->slots[(size_t)b->index * RING_DEPTH + (size_t)i];
		if (b->dev >= 0)
			slot_setup(a, s, b->r->buf_size, b->dev, &b->err);
		else
			slot_map(s, b->r->buf_size, &b->err);
	}
	return NULL;
}

/* A ring of threads x RING_DEPTH buffers of buf_size, built in parallel; pinned with dev's context when dev >= 0. */
static int build_ring(struct gs_agent *a, unsigned threads, uint64_t buf_size, int dev, struct gs_ring **out,
		      struct gs_err *err)
{
	*out = NULL;
	struct gs_ring *r = calloc(1, sizeof(*r));
	struct ring_build *b = calloc(threads, sizeof(*b));
	if (r)
		r->slots = calloc((size_t)threads * RING_DEPTH, sizeof(*r->slots));
	if (!r || !b || !r->slots) {
		if (r)
			free(r->slots);
		free(r);
		free(b);
		return gs_fail(err, GS_E_AGENT, "out of memory");
	}
	r->a = a;
	r->threads = threads;
	r->buf_size = gs_round_up(buf_size, RING_ALIGN);
	void *ctx = dev >= 0 ? gpu->device_context(a, dev) : NULL;
	unsigned started = 0;
	for (unsigned i = 0; i < threads; i++) {
		b[i] = (struct ring_build){ .r = r, .ctx = ctx, .dev = dev, .index = i };
		if (gs_thread_start(&b[i].thread, build_main, &b[i]) != 0)
			break;
		started = i + 1;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(b[i].thread, NULL);
	/* a thread that could not start leaves its buffers to this one */
	if (started < threads) {
		void *saved = dev >= 0 ? gpu->get_context(a) : NULL;
		for (unsigned i = started; i < threads; i++)
			build_main(&b[i]);
		if (dev >= 0)
			gpu->set_context(a, saved);
	}
	int rc = 0;
	for (unsigned i = 0; i < threads && !rc; i++)
		if (b[i].err.code) {
			*err = b[i].err;
			rc = err->code;
		}
	free(b);
	if (rc) {
		gs_ring_destroy(r);
		return rc;
	}
	*out = r;
	return 0;
}

int gs_ring_create(struct gs_agent *a, unsigned threads, uint64_t buf_size, struct gs_ring **out, struct gs_err *err)
{
	*out = NULL;
	int dev = -1;
	for (int i = 0; i < GS_AGENT_MAX_DEVICES && dev < 0; i++)
		if (a->devices[i].used)
			dev = i;
	if (dev < 0)
		return gs_fail(err, GS_E_AGENT, "no GPU in use to pin the copy ring with");
	if (threads < 1 || threads > RING_THREADS_MAX || !buf_size)
		return gs_fail(err, GS_E_USAGE, "a copy ring of %u threads and %llu-byte buffers is out of range", threads,
			       (unsigned long long)buf_size);
	return build_ring(a, threads, buf_size, dev, out, err);
}

int gs_ring_prepare(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring **out, struct gs_err *err)
{
	*out = NULL;
	if (!h || !h->plan.nchunks)
		return 0;
	uint64_t buf_size;
	unsigned threads = ring_shape(h, gs_ring_image_threads(false), &buf_size);
	return build_ring(a, threads, buf_size, -1, out, err);
}

void gs_ring_destroy(struct gs_ring *r)
{
	if (!r)
		return;
	struct gs_agent *a = r->a;
	bool cuda = false; /* a prepared ring never used holds nothing of the driver's: no CUDA call then */
	for (size_t i = 0; r->slots && i < (size_t)r->threads * RING_DEPTH; i++)
		for (int d = 0; d < GS_AGENT_MAX_DEVICES && !cuda; d++)
			cuda = r->slots[i].pinned || r->slots[i].ev[d];
	if (!cuda) {
		for (size_t i = 0; r->slots && i < (size_t)r->threads * RING_DEPTH; i++)
			if (r->slots[i].buf)
				munmap(r->slots[i].buf, r->slots[i].len);
		free(r->slots);
		free(r);
		return;
	}
	/* unregistering needs a context; PORTABLE buffers take any of the app's */
	void *saved = gpu->get_context(a);
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		if (a->devices[i].used) {
			gpu->use_device(a, i);
			break;
		}
	for (size_t i = 0; i < (size_t)r->threads * RING_DEPTH; i++)
		slot_teardown(a, &r->slots[i], true);
	gpu->set_context(a, saved);
	free(r->slots);
	free(r);
}

uint64_t gs_ring_bytes(const struct gs_ring *r)
{
	return r ? (uint64_t)r->threads * RING_DEPTH * r->buf_size : 0;
}

void gs_ring_stats_report(const struct gs_ring_stats *st, struct gs_msg *reply)
{
	if (!st->threads)
		return;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_setup", st->setup_s);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_wait", st->wait_s);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_host", st->host_s);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_issue", st->issue_s);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "ring_run", st->run_s);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_threads", st->threads);
}
