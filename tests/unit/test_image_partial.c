/*
 * test_image_partial.c - partial images (a suspend split between host memory
 * and a spill, issue 24): chunks recorded ELSEWHERE keep the coverage rule,
 * gs_image_open refuses such an image (restore, inspect and verify never take
 * it for a whole one), gs_image_open_partial opens it, its stored chunks read
 * and its ELSEWHERE ones do not; a partial image is of format version 2; a
 * writer not made partial refuses ELSEWHERE chunks; the manifest refuses
 * ELSEWHERE with another flag or with a file position.
 */
#include "image/manifest.h"
#include "image_test_util.h"

static const struct gs_image_writer_opts opts = { .how = "agent" };

/* One allocation of 3 chunks of 64 KiB: stored, ELSEWHERE, ZERO. */
static void write_partial(const char *path, uint8_t *data)
{
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &opts, &w, &err), 0);
	CHECK_INT(gs_image_writer_set_partial(w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	struct gs_image_allocation a = { .id = 1, .va = 0x100000000ULL, .size = 3 << 16 };
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	fill_pattern(data, 3, 1, 0, 1 << 16);
	CHECK_INT(gs_image_write_chunk(w, 1, 0, data, 1 << 16, &err), 0);
	CHECK_INT(gs_image_write_elsewhere_chunk(w, 1, 1 << 16, 1 << 16, &err), 0);
	CHECK_INT(gs_image_write_zero_chunk(w, 1, 2 << 16, 1 << 16, &err), 0);
	struct gs_image_writer_stats st;
	gs_image_writer_stats(w, &st);
	CHECK_INT(st.chunks, 3);
	CHECK_INT(st.zero_bytes, 1 << 16);
	CHECK_INT(st.payload_bytes, 1 << 16);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	if (err.code)
		fprintf(stderr, "  %s\n", err.msg);
}

static void test_partial_open_and_read(void)
{
	char path[800];
	path_join(path, sizeof(path), scratch_dir("partial"), "img");
	static uint8_t data[1 << 16], out[1 << 16];
	write_partial(path, data);
	struct gs_err err = { 0 };
	struct gs_image *img = NULL;
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK(img == NULL);
	CHECK_CONTAINS(err.msg, "holds only part of a process's GPU data (1 of its 3 chunks are elsewhere");
	gs_err_clear(&err);
	CHECK_INT(gs_image_open_partial(path, &img, &err), 0);
	if (!img)
		return;
	CHECK_INT(gs_image_chunk_count(img), 3);
	CHECK_INT(gs_image_get_info(img)->format_version, GS_FMT_VERSION_PARTIAL);
	CHECK(gs_image_chunk_at(img, 1)->flags == GS_CHUNK_F_ELSEWHERE);
	CHECK_INT(gs_image_read_chunk(img, 0, out, &err), 0);
	CHECK(!memcmp(out, data, sizeof(out)));
	CHECK_INT(gs_image_read_chunk(img, 1, out, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "chunk 1 (allocation 1, offset 65536) is not in this image");
	gs_err_clear(&err);
	CHECK_INT(gs_image_read_chunk(img, 2, out, &err), 0);
	CHECK(out[0] == 0 && out[sizeof(out) - 1] == 0);
	gs_image_close(img);
}

/* Rewrites chunk record i's flags (and file_index) in the manifest at path, its CRC fixed. */
static void patch_chunk(const char *path, size_t i, uint32_t flags, uint32_t file_index)
{
	char mf[900];
	path_join(mf, sizeof(mf), path, "manifest.img");
	size_t len;
	unsigned char *buf = slurp(mf, &len);
	struct gs_fmt_section sec;
	size_t entry_off;
	CHECK(buf && manifest_section(buf, GS_SEC_CHUNKS, &sec, &entry_off) != NULL);
	if (!buf)
		return;
	unsigned char *rec = buf + sec.offset + i * sec.entry_size;
	memcpy(rec + 32, &file_index, 4);
	memcpy(rec + 36, &flags, 4);
	manifest_fix_crc(buf, len);
	spit(mf, buf, len);
	free(buf);
}

static void test_manifest_refuses_bad_elsewhere(void)
{
	char path[800];
	static uint8_t data[1 << 16];
	struct gs_err err = { 0 };
	struct gs_image *img = NULL;
	path_join(path, sizeof(path), scratch_dir("both"), "img");
	write_partial(path, data);
	patch_chunk(path, 1, GS_CHUNK_F_ELSEWHERE | GS_CHUNK_F_ZERO, 0);
	CHECK(gs_image_open_partial(path, &img, &err) != 0);
	CHECK_CONTAINS(err.msg, "ELSEWHERE with other flags");
	gs_err_clear(&err);
	path_join(path, sizeof(path), scratch_dir("positioned"), "img");
	write_partial(path, data);
	patch_chunk(path, 1, GS_CHUNK_F_ELSEWHERE, 1);
	CHECK(gs_image_open_partial(path, &img, &err) != 0);
	CHECK_CONTAINS(err.msg, "an ELSEWHERE chunk with a file position, checksum or fingerprint");
}

static void test_writer_not_partial(void)
{
	char path[800];
	path_join(path, sizeof(path), scratch_dir("whole"), "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &opts, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	struct gs_image_allocation a = { .id = 1, .va = 0x100000000ULL, .size = 1 << 16 };
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	CHECK_INT(gs_image_write_elsewhere_chunk(w, 1, 0, 1 << 16, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "an image not made partial");
	gs_err_clear(&err);
	CHECK_INT(gs_image_write_zero_chunk(w, 1, 0, 1 << 16, &err), 0);
	CHECK_INT(gs_image_writer_set_partial(w, &err), GS_E_FAILURE);
	image_test_writer_abort(w);
}

int main(void)
{
	scratch_init("partial");
	RUN(test_partial_open_and_read);
	RUN(test_manifest_refuses_bad_elsewhere);
	RUN(test_writer_not_partial);
	scratch_cleanup();
	return TEST_SUMMARY();
}
