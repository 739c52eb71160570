/*
 * interrupt.h - what the ending signals do to an operation of the gpusnap
 * command: nothing at once.
 *
 * From cli_signals_catch on, SIGINT, SIGTERM and SIGHUP are only recorded (an
 * async-signal-safe handler stores the first one's number) and SIGPIPE is
 * ignored (a write to a closed pipe or socket fails with EPIPE instead). The
 * operation looks at cli_signal_caught() between its steps: before its point
 * of no return it undoes what it did, says so in one line and ends with the
 * signal (cli_exit re-raises it, so a shell sees 128 + N and a loop around
 * gpusnap stops); after that point it finishes (the image is published, the
 * process resumed) and says that the signal came too late to stop it.
 * docs/DESIGN.md, "Signals, locks and recovery".
 */
#ifndef GPUSNAP_CLI_INTERRUPT_H
#define GPUSNAP_CLI_INTERRUPT_H

#include <stdbool.h>

#include "common/err.h"

/* Records the ending signals from now on (idempotent); helper processes get the defaults back (criu/run.h). */
void cli_signals_catch(void);
/*
 * While a step can be cut short safely (a restore's CRIU run, whose
 * half-made task is killed), fn is called from the handler at the first
 * ending signal; NULL removes it. fn must be async-signal-safe.
 */
void cli_signals_on_first(void (*fn)(void));
/* The first ending signal recorded since cli_signals_catch, or 0. Any thread. */
int cli_signal_caught(void);
/*
 * While on, cli_signal_caught() says 0: for an undo that a signal asked for,
 * whose steps (a suspend that checks for signals) must not stop because of
 * that same signal. cli_fail_interrupted still names it.
 */
void cli_signals_mute(bool on);
/* "SIGTERM" for 15; "signal N" for others. */
const char *cli_signal_name(int sig);
/*
 * Fills err with code 128 + the caught signal (GS_E_INTERRUPTED_BASE) and a
 * message "<what> interrupted by SIGTERM" for the caller to complete; returns
 * the code. Only after cli_signal_caught() said one came.
 */
int cli_fail_interrupted(struct gs_err *err, const char *what);
/* Appends ": <text>" to err's message (what was done about the signal). */
void cli_err_append(struct gs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether code is one cli_fail_interrupted made. */
bool cli_is_interrupted(int code);
/*
 * The end of a dump that failed (rc) and was undone unless published: a
 * step that failed after a signal came (CRIU got it too, say) is told as the
 * interruption of `what` ("dump of process 5") with its own error as the
 * cause; an interruption then says whether it was all undone, naming who
 * runs on ("process 5 runs on") and the folder nothing was written to.
 * Returns the code to exit with.
 */
int cli_dump_failed_by_signal(int rc, bool published, bool undo_failed, const char *what, const char *runs_on,
			      const char *dir, struct gs_err *err);
/*
 * The command's end: with an interrupted code, the signal's default action
 * (gpusnap ends by it); otherwise returns code for main to return.
 */
int cli_exit(int code);

#endif
