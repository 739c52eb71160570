/*
 * test_staging.c - the host staging pool with a fake register callback and an
 * injectable mmap: sizes that are not whole segments, hugetlb fallback,
 * concurrent waiters, timeouts and failed registration, destroy while
 * populating, out of host memory; a pool without a register callback (the
 * agent's bounce mode); a lazy pool (nothing populated ahead); and populate speed for 1 GiB with 1 and 4
 * threads (printed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "core/staging.h"
#include "test.h"

#define GS_MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- fake register callback ---- */

#define MAX_REGS 1024

struct fake_reg {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int calls;
	int fail_call;       /* 1-based call number that fails; 0 never */
	int block_call;      /* 1-based call number that waits for `released`; 0 never */
	bool block_all;      /* every call waits for `released` */
	bool released;
	useconds_t delay_us; /* every call takes this long */
	void *addr[MAX_REGS];
	uint64_t len[MAX_REGS];
	int unregs[MAX_REGS];
	int nregs;
	int bad_unregs;
};

static int fake_reg_fn(void *ctx, void *addr, uint64_t len)
{
	struct fake_reg *f = ctx;
	pthread_mutex_lock(&f->lock);
	int call = ++f->calls;
	if (call == f->block_call || f->block_all)
		while (!f->released)
			pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	if (f->delay_us)
		usleep(f->delay_us);
	if (call == f->fail_call)
		return 7;
	pthread_mutex_lock(&f->lock);
	f->addr[f->nregs] = addr;
	f->len[f->nregs] = len;
	f->nregs++;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static int calls_made(struct fake_reg *f)
{
	pthread_mutex_lock(&f->lock);
	int n = f->calls;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static void fake_unreg_fn(void *ctx, void *addr, uint64_t len)
{
	struct fake_reg *f = ctx;
	pthread_mutex_lock(&f->lock);
	int i;
	for (i = 0; i < f->nregs; i++)
		if (f->addr[i] == addr && f->len[i] == len && !f->unregs[i])
			break; /* a later pool may get the same address again */
	if (i == f->nregs)
		f->bad_unregs++;
	else
		f->unregs[i]++;
	pthread_mutex_unlock(&f->lock);
}

static void fake_reg_init(struct fake_reg *f, struct gs_staging_ops *ops)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	*ops = (struct gs_staging_ops){ fake_reg_fn, fake_unreg_fn, f, NULL };
}

static void fake_release(struct fake_reg *f)
{
	pthread_mutex_lock(&f->lock);
	f->released = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* Every registration undone exactly once. */
static bool all_unregistered_once(struct fake_reg *f)
{
	for (int i = 0; i < f->nregs; i++)
		if (f->unregs[i] != 1)
			return false;
	return f->bad_unregs == 0;
}

/* ---- fake mmap ---- */

static int mmap_ok_left = -1;  /* successful calls before ENOMEM; -1 unlimited */
static int hugetlb_ok_left = 0; /* MAP_HUGETLB calls that "succeed" (with normal pages) */
static int mmap_calls;

static void *fake_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	__atomic_add_fetch(&mmap_calls, 1, __ATOMIC_SEQ_CST);
	if (flags & MAP_HUGETLB) {
		if (hugetlb_ok_left <= 0) {
			errno = ENOMEM;
			return MAP_FAILED;
		}
		hugetlb_ok_left--;
		flags = (int)((unsigned)flags & ~((unsigned)MAP_HUGETLB | (0x3fu << 26)));
	}
	if (mmap_ok_left == 0) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	if (mmap_ok_left > 0)
		mmap_ok_left--;
	return mmap(addr, len, prot, flags, fd, off);
}

static void fake_mmap_reset(int ok_left, int hugetlb_ok)
{
	mmap_ok_left = ok_left;
	hugetlb_ok_left = hugetlb_ok;
	mmap_calls = 0;
}

/* ---- tests ---- */

static void test_sizes_and_ptr(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	ops.mmap_fn = fake_mmap;
	fake_mmap_reset(-1, 0); /* no huge pages */
	const uint64_t seg = 4 * GS_MiB, size = 2 * seg + seg / 2 + 100;
	struct gs_staging_config cfg = { .segment_size = seg, .workers = 2 };
	struct gs_staging *p;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(size, &cfg, &ops, &p, &err), 0);
	CHECK_INT(gs_staging_segments(p), 3);
	CHECK(gs_staging_size(p) == size && gs_staging_segment_size(p) == seg);
	CHECK_INT(gs_staging_wait_all(p, 10.0, &err), 0);
	for (uint32_t i = 0; i < 3; i++)
		CHECK(gs_staging_ready(p, i));
	CHECK(!gs_staging_ready(p, 3));
	CHECK(gs_staging_ptr(p, size - 1) != NULL && gs_staging_ptr(p, size) == NULL);
	/* every byte writable through its offset, segment by segment, and reads back */
	for (uint64_t off = 0; off < size;) {
		uint64_t n = seg - off % seg;
		if (n > size - off)
			n = size - off;
		memset(gs_staging_ptr(p, off), (int)(off / seg) + 1, n);
		off += n;
	}
	int bad = 0;
	for (uint64_t off = 0; off < size; off += 4093)
		bad += *(uint8_t *)gs_staging_ptr(p, off) != (uint8_t)(off / seg + 1);
	CHECK_INT(bad, 0);
	/* registered: each segment once, 2 MiB-aligned address and length (normal pages, THP-ready) */
	CHECK_INT(f.nregs, 3);
	for (int i = 0; i < f.nregs; i++)
		CHECK((uintptr_t)f.addr[i] % (2 * GS_MiB) == 0 && f.len[i] % (2 * GS_MiB) == 0 && f.len[i] <= seg);
	struct gs_staging_report r;
	gs_staging_get_report(p, &r);
	CHECK(r.bytes == size && r.mapped_bytes == 3 * seg && r.hugetlb_bytes == 0);
	CHECK_STR(r.page_kind, "normal");
	CHECK(r.segments == 3 && r.ready == 3 && r.failed == 0);
	CHECK(r.ready_wall_s > 0 && r.populate_s > 0);
	gs_staging_destroy(p);
	CHECK(all_unregistered_once(&f));

	CHECK_INT(gs_staging_create(0, &cfg, &ops, &p, &err), GS_E_USAGE);
	/* one byte: one segment of one huge page */
	CHECK_INT(gs_staging_create(1, &cfg, NULL, &p, &err), 0);
	CHECK_INT(gs_staging_wait(p, 0, 10.0, &err), 0);
	CHECK_INT(gs_staging_wait(p, 1, 10.0, &err), GS_E_USAGE);
	gs_staging_get_report(p, &r);
	CHECK(r.mapped_bytes == 2 * GS_MiB);
	gs_staging_destroy(p);
}

