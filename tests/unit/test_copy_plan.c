/*
 * test_copy_plan.c - the copy planner: every byte in exactly one chunk, staging
 * without overlap, alignment and segment limits, lanes within one chunk of
 * each other, determinism, 64 GiB regions and 1e5 one-byte regions.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "common/util.h"
#include "core/copy_plan.h"
#include "test.h"

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Checks every property of a plan; returns the number of violations. */
static int verify(const struct gs_copy_region *regions, size_t nregions, const struct gs_copy_params *p,
		  const struct gs_copy_plan *plan)
{
	int bad = 0;
	size_t k = 0;
	uint64_t total = 0, prev_end = 0, max_chunk = 0;
	for (size_t r = 0; r < nregions; r++) {
		uint64_t covered = 0;
		total += regions[r].size;
		while (covered < regions[r].size && k < plan->nchunks) {
			const struct gs_copy_chunk *c = &plan->chunks[k++];
			/* chunks of one region, in order, back to back, none empty or too large */
			bad += c->region != r || c->va != regions[r].va + covered;
			bad += c->size == 0 || c->size > p->chunk_size;
			/* staging: after the previous chunk, aligned, inside one segment */
			bad += c->staging_offset < prev_end;
			if (p->staging_align > 1)
				bad += c->staging_offset % p->staging_align != 0;
			if (p->staging_segment)
				bad += c->staging_offset / p->staging_segment !=
				       (c->staging_offset + c->size - 1) / p->staging_segment;
			bad += c->lane >= p->lanes;
			prev_end = c->staging_offset + c->size;
			covered += c->size;
			if (c->size > max_chunk)
				max_chunk = c->size;
		}
		bad += covered != regions[r].size;
	}
	bad += k != plan->nchunks;
	bad += plan->total_bytes != total;
	bad += plan->staging_bytes != prev_end;

	/* lanes: byte sums, per-lane lists (each chunk once, its own lane, staging order), balance */
	uint64_t lmin = UINT64_MAX, lmax = 0, lsum = 0;
	char *seen = calloc(plan->nchunks + 1, 1);
	bad += plan->lane_start[0] != 0 || plan->lane_start[p->lanes] != plan->nchunks;
	for (uint32_t l = 0; l < p->lanes; l++) {
		uint64_t bytes = 0;
		for (size_t i = plan->lane_start[l]; i < plan->lane_start[l + 1]; i++) {
			size_t ci = plan->lane_chunks[i];
			bad += ci >= plan->nchunks || seen[ci] || plan->chunks[ci].lane != l;
			bad += i > plan->lane_start[l] && ci <= plan->lane_chunks[i - 1];
			seen[ci] = 1;
			bytes += plan->chunks[ci].size;
		}
		bad += bytes != plan->lane_bytes[l];
		lsum += bytes;
		if (bytes < lmin)
			lmin = bytes;
		if (bytes > lmax)
			lmax = bytes;
	}
	free(seen);
	bad += lsum != total;
	bad += lmax - lmin > max_chunk;
	return bad;
}

static void test_random_plans(void)
{
	for (int iter = 0; iter < 300; iter++) {
		size_t n = rnd() % 50;
		struct gs_copy_region regions[50];
		uint64_t va = 0x7f0000000000ULL;
		for (size_t i = 0; i < n; i++) {
			uint64_t size = rnd() % 4 == 0 ? 0 : 1 + rnd() % (rnd() % 2 ? 5000 : 3 * GS_MiB);
			regions[i] = (struct gs_copy_region){ va, size };
			va += size + (rnd() % 2) * 4096;
		}
		uint64_t align = rnd() % 3 == 0 ? 0 : (1ULL << (rnd() % 13));
		struct gs_copy_params p = {
			.chunk_size = 1 + rnd() % GS_MiB,
			.lanes = 1 + (uint32_t)(rnd() % 9),
			.staging_align = align,
			.staging_segment = rnd() % 2 ? 0 : (align > 1 ? align : 1) * (1 + rnd() % 600),
		};
		struct gs_copy_plan plan;
		struct gs_err err = { 0 };
		CHECK_INT(gs_copy_plan_build(regions, n, &p, &plan, &err), 0);
		int bad = verify(regions, n, &p, &plan);
		if (bad)
			fprintf(stderr, "iteration %d: %d violations (chunk %llu, lanes %u, align %llu, segment %llu)\n", iter,
				bad, (unsigned long long)p.chunk_size, p.lanes, (unsigned long long)p.staging_align,
				(unsigned long long)p.staging_segment);
		CHECK_INT(bad, 0);
		gs_copy_plan_free(&plan);
	}
}

