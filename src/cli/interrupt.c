/*
 * interrupt.c - ending signals recorded, not obeyed, during an operation
 * (see interrupt.h).
 */
#include "cli/interrupt.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t caught;
static bool catching;
static volatile bool muted;
static void (*volatile on_first)(void);

/* Async-signal-safe: one store (and the step's own cut-short, if it has one); the operation reads it between steps. */
static void on_ending_signal(int sig)
{
	if (caught)
		return;
	caught = sig;
	void (*fn)(void) = on_first;
	if (fn)
		fn();
}

void cli_signals_on_first(void (*fn)(void))
{
	on_first = fn;
}

static const int ending_signals[] = { SIGINT, SIGTERM, SIGHUP };

void cli_signals_catch(void)
{
	if (catching)
		return;
	catching = true;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_ending_signal;
	/* restarted calls: a signal must not fail a read, write or wait that the step depends on */
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(ending_signals) / sizeof(ending_signals[0]); i++)
		sigaction(ending_signals[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigset_t unblock;
	sigemptyset(&unblock);
	for (size_t i = 0; i < sizeof(ending_signals) / sizeof(ending_signals[0]); i++)
		sigaddset(&unblock, ending_signals[i]);
	pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
}

int cli_signal_caught(void)
{
	return muted ? 0 : caught;
}

void cli_signals_mute(bool on)
{
	muted = on;
}

const char *cli_signal_name(int sig)
{
	switch (sig) {
	case SIGINT: return "SIGINT";
	case SIGTERM: return "SIGTERM";
	case SIGHUP: return "SIGHUP";
	case SIGPIPE: return "SIGPIPE";
	default: return "a signal";
	}
}

int cli_fail_interrupted(struct gs_err *err, const char *what)
{
	int sig = caught ? caught : SIGTERM;
	return gs_fail(err, GS_E_INTERRUPTED_BASE + sig, "%s interrupted by %s", what, cli_signal_name(sig));
}

int cli_dump_failed_by_signal(int rc, bool published, bool undo_failed, const char *what, const char *runs_on,
			      const char *dir, struct gs_err *err)
{
	char cause[GS_ERR_MSG_MAX] = "";
	if (rc && cli_signal_caught() && !cli_is_interrupted(rc) && !published) {
		snprintf(cause, sizeof(cause), " (%s)", err->msg);
		rc = cli_fail_interrupted(err, what);
	}
	if (cli_is_interrupted(rc)) {
		if (undo_failed)
			cli_err_append(err, "not all of it could be undone (said above)%s", cause);
		else
			cli_err_append(err, "undone, %s and nothing was written to '%s'%s", runs_on, dir, cause);
	}
	return rc;
}

void cli_err_append(struct gs_err *err, const char *fmt, ...)
{
	size_t len = strlen(err->msg);
	if (len + 2 >= sizeof(err->msg))
		return;
	memcpy(err->msg + len, ": ", 3);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg + len + 2, sizeof(err->msg) - len - 2, fmt, ap);
	va_end(ap);
}

bool cli_is_interrupted(int code)
{
	return caught && code == GS_E_INTERRUPTED_BASE + caught;
}

int cli_exit(int code)
{
	if (!cli_is_interrupted(code))
		return code;
	fflush(stdout);
	fflush(stderr);
	int sig = caught;
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	return code; /* not reached: the default action of an ending signal ends the process */
}
