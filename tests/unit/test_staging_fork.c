/*
 * test_staging_fork.c - staging memory is not inherited by fork children
 * (MADV_DONTFORK): a reserved pool of tens of GiB must not be shared
 * copy-on-write with every worker process the app forks, and a child must
 * find nothing at the pool's addresses. Both page kinds of a segment are
 * covered where the host allows: normal pages always, hugetlb pages where
 * some are free.
 */
#include <errno.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "core/staging.h"
#include "test.h"

/* In a child: 0 if nothing is mapped at any of the pool's segments, else the number of the first mapped one + 1. */
static int child_sees(struct gs_staging *p)
{
	for (uint32_t i = 0; i < gs_staging_segments(p); i++) {
		void *a = gs_staging_ptr(p, (uint64_t)i * gs_staging_segment_size(p));
		/* msync on an address range with nothing mapped fails with ENOMEM */
		if (!(msync(a, 4096, MS_ASYNC) && errno == ENOMEM))
			return (int)i + 1;
	}
	return 0;
}

static void check_pool(bool no_hugetlb)
{
	struct gs_staging_config cfg = { .segment_size = 2 * GS_MiB, .workers = 1, .no_hugetlb = no_hugetlb };
	struct gs_staging_ops ops = { 0 };
	struct gs_staging *p = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_staging_create(3 * 2 * GS_MiB, &cfg, &ops, &p, &err), 0);
	if (!p)
		return;
	CHECK_INT(gs_staging_wait_all(p, 10.0, &err), 0);
	unsigned char *first = gs_staging_ptr(p, 0);
	first[0] = 42;
	pid_t child = fork();
	if (child == 0)
		_exit(child_sees(p));
	int status = 0;
	CHECK(waitpid(child, &status, 0) == child);
	CHECK(WIFEXITED(status));
	CHECK_INT(WEXITSTATUS(status), 0); /* the segment the child saw, if it saw one */
	CHECK_INT(first[0], 42);           /* the parent keeps its memory */
	gs_staging_destroy(p);
}

static void test_pool_not_inherited(void)
{
	check_pool(true);
}

static void test_hugetlb_pool_not_inherited(void)
{
	check_pool(false); /* hugetlb pages where the host has free ones, else normal pages again */
}

int main(void)
{
	RUN(test_pool_not_inherited);
	RUN(test_hugetlb_pool_not_inherited);
	return TEST_SUMMARY();
}