static void test_hugetlb_fallback(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	ops.mmap_fn = fake_mmap;
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 2 };
	struct gs_staging *p;
	struct gs_err err = { 0 };
	struct gs_staging_report r;
	/* huge pages for two segments, then none: the rest silently uses normal pages */
	fake_mmap_reset(-1, 2);
	CHECK_INT(gs_staging_create(5 * 2 * GS_MiB, &cfg, &ops, &p, &err), 0);
	CHECK_INT(gs_staging_wait_all(p, 10.0, &err), 0);
	gs_staging_get_report(p, &r);
	CHECK(r.hugetlb_bytes == 4 * GS_MiB);
	CHECK_STR(r.page_kind, "mixed");
	CHECK_INT(mmap_calls, 6); /* 2 huge, 1 refused, then 3 normal: no retry after the refusal */
	gs_staging_destroy(p);
	fake_mmap_reset(-1, 100);
	CHECK_INT(gs_staging_create(3 * GS_MiB, &cfg, &ops, &p, &err), 0);
	gs_staging_get_report(p, &r);
	CHECK_STR(r.page_kind, "huge");
	gs_staging_destroy(p);
	cfg.no_hugetlb = true;
	fake_mmap_reset(-1, 100);
	CHECK_INT(gs_staging_create(3 * GS_MiB, &cfg, &ops, &p, &err), 0);
	gs_staging_get_report(p, &r);
	CHECK_STR(r.page_kind, "normal");
	gs_staging_destroy(p);
	CHECK(all_unregistered_once(&f));

	/* the real system: huge pages exactly when it has free ones */
	FILE *mi = fopen("/proc/meminfo", "r");
	char line[256];
	long free_huge = 0;
	while (mi && fgets(line, sizeof(line), mi))
		sscanf(line, "HugePages_Free: %ld", &free_huge);
	if (mi)
		fclose(mi);
	cfg.no_hugetlb = false;
	CHECK_INT(gs_staging_create(4 * GS_MiB, &cfg, NULL, &p, &err), 0);
	CHECK_INT(gs_staging_wait_all(p, 10.0, &err), 0);
	gs_staging_get_report(p, &r);
	printf("     this system has %ld free huge pages: a 4 MiB pool gets %s pages\n", free_huge, r.page_kind);
	if (free_huge == 0)
		CHECK_STR(r.page_kind, "normal");
	gs_staging_destroy(p);
}

