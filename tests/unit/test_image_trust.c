/*
 * test_image_trust.c - what an image must refuse and what a writer must
 * never lose, on CPU only: symlinks, hard links and FIFOs anywhere in an
 * image (refused at once, nothing blocks), CRIU's files listed and
 * checksummed (cpu-files.img: corrupt, extra, missing, resized, of another
 * image; images without the list still open), unsafe directories above an
 * image (reader and writer), the path through a descriptor that survives a
 * swap, one writer per directory, no silent replacement of another
 * process's image, kept images that no later dump deletes, and read faults.
 * Some checks need root (chown); they say SKIP where it is missing.
 */
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>

#include "common/fault.h"
#include "common/log.h"
#include "image/cpu_list.h"
#include "image/manifest.h"
#include "image_test_util.h"

#define OTHER_UID 65534 /* nobody */

static const struct gs_image_writer_opts proc_opts = {
	.source_pid = 4242,
	.source_comm = "python3",
	.how = "agent",
	.max_data_file_size = 128 * 1024,
};

/* Writes the standard image with a cpu/ holding CRIU-like files (one of 3 pieces of 64 MiB is too big: 300 KiB). */
static int write_cpu_image(const char *path, const struct gs_image_writer_opts *o, uint32_t seed, struct gs_err *err)
{
	struct gs_image_writer *w;
	char cpu[900], f[1000];
	int rc = image_test_writer_open(path, o, &w, err);
	if (rc)
		return rc;
	if ((rc = gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), err)) || (rc = std_describe(w, err)) ||
	    (rc = std_write_chunks(w, seed, err))) {
		image_test_writer_abort(w);
		return rc;
	}
	static uint8_t pages[300000];
	fill_pattern(pages, seed, 99, 0, sizeof(pages));
	path_join(f, sizeof(f), cpu, "pages-1.img");
	spit(f, pages, sizeof(pages));
	path_join(f, sizeof(f), cpu, "inventory.img");
	spit(f, "inventory", 9);
	path_join(f, sizeof(f), cpu, "empty.img");
	spit(f, "", 0);
	path_join(f, sizeof(f), cpu, "sub");
	mkdir(f, 0700);
	path_join(f, sizeof(f), cpu, "sub/core-7.img");
	spit(f, "core", 4);
	return image_test_writer_commit(w, err);
}

/* gs_image_open's code for path; the message in err. */
static int open_rc(const char *path, struct gs_err *err)
{
	struct gs_image *img;
	int rc = gs_image_open(path, &img, err);
	if (!rc)
		gs_image_close(img);
	return rc;
}

/* gs_image_open then gs_image_verify: the first code that is not 0. */
static int verify_rc(const char *path, struct gs_err *err)
{
	struct gs_image *img;
	int rc = gs_image_open(path, &img, err);
	if (rc)
		return rc;
	rc = gs_image_verify(img, 2, err);
	gs_image_close(img);
	return rc;
}

/* Runs open_rc in a child with a 10 s alarm: a hang is a failure (-1), not a stuck test. */
static int open_rc_bounded(const char *path, bool verify, char *msg, size_t n)
{
	int pfd[2];
	if (pipe(pfd))
		return -2;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		alarm(10);
		struct gs_err err = { 0 };
		int rc = verify ? verify_rc(path, &err) : open_rc(path, &err);
		ssize_t w = write(pfd[1], err.msg, strlen(err.msg));
		(void)w;
		_exit(rc);
	}
	close(pfd[1]);
	ssize_t r = read(pfd[0], msg, n - 1);
	msg[r > 0 ? r : 0] = '\0';
	close(pfd[0]);
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ------------------------------------------------------------ 2.4: links */

