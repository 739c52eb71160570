/*
 * run.h - running a helper program (criu) as a child: fork/exec of an argument
 * vector with no shell, stdin from /dev/null, stdout and stderr captured together,
 * no descriptor of ours leaked into it, in a process group of its own (a signal to
 * gpusnap's group, such as Ctrl-C, does not reach it), and an optional time limit
 * after which it is killed with its whole group.
 */
#ifndef GPUSNAP_CRIU_RUN_H
#define GPUSNAP_CRIU_RUN_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/err.h"

#define GS_RUN_OUTPUT_MAX 4096

/* gs_run flags */
#define GS_RUN_PRIVATE_FILES 1 /* umask 077 in the child: what it creates is readable by its owner only */
/*
 * The child stays in gpusnap's process group instead of getting one of its
 * own: for criu restore, whose --shell-job tasks join criu's group; a group
 * of criu's own would be left orphaned with the task stopped in it once criu
 * exits, and the kernel then sends it SIGHUP, which kills it.
 */
#define GS_RUN_SHARE_GROUP 2

struct gs_run_result {
	int status;     /* waitpid status */
	bool timed_out; /* killed with SIGKILL (its process group) after timeout_s */
	/* The last GS_RUN_OUTPUT_MAX - 1 bytes of stdout+stderr, NUL-terminated. */
	char output[GS_RUN_OUTPUT_MAX];
};

/*
 * Runs argv[0] (a path; no PATH search) with argv. LD_PRELOAD is dropped from its
 * environment (a preloaded gpusnap agent must not end up inside criu); signal
 * mask and the dispositions of the usual signals are reset. timeout_s <= 0: no
 * limit. Returns 0 when the program ran, whatever its exit status (see res), or
 * GS_E_FAILURE with err set when it could not be started (exec's errno named).
 */
int gs_run(char *const argv[], double timeout_s, int flags, struct gs_run_result *res, struct gs_err *err);
/*
 * gs_run, with descriptor keep_fd (>= 3; -1: none) left open in the program
 * under the same number, so it can be named to it as /proc/self/fd/<keep_fd>.
 */
int gs_run_fd(char *const argv[], double timeout_s, int flags, int keep_fd, struct gs_run_result *res,
	      struct gs_err *err);

/*
 * A helper started to run alongside (criu lazy-pages, which serves a
 * restore's pages while gpusnap goes on): gs_run_spawn starts it as gs_run
 * would, with the descriptors keep_fds (>= 3) left open in it under their
 * numbers; gs_run_wait waits for its end (timeout_s > 0: at most that long,
 * then it is killed as gs_run kills; 0: no limit; < 0: only looks, and
 * returns GS_RUN_STILL while it runs). Its output is kept in a file until
 * then. gs_run_kill sends it (and its group) SIGKILL; the caller still
 * waits for it. gs_run_child does not name it.
 */
struct gs_run_proc {
	pid_t pid; /* 0 once waited for */
	bool own_group;
	int out; /* its output file, -1 once waited for */
	char name[64];
};
#define GS_RUN_STILL 1
int gs_run_spawn(char *const argv[], int flags, const int *keep_fds, int nkeep, struct gs_run_proc *p,
		 struct gs_err *err);
int gs_run_wait(struct gs_run_proc *p, double timeout_s, struct gs_run_result *res, struct gs_err *err);
void gs_run_kill(const struct gs_run_proc *p);

/*
 * The PID of the child gs_run is running now (also its process group ID), or 0.
 * Async-signal-safe: for a signal handler that must stop it.
 */
pid_t gs_run_child(void);

/* "exit status 1", "killed by signal 9" into buf; returns buf. */
const char *gs_run_status_str(int status, char *buf, unsigned n);

#endif
