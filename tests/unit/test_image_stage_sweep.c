/*
 * test_image_stage_sweep.c - gs_image_stage_sweep: which stages of killed
 * live dumps (.gpusnap-live-<maker>-XXXXXX in a memory file system) it
 * removes and which it keeps. Kept: one whose maker runs, one somebody has
 * open and locked (the agent writing into it), one whose manifest names a
 * process that runs (its only copy of its data). Removed: one whose maker
 * is gone with no manifest (never finished) or whose process is gone.
 * Also: a stage's own descriptor is locked while it exists. Needs /dev/shm
 * to be a tmpfs (else says SKIP and exits 77).
 */
#include <sys/file.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <linux/magic.h>

#include "image_test_util.h"

static char mem[600];


/* A stage directory by its name as a killed dump leaves it; with a manifest naming source when source > 0. */
static void make_stage(const char *name, pid_t source)
{
	char path[800];
	path_join(path, sizeof(path), mem, name);
	CHECK_INT(mkdir(path, 0700), 0);
	if (source <= 0)
		return;
	struct gs_image_writer_opts wo = { .source_pid = source, .source_comm = "app", .how = "agent" };
	struct gs_image_writer *w = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_image_writer_open_in(path, &wo, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	CHECK_INT(gs_image_writer_seal(w, &err), 0);
}

static bool there(const char *name)
{
	char path[800];
	path_join(path, sizeof(path), mem, name);
	struct stat st;
	return stat(path, &st) == 0;
}

static void test_sweep(void)
{
	char own[64], unfinished[64], locked[64], held[64], orphan[64];
	pid_t gone = test_dead_pid();
	snprintf(own, sizeof(own), ".gpusnap-live-%d-aaaaaa", (int)getpid());
	snprintf(unfinished, sizeof(unfinished), ".gpusnap-live-%d-bbbbbb", (int)gone);
	snprintf(locked, sizeof(locked), ".gpusnap-live-%d-cccccc", (int)gone);
	snprintf(held, sizeof(held), ".gpusnap-live-%d-dddddd", (int)gone);
	snprintf(orphan, sizeof(orphan), ".gpusnap-live-%d-eeeeee", (int)gone);
	make_stage(own, 0);
	make_stage(unfinished, 0);
	make_stage(locked, 0);
	make_stage(held, getpid());
	make_stage(orphan, gone);
	make_stage(".gpusnap-live-x", 0); /* not a stage's name */
	make_stage("other", 0);
	char path[800];
	path_join(path, sizeof(path), mem, locked);
	int lock_fd = open(path, O_RDONLY | O_DIRECTORY);
	CHECK(lock_fd >= 0 && flock(lock_fd, LOCK_SH) == 0);

	CHECK_INT(gs_image_stage_sweep(mem), 2);
	CHECK(there(own));         /* its maker runs */
	CHECK(!there(unfinished)); /* maker gone, never finished */
	CHECK(there(locked));      /* somebody writes into it */
	CHECK(there(held));        /* the only copy of a live process's data */
	CHECK(!there(orphan));     /* its process is gone */
	CHECK(there(".gpusnap-live-x"));
	CHECK(there("other"));

	close(lock_fd);
	CHECK_INT(gs_image_stage_sweep(mem), 1); /* unlocked now, still unfinished */
	CHECK(!there(locked));
	CHECK(there(held));
}

static void test_stage_fd_locked(void)
{
	struct gs_image_stage *s = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_image_stage_create(mem, 1 << 20, 1 << 20, false, &s, &err), 0);
	if (!s)
		return;
	int fd = open(gs_image_stage_path(s), O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	CHECK(flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK);
	CHECK(gs_image_stage_fd(s) >= 0);
	close(fd);
	/* its maker (this process) runs: the sweep leaves it */
	CHECK_INT(gs_image_stage_sweep(mem), 0);
	char path[700];
	snprintf(path, sizeof(path), "%s", gs_image_stage_path(s));
	gs_image_stage_free(s, false);
	struct stat st;
	CHECK(stat(path, &st) < 0 && errno == ENOENT);
}

int main(void)
{
	struct statfs sfs;
	if (statfs("/dev/shm", &sfs) < 0 || sfs.f_type != TMPFS_MAGIC) {
		printf("SKIP: /dev/shm is not a tmpfs here\n");
		return 77;
	}
	snprintf(mem, sizeof(mem), "/dev/shm/gpusnap-stage-sweep-XXXXXX");
	if (!mkdtemp(mem)) {
		printf("SKIP: cannot make a directory in /dev/shm: %s\n", strerror(errno));
		return 77;
	}
	RUN(test_sweep);
	gs_fs_remove_tree(AT_FDCWD, mem);
	CHECK_INT(mkdir(mem, 0700), 0);
	RUN(test_stage_fd_locked);
	gs_fs_remove_tree(AT_FDCWD, mem);
	return TEST_SUMMARY();
}
