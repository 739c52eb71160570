/*
 * agent_image.h - the agent's part of `gpusnap dump` and `gpusnap restore`:
 * writing the data it holds while suspended (agent_mover.h: regions, plan,
 * staging pool) into the GPU part of an image, and reading it back; and the
 * streamed dump and restore, which move the data between the GPU and the
 * image through a small pinned ring (agent_ring.h) with no staging pool.
 * Runs on the control server's thread inside the app.
 */
#ifndef GPUSNAP_AGENT_AGENT_IMAGE_H
#define GPUSNAP_AGENT_AGENT_IMAGE_H

#include "agent/agent.h"
#include "core/protocol.h"

/*
 * Writes a->held (state SUSPENDED or DATA_RELEASED, pool present) as a GPU
 * image into gpu_dir, an empty temporary directory that the gpusnap command
 * created and publishes later (image.h: gs_image_tmp_create,
 * gs_image_writer_open_in, gs_image_writer_seal); the image is sealed when
 * this returns 0. A cpu/ already in gpu_dir marks it as holding CPU state. With
 * drop_staging the pool is destroyed afterwards, so a CRIU dump of the process
 * does not carry the data a second time. Timings/counters go into reply.
 */
int gs_agent_image_save(struct gs_agent *a, const char *gpu_dir, bool drop_staging, struct gs_msg *reply,
			struct gs_err *err);
/*
 * Reads the GPU image at gpu_dir into a new staging pool for a->held (whose
 * regions must match the image's allocations: same addresses and sizes),
 * verifying every chunk's checksum; after it, gs_mover_resume copies to the GPU.
 */
int gs_agent_image_load(struct gs_agent *a, const char *gpu_dir, struct gs_msg *reply, struct gs_err *err);

/*
 * The streamed dump of a running process (state RUNNING): quiesces the app,
 * plans the copy, streams every chunk from the GPU through a small pinned
 * ring into a GPU image in gpu_dir (as for gs_agent_image_save) and seals it,
 * then releases the GPU memory: the agent is SUSPENDED with its data only in
 * the image (held->pool NULL). No staging pool: host memory needed is the
 * ring's (agent_ring.h). On failure nothing was released (or what was is
 * refilled from the sealed image), the gate is open again and the app runs
 * on; the caller discards gpu_dir. Every CUDA call has ended when it returns.
 */
int gs_agent_image_dump_running(struct gs_agent *a, const char *gpu_dir, double timeout_s, struct gs_msg *reply,
				struct gs_err *err);
/*
 * Brings the data of a suspended process back from the image at gpu_dir
 * before gs_mover_resume opens the gate. Data only in the image (pool NULL):
 * re-creates the physical memory and streams the chunks through the ring to
 * the GPU, reading, checksumming and copying at once; on failure the memory
 * is released again, so the process stays suspended and a retry starts over.
 * Data still in a staging pool: gs_agent_image_load.
 */
/*
 * PREPARE: when suspended with the data in an image (restored by CRIU, the
 * driver about to restore the CUDA state), starts a thread that maps and
 * faults in the copy ring the restore will use; makes no CUDA call and
 * replies at once. The restore joins the thread and only pins the ring.
 */
int gs_agent_image_prepare(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err);
int gs_agent_image_restore(struct gs_agent *a, const char *gpu_dir, struct gs_msg *reply, struct gs_err *err);

#endif
