/*
 * gate.h - the gate every app call into the CUDA driver passes through: it
 * knows which app threads are inside the driver right now, and the agent's
 * suspend path can close it (new calls wait, calls in flight are waited for)
 * and open it again.
 *
 * The app's side costs two plain stores and a load per call; the closing side
 * pays instead (membarrier(2), see gate.c). Calls reach the gate through the
 * trampolines (interpose.c, gate_x86_64.S) or, for the agent's own
 * replacements of driver functions, through gs_gate_enter_c/gs_gate_exit_c.
 */
#ifndef GPUSNAP_AGENT_GATE_H
#define GPUSNAP_AGENT_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

/*
 * Closes the gate: app threads that call into the driver from now on block
 * (in gs_gate_enter, on a futex) until gs_gate_open; then waits until no app
 * thread is inside the driver. The calling thread never counts as inside and
 * is never blocked. timeout_s <= 0: no limit.
 * Returns 0 with the gate closed; on timeout reopens the gate
 * (the app keeps running) and fails with GS_E_TIMEOUT naming the threads still
 * inside; GS_E_STATE if the gate is already closed.
 */
int gs_gate_close(double timeout_s, struct gs_err *err);
/* Opens the gate and wakes every thread waiting at it. No-op when open. */
void gs_gate_open(void);
/*
 * Marks the calling thread as one of the agent's: the gate never blocks it nor
 * counts it, whatever entry point it calls through. For life: a thread cannot
 * be un-exempted. Fails (GS_E_FAILURE) only when out of memory.
 */
int gs_gate_exempt_current_thread(struct gs_err *err);

/*
 * For the agent's replacements of driver functions, which the trampolines do
 * not wrap: bracket the body with these (or use GS_GATED) so that the
 * replacement waits at a closed gate and counts as inside while it runs.
 * Pass the token from enter to exit. Nesting is fine.
 */
int gs_gate_enter_c(void);
void gs_gate_exit_c(int token);
/* Evaluates expr between gs_gate_enter_c and gs_gate_exit_c; yields its value. */
#define GS_GATED(expr)                                            \
	({                                                        \
		int gs_gated_token_ = gs_gate_enter_c();          \
		__typeof__(expr) gs_gated_value_ = (expr);        \
		gs_gate_exit_c(gs_gated_token_);                  \
		gs_gated_value_;                                  \
	})

/*
 * Diagnostics: app threads inside the driver now, threads waiting at the
 * closed gate. While the gate is closed the first may count, for an instant,
 * a thread that is about to see the gate closed and back off without calling.
 */
int gs_gate_inside_count(void);
int gs_gate_waiting_count(void);
bool gs_gate_is_closed(void);
/* Threads holding a slot (they called through the gate and have not exited). */
int gs_gate_thread_count(void);
/* Gated calls made so far by all threads (exited ones included); a snapshot, counts are relaxed. */
uint64_t gs_gate_call_count(void);
/* "membarrier" or "seq_cst": how entries are ordered against gs_gate_close. */
const char *gs_gate_fence_name(void);

/*
 * Sets up membarrier registration, the thread-slot key and fork handlers.
 * Idempotent and cheap; every gate function calls it, so calling it from the
 * agent's constructor only moves the work earlier. Reads GPUSNAP_GATE_FENCE
 * (=seq_cst forces the fallback, for tests). Returns 0 or -1.
 */
int gs_gate_init(void);

/*
 * Addresses [lo, hi) are the driver's own code: calls whose return address lies
 * there are the driver calling its own exports, which pass ungated.
 */
void gs_gate_set_driver_range(uintptr_t lo, uintptr_t hi);

/* Called only from gate_x86_64.S (see there): the slow paths of entry and exit. */
int gs_gate_enter(void *return_address);
void gs_gate_notify_closer(void);

#endif
