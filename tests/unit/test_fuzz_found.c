/*
 * test_fuzz_found.c - regression tests for the defects the fuzz harnesses
 * (tests/fuzz) found, one test each, named after what was wrong. The
 * inputs that crashed a harness are kept in tests/fuzz/regress/<harness>/ too.
 */
#include <stdlib.h>

#include "common/options.h"
#include "criu/criu.h"
#include "test.h"

/* An argument echoed in a usage error could break the one-line message (or drive the terminal). */
static void test_usage_error_is_one_printable_line(void)
{
	bool flag = false;
	int n = 0;
	const struct gs_option opts[] = {
		GS_OPT_BOOL_('v', "verbose", &flag, "more"),
		GS_OPT_INT_('j', "jobs", &n, "N", "threads"),
		GS_OPT_END_(),
	};
	struct gs_err err = { 0 };
	int nargs;
	char *unknown[] = { "cmd", "--ti\nme\033[2J", NULL };
	CHECK_INT(gs_parse_options(2, unknown, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK(!strchr(err.msg, '\n') && !strchr(err.msg, '\033'));
	CHECK_CONTAINS(err.msg, "--ti?me?[2J");
	char *unknown_short[] = { "cmd", "-\n", NULL };
	CHECK_INT(gs_parse_options(2, unknown_short, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK(!strchr(err.msg, '\n'));
	char *bad_value[] = { "cmd", "--jobs", "4\n2", NULL };
	CHECK_INT(gs_parse_options(3, bad_value, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK(!strchr(err.msg, '\n'));
	CHECK_CONTAINS(err.msg, "'4?2'");
}

/* "Can't fork for 4294967297: File exists" named PID 1 (the number wrapped to pid_t). */
static void test_pid_in_use_does_not_wrap(void)
{
	CHECK_INT(gs_criu_log_pid_in_use("Error (criu/cr-restore.c:1230): Can't fork for 4294967297: File exists\n"), -1);
	CHECK_INT(gs_criu_log_pid_in_use("Can't fork for -5: File exists\n"), -1);
	CHECK_INT(gs_criu_log_pid_in_use("Can't fork for  +7: File exists\n"), -1);
	CHECK_INT(gs_criu_log_pid_in_use("Can't fork for 6101: File exists\n"), 6101);
	CHECK_INT(gs_criu_log_pid_in_use("Can't fork for 2147483647: File exists\n"), 2147483647);
}

/* "Version: 4.1.3000000000" gave a negative patch number (atoi wrapped); sscanf's %d overflowed the same way. */
static void test_version_numbers_do_not_wrap(void)
{
	int ma = -7, mi = -7, pa = -7;
	CHECK_INT(gs_criu_parse_version("Version: 4.1.3000000000\n", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version("Version: 4.99999999999.1\n", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version("Version: 99999999999.1\n", &ma, &mi, &pa), -1);
	CHECK_INT(ma, -7); /* nothing stored on failure */
	CHECK_INT(gs_criu_parse_version("Version: 4.2.1\n", &ma, &mi, &pa), 0);
	CHECK(ma == 4 && mi == 2 && pa == 1);
	CHECK_INT(gs_criu_parse_version("Version: 123456789.0\n", &ma, &mi, &pa), 0);
	CHECK(ma == 123456789 && mi == 0 && pa == 0);
}

int main(void)
{
	RUN(test_usage_error_is_one_printable_line);
	RUN(test_pid_in_use_does_not_wrap);
	RUN(test_version_numbers_do_not_wrap);
	return TEST_SUMMARY();
}
