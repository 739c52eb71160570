/*
 * copy_plan.c - chunking, staging layout and lane assignment (see copy_plan.h).
 *
 * Two passes over the same cutting loop: the first counts chunks so the
 * arrays are allocated once, the second fills them. Lanes are picked from a
 * binary min-heap keyed by (bytes, lane index).
 */
#include "core/copy_plan.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cutter {
	const struct gs_copy_params *p;
	uint64_t cursor; /* end of the previous chunk in staging */
};

/*
 * Next chunk of a region's remaining [va, va + left): its size and staging
 * offset. Returns -1 if the staging offset would overflow.
 */
static int cut(struct cutter *c, uint64_t left, uint64_t *size, uint64_t *offset)
{
	const struct gs_copy_params *p = c->p;
	uint64_t off = c->cursor;
	if (p->staging_align > 1 && off % p->staging_align) {
		uint64_t pad = p->staging_align - off % p->staging_align;
		if (off > UINT64_MAX - pad)
			return -1;
		off += pad;
	}
	uint64_t n = left < p->chunk_size ? left : p->chunk_size;
	if (p->staging_segment) {
		uint64_t room = p->staging_segment - off % p->staging_segment;
		if (n > room)
			n = room;
	}
	if (off > UINT64_MAX - n)
		return -1;
	*size = n;
	*offset = off;
	c->cursor = off + n;
	return 0;
}

static bool lane_less(const uint64_t *bytes, uint32_t a, uint32_t b)
{
	return bytes[a] < bytes[b] || (bytes[a] == bytes[b] && a < b);
}

static void heap_sift_down(uint32_t *heap, uint32_t n, const uint64_t *bytes, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && lane_less(bytes, heap[l], heap[m]))
			m = l;
		if (r < n && lane_less(bytes, heap[r], heap[m]))
			m = r;
		if (m == i)
			return;
		uint32_t t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

void gs_copy_plan_free(struct gs_copy_plan *plan)
{
	free(plan->chunks);
	free(plan->lane_bytes);
	free(plan->lane_start);
	free(plan->lane_chunks);
	memset(plan, 0, sizeof(*plan));
}

int gs_copy_plan_build(const struct gs_copy_region *regions, size_t nregions, const struct gs_copy_params *params,
		       struct gs_copy_plan *plan, struct gs_err *err)
{
	const struct gs_copy_params *p = params;
	memset(plan, 0, sizeof(*plan));
	if (!p->chunk_size || !p->lanes)
		return gs_fail(err, GS_E_USAGE, "copy plan needs a chunk size and at least one lane");
	if (p->staging_segment && p->staging_align > 1 && p->staging_segment % p->staging_align)
		return gs_fail(err, GS_E_USAGE, "staging segment %llu is not a multiple of the alignment %llu",
			       (unsigned long long)p->staging_segment, (unsigned long long)p->staging_align);
	if (nregions > UINT32_MAX)
		return gs_fail(err, GS_E_USAGE, "too many regions for one copy plan (%zu)", nregions);

	/* pass 1: count */
	struct cutter c = { p, 0 };
	size_t nchunks = 0;
	uint64_t total = 0;
	for (size_t r = 0; r < nregions; r++) {
		if (regions[r].va + regions[r].size < regions[r].va && regions[r].va + regions[r].size != 0)
			return gs_fail(err, GS_E_USAGE, "region 0x%llx + %llu wraps the address space",
				       (unsigned long long)regions[r].va, (unsigned long long)regions[r].size);
		total += regions[r].size;
		for (uint64_t left = regions[r].size; left;) {
			uint64_t n, off;
			if (cut(&c, left, &n, &off))
				return gs_fail(err, GS_E_FAILURE, "copy plan staging offsets overflow");
			left -= n;
			nchunks++;
		}
	}

