/*
 * agent_ring.h - the agent's one transfer engine: moves the chunks of a copy
 * plan between the GPU and one "end" (staging memory, an image writer, an
 * image reader), or between two ends on the host. The engine knows chunks,
 * lanes, threads, pinned buffers and CUDA events; an end knows only where a
 * chunk's bytes go or come from (struct gs_ring_end, below), the way one
 * codec writes through Valkey's rio to files or memory alike. The lifecycle
 * (agent_lifecycle.c) picks the ends; the engine is the same for a suspend,
 * a dump, a resume and a restore.
 *
 * GPU <-> end, through a ring: each of a few IO threads owns RING_DEPTH
 * pinned buffers of one chunk each (64 MiB at most): it claims the next chunk
 * of the plan, starts its copy on the chunk's lane and records an event;
 * while the copy engine fills (or drains) one buffer, the thread hands
 * another to the end (or fills it from there). Host memory pinned: threads x
 * depth x chunk size, whatever the size of the GPU data. The buffers are set
 * up for one transfer (mapped, faulted in and pinned by each thread for
 * itself, freed before the call returns) or borrowed from a struct gs_ring
 * the caller keeps across transfers, which spares that setup on the critical
 * path.
 *
 * GPU <-> end, direct: an end whose memory is pinned (a staging pool in
 * pinned mode) gives the copy engine the chunk's own address; no ring buffer
 * and no host copy, and the end hears when each chunk's copy has completed.
 *
 * end -> end (host only): a staging pool written to an image, chunk by
 * chunk, from the pool's memory in place.
 *
 * Every CUDA call (registration, copies, events) is made on these threads or
 * the caller's, and has ended when the functions return; every thread they
 * start is joined before they return. On failure nothing is in flight any
 * more: towards the host the GPU memory is untouched; towards the GPU it
 * holds part of the data.
 */
#ifndef GPUSNAP_AGENT_AGENT_RING_H
#define GPUSNAP_AGENT_AGENT_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "common/err.h"
#include "core/fingerprint.h"
#include "core/protocol.h"
#include "core/staging.h"
#include "image/image.h"

struct gs_ring_stats {
	uint64_t ring_bytes; /* pinned host memory the ring held (0: direct) */
	unsigned threads;    /* IO threads used */
	double setup_s;      /* allocating and pinning the ring (the slowest thread's); 0 for a kept ring */
	/*
	 * Where the IO threads' time went, averaged over them: waiting for copy
	 * engines (the link is the bottleneck when this dominates), and the host
	 * side, the end's work (file I/O or memcpy: the host is, when that does).
	 */
	double wait_s;
	double host_s;
	double issue_s; /* starting copies and recording events */
	double run_s;   /* the transfer's wall time, threads started to threads joined */
	uint64_t zero_bytes; /* towards the GPU: bytes of all-zero chunks set, not copied (staging and image ends) */
};

/* Adds st to a reply: ring_setup, ring_wait, ring_host and ring_issue timings (nothing for a transfer that used no threads). */
void gs_ring_stats_report(const struct gs_ring_stats *st, struct gs_msg *reply);

/*
 * One end of a transfer. Every function may be called from several IO
 * threads at once, for different chunks; k is the chunk's index in h's plan.
 * They return 0 or a gs code with e set, and never call CUDA.
 */
struct gs_ring_end;
struct gs_ring_end_ops {
	/* Towards the host: chunk k's bytes are in buf (a ring buffer, or NULL: the chunk is all zero). */
	int (*put)(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, const void *buf, struct gs_err *e);
	/* Towards the GPU: fills buf with chunk k's bytes. */
	int (*get)(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, void *buf, struct gs_err *e);
	/*
	 * Optional: chunk k is all zero. Towards the GPU the GPU sets it (nothing
	 * is read); towards the host a chunk already known zero when the transfer
	 * claims it (found on the GPU, agent_zero_scan.h) is not copied at all.
	 */
	bool (*zero)(struct gs_ring_end *end, size_t k);
	/*
	 * Optional: chunk k's bytes in the end's own memory, waited for until
	 * usable (NULL with e set on failure). A direct end's memory is pinned:
	 * the copy engine reads or writes it there; for end -> end transfers the
	 * source is read there.
	 */
	void *(*at)(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, struct gs_err *e);
	/* Optional, direct ends: chunk k's copy has completed (in either direction). */
	int (*done)(struct gs_ring_end *end, const struct gs_agent_held *h, size_t k, struct gs_err *e);
};
struct gs_ring_end {
	const struct gs_ring_end_ops *ops;
	bool direct; /* the copy engine reaches the end's memory (at) without a ring */
};

/*
 * A staging pool as an end (GPUSNAP_STAGING_MODE): a pool that pins its
 * segments is direct; one that is only populated goes through the ring, with
 * a memcpy on the host. Each chunk waits for its pool segment first
 * (gs_staging_wait, timeout_s each; <= 0: no limit), so an on-demand pool can
 * still be populating.
 *
 * zero (NULL: off), one byte per chunk of the plan. Towards the host through
 * the ring, a chunk found all zero in its ring buffer is marked there and
 * nothing of it enters the pool (frameworks reserve much more GPU memory than
 * they fill, and fresh GPU memory reads as zero: that host memory is then
 * never taken); a chunk marked before the transfer (found on the GPU) is not
 * copied at all; towards the GPU a marked chunk is set to zero on the GPU
 * instead (cuMemsetD8Async, in order with the lane's copies).
 *
 * unpin (direct, towards the host): each segment is unpinned as soon as the
 * copies into it have completed (the driver's own checkpoint costs time per
 * pinned GiB), and gs_ring_staging_end_finish unpins the segments no chunk
 * reached (a reserved pool larger than the data).
 */
