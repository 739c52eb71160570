/*
 * test_chain.c - incremental images (FORMAT.md 4.11) written with the image
 * writer: a child's PARENT chunks read through the chain and verified, the
 * parent recorded by name beside it, and the chain checks the CLI tests
 * cannot reach on the fake driver: a parent of another GPU layout, a PARENT
 * chunk whose parent chunk differs or does not exist, a chain too long.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/fingerprint.h"
#include "image_test_util.h"

#define LEN 8192u

static uint8_t data[2][LEN];

/* An image at dir of one allocation in two chunks of data[0] and data[1]; with parent: chunk 0 refers to parent_index. */
static int write_image(const char *dir, const char *gpu_name, const struct gs_image_parent *parent, uint64_t parent_index,
		 uint32_t crc, struct gs_fp fp, struct gs_err *err)
{
	struct gs_image_writer_opts o = { .source_pid = 77, .source_comm = "app", .how = "agent", .parent = parent };
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, &o, &w, err);
	if (rc)
		return rc;
	struct gs_image_gpu g = { .index = 0, .name = gpu_name, .total_memory = 1 << 30 };
	struct gs_image_allocation a = { .id = 3, .va = 1 << 20, .size = 2 * LEN };
	struct gs_fp f0 = gs_fp_of(data[0], LEN), f1 = gs_fp_of(data[1], LEN);
	if ((rc = gs_image_writer_add_gpu(w, &g, err)) || (rc = gs_image_writer_add_allocation(w, &a, err)))
		goto fail;
	if (parent)
		rc = gs_image_write_parent_chunk(w, 3, 0, LEN, parent_index, crc, fp.lo, fp.hi, err);
	else
		rc = gs_image_write_chunk_fp(w, 3, 0, data[0], LEN, f0.lo, f0.hi, err);
	if (rc || (rc = gs_image_write_chunk_fp(w, 3, LEN, data[1], LEN, f1.lo, f1.hi, err)))
		goto fail;
	return image_test_writer_commit(w, err);
fail:
	image_test_writer_abort(w);
	return rc;
}

static struct gs_image_parent parent_of(const char *dir, const char *name)
{
	struct gs_image *img;
	struct gs_err err = { 0 };
	struct gs_image_parent p = { .path = name };
	if (gs_image_open(dir, &img, &err) == 0) {
		memcpy(p.image_id, gs_image_get_info(img)->image_id, 16);
		p.manifest_crc32c = gs_image_manifest_crc32c(img);
		gs_image_close(img);
	}
	return p;
}

static void test_chain(void)
{
	for (size_t i = 0; i < LEN; i++) {
		data[0][i] = (uint8_t)(i * 7 + 1);
		data[1][i] = (uint8_t)(i * 13 + 5);
	}
	struct gs_err err = { 0 };
	char root[700];
	snprintf(root, sizeof(root), "%s", scratch_dir("series"));
	char p1[800], p2[800], p3[800];
	snprintf(p1, sizeof(p1), "%s/img1", root);
	snprintf(p2, sizeof(p2), "%s/img2", root);
	snprintf(p3, sizeof(p3), "%s/img3", root);
	struct gs_fp f0 = gs_fp_of(data[0], LEN);
	uint32_t crc0 = gs_crc32c(0, data[0], LEN);
	CHECK_INT(write_image(p1, "g", NULL, 0, 0, f0, &err), 0);
	struct gs_image_parent par = parent_of(p1, "img1");
	CHECK_INT(write_image(p2, "g", &par, 0, crc0, f0, &err), 0);
	struct gs_image *img = NULL;
	CHECK_INT(gs_image_open(p2, &img, &err), 0);
	if (!img)
		return;
	CHECK_INT(gs_image_get_info(img)->format_version, 2);
	CHECK(gs_image_parent(img) != NULL);
	CHECK((gs_image_chunk_at(img, 0)->flags & GS_CHUNK_F_PARENT) != 0);
	uint8_t buf[LEN];
	CHECK_INT(gs_image_read_chunk(img, 0, buf, &err), 0);
	CHECK(memcmp(buf, data[0], LEN) == 0);
	gs_image_set_verify_fingerprints(img, true);
	CHECK_INT(gs_image_verify(img, 1, &err), 0);
	struct gs_image_totals t;
	gs_image_totals(img, &t);
	CHECK_INT(t.parent_chunks, 1);
	CHECK_INT(t.parent_bytes, LEN);
	gs_image_close(img);

	/* a parent of another GPU layout */
	char q1[800], q2[800];
	snprintf(q1, sizeof(q1), "%s/gpu1", root);
	snprintf(q2, sizeof(q2), "%s/gpu2", root);
	CHECK_INT(write_image(q1, "other", NULL, 0, 0, f0, &err), 0);
	par = parent_of(q1, "gpu1");
	CHECK_INT(write_image(q2, "other", &par, 0, crc0, f0, &err), 0);
	CHECK_INT(gs_image_open(q2, &img, &err), 0); /* same GPUs: fine */
	gs_image_close(img);
	struct gs_image_parent other = parent_of(p1, "img1"); /* GPU "g" where q2 has "other": only the name differs */
	char q3[800];
	snprintf(q3, sizeof(q3), "%s/gpu3", root);
	/* a child on a GPU of another size than its parent's */
	struct gs_image_writer_opts o = { .source_pid = 77, .source_comm = "app", .how = "agent", .parent = &other };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(q3, &o, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "g", .total_memory = 2u << 30 };
	struct gs_image_allocation a = { .id = 3, .va = 1 << 20, .size = LEN };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	CHECK_INT(gs_image_write_parent_chunk(w, 3, 0, LEN, 0, crc0, f0.lo, f0.hi, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(q3, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "its parent '");
	CHECK_CONTAINS(err.msg, "was taken on other GPUs");

	/* a PARENT chunk whose parent chunk differs, or does not exist */
	par = parent_of(p1, "img1");
	struct gs_fp f1 = gs_fp_of(data[1], LEN);
	CHECK_INT(write_image(p3, "g", &par, 1, crc0, f0, &err), 0); /* chunk 1 of img1 holds data[1] */
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(p3, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "chunk 0 (allocation 3, offset 0) refers to chunk 1 of its parent");
	CHECK_CONTAINS(err.msg, "which holds other data");
	CHECK_INT(write_image(p3, "g", &par, 9, crc0, f0, &err), 0);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(p3, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "refers to chunk 9 of its parent");
	CHECK_CONTAINS(err.msg, "which does not exist");
	(void)f1;

	/* a writer refuses a parent chunk without a fingerprint, and a parent set after a chunk */
	CHECK_INT(image_test_writer_open(q3, &(struct gs_image_writer_opts){ .how = "agent", .replace = true }, &w, &err), 0);
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 3, 0, data[0], LEN, &err), 0);
	CHECK_INT(gs_image_writer_set_parent(w, &par, &err), GS_E_FAILURE);
	CHECK_INT(gs_image_write_parent_chunk(w, 3, 0, LEN, 0, crc0, 0, 0, &err), GS_E_FAILURE);
	image_test_writer_abort(w);
}

int main(void)
{
	gs_log_init_from_env();
	scratch_init("chain");
	RUN(test_chain);
	scratch_cleanup();
	return TEST_SUMMARY();
}
