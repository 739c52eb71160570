/*
 * copy_plan.h - splits device regions into chunks for several copy lanes.
 *
 * The data mover copies regions (allocations, slabs) between device memory
 * and a host staging area over several lanes (stream + thread pairs). The
 * plan cuts each region into chunks of at most chunk_size bytes (a chunk
 * never spans two regions), places the chunks one after another in the
 * staging area in region order (each start optionally rounded up to
 * staging_align, e.g. 4096 for O_DIRECT; padding costs up to align-1 bytes per
 * chunk, so leave it 0 for many tiny regions), and deals them to lanes
 * greedily by bytes: each chunk goes to the lane with the fewest bytes so far
 * (lowest index on a tie), which keeps every two lanes within one chunk of
 * each other. With staging_segment set, no chunk crosses a multiple of it in
 * the staging area, so each chunk lies inside one staging-pool segment.
 *
 * The plan depends only on its inputs (the same regions and parameters give
 * the same plan, so a resume can rebuild the suspend's plan).
 * Each lane's chunks are listed in staging order, so lanes walk the staging
 * area front to back together, the order in which an on-demand pool fills.
 * Thread-safety: pure functions; a plan is read-only once built.
 */
#ifndef GPUSNAP_CORE_COPY_PLAN_H
#define GPUSNAP_CORE_COPY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct gs_copy_region {
	uint64_t va, size; /* size 0: no chunk */
};

struct gs_copy_params {
	uint64_t chunk_size;      /* > 0 */
	uint32_t lanes;           /* >= 1 */
	uint64_t staging_align;   /* 0 or 1: packed; else each chunk's offset is a multiple of it */
	uint64_t staging_segment; /* 0: none; else a multiple of staging_align no chunk crosses */
};

struct gs_copy_chunk {
	uint64_t va, size;
	uint64_t staging_offset;
	uint32_t region; /* index into the regions given */
	uint32_t lane;
};

struct gs_copy_plan {
	struct gs_copy_chunk *chunks; /* in staging order */
	size_t nchunks;
	uint32_t lanes;
	uint64_t *lane_bytes; /* [lanes] */
	/* lane l's chunks: chunks[lane_chunks[i]] for lane_start[l] <= i < lane_start[l + 1], in staging order */
	size_t *lane_start;   /* [lanes + 1] */
	size_t *lane_chunks;  /* [nchunks] */
	uint64_t total_bytes;   /* sum of region sizes */
	uint64_t staging_bytes; /* end of the last chunk in the staging area */
};

/*
 * Builds the plan into *plan (free with gs_copy_plan_free, also after a
 * failure). GS_E_USAGE for bad parameters or a region that wraps the address
 * space, GS_E_FAILURE when out of memory or the staging offsets overflow.
 */
int gs_copy_plan_build(const struct gs_copy_region *regions, size_t nregions, const struct gs_copy_params *params,
		       struct gs_copy_plan *plan, struct gs_err *err);
void gs_copy_plan_free(struct gs_copy_plan *plan);

/*
 * An order in which to take a plan's chunks so that the regions' groups (the
 * GPUs: group_of_region[r] for region r) move at once instead of one after
 * the other: one chunk of each group in turn (groups in the order they first
 * appear), each group's chunks in staging order; a group that runs out drops
 * out of the turn. *order (malloc'd, plan->nchunks entries; the caller frees)
 * is a permutation of the chunk indices; with one group it is the staging
 * order. GS_E_FAILURE when out of memory.
 */
int gs_copy_plan_interleave(const struct gs_copy_plan *plan, const uint32_t *group_of_region, size_t **order,
			    struct gs_err *err);

#endif
