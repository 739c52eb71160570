/*
 * test_image_stage_sweep.c - gs_image_stage_sweep: which stages of killed
 * live dumps (.gpusnap-live-<maker>-XXXXXX in a memory file system, with
 * .owner naming the maker and the process whose data it holds) it removes
 * and which it keeps. Kept: one whose maker runs, one somebody has open and
 * locked (the agent writing into it), one with a manifest whose process
 * runs (its only copy of its data), one without a readable .owner or made
 * in another PID namespace (nothing known). Removed: one whose maker is gone
 * (also: its PID taken by a later process) with no manifest (never
 * finished), or whose process is gone. Also: a stage's own descriptor is
 * locked while it exists, and a stage made by gs_image_stage_create is
 * swept once its maker and its process are gone. And gs_image_stage_write
 * of an incremental image: the manifest written with the parent's path the
 * published image records (gs_image_stage_set_parent_rec), its parent's id
 * kept; a stage without a parent refuses such a path. Needs /dev/shm to be a
 * tmpfs (else says SKIP and exits 77).
 */
#include <sys/file.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include "common/proc.h"
#include "image/manifest.h"
#include "image_test_util.h"

static char mem[600];


static unsigned long long my_pid_ns(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/*
 * A stage directory as a killed dump leaves it, made by maker (its start
 * time maker_start; 0: its real one) in PID namespace ns, for process owner;
 * with a manifest naming owner when manifest. No .owner when ns is 0.
 */
static void make_stage(const char *name, unsigned long long ns, pid_t maker, unsigned long long maker_start, pid_t owner,
		       bool manifest)
{
	char path[800];
	path_join(path, sizeof(path), mem, name);
	CHECK_INT(mkdir(path, 0700), 0);
	if (ns) {
		char owner_path[900], line[160];
		snprintf(owner_path, sizeof(owner_path), "%s/.owner", path);
		FILE *f = fopen(owner_path, "w");
		CHECK(f != NULL);
		if (f) {
			snprintf(line, sizeof(line), "%llu %d %llu %d %llu\n", ns, (int)maker,
				 maker_start ? maker_start : gs_proc_start_time(maker), (int)owner, gs_proc_start_time(owner));
			fputs(line, f);
			fclose(f);
		}
	}
	if (!manifest)
		return;
	struct gs_image_writer_opts wo = { .source_pid = owner, .source_comm = "app", .how = "agent" };
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
	pid_t me = getpid(), gone = test_dead_pid();
	unsigned long long ns = my_pid_ns();
	CHECK(ns != 0);
	char own[64], unfinished[64], locked[64], held[64], orphan[64], unknown[64], elsewhere[64], reused[64];
	snprintf(own, sizeof(own), ".gpusnap-live-%d-aaaaaa", (int)me);
	snprintf(unfinished, sizeof(unfinished), ".gpusnap-live-%d-bbbbbb", (int)gone);
	snprintf(locked, sizeof(locked), ".gpusnap-live-%d-cccccc", (int)gone);
	snprintf(held, sizeof(held), ".gpusnap-live-%d-dddddd", (int)gone);
	snprintf(orphan, sizeof(orphan), ".gpusnap-live-%d-eeeeee", (int)gone);
	snprintf(unknown, sizeof(unknown), ".gpusnap-live-%d-ffffff", (int)gone);
	snprintf(elsewhere, sizeof(elsewhere), ".gpusnap-live-%d-gggggg", (int)gone);
	snprintf(reused, sizeof(reused), ".gpusnap-live-%d-hhhhhh", (int)me);
	make_stage(own, ns, me, 0, me, false);
	make_stage(unfinished, ns, gone, 0, me, false);
	make_stage(locked, ns, gone, 0, gone, false);
	make_stage(held, ns, gone, 0, me, true);
	make_stage(orphan, ns, gone, 0, gone, true);
	make_stage(unknown, 0, gone, 0, gone, true);
	make_stage(elsewhere, ns + 1, gone, 0, gone, true);
	make_stage(reused, ns, me, 1, gone, true); /* its maker's PID is now another process's (this one) */
	make_stage(".gpusnap-live-x", ns, gone, 0, gone, false); /* not a stage's name */
	char path[800];
	path_join(path, sizeof(path), mem, locked);
	int lock_fd = open(path, O_RDONLY | O_DIRECTORY);
	CHECK(lock_fd >= 0 && flock(lock_fd, LOCK_SH) == 0);

	CHECK_INT(gs_image_stage_sweep(mem), 3);
	CHECK(there(own));         /* its maker runs */
	CHECK(!there(unfinished)); /* maker gone, never finished */
	CHECK(there(locked));      /* somebody writes into it */
	CHECK(there(held));        /* the only copy of a live process's data */
	CHECK(!there(orphan));     /* its process is gone */
	CHECK(there(unknown));     /* no .owner: nothing known */
	CHECK(there(elsewhere));   /* made in another PID namespace: its PIDs are not ours */
	CHECK(!there(reused));     /* its maker's PID taken by a later process, its process gone */
	CHECK(there(".gpusnap-live-x"));

	close(lock_fd);
	CHECK_INT(gs_image_stage_sweep(mem), 1); /* unlocked now, its process gone */
	CHECK(!there(locked));
	CHECK(there(held));
}

static void test_stage_fd_locked(void)
{
	struct gs_image_stage *s = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_image_stage_create(mem, 1 << 20, 1 << 20, false, getpid(), &s, &err), 0);
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

	/* made by a child for a process that is gone, the child gone too: swept */
	pid_t gone = test_dead_pid();
	int pipefd[2];
	CHECK_INT(pipe(pipefd), 0);
	pid_t child = fork();
	if (child == 0) {
		struct gs_image_stage *cs = NULL;
		struct gs_err ce = { 0 };
		char name[700] = "";
		if (!gs_image_stage_create(mem, 1 << 20, 1 << 20, false, gone, &cs, &ce))
			snprintf(name, sizeof(name), "%s", gs_image_stage_path(cs));
		if (write(pipefd[1], name, sizeof(name)) < 0)
			_exit(1);
		_exit(0); /* killed in its pause: the stage stays */
	}
	close(pipefd[1]);
	char made[700] = "";
	CHECK(read(pipefd[0], made, sizeof(made)) == (ssize_t)sizeof(made));
	close(pipefd[0]);
	waitpid(child, NULL, 0);
	CHECK(made[0] && stat(made, &st) == 0);
	CHECK_INT(gs_image_stage_sweep(mem), 1);
	CHECK(stat(made, &st) < 0 && errno == ENOENT);
}

