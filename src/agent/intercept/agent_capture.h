/*
 * agent_capture.h - the app's stream captures in CUDA's global mode, which a
 * suspend must not run into.
 *
 * While a thread of the app captures a stream into a graph in global mode
 * (CU_STREAM_CAPTURE_MODE_GLOBAL: cudaStreamBeginCapture's default, and
 * PyTorch's for torch.cuda.graph), the driver refuses every thread of the
 * process the calls that could touch the capture (synchronizing a context,
 * allocating, pinning host memory, loading a module) and invalidates the
 * capture when one is tried. A suspend makes exactly those calls, and the
 * gate holds the capturing thread before its cuStreamEndCapture. So the
 * agent keeps the global-mode captures open now (hooks on
 * cuStreamBeginCapture*, cuStreamEndCapture*, inside the gate so the list is
 * still once the gate is closed), and a suspend or dump that finds one
 * refuses with GS_E_STATE, the app running on. Thread-local and relaxed
 * captures forbid nothing to the agent's threads and are not listed.
 * (Pinned staging, GPUSNAP_STAGING_MODE=pinned, still pins and unpins its
 * pool on worker threads without looking.)
 */
#ifndef GPUSNAP_AGENT_AGENT_CAPTURE_H
#define GPUSNAP_AGENT_AGENT_CAPTURE_H

#include <stdbool.h>

#include "common/err.h"

/*
 * The agent's background CUDA work (the kept copy ring pinned after a
 * device's first use and after each resume; a pinned staging pool's workers)
 * brackets itself with these: begin returns false, and the work is to be
 * skipped, while a global-mode capture is open or beginning; begin_wait
 * waits for the captures to end instead, for work that cannot be skipped.
 * While a section runs, a global-mode capture waits to begin. A capture
 * waits only for sections that have begun, and those wait for nothing of
 * the app's, so nothing waits in a circle (nothing of the app's waits for a
 * worker in begin_wait either: a suspend, which would, refuses while a
 * capture is open).
 */
bool gs_capture_bg_begin(void);
void gs_capture_bg_begin_wait(void);
void gs_capture_bg_end(void);

/* Installs the replacements of the capture entry points. */
int gs_capture_install_hooks(struct gs_err *err);
/* With the gate closed: GS_E_STATE (err says which thread) when a global-mode capture is open, else 0. */
int gs_capture_check_none_open(struct gs_err *err);

#endif