struct waiter {
	struct gs_staging *p;
	uint32_t nsegs;
	int errors;
	unsigned seed;
	int id;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	struct gs_err err;
	for (uint32_t k = 0; k < w->nsegs; k++) {
		uint32_t seg = (uint32_t)rand_r(&w->seed) % w->nsegs;
		if (gs_staging_wait(w->p, seg, 20.0, &err) || !gs_staging_ready(w->p, seg))
			w->errors++;
		/* ready means usable */
		*(volatile uint8_t *)gs_staging_ptr(w->p, (uint64_t)seg * 2 * GS_MiB + (uint64_t)w->id) = 1;
	}
	return NULL;
}

static void test_concurrent_waits(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	f.delay_us = 20000;
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 2 };
	struct gs_staging *p;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(12 * 2 * GS_MiB, &cfg, &ops, &p, &err), 0);
	pthread_t t[4];
	struct waiter w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct waiter){ p, 12, 0, (unsigned)i + 1, i };
		pthread_create(&t[i], NULL, waiter_main, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_INT(w[i].errors, 0);
	}
	CHECK_INT(f.nregs, 12);
	gs_staging_destroy(p);
	CHECK(all_unregistered_once(&f));
}

static void test_timeout_and_failed_register(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	f.block_call = 1;
	f.fail_call = 2;
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 1 };
	struct gs_staging *p;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(3 * 2 * GS_MiB, &cfg, &ops, &p, &err), 0);
	double t0 = gs_now();
	CHECK_INT(gs_staging_wait(p, 0, 0.1, &err), GS_E_TIMEOUT);
	double took = gs_now() - t0;
	CHECK(took >= 0.09 && took < 10.0); /* the call is held: only its own 0.1 s ends it */
	CHECK_CONTAINS(err.msg, "staging segment 0 not ready after 0.1 s");
	CHECK(!gs_staging_ready(p, 0));
	fake_release(&f);
	CHECK_INT(gs_staging_wait(p, 0, 10.0, &err), 0);
	CHECK_INT(gs_staging_wait(p, 1, 10.0, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "cannot register 2.00 MiB of staging memory (segment 1, error 7)");
	CHECK_INT(gs_staging_wait(p, 2, 10.0, &err), 0);
	CHECK_INT(gs_staging_wait_all(p, 10.0, &err), GS_E_FAILURE);
	struct gs_staging_report r;
	gs_staging_get_report(p, &r);
	CHECK(r.ready == 2 && r.failed == 1);
	gs_staging_destroy(p);
	CHECK_INT(f.nregs, 2);
	CHECK(all_unregistered_once(&f)); /* the failed one is never unregistered */
}

