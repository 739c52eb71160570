/*
 * test_fault.c - unit tests of src/common/fault.c: the GPUSNAP_FAULT syntax,
 * which hit fires, the errno a fail action carries, and the process actions
 * (exit, kill) observed from a child.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fault.h"
#include "test.h"

static void test_unset_never_fires(void)
{
	CHECK_INT(gs_fault_configure(""), 0);
	for (int i = 0; i < GS_FI_COUNT_; i++)
		CHECK(!gs_fault((enum gs_fault_point)i));
	CHECK_INT(gs_fault_errno(GS_FI_IMAGE_WRITE, 7), 7);
}

static void test_first_hit_by_default(void)
{
	CHECK_INT(gs_fault_configure("agent-release"), 0);
	CHECK(gs_fault(GS_FI_AGENT_RELEASE));
	CHECK(!gs_fault(GS_FI_AGENT_RELEASE));
	CHECK(!gs_fault(GS_FI_AGENT_RECREATE));
	CHECK_INT(gs_fault_errno(GS_FI_AGENT_RELEASE, EBUSY), EBUSY);
}

static void test_nth_and_onwards(void)
{
	CHECK_INT(gs_fault_configure("image-write@3=fail:ENOSPC,agent-copy-in@2+"), 0);
	CHECK(!gs_fault(GS_FI_IMAGE_WRITE));
	CHECK(!gs_fault(GS_FI_IMAGE_WRITE));
	CHECK(gs_fault(GS_FI_IMAGE_WRITE));
	CHECK(!gs_fault(GS_FI_IMAGE_WRITE));
	CHECK_INT(gs_fault_errno(GS_FI_IMAGE_WRITE, EIO), ENOSPC);
	CHECK(!gs_fault(GS_FI_AGENT_COPY_IN));
	CHECK(gs_fault(GS_FI_AGENT_COPY_IN));
	CHECK(gs_fault(GS_FI_AGENT_COPY_IN));
	CHECK(gs_fault(GS_FI_AGENT_COPY_IN));
}

static void test_numeric_errno_and_reset(void)
{
	CHECK_INT(gs_fault_configure("image-read=fail:5"), 0);
	CHECK_INT(gs_fault_errno(GS_FI_IMAGE_READ, 0), 5);
	CHECK(gs_fault(GS_FI_IMAGE_READ));
	/* configuring again starts the counts over */
	CHECK_INT(gs_fault_configure("image-read"), 0);
	CHECK(gs_fault(GS_FI_IMAGE_READ));
}

static void test_bad_entries_are_counted_and_ignored(void)
{
	CHECK_INT(gs_fault_configure("no-such-point,agent-release@0,agent-release=explode,agent-release@x,"
				     "image-read=fail:EWHAT,agent-quiesce"),
		  5);
	CHECK(!gs_fault(GS_FI_AGENT_RELEASE));
	CHECK(!gs_fault(GS_FI_IMAGE_READ));
	CHECK(gs_fault(GS_FI_AGENT_QUIESCE));
}

static void test_hold_returns_false(void)
{
	CHECK_INT(gs_fault_configure("dump-after-criu=hold:0"), 0);
	CHECK(!gs_fault(GS_FI_DUMP_AFTER_CRIU));
}

static int child_status(const char *spec, enum gs_fault_point p)
{
	pid_t pid = fork();
	if (pid == 0) {
		gs_fault_configure(spec);
		gs_fault(p);
		_exit(0);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	return st;
}

static void test_process_actions(void)
{
	int st = child_status("dump-after-agent=exit:42", GS_FI_DUMP_AFTER_AGENT);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
	st = child_status("dump-after-agent=kill", GS_FI_DUMP_AFTER_AGENT);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	st = child_status("dump-after-agent=term", GS_FI_DUMP_AFTER_AGENT);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
	/* a point not reached does nothing */
	st = child_status("dump-after-agent=kill", GS_FI_DUMP_AFTER_CRIU);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_names_are_unique(void)
{
	for (int i = 0; i < GS_FI_COUNT_; i++) {
		CHECK(gs_fault_name((enum gs_fault_point)i) != NULL);
		CHECK(gs_fault_where((enum gs_fault_point)i) != NULL);
		for (int j = 0; j < i; j++)
			CHECK(strcmp(gs_fault_name((enum gs_fault_point)i), gs_fault_name((enum gs_fault_point)j)));
	}
	CHECK(gs_fault_name(GS_FI_COUNT_) == NULL);
}

int main(void)
{
	RUN(test_unset_never_fires);
	RUN(test_first_hit_by_default);
	RUN(test_nth_and_onwards);
	RUN(test_numeric_errno_and_reset);
	RUN(test_bad_entries_are_counted_and_ignored);
	RUN(test_hold_returns_false);
	RUN(test_process_actions);
	RUN(test_names_are_unique);
	return TEST_SUMMARY();
}
