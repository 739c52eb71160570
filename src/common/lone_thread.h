/*
 * lone_thread.h - lets one thread of a stopped process run while all its
 * other threads stay stopped, then stops it again.
 *
 * Restore needs this: CRIU brings a process back stopped (--leave-stopped),
 * and the driver's restore runs on a thread of that process (the one
 * cuCheckpointProcessGetRestoreThreadId names), so that thread must run while
 * the app's own threads must not yet: they would touch GPU memory the driver
 * has not mapped back, and a restore whose checksum pass then fails must not
 * have let the app run at all. CRIU's CUDA plugin does the same with the
 * tasks CRIU holds.
 *
 * How: PTRACE_SEIZE the thread (a thread of a group-stopped process turns
 * into a trace stop), block all its signals (PTRACE_SETSIGMASK: none of the
 * app's handlers runs on it), PTRACE_CONT. Stopping: PTRACE_INTERRUPT, put
 * the signal mask back, PTRACE_DETACH; since the process is still
 * group-stopped, the kernel returns the thread to that stop. PTRACE_O_EXITKILL
 * while it runs: if gpusnap dies in between, the process is killed rather
 * than left half-restored with one thread running (set only once the thread
 * is in our trace stop, and cleared before it is handed back).
 *
 * The caller needs ptrace rights over the process (root, or same user where
 * Yama allows). Not thread-safe per struct; one lone thread per process at a time.
 */
#ifndef GPUSNAP_COMMON_LONE_THREAD_H
#define GPUSNAP_COMMON_LONE_THREAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

struct gs_lone_thread {
	pid_t pid, tid;
	uint64_t saved_mask; /* the thread's signal mask before we blocked everything */
	bool running;        /* seized and let run: gs_lone_thread_stop must follow */
};

/*
 * Whether every thread of pid is stopped (state T in /proc/PID/task/TID/stat),
 * waiting up to timeout_s for it. 0 yes; GS_E_NO_PROCESS if pid is gone;
 * GS_E_TIMEOUT if some thread still runs.
 */
int gs_process_wait_stopped(pid_t pid, double timeout_s, struct gs_err *err);

/* Lets thread tid of the stopped process pid run alone. On failure nothing is left seized. */
int gs_lone_thread_start(pid_t pid, pid_t tid, struct gs_lone_thread *t, struct gs_err *err);

/* Stops it again and hands it back to the process's stop. Safe to call when not running. */
int gs_lone_thread_stop(struct gs_lone_thread *t, struct gs_err *err);

#endif
