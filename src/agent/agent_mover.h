/*
 * agent_mover.h - the data mover: on suspend it quiesces the app (gate),
 * copies every releasable allocation into host staging memory over several
 * streams, and releases the physical GPU memory (addresses stay reserved);
 * on resume it re-creates the physical memory at the same addresses and
 * copies the data back. Runs on the control server's thread.
 */
#ifndef GPUSNAP_AGENT_AGENT_MOVER_H
#define GPUSNAP_AGENT_AGENT_MOVER_H

#include <stdbool.h>

#include "agent/agent.h"
#include "core/copy_plan.h"
#include "core/protocol.h"
#include "core/staging.h"

/*
 * What the agent holds while suspended: the regions it released (allocations
 * of its own and slabs; same addresses on resume), the copy plan that placed
 * them in staging memory, and the staging pool itself. pool is NULL when the
 * data lives only in an image (after a dump, before a restore's load).
 */
struct held_region {
	uint64_t va, size, reserved;
	CUmemGenericAllocationHandle handle;
	int device;
	bool is_slab;
	bool released;
	uint64_t app_handle; /* the app's own VMM handle (agent_app_vmm.h) copied through va; 0: the agent's memory */
};

struct gs_agent_held {
	struct held_region *regions;
	size_t nregions;
	struct gs_copy_plan plan;
	struct gs_staging *pool;
	bool pool_is_reserve;
	bool keep_context;
	bool unpinned; /* the pool's segments were unpinned for the driver's checkpoint */
	uint64_t bytes;
	/*
	 * Bounce staging: zero_chunks[k] is 1 when plan chunk k was all zero on
	 * the GPU, so it is not in the pool (agent_ring.h); NULL when none are
	 * known. zero_bytes: their total.
	 */
	uint8_t *zero_chunks;
	uint64_t zero_bytes;
};

/* A staging pool for bytes (on demand; its segments register with the driver as they fill). */
int gs_mover_make_pool(struct gs_agent *a, uint64_t bytes, struct gs_staging **out, struct gs_err *err);
/* Frees the held data's staging pool now (not a reserved pool: that one is kept). */
void gs_mover_drop_pool(struct gs_agent_held *h);

/* Reads GPUSNAP_RESERVE (bytes, e.g. "40G"): a staging pool kept ready for suspends. */
void gs_mover_init_from_env(struct gs_agent *a);
/* Called when a device is first used: starts filling the reserved pool, if one was asked for. */
void gs_mover_device_ready(struct gs_agent *a, struct gs_agent_device *d);
bool gs_mover_has_reserve(struct gs_agent *a);
/*
 * In a fork child (atfork handler, one thread): forgets the parent's reserved
 * pool, kept ring and helper threads without touching them. The pool keeps
 * its size setting, so a child that uses a GPU reserves a pool of its own.
 */
void gs_mover_forget_after_fork(void);

/*
 * The phases of a suspend, for callers that move the data their own way
 * (agent_image.c streams it to files). All run with a->lock held.
 * quiesce: closes the gate (no app thread in the driver) and synchronizes
 * every device; on failure the gate is open again. plan: lists the releasable
 * regions and builds their copy plan (no staging pool yet; lanes created).
 * release: frees the physical memory of every region; on failure what was
 * released is re-created (and refilled from h->pool when there is one).
 * recreate: re-creates physical memory at the same addresses, all or nothing
 * (GS_E_NO_VRAM on a shortage).
 */
/* The chunk size of a dump's plan, and so of its image's chunks. */
#define GS_MOVER_IMAGE_CHUNK_BYTES (64ULL << 20)
int gs_mover_quiesce(struct gs_agent *a, double timeout_s, struct gs_err *err);
int gs_mover_plan(struct gs_agent *a, uint64_t chunk_bytes, struct gs_agent_held **out, struct gs_err *err);
int gs_mover_release(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err);
int gs_mover_recreate(struct gs_agent *a, struct gs_agent_held *h, struct gs_err *err);
/* Drops a plan (and the app handles' copy windows it made): after a failure, or after a resume. */
void gs_mover_free_held(struct gs_agent *a, struct gs_agent_held *h);

/*
 * For a dump that streams the data without staging (agent_image.c), with
 * a->lock held: join_background waits for the background freeing of an
 * earlier pool (its CUDA calls must end before the DUMP reply); drop_reserve
 * frees the reserved pool, which CRIU must not carry (resume makes it again).
 */
void gs_mover_join_background(struct gs_agent *a);
void gs_mover_drop_reserve(struct gs_agent *a);

/* Timings and counters go into reply (named fields); the gate stays closed on success. */
int gs_mover_suspend(struct gs_agent *a, double timeout_s, bool keep_context, struct gs_msg *reply, struct gs_err *err);
/* Re-creates and refills the released memory, then opens the gate. */
int gs_mover_resume(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err);

#endif