static void test_destroy_while_populating(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	struct gs_staging_config cfg = { .segment_size = 64 * GS_MiB, .workers = 2 };
	struct gs_staging *p;
	struct gs_err err = { 0 };
	/* 2 GiB at a few GB/s takes around a second; destroy right away */
	CHECK_INT(gs_staging_create(2 * GS_GiB, &cfg, &ops, &p, &err), 0);
	usleep(20000);
	double t0 = gs_now();
	gs_staging_destroy(p);
	double took = gs_now() - t0;
	printf("     destroy while populating took %.3f s (%d of 32 segments had been registered)\n", took, f.nregs);
	CHECK(took < 5.0);
	CHECK(f.nregs < 32); /* what shows that destroy did not wait for the rest to populate */
	CHECK(all_unregistered_once(&f));

	/* and while a registration is stuck: destroy waits for it, then undoes it */
	fake_reg_init(&f, &ops);
	f.block_call = 1;
	CHECK_INT(gs_staging_create(2 * GS_MiB, &cfg, &ops, &p, &err), 0);
	CHECK_SOON(calls_made(&f) >= 1, 30); /* the registration is under way, held */
	fake_release(&f);
	gs_staging_destroy(p);
	CHECK_INT(f.nregs, 1);
	CHECK(all_unregistered_once(&f));
}

static void test_out_of_memory(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	ops.mmap_fn = fake_mmap;
	fake_mmap_reset(2, 0);
	struct gs_staging_config cfg = { .segment_size = 256 * GS_MiB, .workers = 2 };
	struct gs_staging *p = (struct gs_staging *)&f;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(4 * 256 * GS_MiB, &cfg, &ops, &p, &err), GS_E_NO_SPACE);
	CHECK(p == NULL);
	CHECK_CONTAINS(err.msg, "cannot get 256.00 MiB of host memory for staging (segment 2, pool of 1.00 GiB)");
	CHECK_CONTAINS(err.msg, "Cannot allocate memory");
	CHECK_INT(f.calls, 0); /* nothing was populated or registered */

#if defined(__SANITIZE_ADDRESS__)
	printf("     (address-space limit case not run under AddressSanitizer, which needs a large address space)\n");
#else
	/* the real mmap under an address-space limit, in a child */
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 512 * GS_MiB, 512 * GS_MiB };
		FILE *st = fopen("/proc/self/statm", "r");
		unsigned long vm_pages = 0;
		if (st && fscanf(st, "%lu", &vm_pages) != 1)
			vm_pages = 0;
		if (st)
			fclose(st);
		rl.rlim_cur = rl.rlim_max = vm_pages * (unsigned long)sysconf(_SC_PAGESIZE) + 256 * GS_MiB;
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(90);
		struct gs_staging *q;
		struct gs_err e = { 0 };
		int rc = gs_staging_create(GS_GiB, &cfg, NULL, &q, &e);
		if (rc != GS_E_NO_SPACE || !strstr(e.msg, "of host memory for staging")) {
			fprintf(stderr, "under RLIMIT_AS: rc %d '%s'\n", rc, e.msg);
			_exit(91);
		}
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#endif
}

