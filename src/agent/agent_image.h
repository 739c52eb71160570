/*
 * agent_image.h - the agent's part of `gpusnap dump` and `gpusnap restore`:
 * writing the data it holds while suspended (agent_mover.h: regions, plan,
 * staging pool) into the GPU part of an image, and reading it back into a
 * fresh staging pool before a resume. Runs on the control server's thread
 * inside the app; CUDA-free apart from what the staging pool registers.
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

#endif