static void test_symlink_in_cpu_refused(void)
{
	char path[800], f[900], target[900];
	path_join(path, sizeof(path), scratch_dir("symlink"), "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 1, &err), 0);
	/* another user's file, writable by anyone, in CRIU's pages' place */
	path_join(target, sizeof(target), scratch_root, "evil-pages.img");
	spit(target, "evil", 4);
	chmod(target, 0666);
	if (geteuid() == 0)
		CHECK_INT(chown(target, OTHER_UID, OTHER_UID), 0);
	path_join(f, sizeof(f), path, "cpu/pages-1.img");
	unlink(f);
	CHECK_INT(symlink(target, f), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "cpu/pages-1.img");
	CHECK_CONTAINS(err.msg, "symbolic link");
	/* a link to a file of ours is refused too: the link is what is checked, not where it points */
	path_join(target, sizeof(target), scratch_root, "own.img");
	spit(target, "own", 3);
	unlink(f);
	CHECK_INT(symlink(target, f), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	/* and a symlink next to the manifest, which no reader opens */
	unlink(f);
	CHECK_INT(write_cpu_image(path, &proc_opts, 2, &err), 0);
	path_join(f, sizeof(f), path, "notes");
	CHECK_INT(symlink("/etc/passwd", f), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "notes");
}

static void test_hard_link_refused(void)
{
	char path[800], f[900], other[900];
	path_join(path, sizeof(path), scratch_dir("hardlink"), "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 3, &err), 0);
	path_join(f, sizeof(f), path, "cpu/inventory.img");
	path_join(other, sizeof(other), scratch_root, "inventory-link");
	CHECK_INT(link(f, other), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "cpu/inventory.img");
	CHECK_CONTAINS(err.msg, "hard links");
	unlink(other);
	path_join(f, sizeof(f), path, "manifest.img");
	CHECK_INT(link(f, other), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "manifest.img");
	unlink(other);
	CHECK_INT(check_std_image(path, 3), 0);
}

/* ------------------------------------------------------------ 2.5: FIFOs */

static void test_fifo_fails_fast(void)
{
	char path[800], f[900], msg[600];
	path_join(path, sizeof(path), scratch_dir("fifo"), "img");
	struct gs_err err = { 0 };
	const char *names[] = { "gpu-data-0000.img", "manifest.img", "cpu/inventory.img", "cpu/sub/core-7.img",
				"cpu-files.img", "cpu/new-fifo" };
	for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++) {
		for (int verify = 0; verify < 2; verify++) {
			gs_fs_remove_tree(AT_FDCWD, path);
			CHECK_INT(write_cpu_image(path, &proc_opts, 4, &err), 0);
			path_join(f, sizeof(f), path, names[i]);
			unlink(f);
			CHECK_INT(mkfifo(f, 0600), 0);
			double t0 = gs_now();
			int rc = open_rc_bounded(path, verify, msg, sizeof(msg));
			if (rc != GS_E_IMAGE)
				fprintf(stderr, "  %s (verify %d): rc %d: %s\n", names[i], verify, rc, msg);
			CHECK_INT(rc, GS_E_IMAGE);
			CHECK_CONTAINS(msg, names[i]);
			CHECK_CONTAINS(msg, "a FIFO, not a regular file");
			CHECK(gs_now() - t0 < 5);
			unlink(f);
		}
	}
}

/* A FIFO put in a file's place between the check and the open: the open does not wait for a writer. */
static void test_open_does_not_block(void)
{
	const char *dir = scratch_dir("fifo-open");
	char f[900];
	path_join(f, sizeof(f), dir, "x");
	CHECK_INT(mkfifo(f, 0600), 0);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	int fd;
	struct stat st;
	struct gs_err err = { 0 };
	CHECK_INT(gs_fs_open_file(dfd, "x", f, &fd, &st, NULL, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "a FIFO");
	bool missing = false;
	CHECK_INT(gs_fs_open_file(dfd, "nothing", f, &fd, &st, &missing, &err), GS_E_IMAGE);
	CHECK(missing);
	close(dfd);
}

/* ------------------------------------------------------- 2.4: CPU files checksummed */

static void test_cpu_files_listed(void)
{
	char path[800], f[900], bad[900];
	const char *dir = scratch_dir("cpulist");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 5, &err), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	size_t nfiles = 0;
	uint64_t bytes = 0;
	CHECK(gs_image_cpu_files(img, &nfiles, &bytes));
	CHECK_INT(nfiles, 4);
	CHECK(bytes == 300000 + 9 + 0 + 4);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_image_close(img);
	path_join(f, sizeof(f), path, "cpu-files.img");
	struct stat st;
	CHECK(stat(f, &st) == 0 && (st.st_mode & 0777) == 0600);

	/* a flipped bit in a CRIU file: open is fine (sizes match), verify names the file and the range */
	path_join(f, sizeof(f), path, "cpu/pages-1.img");
	size_t len;
	unsigned char *b = slurp(f, &len);
	b[200000] ^= 0x04;
	spit(f, b, len);
	CHECK_INT(open_rc(path, &err), 0);
	CHECK_INT(verify_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/pages-1.img' is corrupt in bytes 0-300000");
	b[200000] ^= 0x04;
	spit(f, b, len);
	CHECK_INT(verify_rc(path, &err), 0);
	/* in a nested file too */
	path_join(f, sizeof(f), path, "cpu/sub/core-7.img");
	spit(f, "cord", 4);
	CHECK_INT(verify_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/sub/core-7.img");
	spit(f, "core", 4);

	/* resized, extra, missing: named when the image is opened */
	path_join(f, sizeof(f), path, "cpu/inventory.img");
	spit(f, "inventory!", 10);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/inventory.img' is 10 bytes, the image says 9");
	spit(f, "inventory", 9);
	path_join(bad, sizeof(bad), path, "cpu/pages-2.img");
	spit(bad, "extra", 5);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/pages-2.img' is not one of the image's files");
	unlink(bad);
	CHECK_INT(rename(f, bad), 0);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/inventory.img' is missing");
	CHECK_INT(rename(bad, f), 0);
	CHECK_INT(verify_rc(path, &err), 0);

	/* the list itself: corrupt, truncated, of another image */
	path_join(f, sizeof(f), path, "cpu-files.img");
	b = (free(b), slurp(f, &len));
	b[70] ^= 1;
	spit(f, b, len);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu-files.img");
	CHECK_CONTAINS(err.msg, "checksum mismatch");
	b[70] ^= 1;
	spit(f, b, len - 1);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu-files.img");
	spit(f, b, len);
	CHECK_INT(open_rc(path, &err), 0);
	char other[800];
	path_join(other, sizeof(other), scratch_dir("cpulist-other"), "img");
	CHECK_INT(write_cpu_image(other, &proc_opts, 5, &err), 0);
	char of[900];
	path_join(of, sizeof(of), other, "cpu-files.img");
	size_t olen;
	unsigned char *ob = slurp(of, &olen);
	spit(f, ob, olen);
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "belongs to another image");
	free(ob);

	/* an image written before the list: opens, says so, verifies its GPU data */
	unlink(f);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	CHECK(!gs_image_cpu_files(img, &nfiles, &bytes));
	CHECK_INT(nfiles, 0);
	gs_log_set_level(GS_LOG_ERROR);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_log_set_level(GS_LOG_WARN);
	char *text = NULL;
	size_t tlen = 0;
	FILE *out = open_memstream(&text, &tlen);
	gs_image_describe_text(img, out);
	fclose(out);
	CHECK_CONTAINS(text, "not checksummed");
	free(text);
	gs_image_close(img);
	free(b);
}

/* The list's decoder on hostile bytes: every field out of range is refused, never read past. */
static void test_cpu_list_hostile(void)
{
	struct gs_cpu_scan scan = { 0 };
	struct gs_cpu_file files[2] = { { "a", 5 }, { "b/c", 0 } };
	scan.files = files;
	scan.nfiles = 2;
	char names[] = "a\0b/c";
	scan.names = names;
	scan.names_len = sizeof(names);
	files[0].name = names;
	files[1].name = names + 2;
	uint8_t id[16] = { 1 };
	struct gs_cpu_list l;
	struct gs_err err = { 0 };
	CHECK_INT(gs_cpu_list_from_scan(&scan, id, 7, 2, &l, &err), 0);
	CHECK_INT(l.npieces, 4); /* a: 2+2+1, b/c: one empty piece */
	void *buf;
	size_t len;
	CHECK_INT(gs_cpu_list_encode(&l, &buf, &len, &err), 0);
	gs_cpu_list_free(&l);
	void *copy = malloc(len);
	memcpy(copy, buf, len);
	CHECK_INT(gs_cpu_list_decode(copy, len, &l, &err), 0);
	CHECK_INT(l.nfiles, 2);
	CHECK_STR(l.pieces[3].name, "b/c");
	gs_cpu_list_free(&l);
	/* every single-byte change is refused (the trailer's CRC), and so is every truncation */
	for (size_t i = 0; i < len; i++) {
		unsigned char *c = malloc(len);
		memcpy(c, buf, len);
		c[i] ^= 0x20;
		if (gs_cpu_list_decode(c, len, &l, &err) == 0) {
			CHECK(0);
			gs_cpu_list_free(&l);
		}
		c = malloc(len);
		memcpy(c, buf, i);
		if (gs_cpu_list_decode(c, i, &l, &err) == 0) {
			CHECK(0);
			gs_cpu_list_free(&l);
		}
	}
	/* well-formed but wrong: names with "..", pieces with gaps (checksummed again, so only the rules catch them) */
	struct gs_cpu_piece bad_pieces[2] = { { "../x", 5, 0, 5, 0 }, { "y", 5, 1, 4, 0 } };
	for (int k = 0; k < 2; k++) {
		struct gs_cpu_list b = { .pieces = &bad_pieces[k], .npieces = 1 };
		void *eb;
		size_t el;
		CHECK_INT(gs_cpu_list_encode(&b, &eb, &el, &err), 0);
		CHECK_INT(gs_cpu_list_decode(eb, el, &l, &err), GS_E_IMAGE);
	}
	free(buf);
}

/* ------------------------------------------------------------ 2.10: directories above */

static void test_unsafe_ancestor_refused(void)
{
	char top[800], mid[800], path[900];
	snprintf(top, sizeof(top), "%s", scratch_dir("ancestor"));
	path_join(mid, sizeof(mid), top, "shared");
	mkdir(mid, 0700);
	path_join(path, sizeof(path), mid, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 6, &err), 0);
	CHECK_INT(open_rc(path, &err), 0);
	/* writable by others, not sticky: anyone could rename the checked image away and put theirs there */
	chmod(mid, 0777);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, mid);
	CHECK_CONTAINS(err.msg, "writable by others (mode 0777, not sticky)");
	chmod(mid, 0770);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "writable by its group");
	/* sticky (as /tmp): only an entry's owner may rename it */
	chmod(mid, 01777);
	CHECK_INT(open_rc(path, &err), 0);
	/* a directory further up counts as much */
	chmod(mid, 0700);
	chmod(top, 0757);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, top);
	chmod(top, 0700);
	/* reached through a symlink: the real directories are checked */
	char via[900];
	path_join(via, sizeof(via), scratch_root, "via");
	CHECK_INT(symlink(mid, via), 0);
	char vpath[1000];
	path_join(vpath, sizeof(vpath), via, "img");
	CHECK_INT(open_rc(vpath, &err), 0);
	chmod(mid, 0777);
	CHECK_INT(open_rc(vpath, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, mid);
	chmod(mid, 0700);
	/* the writer refuses such a place too (restore would refuse the image) */
	char dpath[900];
	path_join(dpath, sizeof(dpath), mid, "img2");
	chmod(mid, 0777);
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(dpath, &proc_opts, &w, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, mid);
	chmod(mid, 0700);
	/* handed over as a descriptor (the agent in a container): its ancestors are the sender's to check, and the
	 * directory's real path need not exist where it is opened */
	chmod(mid, 0777);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	char fdpath[64];
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d/.", dfd);
	CHECK_INT(open_rc(fdpath, &err), 0);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", dfd);
	CHECK_INT(open_rc(fdpath, &err), 0);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d/cpu", dfd); /* below it: walked as any path */
	CHECK(open_rc(fdpath, &err) != 0);
	close(dfd);
	chmod(mid, 0700);
	if (geteuid() != 0) {
		printf("SKIP (not root): a directory above owned by another user\n");
		return;
	}
	CHECK_INT(chown(mid, OTHER_UID, OTHER_UID), 0);
	CHECK_INT(open_rc(path, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "owned by uid 65534");
	CHECK_INT(image_test_writer_open(dpath, &proc_opts, &w, &err), GS_E_PERMISSION);
	CHECK_INT(chown(mid, 0, 0), 0);
	CHECK_INT(check_std_image(path, 6), 0);
}

/* The path given to CRIU leads to the checked cpu/, whatever happens to the names after the check. */
static void test_cpu_dir_through_descriptor(void)
{
	char path[800], moved[900], f[1000];
	const char *dir = scratch_dir("fdpath");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 7, &err), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	char fdp[128];
	CHECK_INT(gs_image_cpu_dir_fd_path(img, fdp, sizeof(fdp), &err), 0);
	char want[64];
	snprintf(want, sizeof(want), "/proc/%d/fd/", (int)getpid());
	CHECK_CONTAINS(fdp, want);
	/* swapped: the checked image moved away, another one put at its name */
	path_join(moved, sizeof(moved), dir, "moved");
	CHECK_INT(rename(path, moved), 0);
	CHECK_INT(write_cpu_image(path, &proc_opts, 8, &err), 0);
	struct stat a, b;
	snprintf(f, sizeof(f), "%s/pages-1.img", fdp);
	CHECK_INT(stat(f, &a), 0);
	path_join(f, sizeof(f), moved, "cpu/pages-1.img");
	CHECK_INT(stat(f, &b), 0);
	CHECK(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	gs_image_close(img);
	/* the writer's cpu/ likewise */
	struct gs_image_tmp *t;
	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), 0);
	CHECK_INT(gs_image_tmp_cpu_fd_path(t, fdp, sizeof(fdp), &err), 0);
	CHECK_CONTAINS(fdp, want);
	snprintf(f, sizeof(f), "%s/core-1.img", fdp);
	spit(f, "x", 1);
	path_join(f, sizeof(f), gs_image_tmp_path(t), "cpu/core-1.img");
	CHECK(access(f, R_OK) == 0);
	gs_image_tmp_discard(t);
}

