/*
 * staging.c - the host staging pool: segment mapping, background population
 * and registration by owned worker threads, waiting per segment (see
 * staging.h).
 */
#define LOG_PREFIX "staging: "
#include "core/staging.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define HUGE_PAGE (2 * GS_MiB)
/*
 * How much one MADV_POPULATE_WRITE call faults in. Each call holds the
 * process's mmap lock for reading, and anything that maps memory meanwhile
 * (pthread_create mapping a stack, malloc, the driver) waits for every such
 * call in progress: with 32 MiB steps, creating the copy ring's threads
 * during an on-demand suspend took most of the copy's time (docs/benchmarks.md).
 * 4 MiB keeps each wait short; the worker also looks at the stop
 * flag this often.
 */
#define POPULATE_STEP (4 * GS_MiB)

enum seg_state { SEG_PENDING, SEG_BUSY, SEG_READY, SEG_FAILED };
enum worker_state { WORKER_NONE, WORKER_RUNNING, WORKER_EXITED };

struct segment {
	uint8_t *addr;
	uint64_t map_len; /* multiple of 2 MiB */
	uint64_t size;    /* usable bytes: the pool's size may end inside the last segment */
	bool hugetlb;
	bool populated; /* faulted in once: a re-pin skips populating */
	bool registered;
	enum seg_state state;
	struct gs_err err; /* why it failed */
	double populate_s, register_s;
};

struct gs_staging {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a segment finished, or a worker exited */
	struct gs_staging_ops ops;
	uint64_t seg_size, size;
	bool try_hugetlb;
	bool lazy; /* config.lazy: pages fault in on first write */
	struct segment **segs;
	uint32_t nsegs;
	uint32_t next_pending;
	uint32_t nready, nfailed;
	bool stop;
	int nworkers;
	pthread_t *tid;
	enum worker_state *wstate;
	double t_start, t_all_ready;
};

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

