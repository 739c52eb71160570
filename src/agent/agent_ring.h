/*
 * agent_ring.h - moving the app's GPU data between the GPU and host memory
 * through a small ring of pinned host buffers: to and from an image for
 * `gpusnap dump` and `gpusnap restore` (agent_image.c), and to and from an
 * unpinned staging pool for a suspend in bounce mode (agent_mover.c,
 * GPUSNAP_STAGING_MODE=bounce).
 *
 * Each of a few IO threads owns RING_DEPTH pinned buffers of one chunk each
 * (64 MiB at most): it claims the next chunk of the copy plan, starts its copy
 * on the chunk's lane and records an event; while the copy engine fills (or
 * drains) one buffer, the thread writes (or reads) another: to a file, or with
 * memcpy to the staging pool. Host memory pinned: threads x depth x chunk
 * size, whatever the size of the GPU data.
 *
 * The buffers are either set up for one transfer (mapped, faulted in and
 * pinned by each thread for itself, freed before the call returns) or
 * borrowed from a struct gs_ring the caller keeps across transfers, which
 * spares that setup on the critical path.
 *
 * Every CUDA call (registration, copies, events) is made on these threads or
 * the caller's, and has ended when the functions return; every thread they
 * start is joined before they return.
 */
#ifndef GPUSNAP_AGENT_AGENT_RING_H
#define GPUSNAP_AGENT_AGENT_RING_H

#include <stdint.h>

#include "agent/agent.h"
#include "agent/agent_mover.h"
#include "common/err.h"
#include "core/protocol.h"
#include "core/staging.h"
#include "image/image.h"

struct gs_ring_stats {
	uint64_t ring_bytes; /* pinned host memory the ring held */
	unsigned threads;    /* IO threads used */
	double setup_s;      /* allocating and pinning the ring (the slowest thread's); 0 for a kept ring */
	/*
	 * Where the IO threads' time went, averaged over them: waiting for copy
	 * engines (the link is the bottleneck when this dominates), and the host
	 * side, file I/O or memcpy (the host is, when that does).
	 */
	double wait_s;
	double host_s;
	double issue_s; /* starting copies and recording events */
	double run_s;   /* the transfer's wall time, threads started to threads joined */
	uint64_t zero_bytes; /* staging transfers: bytes of all-zero chunks, not copied (see gs_ring_to_staging) */
};

/* Adds st to a reply: ring_setup, ring_wait, ring_host and ring_issue timings (nothing for a transfer that used no ring). */
void gs_ring_stats_report(const struct gs_ring_stats *st, struct gs_msg *reply);

/*
 * A ring kept across transfers: `threads` sets of RING_DEPTH pinned buffers
 * of buf_size bytes (rounded up to 2 MiB), set up by `threads` threads in
 * parallel (their signals blocked). Needs a device in use (its context makes
 * the PORTABLE registrations). gs_ring_destroy unpins and unmaps it (no
 * transfer may be using it); NULL is ignored.
 */
struct gs_ring;
int gs_ring_create(struct gs_agent *a, unsigned threads, uint64_t buf_size, struct gs_ring **out, struct gs_err *err);
void gs_ring_destroy(struct gs_ring *r);
uint64_t gs_ring_bytes(const struct gs_ring *r);

/*
 * Copies every chunk of h's plan from the GPU into w (allocation id = region
 * index, offset within the region), checksummed by the writer. The regions
 * must be mapped and the app quiesced. On failure the writer is failed too
 * (abort it); the GPU memory is untouched.
 */
int gs_ring_to_image(struct gs_agent *a, const struct gs_agent_held *h, struct gs_image_writer *w,
		     struct gs_ring_stats *st, struct gs_err *err);
/*
 * Reads chunk k of img (whose chunks match h's plan one to one: check that
 * first) into a buffer, verifying its checksum, and copies it to the GPU at
 * plan chunk k's address, for every k. The regions must be mapped. On failure
 * the GPU memory holds part of the data (nothing is in flight any more).
 */
int gs_ring_from_image(struct gs_agent *a, const struct gs_agent_held *h, struct gs_image *img, struct gs_ring *ring,
		       struct gs_ring_stats *st, struct gs_err *err);
/*
 * A ring for a later gs_ring_from_image of h's plan, shaped as that transfer
 * would make its own, with its buffers mapped and faulted in (by as many
 * threads, joined before return) but not pinned: it makes no CUDA call, so it
 * can run while the driver still holds the process. The transfer pins the
 * buffers; gs_ring_destroy frees them (without a CUDA call if never pinned).
 * *out stays NULL when h has nothing to copy.
 */
int gs_ring_prepare(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring **out, struct gs_err *err);

/*
 * The staging side, for a pool that is not pinned: every chunk of h's plan
 * goes GPU -> ring buffer -> pool at the chunk's staging offset (to_staging),
 * or pool -> ring buffer -> GPU (from_staging). Each chunk waits for its
 * pool segment first (gs_staging_wait, timeout_s each; < 0: no limit), so an
 * on-demand pool can still be populating. ring: a kept ring whose buffers
 * hold the largest chunk, or NULL for one set up for this transfer with
 * `threads` threads (1 to 32). The memcpy is the CPU's share of the work:
 * as many threads as the staging pool's workers suit it. On failure nothing
 * is in flight any more; to_staging leaves the GPU memory untouched,
 * from_staging leaves part of the data on the GPU (the pool keeps all of it).
 *
 * zero (NULL: off), one byte per chunk of the plan: to_staging sets it for
 * every chunk whose bytes were all zero when they reached the ring buffer,
 * and copies nothing of those into the pool (frameworks reserve much more
 * GPU memory than they fill, and fresh GPU memory reads as zero: that host
 * memory is then never taken); from_staging sets those chunks to zero on the
 * GPU (cuMemsetD8Async, in order with the lane's copies) instead of copying.
 * st->zero_bytes says how many bytes that was.
 */
int gs_ring_to_staging(struct gs_agent *a, const struct gs_agent_held *h, struct gs_staging *pool,
		       struct gs_ring *ring, unsigned threads, double timeout_s, uint8_t *zero, struct gs_ring_stats *st,
		       struct gs_err *err);
int gs_ring_from_staging(struct gs_agent *a, const struct gs_agent_held *h, struct gs_staging *pool,
			 struct gs_ring *ring, unsigned threads, const uint8_t *zero, struct gs_ring_stats *st,
			 struct gs_err *err);

#endif
