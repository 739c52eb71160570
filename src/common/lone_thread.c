/*
 * lone_thread.c - one thread of a stopped process let run alone through
 * ptrace, and stopped again (see lone_thread.h).
 */
#include "common/lone_thread.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proc.h"
#include "common/util.h"

#define TRACE_WAIT_S 10.0 /* a trace stop is reported within microseconds; this is for a hung kernel call */

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* State letter of a thread; 0 if it is gone. */
static char thread_state(pid_t pid, pid_t tid)
{
	struct gs_proc_stat st;
	return gs_proc_read_task_stat(pid, tid, &st) ? 0 : st.state;
}

int gs_process_wait_stopped(pid_t pid, double timeout_s, struct gs_err *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	double deadline = gs_now() + timeout_s;
	for (;;) {
		DIR *d = opendir(path);
		if (!d)
			return gs_fail(err, GS_E_NO_PROCESS, "process %d is gone", (int)pid);
		pid_t running = 0;
		struct dirent *e;
		while ((e = readdir(d)) && !running) {
			int tid;
			if (gs_parse_pid(e->d_name, &tid))
				continue;
			char s = thread_state(pid, tid);
			if (s && s != 'T' && s != 't')
				running = tid;
		}
		closedir(d);
		if (!running)
			return 0;
		if (gs_now() > deadline)
			return gs_fail(err, GS_E_TIMEOUT, "thread %d of process %d is not stopped after %.1f s", (int)running,
				       (int)pid, timeout_s);
		nap_ms(2);
	}
}

/*
 * Waits for tid's next trace stop that is a PTRACE_EVENT_STOP (the one a seize
 * of a stopped thread or an interrupt produces). A signal-delivery stop met on
 * the way (a fault the thread raised) is passed on to the thread.
 */
static int wait_event_stop(pid_t tid, struct gs_err *err)
{
	double deadline = gs_now() + TRACE_WAIT_S;
	for (;;) {
		int st;
		pid_t w = waitpid(tid, &st, __WALL | WNOHANG);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot wait for thread %d", (int)tid);
		if (w == 0) {
			if (gs_now() > deadline)
				return gs_fail(err, GS_E_TIMEOUT, "thread %d did not stop for the tracer within %.0f s", (int)tid,
					       TRACE_WAIT_S);
			nap_ms(1);
			continue;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return gs_fail(err, GS_E_NO_PROCESS, "thread %d ended while held", (int)tid);
		if (!WIFSTOPPED(st))
			continue;
		if ((st >> 16) == PTRACE_EVENT_STOP)
			return 0;
		/* a signal on its way to the thread: let it go on, as if nobody traced it */
		if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(st)))
			return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot resume thread %d", (int)tid);
	}
}

int gs_lone_thread_start(pid_t pid, pid_t tid, struct gs_lone_thread *t, struct gs_err *err)
{
	*t = (struct gs_lone_thread){ .pid = pid, .tid = tid };
	char s = thread_state(pid, tid);
	if (!s)
		return gs_fail(err, GS_E_NO_PROCESS, "thread %d of process %d does not exist", (int)tid, (int)pid);
	if (s != 'T' && s != 't')
		return gs_fail(err, GS_E_STATE, "thread %d of process %d is not stopped (state %c)", (int)tid, (int)pid, s);
	/*
	 * EXITKILL only once the thread is in our trace stop: a thread we could
	 * not stop stays traced until gpusnap exits, and must not be killed then.
	 */
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL))
		return gs_fail_errno(err, errno == EPERM ? GS_E_PERMISSION : GS_E_FAILURE, errno,
				     "cannot trace thread %d of process %d", (int)tid, (int)pid);
	int rc = wait_event_stop(tid, err);
	if (rc)
		return rc; /* not in a trace stop: it cannot be detached before gpusnap exits */
	uint64_t all = ~0ULL;
	if (ptrace(PTRACE_SETOPTIONS, tid, NULL, (void *)(long)PTRACE_O_EXITKILL))
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot set the trace options of thread %d", (int)tid);
	if (!rc && ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(t->saved_mask), &t->saved_mask))
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read the signal mask of thread %d", (int)tid);
	if (!rc && ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(all), &all))
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot block the signals of thread %d", (int)tid);
	if (!rc && ptrace(PTRACE_CONT, tid, NULL, NULL))
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot let thread %d run", (int)tid);
	if (rc) {
		ptrace(PTRACE_SETOPTIONS, tid, NULL, NULL);
		ptrace(PTRACE_DETACH, tid, NULL, NULL); /* back to the group stop (or gone) */
		return rc;
	}
	t->running = true;
	return 0;
}

int gs_lone_thread_stop(struct gs_lone_thread *t, struct gs_err *err)
{
	if (!t->running)
		return 0;
	t->running = false;
	int rc = 0;
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL))
		rc = gs_fail_errno(err, errno == ESRCH ? GS_E_NO_PROCESS : GS_E_FAILURE, errno, "cannot stop thread %d",
				   (int)t->tid);
	if (!rc)
		rc = wait_event_stop(t->tid, err);
	if (!rc && ptrace(PTRACE_SETSIGMASK, t->tid, (void *)sizeof(t->saved_mask), &t->saved_mask))
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot restore the signal mask of thread %d", (int)t->tid);
	if (!rc)
		ptrace(PTRACE_SETOPTIONS, t->tid, NULL, NULL); /* no EXITKILL once it is handed back */
	/* the process is group-stopped: detaching returns the thread to that stop */
	if (ptrace(PTRACE_DETACH, t->tid, NULL, NULL) && !rc && errno != ESRCH)
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot detach from thread %d", (int)t->tid);
	return rc;
}
