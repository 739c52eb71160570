/*
 * agent_ring.h - moving the app's GPU data between the GPU and an image
 * through a small ring of pinned host buffers, for `gpusnap dump` and
 * `gpusnap restore` (agent_image.c).
 *
 * Each of a few IO threads owns RING_DEPTH pinned buffers of one chunk each
 * (64 MiB at most): it claims the next chunk of the copy plan, starts its copy
 * on the chunk's lane and records an event; while the copy engine fills (or
 * drains) one buffer, the thread writes (or reads) another. Host memory
 * needed: threads x depth x chunk size, whatever the size of the GPU data.
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
#include "image/image.h"

struct gs_ring_stats {
	uint64_t ring_bytes; /* pinned host memory the ring held */
	unsigned threads;    /* IO threads used */
	double setup_s;      /* allocating and pinning the ring (the slowest thread's) */
};

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
int gs_ring_from_image(struct gs_agent *a, const struct gs_agent_held *h, struct gs_image *img,
		       struct gs_ring_stats *st, struct gs_err *err);

#endif
