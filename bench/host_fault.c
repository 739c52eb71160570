/*
 * host_fault.c - how fast this machine hands out fresh host memory, the limit
 * of an on-demand suspend (issue 4): N threads fault in SIZE bytes of new
 * anonymous memory the way the staging pool does (256 MiB segments claimed by
 * the next free thread, populated in STEP pieces), with transparent huge pages
 * asked for, refused, or hugetlb pages, or by copying into the fresh pages
 * directly. Prints one line per run: mode, threads, GB/s, the part that
 * ended up in huge pages.
 *
 * usage: host_fault SIZE_GIB THREADS MODE [STEP_MIB]
 *   MODE: thp (MADV_HUGEPAGE + MADV_POPULATE_WRITE), 4k (MADV_NOHUGEPAGE +
 *         populate), hugetlb (MAP_HUGETLB + populate), copy (MADV_HUGEPAGE,
 *         memcpy of a warm 4 MiB buffer into the fresh pages), copy-stream
 *         (the same with non-temporal stores, gs_host_copy_stream), shm (pwrite of
 *         that buffer into a memfd per segment: tmpfs does not zero pages a
 *         write fills, so allocation and copy are one pass), reserve (the
 *         memory populated first, untimed, as a reserved pool is; then each
 *         thread copies its own warm 4 MiB buffer into it with memcpy: the
 *         host side of a bounce suspend into a reserved pool), reserve-stream
 *         (the same with non-temporal stores, gs_host_copy_stream)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/host_copy.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MiB (1024ull * 1024)
#define SEGMENT (256 * MiB)

enum mode { MODE_THP, MODE_4K, MODE_HUGETLB, MODE_COPY, MODE_COPY_STREAM, MODE_SHM, MODE_RESERVE, MODE_RESERVE_STREAM };

struct run {
	uint8_t *base;
	uint64_t size, step;
	enum mode mode;
	atomic_uint_fast64_t next; /* next segment offset to claim */
	uint8_t *warm;             /* copy and shm modes: the source, in cache */
	uint8_t **thread_warm;     /* reserve modes: each thread's own source */
	atomic_int next_thread;
	int *fds;                  /* shm mode: one memfd per segment */
	atomic_int failed;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
	struct run *r = arg;
	const uint8_t *own = r->thread_warm ? r->thread_warm[atomic_fetch_add(&r->next_thread, 1)] : NULL;
	for (;;) {
		uint64_t seg = atomic_fetch_add(&r->next, SEGMENT);
		if (seg >= r->size)
			return NULL;
		uint64_t end = seg + SEGMENT < r->size ? seg + SEGMENT : r->size;
		for (uint64_t off = seg; off < end; off += r->step) {
			uint64_t n = end - off < r->step ? end - off : r->step;
			if (r->mode == MODE_SHM) {
				/* full pages written into tmpfs are not zeroed first: one pass */
				int fd = r->fds[seg / SEGMENT];
				for (uint64_t k = 0; k < n; k += 4 * MiB) {
					size_t len = n - k < 4 * MiB ? n - k : 4 * MiB;
					if (pwrite(fd, r->warm, len, (off_t)(off - seg + k)) != (ssize_t)len) {
						perror("pwrite");
						atomic_store(&r->failed, 1);
						return NULL;
					}
				}
			} else if (r->mode == MODE_COPY || r->mode == MODE_COPY_STREAM) {
				for (uint64_t k = 0; k < n; k += 4 * MiB) {
					size_t len = n - k < 4 * MiB ? n - k : 4 * MiB;
					if (r->mode == MODE_COPY)
						memcpy(r->base + off + k, r->warm, len);
					else
						gs_host_copy_stream(r->base + off + k, r->warm, len);
				}
			} else if (r->mode == MODE_RESERVE || r->mode == MODE_RESERVE_STREAM) {
				for (uint64_t k = 0; k < n; k += 4 * MiB) {
					size_t len = n - k < 4 * MiB ? n - k : 4 * MiB;
					if (r->mode == MODE_RESERVE)
						memcpy(r->base + off + k, own, len);
					else
						gs_host_copy_stream(r->base + off + k, own, len);
				}
			} else if (madvise(r->base + off, n, MADV_POPULATE_WRITE)) {
				perror("madvise(MADV_POPULATE_WRITE)");
				atomic_store(&r->failed, 1);
				return NULL;
			}
		}
	}
}

/* Runs the workers over the whole area once: 0, or 1 if a thread could not start. */
static int run_workers(struct run *r, pthread_t *tid, int threads)
{
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, r)) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	return 0;
}