/* A stage holding a sealed image of this process, with a parent record naming parent_path when given. */
static struct gs_image_stage *stage_with_image(const char *parent_path, const uint8_t parent_id[16])
{
	struct gs_image_stage *s = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_image_stage_create(mem, 1 << 20, 1 << 20, false, getpid(), &s, &err), 0);
	if (!s)
		return NULL;
	struct gs_image_writer_opts wo = { .source_pid = getpid(), .source_comm = "app", .how = "agent" };
	struct gs_image_writer *w = NULL;
	CHECK_INT(gs_image_writer_open_in(gs_image_stage_path(s), &wo, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	if (parent_path) {
		struct gs_image_parent pr = { .manifest_crc32c = 77, .path = parent_path };
		memcpy(pr.image_id, parent_id, 16);
		CHECK_INT(gs_image_writer_set_parent(w, &pr, &err), 0);
	}
	CHECK_INT(gs_image_writer_seal(w, &err), 0);
	CHECK_INT(gs_image_stage_detach(s, &err), 0);
	return s;
}

static void test_stage_write_parent_rec(void)
{
	char dir[700];
	snprintf(dir, sizeof(dir), "%s/img-inc", mem);
	static const uint8_t id[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	struct gs_err err = { 0 };
	struct gs_image_stage *s = stage_with_image("/abs/series/img", id);
	if (!s)
		return;
	CHECK_INT(gs_image_stage_set_parent_rec(s, "img", &err), 0);
	struct gs_image_tmp_opts to = { .source_pid = getpid() };
	struct gs_image_tmp *t = NULL;
	CHECK_INT(gs_image_tmp_create(dir, &to, &t, &err), 0);
	uint64_t bytes = 0;
	CHECK_INT(gs_image_stage_write(s, t, NULL, &bytes, &err), 0);
	CHECK(bytes > 0);
	struct gs_manifest m;
	int fd = open(gs_image_tmp_path(t), O_RDONLY | O_DIRECTORY);
	CHECK_INT(gs_manifest_read_at(fd, gs_image_tmp_path(t), &m, &err), 0);
	close(fd);
	CHECK(m.has_parent);
	CHECK_STR(m.parent.path, "img");
	CHECK(!memcmp(m.parent.image_id, id, 16));
	CHECK_INT((int)m.parent.manifest_crc32c, 77);
	gs_manifest_free(&m);
	gs_image_tmp_discard(t);
	gs_image_stage_free(s, false);

	/* a stage without a parent record takes none */
	s = stage_with_image(NULL, id);
	if (!s)
		return;
	CHECK_INT(gs_image_stage_set_parent_rec(s, "img", &err), 0);
	t = NULL;
	CHECK_INT(gs_image_tmp_create(dir, &to, &t, &err), 0);
	CHECK(gs_image_stage_write(s, t, NULL, &bytes, &err) != 0);
	CHECK_CONTAINS(err.msg, "names no parent to record as 'img'");
	gs_image_tmp_discard(t);
	gs_image_stage_free(s, false);
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
	RUN(test_stage_write_parent_rec);
	gs_fs_remove_tree(AT_FDCWD, mem);
	CHECK_INT(mkdir(mem, 0700), 0);
	RUN(test_stage_fd_locked);
	gs_fs_remove_tree(AT_FDCWD, mem);
	return TEST_SUMMARY();
}