static void test_known_layout(void)
{
	struct gs_copy_region regions[] = { { 0x1000, 10 }, { 0x9000, 0 }, { 0x20000, 25 } };
	struct gs_copy_params p = { .chunk_size = 8, .lanes = 2, .staging_align = 16 };
	struct gs_copy_plan plan;
	struct gs_err err = { 0 };
	CHECK_INT(gs_copy_plan_build(regions, 3, &p, &plan, &err), 0);
	/* region 0: 8 + 2; region 2: 8 + 8 + 8 + 1 */
	CHECK_INT(plan.nchunks, 6);
	uint64_t want_off[] = { 0, 16, 32, 48, 64, 80 };
	uint64_t want_size[] = { 8, 2, 8, 8, 8, 1 };
	uint32_t want_lane[] = { 0, 1, 1, 0, 1, 0 }; /* 8|0 -> 8|2 -> 8|10 -> 16|10 -> 16|18 -> 17|18 */
	for (int i = 0; i < 6; i++) {
		CHECK(plan.chunks[i].staging_offset == want_off[i]);
		CHECK(plan.chunks[i].size == want_size[i]);
		CHECK_INT(plan.chunks[i].lane, want_lane[i]);
	}
	CHECK(plan.chunks[2].va == 0x20000 && plan.chunks[2].region == 2);
	CHECK(plan.staging_bytes == 81 && plan.total_bytes == 35);
	CHECK(plan.lane_bytes[0] == 17 && plan.lane_bytes[1] == 18);
	gs_copy_plan_free(&plan);

	/* a segment boundary splits a chunk: segment 20, packed */
	struct gs_copy_region one = { 0x1000, 50 };
	struct gs_copy_params ps = { .chunk_size = 16, .lanes = 1, .staging_segment = 20 };
	CHECK_INT(gs_copy_plan_build(&one, 1, &ps, &plan, &err), 0);
	CHECK_INT(plan.nchunks, 5); /* 16, 4 | 16, 4 | 10 */
	CHECK(plan.chunks[1].size == 4 && plan.chunks[2].staging_offset == 20 && plan.chunks[4].size == 10);
	gs_copy_plan_free(&plan);
}

static void test_huge_and_tiny(void)
{
	struct gs_err err = { 0 };
	struct gs_copy_plan plan, again;
	struct gs_copy_region huge[] = { { 0x7f0000000000ULL, 64 * GS_GiB }, { 0x7f1000000000ULL, 64 * GS_GiB + 1 } };
	struct gs_copy_params p = { .chunk_size = 64 * GS_MiB, .lanes = 4, .staging_align = 4096,
				    .staging_segment = 256 * GS_MiB };
	CHECK_INT(gs_copy_plan_build(huge, 2, &p, &plan, &err), 0);
	CHECK_INT(plan.nchunks, 2049);
	CHECK_INT(verify(huge, 2, &p, &plan), 0);
	CHECK(plan.lane_bytes[0] == 32 * GS_GiB + 1 && plan.lane_bytes[3] == 32 * GS_GiB);
	CHECK(plan.staging_bytes == 128 * GS_GiB + 1);
	gs_copy_plan_free(&plan);

	size_t n = 100000;
	struct gs_copy_region *tiny = malloc(n * sizeof(*tiny));
	for (size_t i = 0; i < n; i++)
		tiny[i] = (struct gs_copy_region){ 0x7f0000000000ULL + i * 512, 1 };
	struct gs_copy_params pt = { .chunk_size = 64 * GS_MiB, .lanes = 3 };
	CHECK_INT(gs_copy_plan_build(tiny, n, &pt, &plan, &err), 0);
	CHECK_INT(plan.nchunks, n);
	CHECK_INT(verify(tiny, n, &pt, &plan), 0);
	CHECK(plan.staging_bytes == n); /* packed */
	CHECK(plan.lane_bytes[0] == 33334 && plan.lane_bytes[2] == 33333);
	/* deterministic: the same inputs give the same plan */
	CHECK_INT(gs_copy_plan_build(tiny, n, &pt, &again, &err), 0);
	CHECK(again.nchunks == plan.nchunks &&
	      !memcmp(again.chunks, plan.chunks, n * sizeof(*plan.chunks)) &&
	      !memcmp(again.lane_chunks, plan.lane_chunks, n * sizeof(*plan.lane_chunks)));
	gs_copy_plan_free(&again);
	gs_copy_plan_free(&plan);
	/* aligned tiny chunks: each takes a 4 KiB slot */
	pt.staging_align = 4096;
	CHECK_INT(gs_copy_plan_build(tiny, n, &pt, &plan, &err), 0);
	CHECK(plan.staging_bytes == (n - 1) * 4096 + 1);
	gs_copy_plan_free(&plan);
	free(tiny);
}

