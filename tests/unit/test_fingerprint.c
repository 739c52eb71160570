/*
 * test_fingerprint.c - the chunk fingerprint (core/fingerprint.h, FORMAT.md
 * 4.8.2): the specification's test vectors, sums added in pieces and in any
 * order equal to one pass (what the GPU's threads do), every one-word change
 * seen, the length in it, and fingerprints recorded in and read back from an
 * image (ZERO chunks without one).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "core/fingerprint.h"
#include "image_test_util.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* FORMAT.md 4.8.2's table */
static void test_vectors(void)
{
	static const struct {
		size_t len;
		int kind; /* 0 zeros, 1 "abc", 2 n, 3 n * 7, 4 0xff */
		uint64_t lo, hi;
	} v[] = {
		{ 1, 0, 0x38c864d518f1d440ULL, 0x8d333e18246ef9aaULL },
		{ 3, 1, 0xaf9cd476c773e2f4ULL, 0x0639f1e4b9304482ULL },
		{ 16, 2, 0x75050f79b4d7df6dULL, 0x838638a18d14cdedULL },
		{ 17, 2, 0xc82170bded5b1eaeULL, 0x26f1f45eda628ad4ULL },
		{ 1000, 3, 0x2d562d3bb86387e3ULL, 0x5b9adf0a49fb48eeULL },
		{ 4096, 4, 0xfb83f020151c4130ULL, 0x64e24cfdb796bd98ULL },
		{ 1 << 20, 0, 0xe21fb2152d3b864aULL, 0x629bc5612f58db71ULL },
	};
	uint8_t *b = malloc(1 << 20);
	for (size_t i = 0; i < GS_ARRAY_SIZE(v); i++) {
		for (size_t k = 0; k < v[i].len; k++)
			b[k] = v[i].kind == 0 ? 0 : v[i].kind == 1 ? (uint8_t)"abc"[k] : v[i].kind == 2 ? (uint8_t)k
			     : v[i].kind == 3 ? (uint8_t)(k * 7) : 0xff;
		struct gs_fp f = gs_fp_of(b, v[i].len);
		CHECK(f.lo == v[i].lo && f.hi == v[i].hi);
		if (f.lo != v[i].lo || f.hi != v[i].hi)
			printf("     vector %zu: %016" PRIx64 " %016" PRIx64 "\n", i, f.lo, f.hi);
	}
	free(b);
}

/* Pieces of whole words added in any order give the one-pass fingerprint. */
static void test_pieces_any_order(void)
{
	enum { N = 1 << 16 };
	uint8_t *b = malloc(N + 5);
	for (size_t i = 0; i < N + 5; i++)
		b[i] = (uint8_t)next_rand();
	const size_t lens[] = { N, N + 5, 48, 33 };
	for (size_t t = 0; t < GS_ARRAY_SIZE(lens); t++) {
		size_t len = lens[t], words = (len + 15) / 16;
		struct gs_fp whole = gs_fp_of(b, len);
		/* backwards, in pieces of 1..7 words */
		struct gs_fp_sums s = { 0, 0 };
		size_t end = words;
		while (end) {
			size_t n = 1 + next_rand() % 7, first = end > n ? end - n : 0;
			size_t from = first * 16, to = end * 16 < len ? end * 16 : len;
			gs_fp_add(&s, b + from, to - from, first);
			end = first;
		}
		CHECK(gs_fp_equal(gs_fp_final(s, len), whole));
	}
	free(b);
}

/* Any change of one word changes the fingerprint; so does the length (zero padding is not data). */
static void test_changes_seen(void)
{
	enum { N = 4096 };
	uint8_t b[N];
	for (size_t i = 0; i < N; i++)
		b[i] = (uint8_t)next_rand();
	struct gs_fp f0 = gs_fp_of(b, N);
	for (int trial = 0; trial < 2000; trial++) {
		size_t at = next_rand() % N;
		uint8_t old = b[at];
		b[at] ^= (uint8_t)(1u << (next_rand() % 8));
		CHECK(!gs_fp_equal(gs_fp_of(b, N), f0));
		b[at] = old;
	}
	/* two words swapped */
	uint8_t c[N];
	memcpy(c, b, N);
	memcpy(c, b + 16, 16);
	memcpy(c + 16, b, 16);
	CHECK(!gs_fp_equal(gs_fp_of(c, N), f0));
	uint8_t z[32] = { 0 };
	CHECK(!gs_fp_equal(gs_fp_of(z, 17), gs_fp_of(z, 18)));
	CHECK(!gs_fp_equal(gs_fp_of(z, 16), gs_fp_of(z, 32)));
	CHECK(!gs_fp_none(gs_fp_of(z, 1)));
	/* how fast the CPU computes it (the GPU's kernel is measured by tests/gpu t22) */
	size_t big = 64 << 20;
	uint8_t *m = malloc(big);
	memset(m, 0x5a, big);
	double t0 = test_now_();
	struct gs_fp f = gs_fp_of(m, big);
	double s = test_now_() - t0;
	printf("     CPU fingerprint: %.2f GB/s (one thread, %016" PRIx64 ")\n", (double)big / s / 1e9, f.lo);
	free(m);
}

/* The writer records what it is given; the reader gives it back; ZERO chunks have none. */
static void test_in_image(void)
{
	const char *dir = scratch_dir("fp");
	struct gs_image_writer *w;
	struct gs_err err = { 0 };
	CHECK_INT(image_test_writer_open(dir, &(struct gs_image_writer_opts){ .how = "agent" }, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "g" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	struct gs_image_allocation a = { .id = 1, .va = 1 << 20, .size = 3 * 4096 };
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	uint8_t buf[4096], zero[4096] = { 0 };
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13 + 1);
	struct gs_fp f = gs_fp_of(buf, sizeof(buf));
	CHECK_INT(gs_image_write_chunk_fp(w, 1, 0, buf, sizeof(buf), f.lo, f.hi, &err), 0);
	CHECK_INT(gs_image_write_chunk_fp(w, 1, 4096, zero, sizeof(zero), 7, 7, &err), 0); /* found zero: ZERO */
	CHECK_INT(gs_image_write_chunk(w, 1, 8192, buf, sizeof(buf), &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(dir, &img, &err), 0);
	if (!img)
		return;
	CHECK_INT(gs_image_get_info(img)->format_version, 1);
	const struct gs_image_chunk *c = gs_image_chunk_at(img, 0);
	CHECK(c->fp_lo == f.lo && c->fp_hi == f.hi);
	c = gs_image_chunk_at(img, 1);
	CHECK((c->flags & GS_CHUNK_F_ZERO) && !c->fp_lo && !c->fp_hi);
	c = gs_image_chunk_at(img, 2);
	CHECK(!c->fp_lo && !c->fp_hi);
	gs_image_close(img);
}

int main(void)
{
	gs_log_init_from_env();
	scratch_init("fingerprint");
	RUN(test_vectors);
	RUN(test_pieces_any_order);
	RUN(test_changes_seen);
	RUN(test_in_image);
	scratch_cleanup();
	return TEST_SUMMARY();
}
