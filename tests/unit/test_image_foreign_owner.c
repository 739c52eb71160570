/*
 * test_image_foreign_owner.c - restore trusts only files of the current user
 * or root: an image (or one file of it) owned by another user is refused,
 * and a root-owned, read-only-for-others image is accepted by a normal user.
 * Needs root to chown and to switch user; says SKIP and exits 77 otherwise.
 */
#include <sys/wait.h>

#include "image_test_util.h"

#define OTHER_UID 65534 /* nobody */

static void test_other_owner_refused(void)
{
	char path[800], f[900];
	path_join(path, sizeof(path), scratch_dir("owner"), "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_std_image(path, NULL, 1, &err), 0);
	struct gs_image *img;
	const char *names[] = { "gpu-data-0000.img", "manifest.img", "." };
	for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++) {
		path_join(f, sizeof(f), path, names[i]);
		CHECK_INT(chown(f, OTHER_UID, OTHER_UID), 0);
		CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
		CHECK_CONTAINS(err.msg, "owned by uid 65534, not by you or root");
		CHECK_INT(chown(f, 0, 0), 0);
	}
	CHECK_INT(check_std_image(path, 1), 0);

	/* cpu/ too: CRIU would restore whatever it says. */
	struct gs_image_writer *w;
	char cpu[900];
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	path_join(f, sizeof(f), cpu, "core-1.img");
	spit(f, "x", 1);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 2, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	path_join(f, sizeof(f), path, "cpu/core-1.img");
	CHECK_INT(chown(f, OTHER_UID, OTHER_UID), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "cpu/core-1.img");
}

/* Opens path as OTHER_UID in a child; returns gs_image_open's code. */
static int open_as_other(const char *path)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(OTHER_UID) < 0 || setuid(OTHER_UID) < 0)
			_exit(100);
		struct gs_err err = { 0 };
		struct gs_image *img;
		int rc = gs_image_open(path, &img, &err);
		if (rc)
			fprintf(stderr, "  as uid %d: %s\n", OTHER_UID, err.msg);
		else
			rc = gs_image_verify(img, 2, &err);
		_exit(rc);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_root_owned_image_accepted_by_user(void)
{
	char path[800], f[900];
	const char *dir = scratch_dir("rootowned");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_std_image(path, NULL, 3, &err), 0);
	/* Readable by others, writable only by root: a normal user may restore it. */
	chmod(scratch_root, 0755);
	chmod(dir, 0755);
	chmod(path, 0755);
	const char *names[] = { "gpu-data-0000.img", "manifest.img" };
	for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++) {
		path_join(f, sizeof(f), path, names[i]);
		chmod(f, 0644);
	}
	CHECK_INT(open_as_other(path), 0);
	/* Owned by that user it is theirs too; owned by a third user it is refused. */
	path_join(f, sizeof(f), path, "manifest.img");
	CHECK_INT(chown(f, 12345, 12345), 0);
	CHECK_INT(open_as_other(path), GS_E_PERMISSION);
	chmod(scratch_root, 0700);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: changing file owners needs root\n");
		return 77;
	}
	scratch_init("owner");
	RUN(test_other_owner_refused);
	RUN(test_root_owned_image_accepted_by_user);
	scratch_cleanup();
	return TEST_SUMMARY();
}
