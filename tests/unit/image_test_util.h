/*
 * image_test_util.h - helpers shared by the image unit tests: a scratch
 * directory, a standard image (every kind of allocation and chunk) written
 * and checked byte for byte, and raw manifest patching for corruption tests.
 */
#ifndef GPUSNAP_IMAGE_TEST_UTIL_H
#define GPUSNAP_IMAGE_TEST_UTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "image/crc32c.h"
#include "image/format.h"
#include "image/image.h"
#include "image/image_fs.h"
#include "image_test_writer.h" /* tests/common */
#include "test.h"

/* Each test file uses some of these helpers. */
#define TEST_HELPER static __attribute__((unused))

static char scratch_root[512];

/* Creates the test's scratch directory under $TMPDIR (or /tmp). */
TEST_HELPER void scratch_init(const char *tag)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(scratch_root, sizeof(scratch_root), "%s/gpusnap-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
	if (!mkdtemp(scratch_root)) {
		perror("mkdtemp");
		exit(1);
	}
}

TEST_HELPER void scratch_cleanup(void)
{
	gs_fs_remove_tree(AT_FDCWD, scratch_root);
}

/* A fresh empty directory under the scratch root; returns its path (static buffer rotated 4 ways). */
TEST_HELPER const char *scratch_dir(const char *name)
{
	static char bufs[4][700];
	static int next;
	char *b = bufs[next++ % 4];
	snprintf(b, sizeof(bufs[0]), "%s/%s", scratch_root, name);
	gs_fs_remove_tree(AT_FDCWD, b);
	mkdir(b, 0700);
	return b;
}

TEST_HELPER void path_join(char *out, size_t n, const char *a, const char *b)
{
	snprintf(out, n, "%s/%s", a, b);
}

/* Number of entries in dir (without . and ..) whose name contains needle. */
TEST_HELPER int count_matching(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strstr(de->d_name, needle))
			n++;
	closedir(d);
	return n;
}

/* The path of the first entry of dir whose name contains needle into out; false if none. */
TEST_HELPER bool find_matching(const char *dir, const char *needle, char *out, size_t n)
{
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strstr(de->d_name, needle)) {
			snprintf(out, n, "%s/%s", dir, de->d_name);
			found = true;
		}
	closedir(d);
	return found;
}

TEST_HELPER int count_entries(const char *dir)
{
	return count_matching(dir, "");
}

TEST_HELPER uint8_t pattern_byte(uint32_t seed, uint64_t id, uint64_t off)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ULL ^ (id << 40) ^ ((uint64_t)seed << 20);
	x ^= x >> 29;
	return (uint8_t)(x | 1); /* never zero: pattern chunks must not be taken for ZERO chunks */
}

TEST_HELPER void fill_pattern(uint8_t *buf, uint32_t seed, uint64_t id, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern_byte(seed, id, off + i);
}

struct std_alloc {
	uint64_t id, va, size;
	uint32_t gpu, kind, flags;
	uint64_t chunk; /* chunk size used to write it */
	int zero;       /* written as zeros (detected by the writer), or as explicit zero chunks (2) */
};

/* Every case the format has: 0 bytes, 1 byte, several chunks with an unaligned tail, zero chunks, no data. */
static const struct std_alloc std_allocs[] = {
	{ 1, 0x7f0000000000ULL, 0, 0, GS_ALLOC_KIND_DEVICE, 0, 65536, 0 },
	{ 2, 0x7f0000200000ULL, 1, 0, GS_ALLOC_KIND_DEVICE, 0, 65536, 0 },
	{ 3, 0x7f0000400000ULL, 3 * 65536 + 1000, 1, GS_ALLOC_KIND_APP_VMM, 0, 65536, 0 },
	{ 4, 0x7f0000800000ULL, 262144, 1, GS_ALLOC_KIND_POOL, 0, 65536, 1 },
	{ 5, 0x7f0000c00000ULL, 1 << 20, 0, GS_ALLOC_KIND_DEVICE, GS_ALLOC_F_NO_DATA, 0, 0 },
	{ 6, 0x7f0001000000ULL, 200000, 0, GS_ALLOC_KIND_DEVICE, 0, 50000, 2 },
};
#define STD_NALLOCS (sizeof(std_allocs) / sizeof(std_allocs[0]))
static const uint8_t std_blob[5] = { 1, 2, 3, 4, 5 };

