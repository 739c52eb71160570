/*
 * agent_image.h - the agent's side of the GPU image (docs/FORMAT.md): its
 * held regions described as an image's allocations (one per region, id = its
 * index; one chunk per plan chunk), the check that an image is this
 * process's, and the copy ring a restore gets ready in advance. Which data
 * goes where, and when, is agent_lifecycle.c's; the bytes move through the
 * engine's image ends (agent_ring.h).
 *
 * The image lives in a temporary directory that the gpusnap command created
 * and holds locked (image.h: gs_image_tmp_create); the agent writes and seals
 * it, the command publishes it once CRIU succeeded. All of these run with
 * a->lock held on the thread of a control request.
 */
#ifndef GPUSNAP_AGENT_AGENT_IMAGE_H
#define GPUSNAP_AGENT_AGENT_IMAGE_H

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "core/fingerprint.h"
#include "core/protocol.h"
#include "image/image.h"

/*
 * A writer of an agent image into gpu_dir (an empty directory), naming this
 * process as its source, with the GPUs in use and h's regions (h may be NULL:
 * none) described. A cpu/ already in gpu_dir marks it as holding CPU state.
 * o->cached: through the page cache, and seal leaves the data files' fsync
 * to the publish. On failure *w may be set: the caller aborts it.
 */
int gs_agent_image_open_writer(struct gs_agent *a, struct gs_agent_held *h, const char *gpu_dir, const struct gs_dump_opts *o,
			       struct gs_image_writer **w, struct gs_err *err);
/* The same, name (if not NULL) naming the directory in messages instead of gpu_dir (a descriptor's path). */
int gs_agent_image_open_writer_named(struct gs_agent *a, struct gs_agent_held *h, const char *gpu_dir,
				     const char *name, const struct gs_dump_opts *o, struct gs_image_writer **w,
				     struct gs_err *err);
/*
 * An incremental dump (o->parent, dump --parent): opens the parent image
 * (its chain checked, image.h), makes w an image of it, and sets refs[k]
 * (h's plan order, calloc'd here; NULL when o->parent is NULL) for every
 * chunk not in zero whose GPU fingerprint fp[k] equals the parent's chunk at
 * the same address and length: such chunks are not copied (agent_ring.h,
 * parent_ref). A parent of another process is GS_E_IMAGE. The chunks and
 * bytes left in the parent go to reply (parent_chunks, parent_bytes).
 */
struct gs_ring_parent_ref;
int gs_agent_image_parent(struct gs_image_writer *w, const struct gs_agent_held *h, const struct gs_dump_opts *o,
			  const uint8_t *zero, const struct gs_fp *fp, struct gs_ring_parent_ref **refs, struct gs_msg *reply,
			  struct gs_err *err);
/*
 * A dump into a chunk store (o->store, dump --store; image/store.h): opens
 * the store (*store, closed by the caller after w is sealed or aborted),
 * attaches to the dump's ref the command made (o->store_ref), makes w write
 * into it, and claims in it every chunk not in zero whose GPU fingerprint
 * fp[k] and length name an object the store holds: its ref lists them
 * before they are found there (gc keeps them), and refs[k] (h's plan
 * order, calloc'd here) gets its CRC + 1. Such chunks are not copied
 * (agent_ring.h, store_ref); the others are copied and written into the
 * store by w where it lacks them. The chunks and bytes left in the store go
 * to reply (store_chunks, store_bytes). Without o->store: nothing, NULLs.
 */
struct gs_store;
int gs_agent_image_store(struct gs_image_writer *w, const struct gs_agent_held *h, const struct gs_dump_opts *o,
			 const uint8_t *zero, const struct gs_fp *fp, struct gs_store **store, uint64_t **refs,
			 struct gs_msg *reply, struct gs_err *err);
/* Seals *w (consumed, set to NULL whatever the outcome), with its statistics taken before. */
int gs_agent_image_seal(struct gs_image_writer **w, struct gs_image_writer_stats *st, struct gs_err *err);
/* Opens the agent image at gpu_dir and checks that it holds exactly h's regions and plan (GS_E_IMAGE if not). */
int gs_agent_image_open_matching(const struct gs_agent_held *h, const char *gpu_dir, struct gs_image **img,
				 struct gs_err *err);

/*
 * PREPARE: starts a thread (owned here, joined by take_prepared or the next
 * prepare) that maps and faults in the copy ring a restore of h will use; it
 * makes no CUDA call, so it may run while the driver still holds the process.
 * Replies at once. take_prepared joins it and returns its ring if it was made
 * for h (else frees it; NULL when there is none).
 */
int gs_agent_image_prepare(struct gs_agent *a, const struct gs_agent_held *h, struct gs_msg *reply,
			   struct gs_err *err);
struct gs_ring *gs_agent_image_take_prepared(const struct gs_agent_held *h);

#endif
