/*
 * test_image_tmpfs_full.c - a dump onto a really full file system (a 1 MiB
 * tmpfs): GS_E_NO_SPACE naming the path, nothing left behind, the old image
 * untouched; also with payloads spread over several data files. Needs root to mount; says SKIP and exits 77 otherwise.
 */
#include <sys/mount.h>

#include "image_test_util.h"

static char mnt[700];

/*
 * Opens a writer for DIR path with opts and writes a 4 MiB allocation into it
 * in chunks of `chunk` bytes until one fails; *written counts the chunks
 * tried. Returns the last write's result; *w stays open for the caller.
 */
static int write_4mib(const char *path, const struct gs_image_writer_opts *opts, uint64_t chunk,
		      struct gs_image_writer **w, int *written, struct gs_err *err)
{
	CHECK_INT(image_test_writer_open(path, opts, w, err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(*w, &g, err), 0);
	struct gs_image_allocation a = { .id = 1, .size = 4 << 20 };
	CHECK_INT(gs_image_writer_add_allocation(*w, &a, err), 0);
	void *buf;
	CHECK_INT(posix_memalign(&buf, 4096, chunk), 0);
	int rc = 0;
	*written = 0;
	for (uint64_t off = 0; off < a.size && !rc; off += chunk, (*written)++) {
		fill_pattern(buf, 2, 1, off, chunk);
		rc = gs_image_write_chunk(*w, 1, off, buf, chunk, err);
	}
	free(buf);
	return rc;
}

static void test_real_disk_full(void)
{
	char path[800];
	path_join(path, sizeof(path), mnt, "img");
	struct gs_err err = { 0 };
	const struct gs_image_writer_opts opts = { .how = "agent" };

	/* The standard image fits (about 220 KiB). */
	CHECK_INT(write_std_image(path, &opts, 1, &err), 0);
	CHECK_INT(check_std_image(path, 1), 0);

	/* A 4 MiB allocation does not. */
	struct gs_image_writer *w;
	int written;
	CHECK_INT(write_4mib(path, &opts, 256 << 10, &w, &written, &err), GS_E_NO_SPACE);
	CHECK_CONTAINS(err.msg, "no space left on the file system holding '");
	CHECK_CONTAINS(err.msg, path);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_NO_SPACE);
	CHECK_INT(count_entries(mnt), 1);
	CHECK_INT(check_std_image(path, 1), 0);

	/* A dump into a fresh directory of the full file system leaves nothing either. */
	char fresh[800];
	path_join(fresh, sizeof(fresh), mnt, "fresh");
	CHECK_INT(write_4mib(fresh, &opts, 4 << 20, &w, &written, &err), GS_E_NO_SPACE);
	CHECK_INT(written, 1);
	image_test_writer_abort(w);
	CHECK_INT(count_entries(mnt), 1);
}

/* Full while payloads are spread over several data files (a tmpfs is written through memory): as above. */
static void test_full_with_several_files(void)
{
	char path[800];
	path_join(path, sizeof(path), mnt, "img");
	struct gs_err err = { 0 };
	const struct gs_image_writer_opts opts = { .how = "agent", .parallel_data_files = 4 };
	struct gs_image_writer *w;
	int written;
	CHECK_INT(write_4mib(path, &opts, 128 << 10, &w, &written, &err), GS_E_NO_SPACE);
	CHECK(written > 4); /* the first payloads went into four files before the space ran out */
	struct gs_image_writer_stats st;
	gs_image_writer_stats(w, &st);
	CHECK_INT(st.data_files, 4);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_NO_SPACE);
	CHECK_INT(count_entries(mnt), 1); /* every file of the failed image removed, the old image kept */
	CHECK_INT(check_std_image(path, 1), 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: mounting a tiny tmpfs needs root\n");
		return 77;
	}
	scratch_init("tmpfs-full");
	path_join(mnt, sizeof(mnt), scratch_root, "mnt");
	mkdir(mnt, 0700);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0700") < 0) {
		printf("SKIP: cannot mount a tmpfs here: %s\n", strerror(errno));
		scratch_cleanup();
		return 77;
	}
	RUN(test_real_disk_full);
	RUN(test_full_with_several_files);
	if (umount(mnt) < 0)
		umount2(mnt, MNT_DETACH);
	scratch_cleanup();
	return TEST_SUMMARY();
}
