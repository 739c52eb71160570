/*
 * held.h - what the agent holds while the app's data is off the GPU: the
 * regions it released (allocations of its own, slabs, the app's VMM handles;
 * same addresses on resume), their copy plan, and where the data is besides
 * the GPU (the holder): a staging pool, or the sealed image at image_dir
 * (after a dump; pool NULL).
 *
 * Base, not movement: the memory kinds fill regions in, the transfer engine
 * and its ends read them, the mover and the lifecycle own the whole. Made
 * and freed by the mover (movement/agent_mover.h), with a->lock held.
 */
#ifndef GPUSNAP_AGENT_BASE_HELD_H
#define GPUSNAP_AGENT_BASE_HELD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/copy_plan.h"
#include "core/staging.h"
#include "cuda/driver.h"

struct gs_ring;
struct gs_memkind;

struct held_region {
	uint64_t va, size, reserved;
	CUmemGenericAllocationHandle handle;
	int device;
	bool is_slab;
	bool released; /* its physical memory is released (handle 0) */
	uint64_t app_handle; /* the app's own VMM handle (agent_app_vmm.h) copied through va; 0: the agent's memory */
	const struct gs_memkind *kind; /* the kind that described it, which releases and re-creates it (memory/memkind.h) */
};

/* The regions the memory kinds describe for a plan (malloc'd array, grown by gs_held_add). */
struct gs_region_list {
	struct held_region *r;
	size_t n, cap;
};
/* Appends a copy of r; -1 when out of memory. */
int gs_held_add(struct gs_region_list *l, const struct held_region *r);

struct gs_agent_held {
	struct held_region *regions;
	size_t nregions;
	struct gs_copy_plan plan;
	struct gs_staging *pool;
	bool pool_is_reserve;
	char *image_dir; /* the image holding the data when pool is NULL (malloc'd; NULL when none) */
	bool keep_context;
	bool unpinned; /* the pool's segments were unpinned for the driver's checkpoint */
	uint64_t bytes;
	/*
	 * Bounce staging: zero_chunks[k] is 1 when plan chunk k was all zero on
	 * the GPU, so it is not in the pool (agent_ring.h); NULL when none are
	 * known. zero_bytes: their total.
	 */
	uint8_t *zero_chunks;
	uint64_t zero_bytes;
	/*
	 * The bytes the holder keeps (the data less its zero chunks): in host
	 * memory, or in the image at image_dir; spilled: that image is a
	 * suspend's spill, resumed from by gpusnap resume.
	 */
	uint64_t held_bytes;
	bool spilled;
	/*
	 * Of held_bytes, those in the spill image: all of them for a whole
	 * spill; for a split (pool and spilled both set) the rest is in the pool.
	 */
	uint64_t spilled_bytes;
	/* bounce, on demand: this suspend's own copy ring, made before its pool so both set up at once */
	struct gs_ring *ring;
	double ring_setup_s;
};

#endif
