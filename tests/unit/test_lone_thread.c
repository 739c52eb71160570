/*
 * test_lone_thread.c - one thread of a stopped process let run alone: a child
 * with two counting threads is stopped (SIGSTOP); its second thread is let
 * run and counts while the first does not; stopped again, neither counts;
 * SIGCONT, both count. Also: refusals (a thread that is not stopped, one that
 * does not exist) and gs_process_wait_stopped on a running and a stopped
 * process. Needs ptrace of a child (SKIP where a sandbox forbids it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/lone_thread.h"
#include "common/util.h"
#include "test.h"

struct shared {
	atomic_ulong main_count, helper_count;
	atomic_int helper_tid;
};

static struct shared *sh;

static void *helper(void *arg)
{
	(void)arg;
	atomic_store(&sh->helper_tid, (int)syscall(SYS_gettid));
	for (;;) {
		atomic_fetch_add(&sh->helper_count, 1);
		usleep(200);
	}
	return NULL;
}

static void child_main(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, helper, NULL))
		_exit(1);
	for (;;) {
		atomic_fetch_add(&sh->main_count, 1);
		usleep(200);
	}
}

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* How much each counter moved in ms milliseconds. */
static void moved(long ms, unsigned long *main_d, unsigned long *helper_d)
{
	unsigned long m0 = atomic_load(&sh->main_count), h0 = atomic_load(&sh->helper_count);
	nap(ms);
	*main_d = atomic_load(&sh->main_count) - m0;
	*helper_d = atomic_load(&sh->helper_count) - h0;
}

/* The counters now: a thread that runs moves its counter, as soon as it gets a CPU (load only delays it). */
#define MAIN_NOW() atomic_load(&sh->main_count)
#define HELPER_NOW() atomic_load(&sh->helper_count)

static bool not_allowed; /* ptrace refused here: the test is skipped, not passed */

/* A child with two counting threads; returns its PID, *tid the helper thread's. */
static pid_t start_child(pid_t *tid)
{
	atomic_store(&sh->helper_tid, 0);
	pid_t pid = fork();
	if (pid == 0)
		child_main();
	for (int i = 0; i < 2000 && !atomic_load(&sh->helper_tid); i++)
		nap(1);
	*tid = atomic_load(&sh->helper_tid);
	CHECK(*tid > 0);
	return pid;
}

static void test_lone_thread(void)
{
	pid_t tid;
	pid_t pid = start_child(&tid);
	struct gs_err err = { 0 };
	struct gs_lone_thread t;

	/* running: not stopped, and no thread of it can be let run alone */
	CHECK_INT(gs_process_wait_stopped(pid, 0.05, &err), GS_E_TIMEOUT);
	CHECK_CONTAINS(err.msg, "is not stopped");
	CHECK_INT(gs_lone_thread_start(pid, tid, &t, &err), GS_E_STATE);
	CHECK(!t.running);

	kill(pid, SIGSTOP);
	CHECK_INT(gs_process_wait_stopped(pid, 5, &err), 0);
	unsigned long dm, dh;
	moved(50, &dm, &dh);
	CHECK(dm == 0 && dh == 0);
	CHECK_INT(gs_lone_thread_start(pid, 999999, &t, &err), GS_E_NO_PROCESS);

	int rc = gs_lone_thread_start(pid, tid, &t, &err);
	if (rc == GS_E_PERMISSION) {
		printf("SKIP: ptrace of a child is not allowed here (%s)\n", err.msg);
		not_allowed = true;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return;
	}
	CHECK_INT(rc, 0);
	CHECK(t.running);
	unsigned long m0 = MAIN_NOW(), h0 = HELPER_NOW();
	CHECK_SOON(HELPER_NOW() - h0 > 10, 30); /* the lone thread runs */
	CHECK(MAIN_NOW() == m0);                /* the rest of the process stays stopped */

	CHECK_INT(gs_lone_thread_stop(&t, &err), 0);
	CHECK(!t.running);
	CHECK_INT(gs_lone_thread_stop(&t, &err), 0); /* a second stop is harmless */
	CHECK_INT(gs_process_wait_stopped(pid, 5, &err), 0);
	moved(50, &dm, &dh);
	CHECK(dm == 0 && dh == 0); /* back in the process's stop */

	/* it can be done again (restore of a second GPU process, a retry) */
	CHECK_INT(gs_lone_thread_start(pid, tid, &t, &err), 0);
	m0 = MAIN_NOW(), h0 = HELPER_NOW();
	CHECK_SOON(HELPER_NOW() > h0, 30);
	CHECK(MAIN_NOW() == m0);
	CHECK_INT(gs_lone_thread_stop(&t, &err), 0);

	kill(pid, SIGCONT);
	m0 = MAIN_NOW(), h0 = HELPER_NOW();
	CHECK_SOON(MAIN_NOW() - m0 > 10 && HELPER_NOW() - h0 > 10, 30);
	/* the helper's signal mask came back: a signal it handled before is handled now (here: the default, fatal) */
	kill(pid, SIGTERM);
	int st = 0;
	CHECK_INT(waitpid(pid, &st, 0), pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
}

/*
 * gpusnap dying while a lone thread runs: the process is killed (EXITKILL),
 * not left with one thread running. The tracer is a sibling of the target,
 * which Yama allows root only: skipped (with a line) otherwise.
 */
static void test_tracer_dies(void)
{
	pid_t tid;
	pid_t pid = start_child(&tid);
	kill(pid, SIGSTOP);
	struct gs_err err = { 0 };
	CHECK_INT(gs_process_wait_stopped(pid, 5, &err), 0);
	pid_t tracer = fork();
	if (tracer == 0) {
		struct gs_lone_thread t;
		int rc = gs_lone_thread_start(pid, tid, &t, &err);
		_exit(rc == GS_E_PERMISSION ? 3 : rc ? 1 : 0); /* dies with the thread running */
	}
	int st = 0;
	CHECK_INT(waitpid(tracer, &st, 0), tracer);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		kill(pid, SIGKILL); /* the tracer could not start it: do not wait for a death that will not come */
		waitpid(pid, NULL, 0);
		return;
	}
	CHECK_INT(waitpid(pid, &st, 0), pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

int main(void)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	RUN(test_lone_thread);
	/* a sibling may trace where Yama allows it (scope 0) or as root */
	char scope[8] = "0";
	gs_read_small_file("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope));
	if (not_allowed || (geteuid() != 0 && scope[0] != '0'))
		printf("SKIP: test_tracer_dies: a process may not trace its sibling here (not root, Yama scope %c)\n",
		       scope[0]);
	else
		RUN(test_tracer_dies);
	if (not_allowed)
		return 77;
	return TEST_SUMMARY();
}