TEST_HELPER size_t std_chunk_count(void)
{
	size_t n = 0;
	for (size_t i = 0; i < STD_NALLOCS; i++)
		if (!(std_allocs[i].flags & GS_ALLOC_F_NO_DATA) && std_allocs[i].size)
			n += (std_allocs[i].size + std_allocs[i].chunk - 1) / std_allocs[i].chunk;
	return n;
}

/* Describes the standard image to w (GPUs, allocations, metadata). */
TEST_HELPER int std_describe(struct gs_image_writer *w, struct gs_err *err)
{
	struct gs_image_gpu g0 = { .index = 0, .name = "NVIDIA H100 80GB HBM3", .cc_major = 9, .cc_minor = 0,
				   .total_memory = 85031714816ULL };
	struct gs_image_gpu g1 = g0;
	g1.index = 1;
	for (int i = 0; i < 16; i++) {
		g0.uuid[i] = (uint8_t)(0xa0 + i);
		g1.uuid[i] = (uint8_t)(0xb0 + i);
	}
	int rc;
	if ((rc = gs_image_writer_add_gpu(w, &g1, err)) || (rc = gs_image_writer_add_gpu(w, &g0, err)))
		return rc;
	/* Added in reverse order: the writer sorts. */
	for (size_t i = STD_NALLOCS; i-- > 0;) {
		const struct std_alloc *s = &std_allocs[i];
		struct gs_image_allocation a = { .id = s->id, .va = s->va, .size = s->size, .gpu_index = s->gpu,
						 .kind = s->kind, .flags = s->flags };
		if (s->id == 3) {
			a.blob = std_blob;
			a.blob_len = sizeof(std_blob);
		}
		if ((rc = gs_image_writer_add_allocation(w, &a, err)))
			return rc;
	}
	if ((rc = gs_image_writer_set_metadata(w, "model", "llama-test", err)) ||
	    (rc = gs_image_writer_set_metadata(w, "note", "", err)) ||
	    (rc = gs_image_writer_set_metadata(w, "model", "llama-3", err)))
		return rc;
	return 0;
}

/* Writes the chunks of the standard image (aligned buffers, so O_DIRECT is used where it can be). */
TEST_HELPER int std_write_chunks(struct gs_image_writer *w, uint32_t seed, struct gs_err *err)
{
	void *buf;
	if (posix_memalign(&buf, GS_FMT_ALIGN, 65536))
		return -1;
	int rc = 0;
	for (size_t i = 0; i < STD_NALLOCS && !rc; i++) {
		const struct std_alloc *s = &std_allocs[i];
		if (s->flags & GS_ALLOC_F_NO_DATA)
			continue;
		/* Last chunk first: order of writes does not matter. */
		for (uint64_t off = s->size ? (s->size - 1) / s->chunk * s->chunk : 0; off < s->size && !rc;
		     off = off ? off - s->chunk : s->size) {
			size_t len = (size_t)(s->size - off < s->chunk ? s->size - off : s->chunk);
			if (s->zero == 2) {
				rc = gs_image_write_zero_chunk(w, s->id, off, len, err);
			} else {
				if (s->zero)
					memset(buf, 0, len);
				else
					fill_pattern(buf, seed, s->id, off, len);
				rc = gs_image_write_chunk(w, s->id, off, buf, len, err);
			}
		}
	}
	free(buf);
	return rc;
}

/* Describes the standard image of `seed` in w and writes its chunks; aborts w on failure. */
TEST_HELPER int std_fill(struct gs_image_writer *w, uint32_t seed, struct gs_err *err)
{
	int rc = std_describe(w, err);
	if (rc || (rc = std_write_chunks(w, seed, err)))
		gs_image_writer_abort(w);
	return rc;
}

/* Writes and commits the standard image at dir. */
TEST_HELPER int write_std_image(const char *dir, const struct gs_image_writer_opts *opts, uint32_t seed,
				 struct gs_err *err)
{
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, opts, &w, err);
	if (rc)
		return rc;
	if ((rc = std_describe(w, err)) || (rc = std_write_chunks(w, seed, err))) {
		image_test_writer_abort(w);
		return rc;
	}
	return image_test_writer_commit(w, err);
}

/* Writes the standard image into tmp, an image's temporary directory (gs_image_tmp_path), and seals it. */
TEST_HELPER int seal_std_image_in(const char *tmp, const struct gs_image_writer_opts *opts, uint32_t seed,
				  struct gs_err *err)
{
	struct gs_image_writer *w;
	int rc = gs_image_writer_open_in(tmp, opts, &w, err);
	if (rc || (rc = std_fill(w, seed, err)))
		return rc;
	return gs_image_writer_seal(w, err);
}