struct gs_ring_staging_end {
	struct gs_ring_end end;
	struct gs_staging *pool;
	double timeout_s;
	uint8_t *zero;
	atomic_uint_fast64_t zero_bytes;
	bool unpin;
	atomic_uint *seg_left; /* unpin: chunks per segment whose copy has not completed yet */
	atomic_int unpin_failed;
};
int gs_ring_staging_end(struct gs_ring_staging_end *e, const struct gs_agent_held *h, struct gs_staging *pool,
			double timeout_s, uint8_t *zero, bool unpin, struct gs_err *err);
/* After a transfer: unpins what the copies did not reach (unpin ends), frees the end's own memory. 0: all unpinned. */
int gs_ring_staging_end_finish(struct gs_ring_staging_end *e);

/*
 * An image as an end: a writer (towards the host; allocation id = region
 * index, offset within the region; checksummed by the writer) or a reader
 * (towards the GPU; its chunks must match h's plan one to one: check that
 * first; every chunk's checksum is verified as it is read).
 */
/* A chunk an incremental dump leaves in its parent image (agent_image.h): its index there + 1 (0: none), its CRC. */
struct gs_ring_parent_ref {
	uint64_t index1;
	uint32_t crc32c;
};

struct gs_ring_image_end {
	struct gs_ring_end end;
	struct gs_image_writer *w;
	struct gs_image *img;
	/* a writer's chunks known all zero before the transfer (found on the GPU; NULL: none): written as zero records */
	const uint8_t *known_zero;
	/*
	 * A writer's chunk fingerprints computed on the GPU before the transfer
	 * (agent_fingerprint.h; NULL, or {0, 0} for a chunk: none), recorded in
	 * the manifest; a chunk without one gets it computed from the bytes the
	 * transfer brought (core/fingerprint.h), on the IO thread that writes it.
	 */
	const struct gs_fp *fp;
	/*
	 * An incremental dump's chunks equal to the parent's (NULL: none): not
	 * copied (as known_zero ones), recorded as PARENT chunks with fp's
	 * fingerprint and the parent chunk's CRC.
	 */
	const struct gs_ring_parent_ref *parent_ref;
	/*
	 * A dump into a chunk store: the chunks whose object the store holds
	 * (claimed in it; agent_image.h), their CRC + 1 (NULL, or 0 for a
	 * chunk: none): not copied, recorded as STORED chunks with fp's
	 * fingerprint.
	 */
	const uint64_t *store_ref;
	/* a writer's bytes that crossed PCIe (chunks the transfer brought; atomic adds): what a dump copied */
	uint64_t copied_bytes;
};
void gs_ring_image_writer_end(struct gs_ring_image_end *e, struct gs_image_writer *w);
void gs_ring_image_reader_end(struct gs_ring_image_end *e, struct gs_image *img);

/*
 * A suspend split between host memory and a spill: each chunk goes
 * to (comes from) the staging end or the image end, as to_image[k] says
 * (decided at admission: gs_mover_take_pool_split). Towards the host the
 * image records the memory's chunks as ELSEWHERE, so it describes the whole
 * plan and is never taken for a whole image; towards the GPU to_image is
 * the image's chunks not flagged ELSEWHERE (gs_ring_split_from_image).
 * Through the ring only: the staging end must not be direct.
 */
struct gs_ring_split_end {
	struct gs_ring_end end;
	struct gs_ring_staging_end *mem;
	struct gs_ring_image_end *img;
	const uint8_t *to_image;
};
void gs_ring_split_end(struct gs_ring_split_end *e, struct gs_ring_staging_end *mem, struct gs_ring_image_end *img,
		       const uint8_t *to_image);
/* to_image (one byte per chunk of img) from an image's ELSEWHERE flags; malloc'd, NULL when out of memory */
uint8_t *gs_ring_split_from_image(const struct gs_image *img);

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
 * A ring for a later gs_ring_in of h's plan from an image, shaped as that
 * transfer would make its own, with its buffers mapped and faulted in (by as
 * many threads, joined before return) but not pinned: it makes no CUDA call,
 * so it can run while the driver still holds the process. The transfer pins
 * the buffers; gs_ring_destroy frees them (without a CUDA call if never
 * pinned). *out stays NULL when h has nothing to copy.
 */
int gs_ring_prepare(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring **out, struct gs_err *err);

/* IO threads for a transfer to (out) or from an image: GPUSNAP_IO_THREADS, else 8 out, one per CPU (8 to 32) in. */
unsigned gs_ring_image_threads(bool out);

/*
 * The transfers. The regions must be mapped and the app quiesced. ring: a
 * kept (or prepared) ring whose buffers hold the largest chunk, or NULL for
 * one set up for this transfer with `threads` threads (1 to 32); a direct end
 * takes no ring. out: GPU -> end; in: end -> GPU; host: from -> to, on the
 * host only (from must offer `at`), with `threads` threads.
 */
int gs_ring_out(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring_end *to, struct gs_ring *ring,
		unsigned threads, struct gs_ring_stats *st, struct gs_err *err);
int gs_ring_in(struct gs_agent *a, const struct gs_agent_held *h, struct gs_ring_end *from, struct gs_ring *ring,
	       unsigned threads, struct gs_ring_stats *st, struct gs_err *err);
int gs_ring_host(const struct gs_agent_held *h, struct gs_ring_end *from, struct gs_ring_end *to, unsigned threads,
		 struct gs_ring_stats *st, struct gs_err *err);

#endif
