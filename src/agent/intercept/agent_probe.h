/*
 * agent_probe.h - what the agent exports for measuring its own cost from
 * inside the app (bench/overhead.sh through tests/gpu/py/torch_model.py, with
 * ctypes): comparing two processes, one with the agent and one without, on a
 * VM whose processes differ by more than the 1% the steady-state goal allows,
 * cannot show that goal; counting the calls the gate saw and timing the gate
 * in the same process can bound it.
 */
#ifndef GPUSNAP_AGENT_AGENT_PROBE_H
#define GPUSNAP_AGENT_AGENT_PROBE_H

#include <stdint.h>

/* Driver calls that went through the gate so far, all threads. */
__attribute__((visibility("default"))) uint64_t gpusnap_driver_calls(void);

/*
 * What the gate adds to one call, in nanoseconds, measured now on the calling
 * thread: `calls` calls of an empty function through a gate stub against as
 * many direct calls, best of 5 alternating runs each. A negative value means
 * no stub could be made.
 */
__attribute__((visibility("default"))) double gpusnap_gate_cost_ns(unsigned long calls);

#endif
