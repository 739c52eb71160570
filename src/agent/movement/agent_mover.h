/*
 * agent_mover.h - what the agent's lifecycle (agent_lifecycle.h) moves and
 * where it keeps it: the app's releasable regions and their copy plan, the
 * release and re-creation of their physical memory at the same addresses,
 * the copy streams, and the host staging memory (reserved or on demand, in
 * bounce or pinned mode) with the copies into it and back through the
 * transfer engine (agent_ring.h). It decides nothing about states: every
 * call here does one thing and reports; the lifecycle orders them and undoes
 * them. All run with a->lock held, on the thread of a control request.
 */
#ifndef GPUSNAP_AGENT_AGENT_MOVER_H
#define GPUSNAP_AGENT_AGENT_MOVER_H

#include <stdbool.h>

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "core/protocol.h"

/* Reads GPUSNAP_RESERVE (bytes, e.g. "40G") and the staging settings. */
void gs_mover_init_from_env(struct gs_agent *a);
/*
 * What the mover hears from base (base/agent.h): a device's first use starts
 * filling the reserved pool, if one was asked for (not while the gate is
 * closed); a changed copy context drops its streams and the kept ring.
 */
extern const struct gs_agent_listener gs_mover_listener;
bool gs_mover_has_reserve(struct gs_agent *a);
/*
 * In a fork child (atfork handler, one thread): forgets the parent's reserved
 * pool, kept ring and helper threads without touching them. The pool keeps
 * its size setting, so a child that uses a GPU reserves a pool of its own.
 */
void gs_mover_forget_after_fork(void);

/* The chunk size of a dump's plan, and so of its image's chunks. */
#define GS_MOVER_IMAGE_CHUNK_BYTES (64ULL << 20)
/*
 * Lists the releasable regions and builds their copy plan in chunks of
 * chunk_bytes (0: the staging mode's), with the copy streams of every device
 * ready. No memory is taken yet.
 */
int gs_mover_plan(struct gs_agent *a, uint64_t chunk_bytes, struct gs_agent_held **out, struct gs_err *err);
/* Frees a plan, its pool (an on-demand one, in the background) and the app handles' copy windows. */
void gs_mover_free_held(struct gs_agent *a, struct gs_agent_held *h);

/*
 * Releases the physical memory of every region not yet released, in order;
 * stops at the first failure (fault point agent-release), leaving the regions
 * released so far marked released, and does not undo: the caller does.
 */
int gs_mover_release(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err);
/*
 * Re-creates the physical memory of every released region at its address,
 * all or nothing (fault point agent-recreate): on failure what it re-created
 * is released again. GS_E_NO_VRAM on a shortage.
 */
int gs_mover_recreate(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err);

/*
 * The staging pool for h: the zero scan first (bounce mode), then the
 * reserved pool when it holds h's plan, else one made for it once admitted:
 * the host memory it will take (the chunks not found zero) fits in what is
 * available less GPUSNAP_HOST_MEMORY_MARGIN, else GS_E_NO_SPACE, nothing
 * taken. Timings and counters go to reply.
 */
int gs_mover_take_pool(struct gs_agent *a, struct gs_agent_held *h, struct gs_msg *reply, struct gs_err *err);
/*
 * A pool for part of h (planned in the image's chunks) when host memory would
 * not hold all of it and a spill takes the rest: the zero scan, then the
 * plan's first chunks while they fit in what is available less the margin
 * (and GPUSNAP_HOST_MEMORY_LIMIT). *to_image (malloc'd, one byte per chunk):
 * 1 where the chunk goes to the spill. *to_image stays NULL, nothing taken,
 * when no split is made (pinned or populated-ahead staging, or not one chunk
 * fits): the caller spills the whole.
 */
int gs_mover_take_pool_split(struct gs_agent *a, struct gs_agent_held *h, uint8_t **to_image, struct gs_msg *reply,
			     struct gs_err *err);
/* The bytes of h's data its holder keeps: all but the zero chunks. */
uint64_t gs_mover_held_bytes(const struct gs_agent_held *h);
/* Frees h's staging pool now (a reserved one too: a dump must not carry it; it is made again after a resume). */
void gs_mover_drop_pool(struct gs_agent *a, struct gs_agent_held *h);
/*
 * Copies h's regions into its pool (out) or back (in) through the engine:
 * through the ring (bounce mode; zero chunks tracked) or straight into the
 * pinned pool (pinned mode; with unpin, each segment is unpinned as its
 * copies complete, and h->unpinned says so). Counters and timings go to
 * reply. On failure nothing is in flight; out leaves the GPU untouched (and
 * a reserved pool pinned again), in leaves part of the data on the GPU.
 */
int gs_mover_stage_out(struct gs_agent *a, struct gs_agent_held *h, double timeout_s, bool unpin,
		       struct gs_msg *reply, struct gs_err *err);
int gs_mover_stage_in(struct gs_agent *a, struct gs_agent_held *h, struct gs_msg *reply, struct gs_err *err);

/*
 * Background work around a cycle: join_background waits for the freeing of
 * an earlier pool and the build of the kept ring (their CUDA calls end
 * before a suspend or a dump replies); drop_reserve frees the reserved pool
 * and its ring, which a dump does not use and CRIU must not carry;
 * after_resume makes them again, in the background.
 */
void gs_mover_join_background(struct gs_agent *a);
void gs_mover_drop_reserve(struct gs_agent *a);
void gs_mover_after_resume(struct gs_agent *a);

#endif