static uint64_t anon_huge_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	uint64_t kib = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %lu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static void test_populate_speed(void)
{
	struct gs_err err = { 0 };
	/*
	 * Twice each: on a virtual machine, memory the guest has never touched
	 * can fault in ten times slower (the host backs it first), so the first
	 * run may measure the host rather than the pool.
	 */
	int threads[] = { 1, 4, 1, 4 };
	for (int i = 0; i < 4; i++) {
		struct gs_staging_config cfg = { .segment_size = 256 * GS_MiB, .workers = threads[i] };
		struct gs_staging *p;
		uint64_t thp0 = anon_huge_kib();
		double t0 = gs_now();
		CHECK_INT(gs_staging_create(GS_GiB, &cfg, NULL, &p, &err), 0);
		CHECK_INT(gs_staging_wait_all(p, 60.0, &err), 0);
		double wall = gs_now() - t0;
		struct gs_staging_report r;
		gs_staging_get_report(p, &r);
		uint64_t thp = anon_huge_kib() - thp0;
		printf("     populate 1 GiB, %d thread%s: %.3f s wall, %.2f GB/s (%s pages, %llu MiB as THP, "
		       "%.3f thread-s)\n",
		       threads[i], threads[i] > 1 ? "s" : "", wall, (double)GS_GiB / wall / 1e9, r.page_kind,
		       (unsigned long long)thp / 1024, r.populate_s);
		CHECK(r.ready == 4);
		gs_staging_destroy(p);
	}
}

/* Unpinning unregisters every segment once; pinning again registers each once more; destroy then unregisters those. */
static void test_unpin_and_pin_again(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	struct gs_staging_config cfg = { .segment_size = 4 * GS_MiB, .workers = 2, .no_hugetlb = true };
	struct gs_staging *p = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(10 * GS_MiB, &cfg, &ops, &p, &err), 0);
	if (!p)
		return;
	uint32_t nsegs = gs_staging_segments(p);
	CHECK_INT(gs_staging_set_pinned(p, false, &err), 0);
	int unregs = 0;
	for (int i = 0; i < f.nregs; i++)
		unregs += f.unregs[i];
	CHECK_INT(f.nregs, nsegs);
	CHECK_INT(unregs, nsegs);
	CHECK_INT(gs_staging_set_pinned(p, false, &err), 0); /* already unpinned: nothing more */
	CHECK_INT(f.bad_unregs, 0);
	CHECK_INT(gs_staging_set_pinned(p, true, &err), 0);
	CHECK_INT(f.nregs, 2 * nsegs);
	for (uint64_t off = 0; off < 10 * GS_MiB; off += gs_staging_segment_size(p)) /* still mapped and writable */
		memset(gs_staging_ptr(p, off), 0x5a, GS_MIN(gs_staging_segment_size(p), 10 * GS_MiB - off));
	gs_staging_destroy(p);
	unregs = 0;
	for (int i = 0; i < f.nregs; i++)
		unregs += f.unregs[i];
	CHECK_INT(unregs, 2 * nsegs);
	CHECK_INT(f.bad_unregs, 0);

	/* a failing pin is reported */
	fake_reg_init(&f, &ops);
	CHECK_INT(gs_staging_create(8 * GS_MiB, &cfg, &ops, &p, &err), 0);
	if (!p)
		return;
	CHECK_INT(gs_staging_set_pinned(p, false, &err), 0);
	f.fail_call = f.calls + 1;
	CHECK_INT(gs_staging_set_pinned(p, true, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "pin staging memory");
	gs_staging_destroy(p);
}