static void test_bad_params(void)
{
	struct gs_err err = { 0 };
	struct gs_copy_plan plan;
	struct gs_copy_region r = { 0x1000, 100 };
	struct gs_copy_params p0 = { .chunk_size = 0, .lanes = 1 };
	struct gs_copy_params p1 = { .chunk_size = 10, .lanes = 0 };
	struct gs_copy_params p2 = { .chunk_size = 10, .lanes = 1, .staging_align = 4096, .staging_segment = 6000 };
	CHECK_INT(gs_copy_plan_build(&r, 1, &p0, &plan, &err), GS_E_USAGE);
	CHECK_INT(gs_copy_plan_build(&r, 1, &p1, &plan, &err), GS_E_USAGE);
	CHECK_INT(gs_copy_plan_build(&r, 1, &p2, &plan, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "not a multiple of the alignment");
	struct gs_copy_region wrap = { UINT64_MAX - 5, 10 };
	struct gs_copy_params ok = { .chunk_size = 10, .lanes = 1 };
	CHECK_INT(gs_copy_plan_build(&wrap, 1, &ok, &plan, &err), GS_E_USAGE);
	/* staging offsets that would overflow */
	struct gs_copy_region big[] = { { 0, UINT64_MAX / 2 + 1 }, { 0, UINT64_MAX / 2 + 1 } };
	struct gs_copy_params pb = { .chunk_size = UINT64_MAX, .lanes = 1 };
	CHECK_INT(gs_copy_plan_build(big, 2, &pb, &plan, &err), GS_E_FAILURE);
	gs_copy_plan_free(&plan);
	/* nothing to copy is a valid, empty plan */
	CHECK_INT(gs_copy_plan_build(NULL, 0, &ok, &plan, &err), 0);
	CHECK(plan.nchunks == 0 && plan.staging_bytes == 0 && plan.lane_start[1] == 0);
	gs_copy_plan_free(&plan);
}

/* The interleaved order: a permutation, each GPU's chunks in staging order, GPUs taking turns while both have chunks. */
static void test_interleave(void)
{
	/* GPU 0: 3 + 2 chunks (regions 0 and 2), GPU 1: 4 chunks (region 1), GPU 2: 1 chunk (region 3) */
	struct gs_copy_region regions[] = { { 0x100000, 3 << 20 }, { 0x900000, 4 << 20 }, { 0x2000000, 2 << 20 },
					    { 0x4000000, 1 << 20 } };
	uint32_t gpu[] = { 0, 1, 0, 2 };
	struct gs_copy_params p = { .chunk_size = 1 << 20, .lanes = 4 };
	struct gs_copy_plan plan;
	CHECK_INT(gs_copy_plan_build(regions, 4, &p, &plan, NULL), 0);
	CHECK(plan.nchunks == 10);
	size_t *order = NULL;
	CHECK_INT(gs_copy_plan_interleave(&plan, gpu, &order, NULL), 0);
	/* turns: 0 1 2, 0 1, 0 1, 0 1, 0 */
	static const uint32_t want_gpu[] = { 0, 1, 2, 0, 1, 0, 1, 0, 1, 0 };
	bool seen[10] = { false };
	size_t last[3] = { 0, 0, 0 };
	bool any[3] = { false, false, false };
	for (size_t i = 0; i < 10; i++) {
		size_t k = order[i];
		CHECK(k < 10 && !seen[k]);
		seen[k] = true;
		uint32_t g = gpu[plan.chunks[k].region];
		CHECK_INT((int)g, (int)want_gpu[i]);
		CHECK(!any[g] || k > last[g]);
		any[g] = true;
		last[g] = k;
	}
	free(order);
	/* one GPU: the staging order itself */
	uint32_t one[] = { 0, 0, 0, 0 };
	CHECK_INT(gs_copy_plan_interleave(&plan, one, &order, NULL), 0);
	for (size_t i = 0; i < 10; i++)
		CHECK(order[i] == i);
	free(order);
	gs_copy_plan_free(&plan);
}

int main(void)
{
	RUN(test_interleave);
	RUN(test_known_layout);
	RUN(test_random_plans);
	RUN(test_huge_and_tiny);
	RUN(test_bad_params);
	return TEST_SUMMARY();
}
