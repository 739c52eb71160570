/*
 * test_pid_names.c - common/pid_names.c against a real PID namespace: a
 * process started in a new one is PID 1 there, the caller's name of it and
 * its own translate both ways, a set mixing it with the caller is "mixed",
 * and PIDs the set does not hold pass unchanged. Creating a PID namespace
 * needs root (CAP_SYS_ADMIN): SKIP and exit 77 otherwise.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/pid_names.h"
#include "test.h"

static pid_t inner = -1;  /* the caller's name of the namespace's PID 1 */
static pid_t outer = -1;  /* the process that made the namespace (reaped at the end) */

/*
 * A process in a new PID namespace, PID 1 there, paused until killed. The
 * middle process unshares and forks it, sends its PID (as we see it, the
 * middle being in our namespace) through the pipe, and waits for it.
 */
static int start_inner(void)
{
	int p[2];
	if (pipe(p))
		return -1;
	outer = fork();
	if (outer < 0)
		return -1;
	if (outer == 0) {
		close(p[0]);
		if (unshare(CLONE_NEWPID)) {
			int e = errno;
			if (write(p[1], &(pid_t){ -e }, sizeof(pid_t)) < 0)
				_exit(1);
			_exit(0);
		}
		pid_t c = fork();
		if (c == 0) {
			for (;;)
				pause();
		}
		if (write(p[1], &c, sizeof(c)) != sizeof(c))
			_exit(1);
		close(p[1]);
		while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[1]);
	pid_t got = 0;
	ssize_t n = read(p[0], &got, sizeof(got));
	close(p[0]);
	if (n != sizeof(got))
		return -1;
	if (got < 0)
		return -got;
	inner = got;
	return 0;
}

static void test_inner_is_one_there(void)
{
	pid_t pids[1] = { inner };
	struct gs_pid_names t;
	struct gs_err err = { 0 };
	CHECK_INT(gs_pid_names_make(pids, 1, &t, &err), 0);
	CHECK_INT(t.own[0], 1);
	CHECK(!t.mixed);
	CHECK_INT(gs_pid_names_own(&t, inner), 1);
	CHECK_INT(gs_pid_names_ours(&t, 1), inner);
	gs_pid_names_free(&t);
}

static void test_mixed_with_the_caller(void)
{
	pid_t self = getpid();
	pid_t pids[2] = { self, inner };
	struct gs_pid_names t;
	struct gs_err err = { 0 };
	CHECK_INT(gs_pid_names_make(pids, 2, &t, &err), 0);
	/* we name ourselves as getpid() does, whatever namespace this test runs in */
	CHECK_INT(t.own[0], self);
	CHECK_INT(t.own[1], 1);
	CHECK(t.mixed);
	gs_pid_names_free(&t);
}

static void test_same_namespace_is_identity(void)
{
	pid_t pids[2] = { getpid(), outer };
	struct gs_pid_names t;
	struct gs_err err = { 0 };
	CHECK_INT(gs_pid_names_make(pids, 2, &t, &err), 0);
	CHECK(!t.mixed);
	CHECK_INT(gs_pid_names_own(&t, outer), outer);
	CHECK_INT(gs_pid_names_ours(&t, outer), outer);
	gs_pid_names_free(&t);
}

static void test_unknown_pids_pass_unchanged(void)
{
	pid_t pids[1] = { inner };
	struct gs_pid_names t;
	struct gs_err err = { 0 };
	CHECK_INT(gs_pid_names_make(pids, 1, &t, &err), 0);
	CHECK_INT(gs_pid_names_own(&t, 424242), 424242);
	CHECK_INT(gs_pid_names_ours(&t, 7), 7);
	CHECK_INT(gs_pid_names_own(NULL, 5), 5);
	CHECK_INT(gs_pid_names_ours(NULL, 5), 5);
	gs_pid_names_free(&t);
	/* an empty set */
	CHECK_INT(gs_pid_names_make(NULL, 0, &t, &err), 0);
	CHECK_INT(gs_pid_names_own(&t, 9), 9);
	gs_pid_names_free(&t);
}

int main(void)
{
	int rc = start_inner();
	if (rc) {
		if (outer > 0)
			waitpid(outer, NULL, 0);
		printf("SKIP: cannot make a PID namespace here (%s)\n", rc > 0 ? strerror(rc) : "fork or pipe failed");
		return 77;
	}
	RUN(test_inner_is_one_there);
	RUN(test_mixed_with_the_caller);
	RUN(test_same_namespace_is_identity);
	RUN(test_unknown_pids_pass_unchanged);
	kill(inner, SIGKILL);
	waitpid(outer, NULL, 0);
	return TEST_SUMMARY();
}