/* Pipelined unpin per segment and re-pin in the background, with waits per segment. */
static void test_unpin_segments_and_repin(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 3, .no_hugetlb = true };
	struct gs_staging *p = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(11 * GS_MiB, &cfg, &ops, &p, &err), 0);
	if (!p)
		return;
	uint32_t nsegs = gs_staging_segments(p);
	CHECK_INT(nsegs, 6);
	/* unpin waits for the segment's population, then unregisters it once */
	for (uint32_t i = 0; i < nsegs; i += 2)
		CHECK_INT(gs_staging_unpin_segment(p, i, &err), 0);
	CHECK_INT(gs_staging_unpin_segment(p, 0, &err), 0); /* twice: nothing more */
	CHECK_INT(gs_staging_wait_all(p, 5, &err), 0); /* the odd ones may still be populating */
	for (uint32_t i = 0; i < nsegs; i++) {
		CHECK(gs_staging_pinned(p, i) == (i % 2 == 1));
		CHECK(gs_staging_ready(p, i)); /* unpinned memory stays usable */
	}
	int unregs = 0;
	for (int i = 0; i < f.nregs; i++)
		unregs += f.unregs[i];
	CHECK_INT(unregs, 3);
	CHECK_INT(f.bad_unregs, 0);
	for (uint64_t off = 0; off < 11 * GS_MiB; off += gs_staging_segment_size(p))
		memset(gs_staging_ptr(p, off), (int)(off >> 20), GS_MIN(gs_staging_segment_size(p), 11 * GS_MiB - off));

	/* re-pin: only the unpinned segments, in the background, without populating again; waits per segment */
	f.block_all = true; /* every re-pin holds until released: which worker registers first is a race */
	f.released = false;
	CHECK_INT(gs_staging_repin_start(p, &err), 0);
	CHECK(!gs_staging_ready(p, 0));
	CHECK(gs_staging_ready(p, 1)); /* stayed pinned: ready at once */
	CHECK_INT(gs_staging_wait(p, 0, 0.05, &err), GS_E_TIMEOUT);
	fake_release(&f);
	CHECK_INT(gs_staging_wait_all(p, 5, &err), 0);
	f.block_all = false;
	for (uint32_t i = 0; i < nsegs; i++)
		CHECK(gs_staging_pinned(p, i));
	CHECK_INT(f.nregs, (int)nsegs + 3);
	for (uint64_t off = 0; off < 11 * GS_MiB; off += gs_staging_segment_size(p)) /* data kept */
		CHECK_INT(((uint8_t *)gs_staging_ptr(p, off))[0], (int)(off >> 20) & 0xff);
	struct gs_staging_report rep;
	gs_staging_get_report(p, &rep);
	CHECK_INT(rep.ready, nsegs);

	/* a failed re-pin is reported by the wait; a second re-pin retries it */
	CHECK_INT(gs_staging_unpin_segment(p, 3, &err), 0);
	f.fail_call = f.calls + 1;
	CHECK_INT(gs_staging_repin_start(p, &err), 0);
	CHECK_INT(gs_staging_wait(p, 3, 5, &err), GS_E_FAILURE);
	CHECK_INT(gs_staging_repin_start(p, &err), 0);
	CHECK_INT(gs_staging_wait(p, 3, 5, &err), 0);
	CHECK(gs_staging_pinned(p, 3));
	gs_staging_destroy(p);
	unregs = 0;
	for (int i = 0; i < f.nregs; i++)
		unregs += f.unregs[i];
	CHECK_INT(unregs, f.nregs);
	CHECK_INT(f.bad_unregs, 0);
}

/* Without a register callback (bounce mode): populated, never pinned, and the pin calls change nothing. */
/* Pages of [base, base + len) resident in memory (mincore); -1 if it cannot tell. */
static long resident_pages(const void *base, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t npages = len / (size_t)page;
	unsigned char *vec = calloc(npages, 1);
	long n = -1;
	if (vec && mincore((void *)base, len, vec) == 0)
		for (size_t k = n = 0; k < npages; k++)
			n += vec[k] & 1;
	free(vec);
	return n;
}

