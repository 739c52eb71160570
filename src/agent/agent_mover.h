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
#include "core/protocol.h"

/* Reads GPUSNAP_RESERVE (bytes, e.g. "40G"): a staging pool kept ready for suspends. */
void gs_mover_init_from_env(struct gs_agent *a);
/* Called when a device is first used: starts filling the reserved pool, if one was asked for. */
void gs_mover_device_ready(struct gs_agent *a, struct gs_agent_device *d);
bool gs_mover_has_reserve(struct gs_agent *a);

/* Timings and counters go into reply (named fields); the gate stays closed on success. */
int gs_mover_suspend(struct gs_agent *a, double timeout_s, bool keep_context, struct gs_msg *reply, struct gs_err *err);
/* Re-creates and refills the released memory, then opens the gate. */
int gs_mover_resume(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err);

#endif
