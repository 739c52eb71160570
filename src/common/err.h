/*
 * err.h - gpusnap's one error convention and its exit codes.
 *
 * Library code never prints or exits: it fills a gs_err with a one-line,
 * lower-case message naming the cause and returns the code (non-zero).
 * The command line prints "gpusnap: <message>" and exits with that code.
 * The codes are part of the user interface: README.md documents them, and
 * a code, once given a meaning, keeps it.
 */
#ifndef GPUSNAP_COMMON_ERR_H
#define GPUSNAP_COMMON_ERR_H

#include <stddef.h>

enum gs_exit {
	GS_OK = 0,
	GS_E_FAILURE = 1,       /* unexpected failure (driver error, I/O error): the message says which */
	GS_E_USAGE = 2,         /* bad command line */
	GS_E_NO_PROCESS = 3,    /* no such process */
	GS_E_NOT_CUDA = 4,      /* the process does not use CUDA (or has no GPU state to act on) */
	GS_E_PERMISSION = 5,    /* not allowed to act on that process or file */
	GS_E_STATE = 6,         /* the process is in the wrong state (already suspended, not suspended) */
	GS_E_NO_DRIVER = 7,     /* no NVIDIA driver (libcuda.so.1 cannot be loaded) */
	GS_E_DRIVER_OLD = 8,    /* the driver lacks what is needed (checkpoint API >= 570, GPU remap >= 580) */
	GS_E_TIMEOUT = 9,       /* a deadline passed (lock, quiesce); the process was left running */
	GS_E_GPU_MAP = 10,      /* a --map is invalid, incomplete or refused; the process stays suspended */
	GS_E_IMAGE = 11,        /* an image is missing, incomplete, corrupt or of an unknown version */
	GS_E_GPU_MISMATCH = 12, /* an image or map targets a different GPU type */
	GS_E_NO_SPACE = 13,     /* disk or host memory full */
	GS_E_NO_VRAM = 14,      /* not enough free GPU memory to restore */
	GS_E_CRIU = 15,         /* CRIU missing, too old, or failed */
	GS_E_AGENT = 16,        /* the preloaded agent refused or failed */
	GS_E_PARTIAL = 17,      /* --tree: some processes were handled, some not (each is named) */
	/*
	 * An ending signal (N) came and the operation was undone: the command ends
	 * by that signal, which a shell shows as 128 + N (130 SIGINT, 143 SIGTERM,
	 * 129 SIGHUP). Never returned by library code.
	 */
	GS_E_INTERRUPTED_BASE = 128,
};

#define GS_ERR_MSG_MAX 512

struct gs_err {
	int code;
	char msg[GS_ERR_MSG_MAX];
};

/* Sets err (if non-NULL) and returns code, so callers can `return gs_fail(...)`. */
int gs_fail(struct gs_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Like gs_fail with ": strerror(errnum)" appended. */
int gs_fail_errno(struct gs_err *err, int code, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Prefixes the existing message with more context ("suspending 1234: <old>"). */
int gs_err_wrap(struct gs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gs_err_clear(struct gs_err *err);
/* Short stable name of a code ("no-process"), used in JSON output. */
const char *gs_exit_name(int code);
/* Maps an errno from open/kill/ptrace on a process to an exit code. */
int gs_exit_from_errno(int errnum);

#endif