/* ------------------------------------------------------------ 2.3: one writer, whose image */

static void test_one_writer_per_dir(void)
{
	char path[800];
	const char *dir = scratch_dir("onewriter");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_tmp *t1, *t2;
	CHECK_INT(gs_image_tmp_create(path, NULL, &t1, &err), 0);
	CHECK_INT(gs_image_tmp_create(path, NULL, &t2, &err), GS_E_STATE);
	char want[64];
	snprintf(want, sizeof(want), "another gpusnap (pid %d", (int)getpid());
	CHECK_CONTAINS(err.msg, want);
	CHECK_CONTAINS(err.msg, path);
	/* other directories next to it are not held up */
	char other[800];
	path_join(other, sizeof(other), dir, "img-b");
	CHECK_INT(gs_image_tmp_create(other, NULL, &t2, &err), 0);
	gs_image_tmp_discard(t2);
	gs_image_tmp_discard(t1);
	CHECK_INT(gs_image_tmp_create(path, NULL, &t2, &err), 0);
	gs_image_tmp_discard(t2);

	/* a writer in another process: held while it lives, free once it died (its leftover removed) */
	int pfd[2];
	CHECK_INT(pipe(pfd), 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		struct gs_image_tmp *t;
		char c = gs_image_tmp_create(path, NULL, &t, NULL) ? 'e' : 'k';
		if (write(pfd[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	char c = 0;
	CHECK_INT(read(pfd[0], &c, 1), 1);
	CHECK(c == 'k');
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &proc_opts, &w, &err), GS_E_STATE);
	snprintf(want, sizeof(want), "pid %d", (int)pid);
	CHECK_CONTAINS(err.msg, want);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	CHECK_INT(count_matching(dir, ".img.tmp-"), 1);
	CHECK_INT(write_std_image(path, &proc_opts, 9, &err), 0);
	CHECK_INT(count_entries(dir), 1);
	close(pfd[0]);
	close(pfd[1]);

	/* someone holding the parent's lock (anyone can, in a shared directory) delays a writer, never stops it */
	int pdir = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK_INT(flock(pdir, LOCK_EX), 0);
	double t0 = gs_now();
	CHECK_INT(gs_image_tmp_create(path, NULL, &t1, &err), 0);
	CHECK(gs_now() - t0 < 10);
	/* and the one-writer rule holds without it */
	CHECK_INT(gs_image_tmp_create(path, NULL, &t2, &err), GS_E_STATE);
	gs_image_tmp_discard(t1);
	close(pdir);
	if (geteuid() != 0)
		return;
	/* a locked look-alike of another user (anyone can make one in /tmp) is not taken for a writer */
	char fake[900];
	snprintf(fake, sizeof(fake), "%s/.img.tmp-1-abcdef", dir);
	CHECK_INT(mkdir(fake, 0755), 0);
	CHECK_INT(chown(fake, OTHER_UID, OTHER_UID), 0);
	int ffd = open(fake, O_RDONLY | O_DIRECTORY);
	CHECK_INT(flock(ffd, LOCK_EX), 0);
	CHECK_INT(gs_image_tmp_create(path, NULL, &t1, &err), 0);
	gs_image_tmp_discard(t1);
	close(ffd);
	rmdir(fake);
}

static void test_other_process_not_replaced(void)
{
	char path[800];
	const char *dir = scratch_dir("otherproc");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_std_image(path, &proc_opts, 10, &err), 0);
	/* the same process again (periodic checkpoints, or restored with its PID and name): replaced */
	CHECK_INT(write_std_image(path, &proc_opts, 11, &err), 0);
	CHECK_INT(check_std_image(path, 11), 0);
	/* another PID, or another program with this PID: refused, the image stays */
	struct gs_image_writer_opts other = proc_opts;
	other.source_pid = 777;
	CHECK_INT(write_std_image(path, &other, 12, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "holds the image of another process, 4242 (python3); not replacing it with one of 777");
	CHECK_CONTAINS(err.msg, "--replace");
	other = proc_opts;
	other.source_comm = "bash";
	CHECK_INT(write_std_image(path, &other, 12, &err), GS_E_USAGE);
	CHECK_INT(check_std_image(path, 11), 0);
	CHECK_INT(count_entries(dir), 1);
	/*
	 * a process in a PID namespace of its own: its agent recorded the PID it
	 * sees (4242), gpusnap knows it by another (777): the same process
	 */
	struct gs_image_tmp *t = NULL;
	struct gs_image_tmp_opts own = { .source_pid = 777, .source_pid_own = 4242, .source_comm = "python3" };
	CHECK_INT(gs_image_tmp_create(path, &own, &t, &err), 0);
	gs_image_tmp_discard(t);
	own.source_pid_own = 778;
	CHECK_INT(gs_image_tmp_create(path, &own, &t, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "holds the image of another process, 4242 (python3)");
	CHECK_INT(check_std_image(path, 11), 0);
	/* unless told */
	other.replace = true;
	CHECK_INT(write_std_image(path, &other, 12, &err), 0);
	CHECK_INT(check_std_image(path, 12), 0);
	/* an image that cannot be read says so instead of being replaced */
	char f[900];
	path_join(f, sizeof(f), path, "manifest.img");
	spit(f, "garbage", 7);
	CHECK_INT(write_std_image(path, &proc_opts, 13, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "cannot tell whose image");
	/* writers that name no process (0) do not check */
	CHECK_INT(write_std_image(path, NULL, 14, &err), 0);
}

/* ------------------------------------------------------------ 2.2: kept images */

/* A sealed image in a temporary directory of path, as a dump leaves it after CRIU ran. */
static struct gs_image_tmp *sealed_tmp(const char *path, uint32_t seed)
{
	struct gs_err err = { 0 };
	struct gs_image_tmp *t;
	struct gs_image_tmp_opts to = { .source_pid = 4242, .source_comm = "python3" };
	CHECK_INT(gs_image_tmp_create(path, &to, &t, &err), 0);
	char cpu[900], f[1000];
	CHECK_INT(gs_image_tmp_cpu_dir(t, cpu, sizeof(cpu), &err), 0);
	struct gs_image_writer *w;
	CHECK_INT(gs_image_writer_open_in(gs_image_tmp_path(t), &proc_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, seed, &err), 0);
	CHECK_INT(gs_image_writer_seal(w, &err), 0);
	path_join(f, sizeof(f), cpu, "inventory.img");
	spit(f, "criu", 4);
	return t;
}

/* Leaves what a dump killed after CRIU leaves: a temporary directory of a dead writer, sealed or not. */
static void dead_writer(const char *path, bool sealed)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		struct gs_image_tmp_opts to = { .source_pid = 4242, .source_comm = "python3" };
		struct gs_image_tmp *t;
		if (sealed)
			sealed_tmp(path, 24);
		else if (gs_image_tmp_create(path, &to, &t, NULL))
			_exit(1);
		_exit(test_current_failed);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_kept_images_never_deleted(void)
{
	char path[800], kept[1000];
	const char *dir = scratch_dir("kept");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_std_image(path, &proc_opts, 20, &err), 0);
	gs_log_set_level(GS_LOG_ERROR); /* kept images have no list of CPU files: verify warns */

	/* a dump that cannot publish keeps its image under a name of its own, and says which */
	struct gs_image_tmp *t = sealed_tmp(path, 21);
	CHECK_INT(gs_image_tmp_keep(t, kept, sizeof(kept), &err), 0);
	char want[900];
	snprintf(want, sizeof(want), "%s.kept-4242-", path);
	CHECK(!strncmp(kept, want, strlen(want)));
	CHECK_INT(check_std_image(kept, 21), 0);
	/* later dumps to the same DIR leave it alone */
	CHECK_INT(write_std_image(path, &proc_opts, 22, &err), 0);
	CHECK_INT(write_std_image(path, &proc_opts, 23, &err), 0);
	CHECK_INT(check_std_image(kept, 21), 0);
	CHECK_INT(check_std_image(path, 23), 0);
	gs_fs_remove_tree(AT_FDCWD, kept);

	/* a sealed image whose dump died (lock released, no rename): the next dump keeps it, never deletes it */
	dead_writer(path, true);
	CHECK_INT(count_matching(dir, ".img.tmp-"), 1);
	CHECK_INT(write_std_image(path, &proc_opts, 25, &err), 0);
	CHECK_INT(count_matching(dir, ".img.tmp-"), 0);
	CHECK(find_matching(dir, "img.kept-4242-", kept, sizeof(kept)));
	CHECK_INT(check_std_image(kept, 24), 0);
	CHECK_INT(count_entries(dir), 2);
	gs_fs_remove_tree(AT_FDCWD, kept);

	/* one without a manifest is an unfinished dump: removed */
	dead_writer(path, false);
	CHECK_INT(count_matching(dir, ".img.tmp-"), 1);
	CHECK_INT(write_std_image(path, &proc_opts, 26, &err), 0);
	CHECK_INT(count_entries(dir), 1);

	/* two kept in the same second get names of their own */
	char k1[1000], k2[1000];
	t = sealed_tmp(path, 27);
	CHECK_INT(gs_image_tmp_keep(t, k1, sizeof(k1), &err), 0);
	t = sealed_tmp(path, 28);
	CHECK_INT(gs_image_tmp_keep(t, k2, sizeof(k2), &err), 0);
	CHECK(strcmp(k1, k2) != 0);
	CHECK_INT(check_std_image(k1, 27), 0);
	CHECK_INT(check_std_image(k2, 28), 0);
	gs_log_set_level(GS_LOG_WARN);
}

/* ------------------------------------------------------------ faults when reading */

static void test_read_faults(void)
{
	char path[800], cpu[900], f[1000];
	const char *dir = scratch_dir("readfault");
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_cpu_image(path, &proc_opts, 30, &err), 0);
	gs_log_set_level(GS_LOG_ERROR);
	/* an I/O error is a bad image (exit 11), named (reads 1 and 2: the manifest and the list) */
	gs_fault_configure("image-read@3=fail:EIO");
	CHECK_INT(verify_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "gpu-data-");
	CHECK_CONTAINS(err.msg, "Input/output error");
	/* in CRIU's files too: an image with CPU state and no GPU data */
	char cpu_only[900];
	path_join(cpu_only, sizeof(cpu_only), dir, "cpu-only");
	struct gs_image_writer *w;
	gs_fault_configure("");
	CHECK_INT(image_test_writer_open(cpu_only, &proc_opts, &w, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	path_join(f, sizeof(f), cpu, "pages-1.img");
	spit(f, "pages", 5);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(cpu_only, &img, &err), 0);
	gs_fault_configure("image-read=fail:EIO");
	CHECK_INT(gs_image_verify(img, 1, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "cpu/pages-1.img");
	gs_image_close(img);
	/* reading the manifest */
	gs_fault_configure("image-read=fail:EIO");
	CHECK_INT(open_rc(path, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "manifest.img");
	gs_fault_configure("");
	gs_log_set_level(GS_LOG_WARN);
	CHECK_INT(check_std_image(path, 30), 0);
}

int main(void)
{
	gs_log_init_from_env();
	scratch_init("trust");
	RUN(test_symlink_in_cpu_refused);
	RUN(test_hard_link_refused);
	RUN(test_fifo_fails_fast);
	RUN(test_open_does_not_block);
	RUN(test_cpu_files_listed);
	RUN(test_cpu_list_hostile);
	RUN(test_unsafe_ancestor_refused);
	RUN(test_cpu_dir_through_descriptor);
	RUN(test_one_writer_per_dir);
	RUN(test_other_process_not_replaced);
	RUN(test_kept_images_never_deleted);
	RUN(test_read_faults);
	scratch_cleanup();
	return TEST_SUMMARY();
}
