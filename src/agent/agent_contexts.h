/*
 * agent_contexts.h - every CUDA context the app uses, per device, and the
 * bounded wait for their GPU work that a suspend needs once the gate is
 * closed.
 *
 * A context is known from hooks on the driver calls that make and end
 * contexts (cuCtxCreate*, cuCtxDestroy, cuDevicePrimaryCtxRetain / Release /
 * Reset) and from the context current at a device's first allocation
 * (agent_main.c). A destroyed context is forgotten; a primary context counts
 * only while it is active.
 *
 * Threads: the hooks run on app threads (inside the gate); the rest on the
 * thread of a control request with a->lock held. The waiting itself runs on a
 * thread of this module (see gs_ctx_quiesce): owned here, joined by the next
 * gs_ctx_quiesce, its signals blocked; it makes no call but
 * cuCtxSetCurrent and cuCtxSynchronize.
 */
#ifndef GPUSNAP_AGENT_AGENT_CONTEXTS_H
#define GPUSNAP_AGENT_AGENT_CONTEXTS_H

#include "agent/agent.h"
#include "common/err.h"

/* Installs the replacements of the context entry points. */
int gs_ctx_install_hooks(struct gs_err *err);
/* Notes ctx as one of the app's contexts on device dev (a repeat is ignored). */
void gs_ctx_note(int dev, CUcontext ctx);

/*
 * With the gate closed: waits until every live context of the app has no GPU
 * work left (cuCtxSynchronize in each, on the waiting thread), at most
 * timeout_s (<= 0: no limit). Then gives every used device a live context to
 * copy in (a->devices[d].ctx: the one it had if still alive, else another of
 * the app's on that device, else the device's primary context retained by
 * the agent), and tells the mover when that changed.
 *
 * GS_E_TIMEOUT when the work has not ended by then, naming the device and the
 * context: the waiting thread stays blocked until that work ends (owned
 * here; the next call waits for it first, within its own timeout).
 * GS_E_AGENT when the GPU reported an error. Fault point agent-quiesce fires
 * on the waiting thread before each context's synchronize.
 */
int gs_ctx_quiesce(struct gs_agent *a, double timeout_s, struct gs_err *err);
/*
 * Makes the copy context of the first used device current on the calling
 * thread: the driver's memory calls (map, unmap, create) want one, and the
 * thread of a control request has none of its own.
 */
void gs_ctx_use_copy_context(struct gs_agent *a);

#endif