/* Anonymous memory of len bytes aligned to 2 MiB, so transparent huge pages can back it. */
static uint8_t *map_aligned(struct gs_staging *p, uint64_t len)
{
	uint8_t *raw = p->ops.mmap_fn(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	uint64_t head = (HUGE_PAGE - (uintptr_t)raw % HUGE_PAGE) % HUGE_PAGE;
	if (head)
		munmap(raw, head);
	if (HUGE_PAGE - head)
		munmap(raw + head + len, HUGE_PAGE - head);
	madvise(raw + head, len, MADV_HUGEPAGE); /* advice only: may be off system-wide */
	return raw + head;
}

/*
 * Staging memory stays with the process that made it: a fork child (a
 * DataLoader worker) would otherwise share a reserved pool of tens of GiB
 * copy-on-write, and every page either side writes would be copied. Advice
 * only: memory a child cannot get is not an error here.
 */
static void dont_fork(void *addr, uint64_t len)
{
	if (madvise(addr, len, MADV_DONTFORK))
		pr_debug("staging memory at %p may be inherited by fork children: %s", addr, strerror(errno));
}

/* Maps segment memory. Lock not needed: called before the segment is published. */
static int map_segment(struct gs_staging *p, struct segment *s, uint32_t index, struct gs_err *err)
{
	if (p->try_hugetlb) {
		void *a = p->ops.mmap_fn(NULL, s->map_len, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
		if (a != MAP_FAILED) {
			s->addr = a;
			s->hugetlb = true;
			dont_fork(s->addr, s->map_len);
			return 0;
		}
		/* no (more) free huge pages: normal pages from here on, silently */
		pr_debug("no hugetlb pages for staging segment %u (%s), using normal pages", index, strerror(errno));
		p->try_hugetlb = false;
	}
	s->addr = map_aligned(p, s->map_len);
	if (!s->addr) {
		char b1[32], b2[32];
		return gs_fail_errno(err, GS_E_NO_SPACE, errno,
				     "cannot get %s of host memory for staging (segment %u, pool of %s)",
				     gs_format_bytes(s->map_len, b1, sizeof(b1)), index,
				     gs_format_bytes(p->size, b2, sizeof(b2)));
	}
	dont_fork(s->addr, s->map_len);
	return 0;
}

static void unmap_segment(struct gs_staging *p, struct segment *s)
{
	if (s->registered && p->ops.unreg)
		p->ops.unreg(p->ops.ctx, s->addr, s->map_len);
	s->registered = false;
	if (s->addr)
		munmap(s->addr, s->map_len);
	s->addr = NULL;
}

static bool stopping(struct gs_staging *p)
{
	pthread_mutex_lock(&p->lock);
	bool stop = p->stop;
	pthread_mutex_unlock(&p->lock);
	return stop;
}

/* Faults in every page of the segment. 0, -1 when stopped, or an error code with err set. */
static int populate(struct gs_staging *p, struct segment *s, struct gs_err *err)
{
	static volatile int no_populate_write; /* kernel before 5.14: remembered for every pool */
	long page = sysconf(_SC_PAGESIZE);
	for (uint64_t off = 0; off < s->map_len; off += POPULATE_STEP) {
		if (stopping(p))
			return -1;
		uint64_t n = s->map_len - off < POPULATE_STEP ? s->map_len - off : POPULATE_STEP;
		if (!no_populate_write) {
			if (!madvise(s->addr + off, n, MADV_POPULATE_WRITE))
				continue;
			if (errno != EINVAL)
				return gs_fail_errno(err, GS_E_NO_SPACE, errno, "cannot populate host memory for staging");
			no_populate_write = 1;
		}
		for (uint64_t k = 0; k < n; k += (uint64_t)page)
			((volatile uint8_t *)s->addr)[off + k] = 0;
	}
	return 0;
}

static void *worker_main(void *arg);

/* Starts workers for pending segments, up to the configured count. Lock held. */
static int spawn_workers(struct gs_staging *p, struct gs_err *err)
{
	int running = 0;
	for (int w = 0; w < p->nworkers; w++) {
		if (p->wstate[w] == WORKER_EXITED) {
			pthread_join(p->tid[w], NULL); /* it has left the lock for good */
			p->wstate[w] = WORKER_NONE;
		}
		running += p->wstate[w] == WORKER_RUNNING;
	}
	uint32_t pending = p->nsegs - p->next_pending;
	int rc = 0;
	for (int w = 0; w < p->nworkers && (uint32_t)running < pending; w++) {
		if (p->wstate[w] != WORKER_NONE)
			continue;
		int e = gs_thread_start(&p->tid[w], worker_main, p);
		if (e) {
			if (!running)
				rc = gs_fail_errno(err, GS_E_FAILURE, e, "cannot start a staging worker thread");
			break;
		}
		p->wstate[w] = WORKER_RUNNING;
		running++;
	}
	return rc;
}

static void *worker_main(void *arg)
{
	struct gs_staging *p = arg;
	pthread_t self = pthread_self();
	pthread_mutex_lock(&p->lock);
	while (!p->stop && p->next_pending < p->nsegs) {
		uint32_t index = p->next_pending++;
		struct segment *s = p->segs[index];
		if (s->state != SEG_PENDING)
			continue; /* a re-pin: this one stayed pinned */
		s->state = SEG_BUSY;
		bool populated = s->populated;
		pthread_mutex_unlock(&p->lock);

		struct gs_err err = { 0 };
		double t0 = gs_now();
		int rc = populated ? 0 : populate(p, s, &err);
		double t1 = gs_now();
		if (!rc && p->ops.reg) {
			int r = p->ops.reg(p->ops.ctx, s->addr, s->map_len);
			if (r) {
				char b[32];
				rc = gs_fail(&err, GS_E_FAILURE, "cannot register %s of staging memory (segment %u, error %d)",
					     gs_format_bytes(s->map_len, b, sizeof(b)), index, r);
			} else {
				s->registered = true;
			}
		}
		double t2 = gs_now();

		pthread_mutex_lock(&p->lock);
		if (rc == 0)
			s->populated = true;
		s->populate_s += t1 - t0;
		s->register_s += t2 - t1;
		if (rc == -1) {
			s->state = SEG_FAILED;
			gs_fail(&s->err, GS_E_FAILURE, "staging pool is being destroyed");
		} else if (rc) {
			s->state = SEG_FAILED;
			s->err = err;
		} else {
			s->state = SEG_READY;
		}
		if (s->state == SEG_READY)
			p->nready++;
		else
			p->nfailed++;
		if (p->nready + p->nfailed == p->nsegs)
			p->t_all_ready = t2;
		pthread_cond_broadcast(&p->changed);
	}
	for (int w = 0; w < p->nworkers; w++)
		if (p->wstate[w] == WORKER_RUNNING && pthread_equal(p->tid[w], self))
			p->wstate[w] = WORKER_EXITED;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Maps the segments of a new pool; on failure nothing stays mapped. Lock held. */
static int map_segments(struct gs_staging *p, struct gs_err *err)
{
	uint64_t nseg = (p->size + p->seg_size - 1) / p->seg_size;
	if (nseg > UINT32_MAX)
		return gs_fail(err, GS_E_USAGE, "staging pool of %llu bytes has too many segments",
			       (unsigned long long)p->size);
	p->segs = calloc(nseg, sizeof(*p->segs));
	if (!p->segs)
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the staging pool");
	for (uint32_t i = 0; i < nseg; i++) {
		struct segment *s = calloc(1, sizeof(*s));
		if (!s) {
			gs_fail(err, GS_E_FAILURE, "out of memory creating the staging pool");
			goto undo;
		}
		uint64_t start = (uint64_t)i * p->seg_size;
		s->size = p->size - start < p->seg_size ? p->size - start : p->seg_size;
		s->map_len = gs_round_up(s->size, HUGE_PAGE);
		if (map_segment(p, s, i, err)) {
			free(s);
			goto undo;
		}
		p->segs[p->nsegs++] = s;
	}
	return 0;
undo:
	while (p->nsegs) {
		struct segment *s = p->segs[--p->nsegs];
		unmap_segment(p, s);
		free(s);
	}
	return err ? err->code : GS_E_FAILURE;
}

/* A lazy pool: every segment usable at once, its pages faulted in by the first writes. Lock held. */
static void mark_all_ready(struct gs_staging *p)
{
	for (uint32_t i = 0; i < p->nsegs; i++) {
		p->segs[i]->state = SEG_READY;
		p->segs[i]->populated = true; /* as far as the workers are concerned: they never run */
	}
	p->nready = p->nsegs;
	p->next_pending = p->nsegs;
	p->t_all_ready = gs_now();
}

int gs_staging_create(uint64_t size, const struct gs_staging_config *cfg, const struct gs_staging_ops *ops,
		      struct gs_staging **out, struct gs_err *err)
{
	struct gs_staging_config c = cfg ? *cfg : (struct gs_staging_config){ 0 };
	*out = NULL;
	if (size == 0)
		return gs_fail(err, GS_E_USAGE, "staging pool size must be more than 0");
	if (!c.segment_size)
		c.segment_size = 256 * GS_MiB;
	if (c.segment_size > UINT64_MAX - HUGE_PAGE)
		return gs_fail(err, GS_E_USAGE, "staging segment size too large");
	if (c.workers <= 0)
		c.workers = 4;
	struct gs_staging *p = calloc(1, sizeof(*p));
	if (!p)
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the staging pool");
	if (ops)
		p->ops = *ops;
	if (!p->ops.mmap_fn)
		p->ops.mmap_fn = sys_mmap;
	p->seg_size = gs_round_up(c.segment_size, HUGE_PAGE);
	p->try_hugetlb = !c.no_hugetlb;
	p->nworkers = c.workers;
	p->tid = calloc((size_t)c.workers, sizeof(*p->tid));
	p->wstate = calloc((size_t)c.workers, sizeof(*p->wstate));
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->changed, &ca);
	pthread_condattr_destroy(&ca);
	if (!p->tid || !p->wstate) {
		gs_staging_destroy(p);
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the staging pool");
	}
	p->size = size;
	p->lazy = c.lazy;
	p->t_start = gs_now();
	if (c.lazy && p->ops.reg) {
		gs_staging_destroy(p);
		return gs_fail(err, GS_E_USAGE, "a lazily populated staging pool cannot be pinned");
	}
	pthread_mutex_lock(&p->lock);
	int rc = map_segments(p, err);
	if (!rc && c.lazy)
		mark_all_ready(p);
	else if (!rc)
		rc = spawn_workers(p, err);
	pthread_mutex_unlock(&p->lock);
	if (rc) {
		gs_staging_destroy(p);
		return rc;
	}
	*out = p;
	return 0;
}

void gs_staging_destroy(struct gs_staging *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->changed);
	/* no worker starts after stop: those started now are all there is to join */
	for (int w = 0; p->wstate && w < p->nworkers; w++)
		if (p->wstate[w] != WORKER_NONE)
			p->wstate[w] = WORKER_EXITED;
	pthread_mutex_unlock(&p->lock);
	for (int w = 0; p->wstate && w < p->nworkers; w++)
		if (p->wstate[w] == WORKER_EXITED)
			pthread_join(p->tid[w], NULL);
	for (uint32_t i = 0; i < p->nsegs; i++) {
		unmap_segment(p, p->segs[i]);
		free(p->segs[i]);
	}
	free(p->segs);
	free(p->tid);
	free(p->wstate);
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Waits on the condition until abs_deadline (CLOCK_MONOTONIC seconds; < 0 = forever). Lock held. */
static int wait_changed(struct gs_staging *p, double abs_deadline)
{
	if (abs_deadline < 0)
		return pthread_cond_wait(&p->changed, &p->lock);
	struct timespec ts;
	ts.tv_sec = (time_t)abs_deadline;
	ts.tv_nsec = (long)((abs_deadline - (double)ts.tv_sec) * 1e9);
	return pthread_cond_timedwait(&p->changed, &p->lock, &ts);
}

static int wait_locked(struct gs_staging *p, uint32_t seg, double deadline, double timeout_s, struct gs_err *err)
{
	if (seg >= p->nsegs)
		return gs_fail(err, GS_E_USAGE, "staging segment %u does not exist (pool has %u)", seg, p->nsegs);
	struct segment *s = p->segs[seg];
	while (s->state == SEG_PENDING || s->state == SEG_BUSY) {
		if (wait_changed(p, deadline) == ETIMEDOUT && (s->state == SEG_PENDING || s->state == SEG_BUSY))
			return gs_fail(err, GS_E_TIMEOUT, "staging segment %u not ready after %.1f s", seg, timeout_s);
	}
	if (s->state == SEG_FAILED) {
		if (err)
			*err = s->err;
		return s->err.code ? s->err.code : GS_E_FAILURE;
	}
	return 0;
}

int gs_staging_wait(struct gs_staging *p, uint32_t seg, double timeout_s, struct gs_err *err)
{
	double deadline = timeout_s < 0 ? -1 : gs_now() + timeout_s;
	pthread_mutex_lock(&p->lock);
	int rc = wait_locked(p, seg, deadline, timeout_s, err);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int gs_staging_wait_all(struct gs_staging *p, double timeout_s, struct gs_err *err)
{
	double deadline = timeout_s < 0 ? -1 : gs_now() + timeout_s;
	int rc = 0;
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nsegs && !rc; i++)
		rc = wait_locked(p, i, deadline, timeout_s, err);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

bool gs_staging_ready(struct gs_staging *p, uint32_t seg)
{
	pthread_mutex_lock(&p->lock);
	bool ready = seg < p->nsegs && p->segs[seg]->state == SEG_READY;
	pthread_mutex_unlock(&p->lock);
	return ready;
}

void *gs_staging_ptr(struct gs_staging *p, uint64_t offset)
{
	void *ptr = NULL;
	pthread_mutex_lock(&p->lock);
	if (offset < p->size)
		ptr = p->segs[offset / p->seg_size]->addr + offset % p->seg_size;
	pthread_mutex_unlock(&p->lock);
	return ptr;
}

uint64_t gs_staging_size(struct gs_staging *p)
{
	pthread_mutex_lock(&p->lock);
	uint64_t n = p->size;
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t gs_staging_segment_size(struct gs_staging *p)
{
	return p->seg_size; /* fixed at create */
}

uint32_t gs_staging_segments(struct gs_staging *p)
{
	pthread_mutex_lock(&p->lock);
	uint32_t n = p->nsegs;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void gs_staging_get_report(struct gs_staging *p, struct gs_staging_report *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_lock(&p->lock);
	r->bytes = p->size;
	r->segments = p->nsegs;
	r->ready = p->nready;
	r->failed = p->nfailed;
	for (uint32_t i = 0; i < p->nsegs; i++) {
		const struct segment *s = p->segs[i];
		r->mapped_bytes += s->map_len;
		if (s->hugetlb)
			r->hugetlb_bytes += s->map_len;
		r->populate_s += s->populate_s;
		r->register_s += s->register_s;
	}
	if (p->nready + p->nfailed == p->nsegs && p->t_all_ready > 0)
		r->ready_wall_s = p->t_all_ready - p->t_start;
	pthread_mutex_unlock(&p->lock);
	r->page_kind = r->hugetlb_bytes == r->mapped_bytes ? "huge" : r->hugetlb_bytes ? "mixed" : "normal";
}

int gs_staging_set_pinned(struct gs_staging *p, bool pinned, struct gs_err *err)
{
	if (!p->ops.reg || !p->ops.unreg)
		return 0;
	int rc = 0;
	if (!pinned) {
		for (uint32_t i = 0; i < p->nsegs && !rc; i++)
			rc = gs_staging_unpin_segment(p, i, err);
		return rc;
	}
	struct gs_err e = { 0 };
	if ((rc = gs_staging_repin_start(p, &e)) || (rc = gs_staging_wait_all(p, -1, &e)))
		return gs_fail(err, rc, "cannot pin staging memory for DMA again: %s", e.msg);
	return 0;
}

int gs_staging_unpin_segment(struct gs_staging *p, uint32_t seg, struct gs_err *err)
{
	if (!p->ops.unreg)
		return 0;
	pthread_mutex_lock(&p->lock);
	int rc = wait_locked(p, seg, -1, -1, err);
	struct segment *s = rc ? NULL : p->segs[seg];
	bool was = s && s->registered;
	if (s)
		s->registered = false; /* READY stays: unpinned memory is still usable, only slower for DMA */
	pthread_mutex_unlock(&p->lock);
	if (was)
		p->ops.unreg(p->ops.ctx, s->addr, s->map_len);
	return rc;
}

int gs_staging_repin_start(struct gs_staging *p, struct gs_err *err)
{
	if (!p->ops.reg)
		return 0;
	pthread_mutex_lock(&p->lock);
	/* any population or earlier re-pin must be over: the workers restart from the first segment */
	for (uint32_t i = 0; i < p->nsegs; i++)
		while (p->segs[i]->state == SEG_PENDING || p->segs[i]->state == SEG_BUSY)
			wait_changed(p, -1);
	int rc = 0;
	for (uint32_t i = 0; i < p->nsegs && !rc; i++) {
		struct segment *s = p->segs[i];
		if (!s->registered && !s->populated) {
			/* population failed: that memory is not there to pin */
			if (err)
				*err = s->err;
			rc = s->err.code ? s->err.code : GS_E_FAILURE;
		}
	}
	uint32_t first = p->nsegs;
	for (uint32_t i = 0; i < p->nsegs && !rc; i++) {
		struct segment *s = p->segs[i];
		if (s->registered)
			continue;
		/* a segment whose earlier re-pin failed is tried again */
		if (s->state == SEG_READY)
			p->nready--;
		else
			p->nfailed--;
		s->state = SEG_PENDING;
		if (first == p->nsegs)
			first = i;
	}
	if (!rc && first < p->nsegs) {
		p->next_pending = first;
		p->t_all_ready = 0;
		rc = spawn_workers(p, err);
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

bool gs_staging_pinned(struct gs_staging *p, uint32_t seg)
{
	pthread_mutex_lock(&p->lock);
	bool pinned = seg < p->nsegs && p->segs[seg]->registered;
	pthread_mutex_unlock(&p->lock);
	return pinned;
}

bool gs_staging_registers(const struct gs_staging *p)
{
	return p->ops.reg != NULL; /* fixed at create */
}

bool gs_staging_lazy(const struct gs_staging *p)
{
	return p->lazy; /* fixed at create */
}