/* Opens dir and checks every byte against the standard image of `seed`. Returns the number of failed checks. */
TEST_HELPER int check_std_image(const char *dir, uint32_t seed)
{
	int before = test_current_failed;
	test_current_failed = 0;
	struct gs_err err = { 0 };
	struct gs_image *img;
	int rc = gs_image_open(dir, &img, &err);
	CHECK_INT(rc, 0);
	if (rc) {
		fprintf(stderr, "  open: %s\n", err.msg);
		return 1;
	}
	CHECK_INT(gs_image_allocation_count(img), STD_NALLOCS);
	CHECK_INT(gs_image_chunk_count(img), std_chunk_count());
	CHECK_INT(gs_image_gpu_count(img), 2);
	CHECK_STR(gs_image_metadata_get(img, "model"), "llama-3");
	CHECK_STR(gs_image_metadata_get(img, "note"), "");
	CHECK(gs_image_metadata_get(img, "nothing") == NULL);
	uint8_t *buf = malloc(65536), *expect = malloc(65536);
	for (size_t i = 0; i < gs_image_allocation_count(img); i++) {
		const struct gs_image_allocation *a = gs_image_allocation_at(img, i);
		const struct std_alloc *s = &std_allocs[i];
		CHECK(a->id == s->id && a->va == s->va && a->size == s->size && a->gpu_index == s->gpu &&
		      a->kind == s->kind && a->flags == s->flags);
		if (s->id == 3)
			CHECK(a->blob_len == sizeof(std_blob) && !memcmp(a->blob, std_blob, sizeof(std_blob)));
		else
			CHECK(a->blob_len == 0);
		size_t first, count;
		gs_image_allocation_chunks(img, i, &first, &count);
		uint64_t covered = 0;
		for (size_t c = first; c < first + count; c++) {
			const struct gs_image_chunk *ch = gs_image_chunk_at(img, c);
			CHECK(ch->alloc_id == s->id && ch->offset == covered);
			CHECK_INT(!!(ch->flags & GS_CHUNK_F_ZERO), !!s->zero);
			memset(buf, 0xee, 65536);
			rc = gs_image_read_chunk(img, c, buf, &err);
			CHECK_INT(rc, 0);
			if (rc)
				fprintf(stderr, "  read: %s\n", err.msg);
			if (s->zero)
				memset(expect, 0, ch->length);
			else
				fill_pattern(expect, seed, s->id, ch->offset, ch->length);
			CHECK(!memcmp(buf, expect, ch->length));
			covered += ch->length;
		}
		CHECK(covered == ((s->flags & GS_ALLOC_F_NO_DATA) ? 0 : s->size));
	}
	rc = gs_image_verify(img, 3, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  verify: %s\n", err.msg);
	free(buf);
	free(expect);
	gs_image_close(img);
	int failed = test_current_failed;
	test_current_failed = before || failed;
	return failed;
}

/* Reads a whole file; *len set. NULL on failure. */
TEST_HELPER unsigned char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	struct stat st;
	fstat(fd, &st);
	unsigned char *buf = malloc((size_t)st.st_size + 1);
	*len = (size_t)st.st_size;
	if (gs_fs_pread_full(fd, buf, *len, 0)) {
		free(buf);
		buf = NULL;
	}
	close(fd);
	return buf;
}

/* Replaces a file's contents (mode 0600), as an attacker or a corruption would. */
TEST_HELPER void spit(const char *path, const void *buf, size_t len)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || gs_fs_pwrite_full(fd, buf, len, 0))
		perror(path);
	close(fd);
}

/* Recomputes a manifest's trailer CRC after a deliberate patch, so the patch itself is what the reader sees. */
TEST_HELPER void manifest_fix_crc(unsigned char *buf, size_t len)
{
	uint32_t crc = gs_crc32c(0, buf, len - 4);
	memcpy(buf + len - 4, &crc, 4);
}

/* The section table entry of `type` in a manifest buffer, or NULL. */
TEST_HELPER struct gs_fmt_section *manifest_section(unsigned char *buf, uint32_t type, struct gs_fmt_section *copy,
						    size_t *entry_off)
{
	struct gs_fmt_manifest_header h;
	memcpy(&h, buf, sizeof(h));
	for (uint32_t i = 0; i < h.section_count; i++) {
		size_t off = h.section_table_offset + (size_t)i * h.section_entry_size;
		memcpy(copy, buf + off, sizeof(*copy));
		if (copy->type == type) {
			*entry_off = off;
			return copy;
		}
	}
	return NULL;
}

#endif
