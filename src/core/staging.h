/*
 * staging.h - host memory that holds GPU data while a process is suspended.
 *
 * Getting host memory is the hidden cost of a suspend: fresh pages fault in
 * slowly, a few GB/s per thread, and pinning after the fact is cheap only for
 * memory already populated. A pool is cut into segments (default 256 MiB).
 * Each segment is mapped at once (so running out of memory is reported by
 * gs_staging_create), with 2 MiB hugetlb pages when the system has free ones
 * (MAP_HUGETLB | MAP_HUGE_2MB; after the first refusal the rest use normal
 * pages), else as anonymous memory aligned to 2 MiB with MADV_HUGEPAGE. Then
 * the pool's worker threads populate the segments in order
 * (MADV_POPULATE_WRITE, or a write per page on kernels before 5.14), call
 * the register callback (the CUDA layer passes cuMemHostRegister) and mark
 * each one ready.
 *
 * A lazy pool (config.lazy) skips the workers: its pages fault in as the
 * copies write them.
 *
 * Two uses, one mechanism:
 *  - reserved: `gpusnap run --reserve 40G` creates the pool at agent start
 *    and keeps it across suspend/resume cycles; by the time of a suspend it
 *    is ready and copies run at line rate.
 *  - on demand: a suspend creates the pool for what it needs and copies
 *    segment k while the workers populate k+1..k+W (wait per segment).
 * A pool does not grow: a suspend that needs more than a reserved pool holds
 * creates a second pool for the rest (its staging offsets start at 0).
 *
 * Segments are separate mappings: a copy must not cross a segment boundary
 * (copy_plan.h's staging_segment does this). gs_staging_ptr turns a staging
 * offset into an address. They are MADV_DONTFORK: a fork child of the app has
 * none of them (and its agent forgets the pool).
 *
 * Ownership and threads: the pool owns its mappings and its W worker threads
 * (all signals blocked; a worker exits when no segment is left). gs_staging_destroy stops the workers (a segment being
 * populated stops within one 32 MiB step), unregisters what was registered
 * and unmaps everything; no other call may run on the pool during or after
 * destroy. All other functions may be called from any thread. The register
 * callbacks run on worker threads (register) or the destroying thread
 * (unregister) and must not call back into the pool.
 */
#ifndef GPUSNAP_CORE_STAGING_H
#define GPUSNAP_CORE_STAGING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

struct gs_staging_ops {
	/* Pins [addr, addr + len) for DMA; 0 on success. NULL: no registering. */
	int (*reg)(void *ctx, void *addr, uint64_t len);
	/* Undoes reg. Called only for segments reg succeeded on. */
	void (*unreg)(void *ctx, void *addr, uint64_t len);
	void *ctx;
	/* For tests: replaces mmap(2) (same contract). NULL: the system's. */
	void *(*mmap_fn)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
};

struct gs_staging_config {
	uint64_t segment_size; /* 0: 256 MiB; rounded up to 2 MiB */
	int workers;           /* populating threads; 0: 4 */
	bool no_hugetlb;       /* do not try MAP_HUGETLB */
	/*
	 * Populate nothing ahead: every segment is ready at once and its pages
	 * fault in on the first write to them (the copy into the pool does that).
	 * Faults on separate pages run in parallel under per-VMA locks, where
	 * MADV_POPULATE_WRITE holds the process's mmap lock: copying into fresh
	 * pages runs as fast as populating alone, and populating then copying
	 * pays for both (bench/host_fault). No workers are started. Not with a register
	 * callback (pinning would populate anyway): GS_E_USAGE.
	 */
	bool lazy;
};

struct gs_staging_report {
	uint64_t bytes;          /* pool size as asked */
	uint64_t mapped_bytes;   /* what is mapped (segments rounded to 2 MiB) */
	uint64_t hugetlb_bytes;  /* of which hugetlb pages */
	const char *page_kind;   /* "huge", "normal" or "mixed" */
	uint32_t segments, ready, failed;
	double populate_s;       /* thread-seconds spent populating */
	double register_s;       /* thread-seconds spent in reg */
	double ready_wall_s;     /* from create until every segment was done; 0 while not */
};

struct gs_staging;

/*
 * Maps size bytes (> 0) and starts populating. GS_E_NO_SPACE naming host
 * memory when a segment cannot be mapped (nothing is left mapped then),
 * GS_E_USAGE for a bad size, GS_E_FAILURE otherwise.
 */
int gs_staging_create(uint64_t size, const struct gs_staging_config *cfg, const struct gs_staging_ops *ops,
		      struct gs_staging **out, struct gs_err *err);
void gs_staging_destroy(struct gs_staging *p);

/*
 * Waits until segment seg is populated and registered. 0 when ready;
 * GS_E_TIMEOUT after timeout_s (< 0: no limit); the segment's error
 * (GS_E_NO_SPACE, GS_E_FAILURE) if it failed; GS_E_USAGE past the end.
 */
int gs_staging_wait(struct gs_staging *p, uint32_t seg, double timeout_s, struct gs_err *err);
/* Waits for every segment (timeout_s for all together). */
int gs_staging_wait_all(struct gs_staging *p, double timeout_s, struct gs_err *err);
/* True if segment seg is ready now (no waiting). */
bool gs_staging_ready(struct gs_staging *p, uint32_t seg);

/* Host address of a staging offset; NULL past the end. Valid until destroy. */
void *gs_staging_ptr(struct gs_staging *p, uint64_t offset);
uint64_t gs_staging_size(struct gs_staging *p);
uint64_t gs_staging_segment_size(struct gs_staging *p);
uint32_t gs_staging_segments(struct gs_staging *p);
/*
 * Unpins (pinned = false) or pins again every segment and waits until that is
 * done (pinning runs on the pool's workers); waits for population first.
 * Pinned host memory costs the driver time in its own checkpoint and restore,
 * in proportion to its size, so the agent unpins a pool while the process is
 * checkpointed (segment by segment, below) and pins it again in one go after
 * a failed suspend.
 */
int gs_staging_set_pinned(struct gs_staging *p, bool pinned, struct gs_err *err);
/*
 * The pipelined form of the above, so unpinning overlaps the copy out and
 * pinning the copy in. unpin_segment: waits until segment seg is ready, then
 * unregisters it (it stays ready: unpinned memory is still usable). Safe from
 * any thread, one call per segment at a time. repin_start: waits for any
 * population to end, marks every unpinned segment not ready and lets the
 * pool's workers register them again in order; gs_staging_wait(seg) then
 * waits for segment seg, as after create. pinned: whether seg is registered.
 */
int gs_staging_unpin_segment(struct gs_staging *p, uint32_t seg, struct gs_err *err);
int gs_staging_repin_start(struct gs_staging *p, struct gs_err *err);
bool gs_staging_pinned(struct gs_staging *p, uint32_t seg);
/*
 * Whether the pool pins its segments at all (made with a register callback).
 * A pool without one is only populated: DMA to and from it goes through a
 * pinned bounce buffer (the agent's bounce mode, agent_ring.h).
 */
bool gs_staging_registers(const struct gs_staging *p);
/* Whether the pool was made lazy (config.lazy): its pages are fresh until the copies write them. */
bool gs_staging_lazy(const struct gs_staging *p);
void gs_staging_get_report(struct gs_staging *p, struct gs_staging_report *r);

#endif
