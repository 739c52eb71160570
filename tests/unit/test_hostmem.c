/*
 * test_hostmem.c - host memory headroom: the meminfo and cgroup parsers on
 * good and bad text, and gs_hostmem_read over a fake root (proc and cgroupfs
 * files written into a temporary folder) where a parent cgroup's limit is
 * the tightest, and another process's cgroups (gs_hostmem_read_pid); then
 * this machine's own view.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/hostmem.h"
#include "test.h"

static void test_parsers(void)
{
	uint64_t v = 0;
	CHECK_INT(gs_hostmem_parse_meminfo("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   2048 kB\nSwapFree: 1024 kB\n",
					   &v), 0);
	CHECK(v == 3072ULL * 1024);
	CHECK_INT(gs_hostmem_parse_meminfo("MemAvailable: 4 kB\n", &v), 0);
	CHECK(v == 4096);
	CHECK_INT(gs_hostmem_parse_meminfo("MemTotal: 100 kB\nMemAvailableX: 5 kB\n", &v), -1);
	CHECK_INT(gs_hostmem_parse_meminfo("MemAvailable: lots\n", &v), -1);

	CHECK_INT(gs_hostmem_cgroup_headroom("max\n", "123\n", &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_INT(gs_hostmem_cgroup_headroom("1000\n", "400\n", &v), 0);
	CHECK(v == 600);
	CHECK_INT(gs_hostmem_cgroup_headroom("1000\n", "1200\n", &v), 0);
	CHECK(v == 0);
	CHECK_INT(gs_hostmem_cgroup_headroom("maximum\n", "1\n", &v), -1);
	CHECK_INT(gs_hostmem_cgroup_headroom("12x\n", "1\n", &v), -1);
	CHECK_INT(gs_hostmem_cgroup_headroom("", "1\n", &v), -1);

	char b[64];
	CHECK_INT(gs_hostmem_parse_cgroup_path("12:memory:/old\n0::/user.slice/app.scope\n", b, sizeof(b)), 0);
	CHECK_STR(b, "/user.slice/app.scope");
	CHECK_INT(gs_hostmem_parse_cgroup_path("0::/\n", b, sizeof(b)), 0);
	CHECK_STR(b, "/");
	CHECK_INT(gs_hostmem_parse_cgroup_path("4:cpu:/x\n", b, sizeof(b)), -1);
	CHECK_INT(gs_hostmem_parse_cgroup_path("0::/a/very/long/path\n", b, 8), -1);
}

static void put(const char *root, const char *rel, const char *text)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	/* the folders on the way */
	for (char *s = strchr(p + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		mkdir(p, 0700);
		*s = '/';
	}
	FILE *f = fopen(p, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void test_fake_root(void)
{
	char root[] = "/tmp/gpusnap-hostmem-XXXXXX";
	if (!mkdtemp(root)) {
		CHECK(0 && "mkdtemp");
		return;
	}
	put(root, "proc/meminfo", "MemTotal: 100000000 kB\nMemAvailable: 8388608 kB\nSwapFree: 0 kB\n");
	put(root, "proc/self/cgroup", "0::/a/b\n");
	put(root, "sys/fs/cgroup/a/memory.max", "4294967296\n");
	put(root, "sys/fs/cgroup/a/memory.current", "1073741824\n");
	put(root, "sys/fs/cgroup/a/b/memory.max", "max\n");
	put(root, "sys/fs/cgroup/a/b/memory.current", "1000\n");
	struct gs_hostmem m;
	gs_hostmem_read(root, &m);
	CHECK(m.system == 8ULL << 30);
	CHECK(m.cgroup == 3ULL << 30); /* the parent's limit, not the leaf's "max" */
	CHECK(m.avail == 3ULL << 30);
	CHECK_STR(m.limit, "cgroup memory.max");

	put(root, "sys/fs/cgroup/a/memory.max", "max\n");
	gs_hostmem_read(root, &m);
	CHECK(m.cgroup == UINT64_MAX);
	CHECK(m.avail == 8ULL << 30);
	CHECK_STR(m.limit, "MemAvailable + SwapFree");

	/* another process's cgroups (dump --leave-running's copy is charged to the dumped process's) */
	put(root, "proc/4321/cgroup", "0::/c\n");
	put(root, "sys/fs/cgroup/c/memory.max", "2147483648\n");
	put(root, "sys/fs/cgroup/c/memory.current", "1073741824\n");
	gs_hostmem_read_pid(root, 4321, &m);
	CHECK(m.cgroup == 1ULL << 30);
	CHECK(m.avail == 1ULL << 30);
	CHECK_STR(m.limit, "cgroup memory.max");
	gs_hostmem_read(root, &m); /* this process's view is unchanged */
	CHECK(m.avail == 8ULL << 30);

	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK_INT(system(cmd), 0);
	gs_hostmem_read(root, &m); /* nothing there: unknown, never 0 */
	CHECK(m.avail == UINT64_MAX);
	CHECK_STR(m.limit, "unknown");
}

static void test_this_machine(void)
{
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	CHECK(m.system != UINT64_MAX && m.system > 0); /* Linux has MemAvailable since 3.14 */
	CHECK(m.avail <= m.system);
	printf("     this machine: %llu MiB available (%s)\n", (unsigned long long)(m.avail >> 20), m.limit);
}

int main(void)
{
	RUN(test_parsers);
	RUN(test_fake_root);
	RUN(test_this_machine);
	return TEST_SUMMARY();
}
