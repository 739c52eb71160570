/*
 * agent_zero_scan.h - finding a suspend's all-zero chunks on the GPU, before
 * anything crosses PCIe.
 *
 * Frameworks take far more GPU memory than they write (JAX takes 75% of the
 * GPU at start: t68's process held 63.8 GB, 58.5 GB of it never written),
 * and fresh GPU memory reads as zero. The bounce staging already keeps no
 * host memory for a chunk found all zero in its ring buffer, but only after
 * the chunk crossed PCIe. A kernel reads it where it lies, at the GPU's
 * memory bandwidth: one block per chunk ORs its 16-byte words and the block's
 * threads agree (bar.red.or) whether any was not zero. The kernel is PTX
 * text in this module, loaded with cuModuleLoadData into the copy context of
 * each GPU for one scan and unloaded after it (the agent links no CUDA
 * runtime and the build needs no nvcc); its inputs and flags live in a small
 * cuMemAlloc buffer freed before the scan returns.
 *
 * What is scanned is what the copy reads: the agent's slabs and allocations
 * (mapped in whole granules with their device's access) and the app's own
 * VMM handles through the mapping the copy uses (one the handle's device may
 * read, covering the handle; agent_app_vmm.h), so a read past a chunk's last
 * byte up to its 16-byte boundary stays in mapped memory. A GPU whose scan
 * cannot run (no module support, a launch refused) is left to the host-side
 * check, with a log line; nothing is marked then. GPUSNAP_GPU_ZERO_SCAN=0
 * turns it off.
 */
#ifndef GPUSNAP_AGENT_AGENT_ZERO_SCAN_H
#define GPUSNAP_AGENT_AGENT_ZERO_SCAN_H

#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "core/protocol.h"

/*
 * With the gate closed and the contexts synchronized: sets zero[k] = 1 for
 * every chunk k of h's plan found all zero on its GPU (zero: one byte per
 * chunk, as agent_ring.h's staging end takes it), and returns their bytes.
 * Chunks already marked are not scanned again. The scan's time and the
 * bytes found go to reply (zero_scan, gpu_zero_bytes); zero NULL: nothing
 * is scanned and 0 is reported.
 */
uint64_t gs_zero_scan(struct gs_agent *a, const struct gs_agent_held *h, uint8_t *zero, struct gs_msg *reply);

#endif
