/*
 * criu.h - driving the criu command (CRIU >= 4) to dump a process tree's CPU state
 * into a folder of CRIU images and to restore it from there.
 *
 * gpusnap runs criu as a child process (never through a shell) and reads criu's
 * own log file to explain a failure in one line. Which criu: $GPUSNAP_CRIU, else
 * the first `criu` on PATH; scripts/get-criu.sh provides one (docs/CRIU.md).
 * The pure parts (version parsing, log reading, argument building) are exposed
 * so they can be tested without CRIU.
 */
#ifndef GPUSNAP_CRIU_CRIU_H
#define GPUSNAP_CRIU_CRIU_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

#define GS_CRIU_MIN_MAJOR 4
#define GS_CRIU_MIN_MINOR 0
/* What a user is told to do when criu is missing or too old. */
#define GS_CRIU_HOWTO "run scripts/get-criu.sh or install criu >= 4, then put it on PATH or set GPUSNAP_CRIU"

/* Files gpusnap keeps next to CRIU's images (in the images folder, or restore's work_dir). */
#define GS_CRIU_DUMP_LOG "dump.log"
#define GS_CRIU_RESTORE_LOG "restore.log"
#define GS_CRIU_RESTORE_PIDFILE "restore.pid"
/* The arguments a dump ran with, one per line, so restore can repeat the flags it needs. */
#define GS_CRIU_DUMP_ARGS "gpusnap-criu-dump.args"

struct gs_criu {
	char path[PATH_MAX]; /* what is executed: a criu binary or a wrapper script */
	int major, minor, patch;
	char version[32]; /* as criu printed it, "4.1.1" */
};

enum gs_criu_shell_job {
	/* --shell-job when the process is not the leader of its own session and
	 * process group, or has a controlling terminal (CRIU refuses those otherwise). */
	GS_CRIU_SHELL_JOB_AUTO = 0,
	GS_CRIU_SHELL_JOB_ON,
	GS_CRIU_SHELL_JOB_OFF,
};

enum gs_criu_tcp {
	GS_CRIU_TCP_REFUSE = 0,  /* CRIU's default: a dump with an established connection fails */
	GS_CRIU_TCP_ESTABLISHED, /* --tcp-established: connections saved and restored (needs iptables) */
	GS_CRIU_TCP_CLOSE,       /* --tcp-close: connections restored closed (peers see a reset) */
};

/* A zeroed struct is the default for each. */
struct gs_criu_dump_opts {
	bool leave_running; /* --leave-running: the process continues after the dump */
	enum gs_criu_shell_job shell_job;
	enum gs_criu_tcp tcp;
	bool no_file_locks;            /* leave out --file-locks (on by default: held locks are saved) */
	const char *libdir;            /* --libdir: folder of CRIU plugins (*.so); NULL: none */
	double timeout_s;              /* kill criu after this long; <= 0: no limit */
	const char *const *extra_args; /* NULL-terminated, appended as given; NULL: none */
};

struct gs_criu_restore_opts {
	/* Flags added to those the dump recorded in GS_CRIU_DUMP_ARGS (--shell-job,
	 * --file-locks, --tcp-*), which restore repeats by itself. */
	bool shell_job;
	enum gs_criu_tcp tcp;
	const char *libdir;            /* --libdir: folder of CRIU plugins; NULL: none */
	const char *work_dir;          /* where restore.log and restore.pid go; NULL: the images folder */
	double timeout_s;              /* kill criu after this long; <= 0: no limit */
	const char *const *extra_args; /* NULL-terminated, appended as given; NULL: none */
	bool leave_stopped;            /* --leave-stopped: the process comes back stopped (SIGSTOP) */
};

/*
 * Finds criu ($GPUSNAP_CRIU, else PATH), runs `criu --version` and requires >= 4.0.
 * GS_E_CRIU naming what was found and what to do when it is missing or too old.
 */
