/*
 * agent_fingerprint.h - chunk fingerprints (core/fingerprint.h, FORMAT.md
 * 4.8.2) computed on the GPU where the chunks lie, before anything crosses
 * PCIe: for the manifest of a dump, for `restore --verify-gpu` after the
 * data is back, and for an incremental dump's comparison with its parent.
 *
 * A kernel of the agent's own, handwritten PTX loaded with cuModuleLoadData
 * into the copy context of each GPU for one pass and unloaded after it, as
 * the zero scan (agent_zero_scan.h) is: blocks (chunk, slice) add the
 * per-word terms of their share of a chunk's 16-byte words into two u64
 * sums with atomic adds (the sums do not depend on the order: the
 * fingerprint is defined that way), and the host finalizes each chunk's
 * sums with its length. What is read is what the copy reads (the zero
 * scan's rule); a chunk's last partial word is masked to its length. Each
 * pass also fingerprints its own table, whose bytes the host knows, and
 * compares with the CPU: a kernel that computes anything else is not
 * trusted. A GPU whose pass cannot run (no module support, a launch
 * refused, that self-check failed) gets no fingerprints, with a log line: the caller computes them on the CPU from
 * the bytes it copies (the dump), or says the check did not run (restore).
 */
#ifndef GPUSNAP_AGENT_AGENT_FINGERPRINT_H
#define GPUSNAP_AGENT_AGENT_FINGERPRINT_H

#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "core/fingerprint.h"
#include "core/protocol.h"

/*
 * With the gate closed and the contexts synchronized: fp[k] = the
 * fingerprint of chunk k of h's plan, computed on its GPU, for every chunk
 * not marked in skip (NULL: none; the all-zero ones, which have none) and
 * whose region is on the GPU; fp[k] stays {0, 0} for the rest and where a
 * GPU's pass failed. Returns the bytes fingerprinted; the time goes to reply
 * as "fingerprint" (reply NULL: not reported).
 */
uint64_t gs_fingerprint_gpu(struct gs_agent *a, const struct gs_agent_held *h, const uint8_t *skip, struct gs_fp *fp,
			    struct gs_msg *reply);

/*
 * restore --verify-gpu: with h's data just loaded from img (its chunks in
 * the plan's order, gs_agent_image_open_matching), every chunk the image
 * records a fingerprint for is fingerprinted on its GPU and compared.
 * GS_E_IMAGE naming the first chunk that differs, or for an image that
 * records no fingerprints; GS_E_AGENT where a GPU's pass could not run (the
 * check was asked for and cannot be made). The time and the chunks and
 * bytes checked go to reply (verify_gpu, verify_gpu_chunks,
 * verify_gpu_bytes).
 */
struct gs_image;
int gs_fingerprint_verify(struct gs_agent *a, const struct gs_agent_held *h, struct gs_image *img, struct gs_msg *reply,
			  struct gs_err *err);

#endif