	plan->lanes = p->lanes;
	plan->lane_bytes = calloc(p->lanes, sizeof(*plan->lane_bytes));
	plan->lane_start = calloc((size_t)p->lanes + 1, sizeof(*plan->lane_start));
	plan->chunks = nchunks ? malloc(nchunks * sizeof(*plan->chunks)) : NULL;
	plan->lane_chunks = nchunks ? malloc(nchunks * sizeof(*plan->lane_chunks)) : NULL;
	uint32_t *heap = malloc((size_t)p->lanes * sizeof(*heap));
	if (!plan->lane_bytes || !plan->lane_start || !heap || (nchunks && (!plan->chunks || !plan->lane_chunks))) {
		free(heap);
		gs_copy_plan_free(plan);
		return gs_fail(err, GS_E_FAILURE, "out of memory planning %zu copy chunks", nchunks);
	}
	for (uint32_t l = 0; l < p->lanes; l++)
		heap[l] = l; /* all zero bytes: already a heap by index */

	/* pass 2: cut again, assign lanes */
	c.cursor = 0;
	size_t k = 0;
	for (size_t r = 0; r < nregions; r++) {
		uint64_t va = regions[r].va;
		for (uint64_t left = regions[r].size; left;) {
			struct gs_copy_chunk *ch = &plan->chunks[k++];
			cut(&c, left, &ch->size, &ch->staging_offset);
			ch->va = va;
			ch->region = (uint32_t)r;
			ch->lane = heap[0];
			plan->lane_bytes[heap[0]] += ch->size;
			plan->lane_start[heap[0] + 1]++;
			heap_sift_down(heap, p->lanes, plan->lane_bytes, 0);
			va += ch->size;
			left -= ch->size;
		}
	}
	free(heap);

	/* per-lane lists: counting sort by lane keeps staging order within each lane */
	for (uint32_t l = 0; l < p->lanes; l++)
		plan->lane_start[l + 1] += plan->lane_start[l];
	size_t *fill = calloc(p->lanes, sizeof(*fill));
	if (!fill) {
		gs_copy_plan_free(plan);
		return gs_fail(err, GS_E_FAILURE, "out of memory planning %zu copy chunks", nchunks);
	}
	for (size_t i = 0; i < nchunks; i++) {
		uint32_t l = plan->chunks[i].lane;
		plan->lane_chunks[plan->lane_start[l] + fill[l]++] = i;
	}
	free(fill);
	plan->nchunks = nchunks;
	plan->total_bytes = total;
	plan->staging_bytes = c.cursor;
	return 0;
}

int gs_copy_plan_interleave(const struct gs_copy_plan *plan, const uint32_t *group_of_region, size_t **order,
			    struct gs_err *err)
{
	size_t n = plan->nchunks;
	*order = NULL;
	if (!n)
		return 0;
	/* groups in order of first appearance, each with its next chunk (a cursor into the staging order) */
	uint32_t *group = malloc(n * sizeof(*group));
	size_t *cursor = malloc(n * sizeof(*cursor));
	size_t *out = malloc(n * sizeof(*out));
	if (!group || !cursor || !out) {
		free(group);
		free(cursor);
		free(out);
		return gs_fail(err, GS_E_FAILURE, "out of memory ordering %zu chunks", n);
	}
	size_t ngroups = 0;
	for (size_t k = 0; k < n; k++) {
		uint32_t g = group_of_region[plan->chunks[k].region];
		size_t i = 0;
		while (i < ngroups && group[i] != g)
			i++;
		if (i == ngroups) {
			group[ngroups] = g;
			cursor[ngroups++] = k;
		}
	}
	size_t taken = 0, live = ngroups;
	while (taken < n && live) {
		for (size_t i = 0; i < ngroups; i++) {
			size_t k = cursor[i];
			if (k >= n)
				continue;
			out[taken++] = k;
			/* the group's next chunk in staging order */
			while (++k < n && group_of_region[plan->chunks[k].region] != group[i])
				;
			cursor[i] = k;
			if (k >= n)
				live--;
		}
	}
	free(group);
	free(cursor);
	*order = out;
	return 0;
}
