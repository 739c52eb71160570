/*
 * agent_contexts.h - every CUDA context the app uses, per device, and the
 * bounded wait for their GPU work that a suspend needs once the gate is
 * closed.
 *
 * A context is known from hooks on the driver calls that make and end
 * contexts (cuCtxCreate*, cuCtxDestroy, cuDevicePrimaryCtxRetain / Release /
 * Reset) and from the context current at a device's first allocation
 * (base/agent_state.c, through gs_ctx_listener). A destroyed context is forgotten; a primary context counts
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

#include "agent/base/agent.h"
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
 * Before the driver checkpoints the process (a full suspend, a dump): sets
 * the stack limit of every live context of the app to 0 and remembers what
 * it was. A context's local memory is sized for every thread the GPU can run
 * at once (about half a context with the default 1 KiB), and the driver
 * saves and restores it like data although no kernel keeps anything there
 * between launches (bench/context_floor; docs/benchmarks.md). Only
 * with the app's work drained (gate closed, contexts synchronized). A context
 * whose limit cannot be read or set is left as it is (slower, not wrong).
 * GPUSNAP_SHRINK_STACK=0 turns it off. Returns the contexts shrunk.
 */
unsigned gs_ctx_shrink_stacks(struct gs_agent *a);
/*
 * After the driver restored the process, before its data comes back: gives
 * each shrunk context its stack limit back (the driver allocates the local
 * memory again). GS_E_NO_VRAM when the GPU has no room for it: the contexts
 * not yet done stay listed, so a retry finishes them. 0 when none was shrunk.
 */
int gs_ctx_restore_stacks(struct gs_agent *a, struct gs_err *err);

/*
 * Makes the copy context of the first used device current on the calling
 * thread: the driver's memory calls (map, unmap, create) want one, and the
 * thread of a control request has none of its own.
 */
void gs_ctx_use_copy_context(struct gs_agent *a);

/* Notes the context of each device at its first use (base/agent.h). */
extern const struct gs_agent_listener gs_ctx_listener;

#endif