/* AnonHugePages of this process, in MiB (the part of the pool in transparent huge pages). */
static long anon_huge_mib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: host_fault SIZE_GIB THREADS thp|4k|hugetlb|copy|copy-stream|shm|reserve|reserve-stream [STEP_MIB]\n");
		return 2;
	}
	struct run r = { .size = strtoull(argv[1], NULL, 10) << 30, .step = 4 * MiB };
	int threads = atoi(argv[2]);
	const char *m = argv[3];
	r.mode = !strcmp(m, "4k")	 ? MODE_4K
		 : !strcmp(m, "hugetlb") ? MODE_HUGETLB
		 : !strcmp(m, "copy")	 ? MODE_COPY
		 : !strcmp(m, "copy-stream") ? MODE_COPY_STREAM
		 : !strcmp(m, "shm")	 ? MODE_SHM
		 : !strcmp(m, "reserve") ? MODE_RESERVE
		 : !strcmp(m, "reserve-stream") ? MODE_RESERVE_STREAM
					 : MODE_THP;
	if (argc > 4)
		r.step = strtoull(argv[4], NULL, 10) * MiB;
	if (!r.size || threads < 1 || threads > 1024 || !r.step) {
		fprintf(stderr, "host_fault: bad arguments\n");
		return 2;
	}
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (r.mode == MODE_HUGETLB ? MAP_HUGETLB : 0);
	uint8_t *raw = mmap(NULL, r.size + 2 * MiB, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (raw == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	r.base = (uint8_t *)(((uintptr_t)raw + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
	if (r.mode != MODE_HUGETLB)
		madvise(r.base, r.size, r.mode == MODE_4K ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
	uint64_t nseg = (r.size + SEGMENT - 1) / SEGMENT;
	if (r.mode == MODE_SHM) {
		r.fds = calloc(nseg, sizeof(int));
		for (uint64_t i = 0; r.fds && i < nseg; i++)
			if ((r.fds[i] = memfd_create("host_fault", 0)) < 0) {
				perror("memfd_create");
				return 1;
			}
		if (!r.fds)
			return 1;
	}
	if (r.mode == MODE_COPY || r.mode == MODE_COPY_STREAM || r.mode == MODE_SHM) {
		r.warm = aligned_alloc(2 * MiB, 4 * MiB);
		if (!r.warm)
			return 1;
		memset(r.warm, 0x5a, 4 * MiB);
	}
	long huge_before = anon_huge_mib();
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	if (!tid)
		return 1;
	if (r.mode == MODE_RESERVE || r.mode == MODE_RESERVE_STREAM) {
		/* the pool as a reserve is when a suspend comes: populated, untimed */
		enum mode copy_mode = r.mode;
		r.mode = MODE_THP;
		if (run_workers(&r, tid, threads))
			return 1;
		r.mode = copy_mode;
		atomic_store(&r.next, 0);
		r.thread_warm = calloc((size_t)threads, sizeof(*r.thread_warm));
		for (int i = 0; r.thread_warm && i < threads; i++) {
			r.thread_warm[i] = aligned_alloc(2 * MiB, 4 * MiB);
			if (!r.thread_warm[i])
				return 1;
			memset(r.thread_warm[i], 0x5a + i, 4 * MiB);
		}
		if (!r.thread_warm)
			return 1;
	}
	double t0 = now();
	if (run_workers(&r, tid, threads))
		return 1;
	double s = now() - t0;
	long huge = anon_huge_mib() - huge_before;
	printf("host_fault %s threads=%d step=%lluMiB size=%lluGiB: %.2f s, %.1f GB/s, huge pages %ld MiB (%.0f%%)\n", m,
	       threads, (unsigned long long)(r.step / MiB), (unsigned long long)(r.size >> 30), s,
	       (double)r.size / s / 1e9, r.mode == MODE_HUGETLB ? (long)(r.size / MiB) : huge,
	       r.mode == MODE_HUGETLB ? 100.0 : 100.0 * (double)huge * (double)MiB / (double)r.size);
	munmap(raw, r.size + 2 * MiB);
	for (uint64_t i = 0; r.fds && i < nseg; i++)
		close(r.fds[i]);
	free(r.fds);
	free(tid);
	free(r.warm);
	for (int i = 0; r.thread_warm && i < threads; i++)
		free(r.thread_warm[i]);
	free(r.thread_warm);
	return atomic_load(&r.failed);
}