static void test_unregistered_pool(void)
{
	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 2, .no_hugetlb = true };
	struct gs_staging *p = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(4 * GS_MiB, &cfg, &ops, &p, &err), 0);
	if (!p)
		return;
	CHECK(gs_staging_registers(p));
	CHECK_INT(gs_staging_wait_all(p, 5, &err), 0);
	gs_staging_destroy(p);

	struct gs_staging_ops none = { 0 };
	CHECK_INT(gs_staging_create(5 * GS_MiB, &cfg, &none, &p, &err), 0);
	if (!p)
		return;
	CHECK(!gs_staging_registers(p));
	CHECK(!gs_staging_lazy(p));
	uint32_t nsegs = gs_staging_segments(p);
	CHECK_INT(nsegs, 3);
	CHECK_INT(gs_staging_wait_all(p, 5, &err), 0);
	long page = sysconf(_SC_PAGESIZE);
	for (uint32_t i = 0; i < nsegs; i++) {
		CHECK(!gs_staging_pinned(p, i));
		/* populated: every page of the segment is resident before anyone writes it */
		uint8_t *base = gs_staging_ptr(p, (uint64_t)i * gs_staging_segment_size(p));
		CHECK_INT(resident_pages(base, 2 * GS_MiB), 2 * GS_MiB / page);
	}
	CHECK_INT(gs_staging_set_pinned(p, true, &err), 0);
	CHECK_INT(gs_staging_unpin_segment(p, 1, &err), 0);
	CHECK_INT(gs_staging_repin_start(p, &err), 0);
	for (uint32_t i = 0; i < nsegs; i++) {
		CHECK(gs_staging_ready(p, i)); /* nothing to pin again: ready at once */
		CHECK(!gs_staging_pinned(p, i));
	}
	memset(gs_staging_ptr(p, 0), 0x77, 5 * GS_MiB - 4 * GS_MiB); /* usable memory */
	gs_staging_destroy(p);
	CHECK_INT(f.nregs, 2); /* only the first pool's two segments ever registered */
}

/* A lazy pool: ready at once, nothing resident until written, no workers; refused with a register callback. */
static void test_lazy_pool(void)
{
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 2, .no_hugetlb = true, .lazy = true };
	struct gs_staging_ops none = { 0 };
	struct gs_staging *p = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(5 * GS_MiB, &cfg, &none, &p, &err), 0);
	if (!p)
		return;
	CHECK(gs_staging_lazy(p));
	uint32_t nsegs = gs_staging_segments(p);
	CHECK_INT(nsegs, 3);
	for (uint32_t i = 0; i < nsegs; i++)
		CHECK(gs_staging_ready(p, i));
	CHECK_INT(gs_staging_wait_all(p, 0, &err), 0);
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *base = gs_staging_ptr(p, 2 * GS_MiB);
	CHECK_INT(resident_pages(base, 2 * GS_MiB), 0); /* nothing faulted in ahead */
	memset(base, 0x5a, 2 * GS_MiB);
	CHECK_INT(resident_pages(base, 2 * GS_MiB), 2 * GS_MiB / page);
	struct gs_staging_report r;
	gs_staging_get_report(p, &r);
	CHECK_INT(r.ready, 3);
	CHECK(r.populate_s == 0);
	CHECK(r.ready_wall_s >= 0 && r.ready_wall_s < 1);
	CHECK_INT(gs_staging_set_pinned(p, false, &err), 0); /* nothing to unpin */
	gs_staging_destroy(p);

	struct fake_reg f;
	struct gs_staging_ops ops;
	fake_reg_init(&f, &ops);
	p = NULL;
	CHECK_INT(gs_staging_create(4 * GS_MiB, &cfg, &ops, &p, &err), GS_E_USAGE);
	CHECK(p == NULL);
	CHECK_CONTAINS(err.msg, "cannot be pinned");
	CHECK_INT(f.calls, 0);
}

int main(void)
{
	RUN(test_sizes_and_ptr);
	RUN(test_hugetlb_fallback);
	RUN(test_concurrent_waits);
	RUN(test_timeout_and_failed_register);
	RUN(test_unpin_and_pin_again);
	RUN(test_unpin_segments_and_repin);
	RUN(test_unregistered_pool);
	RUN(test_lazy_pool);
	RUN(test_destroy_while_populating);
	RUN(test_out_of_memory);
	RUN(test_populate_speed);
	return TEST_SUMMARY();
}