int gs_criu_find(struct gs_criu *c, struct gs_err *err);

/* Runs `criu check`; GS_E_CRIU with criu's complaint when the kernel lacks something. */
int gs_criu_check(const struct gs_criu *c, struct gs_err *err);

/*
 * Checks what CRIU needs of the process before anything is stopped: that it
 * exists and that its session leader lives in its PID namespace (session ID 0
 * as seen from here; CRIU cannot dump such a process, --shell-job or not).
 * GS_E_NO_PROCESS or GS_E_CRIU with a one-line message saying what to do.
 */
int gs_criu_dumpable(pid_t pid, struct gs_err *err);

/*
 * Dumps the process tree rooted at pid into images_dir (created 0700 if missing).
 * The log is images_dir/dump.log (-v4). Without leave_running the process is gone
 * afterwards (criu kills it; this waits up to 2 s for it to disappear). On failure
 * GS_E_CRIU (GS_E_NO_PROCESS, GS_E_PERMISSION, GS_E_TIMEOUT where they fit) with
 * CRIU's first meaningful error line and the log's path in the message.
 */
int gs_criu_dump(const struct gs_criu *c, pid_t pid, const char *images_dir,
		 const struct gs_criu_dump_opts *o, struct gs_err *err);

/*
 * Restores the process tree from images_dir, detached (-d): the processes run on
 * after criu exits, as children of init. *restored_pid gets the root's PID, which
 * is the PID it had when dumped (CRIU restores PIDs); that PID must be free, else
 * GS_E_CRIU naming who holds it. opts may be NULL.
 */
int gs_criu_restore(const struct gs_criu *c, const char *images_dir, const struct gs_criu_restore_opts *o,
		    pid_t *restored_pid, struct gs_err *err);

/* ---- pure helpers, exposed for tests ---- */

/* A growable NULL-terminated argument vector; each item is owned (malloc'd). */
struct gs_argv {
	char **v;
	size_t n, cap;
};
/* Appends a copy of s; -1 when out of memory. */
int gs_argv_add(struct gs_argv *a, const char *s);
void gs_argv_free(struct gs_argv *a);

/* Finds "Version: X.Y[.Z]" in `criu --version` output. 0 or -1. */
int gs_criu_parse_version(const char *text, int *major, int *minor, int *patch);

/*
 * The first meaningful "Error (...)" line of a CRIU log, without its timestamp and
 * source location ("The root process 6307 is not a session leader. ..."), into out.
 * Known harmless errors (RLIMIT_NOFILE) and summary lines ("Dumping FAILED.") are
 * skipped; 0 if one was found, -1 if none (out is then "").
 */
int gs_criu_log_error(const char *log_text, char *out, size_t n);

/* The PID that CRIU could not take in a "Can't fork for N: File exists" line; -1 if none. */
pid_t gs_criu_log_pid_in_use(const char *log_text);

/* The flags decision for AUTO from /proc/PID/stat fields: pgrp, session, tty_nr. */
bool gs_criu_needs_shell_job(pid_t pid, pid_t pgrp, pid_t session, int tty_nr);

/* Builds the full criu dump command line (argv[0] = c->path). log_path absolute. */
int gs_criu_dump_args(const struct gs_criu *c, pid_t pid, const char *images_dir, const char *log_path,
		      const struct gs_criu_dump_opts *o, bool shell_job, struct gs_argv *out, struct gs_err *err);

/*
 * Builds the criu restore command line. recorded: the text of GS_CRIU_DUMP_ARGS
 * (NULL if absent); its --shell-job, --file-locks, --tcp-established and --tcp-close
 * are repeated.
 */
int gs_criu_restore_args(const struct gs_criu *c, const char *images_dir, const char *log_path,
			 const char *pidfile, const struct gs_criu_restore_opts *o, const char *recorded,
			 struct gs_argv *out, struct gs_err *err);

#endif
