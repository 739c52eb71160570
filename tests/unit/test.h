/*
 * test.h - the tiny unit-test harness used by tests/unit/test_*.c.
 *
 * A test file defines functions `static void test_xxx(void)` and lists them
 * in main() with RUN(test_xxx). Each CHECK counts; a failing CHECK prints
 * file:line and the expression and marks the test failed. main() returns
 * TEST_SUMMARY(), which prints "N passed, N failed" for the file's tests
 * and exits non-zero on any failure. A test that needs something to have
 * happened in another thread or process waits for it with CHECK_SOON, never
 * with a sleep of a guessed length: the suite runs on loaded machines.
 */
#ifndef GPUSNAP_TEST_H
#define GPUSNAP_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* A PID that no process has now: a child's that already ended, reaped (what a test names as "gone"). */
static inline pid_t test_dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return p;
}

static int test_current_failed;
static int tests_passed, tests_failed;

#define CHECK(cond)                                                                      \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			test_current_failed = 1;                                         \
		}                                                                        \
	} while (0)

#define CHECK_INT(a, b)                                                                               \
	do {                                                                                          \
		long long va_ = (long long)(a), vb_ = (long long)(b);                                 \
		if (va_ != vb_) {                                                                     \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a, va_, #b, vb_); \
			test_current_failed = 1;                                                      \
		}                                                                                     \
	} while (0)

#define CHECK_STR(a, b)                                                                                \
	do {                                                                                           \
		const char *sa_ = (a), *sb_ = (b);                                                     \
		if (!sa_ || !sb_ || strcmp(sa_, sb_)) {                                                \
			fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a, \
				sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                            \
			test_current_failed = 1;                                                       \
		}                                                                                      \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                                     \
	do {                                                                                            \
		const char *h_ = (hay), *n_ = (needle);                                                 \
		if (!h_ || !strstr(h_, n_)) {                                                           \
			fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,  \
				h_ ? h_ : "(null)", n_);                                                \
			test_current_failed = 1;                                                        \
		}                                                                                       \
	} while (0)

/* Monotonic seconds, for the waits below. */
static inline double test_now_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Waits for a condition, not a time: polls cond every millisecond until it
 * holds or secs pass, then CHECKs it. A loaded machine only makes it wait
 * longer; secs is the bound past which the condition counts as never coming.
 */
#define CHECK_SOON(cond, secs)                                          \
	do {                                                            \
		double until_ = test_now_() + (secs);                   \
		while (!(cond) && test_now_() < until_)                 \
			usleep(1000);                                   \
		CHECK(cond);                                            \
	} while (0)

#define RUN(fn)                                                             \
	do {                                                                \
		test_current_failed = 0;                                    \
		fn();                                                       \
		if (test_current_failed) {                                  \
			tests_failed++;                                     \
			fprintf(stderr, "FAIL %s\n", #fn);                 \
		} else {                                                    \
			tests_passed++;                                     \
			printf("ok   %s\n", #fn);                           \
		}                                                           \
	} while (0)

#define TEST_SUMMARY() \
	(printf("%d passed, %d failed\n", tests_passed, tests_failed), tests_failed ? 1 : 0)

#endif
