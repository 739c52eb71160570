/*
 * alloc_registry.h - the agent's table of device allocations it manages.
 *
 * One record per allocation the app sees (a cuMemAlloc-family allocation, a
 * small allocation served from a slab, the app's own cuMemMap mapping, a
 * memory-pool allocation). Records never overlap: an insert that would
 * overlap an existing record is rejected. Slabs of the sub-allocator are NOT
 * recorded here (they contain SUBALLOC records); the sub-allocator tracks them.
 *
 * Implementation: an AVL tree keyed by base address, so insert, remove and
 * "which record contains this pointer" are O(log n); no limit on the number
 * of records besides memory (about 80 bytes each).
 *
 * Thread-safety: every function may be called from any thread; a rwlock
 * protects the tree (lookups share it, changes take it exclusively).
 * Iteration callbacks run with the read lock held and must not call back into
 * the same registry. Not async-signal-safe (uses malloc and locks).
 * Ownership: records are copied in and out; the registry owns its nodes.
 */
#ifndef GPUSNAP_CORE_ALLOC_REGISTRY_H
#define GPUSNAP_CORE_ALLOC_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum gs_alloc_kind {
	GS_ALLOC_DEVICE = 1,   /* cuMemAlloc / cudaMalloc family, backed by its own physical handle(s) */
	GS_ALLOC_SUBALLOC = 2, /* a small allocation inside a sub-allocator slab */
	GS_ALLOC_APP_VMM = 3,  /* the app's own cuMemCreate + cuMemMap mapping */
	GS_ALLOC_POOL = 4,     /* cuMemAllocAsync / memory-pool allocation */
};

/* Bit for a kind in a kind mask: GS_ALLOC_MASK(GS_ALLOC_DEVICE) | ... ; 0 means all kinds. */
#define GS_ALLOC_MASK(kind) (1u << (kind))

struct gs_alloc_rec {
	uint64_t va;     /* device virtual base address */
	uint64_t size;   /* bytes, > 0 */
	uint32_t kind;   /* enum gs_alloc_kind */
	int32_t device;  /* CUDA device ordinal */
	uint64_t handle; /* caller's data: e.g. the physical allocation handle */
	uint64_t user;   /* caller's data: e.g. flags or a pointer to more state */
	/*
	 * Set by insert (the caller's value is ignored): a number no other record
	 * of any registry of the process had or will have, kept by update. The
	 * agent answers CU_POINTER_ATTRIBUTE_BUFFER_ID with it.
	 */
	uint64_t id;
};

struct gs_alloc_registry;

/* NULL when out of memory. */
struct gs_alloc_registry *gs_alloc_registry_new(void);
void gs_alloc_registry_free(struct gs_alloc_registry *r);

/*
 * Adds a copy of rec. GS_E_STATE if [va, va+size) overlaps a record (the
 * message names both ranges), GS_E_USAGE for size 0 or a range that wraps,
 * GS_E_FAILURE when out of memory.
 */
int gs_alloc_registry_insert(struct gs_alloc_registry *r, const struct gs_alloc_rec *rec, struct gs_err *err);
/* Removes the record whose base is exactly va; copies it to *out (may be NULL). False if none. */
bool gs_alloc_registry_remove(struct gs_alloc_registry *r, uint64_t va, struct gs_alloc_rec *out);
/* The record whose base is exactly va. */
bool gs_alloc_registry_get(struct gs_alloc_registry *r, uint64_t va, struct gs_alloc_rec *out);
/* The record with va <= ptr < va + size (for cuMemGetAddressRange / cuPointerGetAttribute). */
bool gs_alloc_registry_find(struct gs_alloc_registry *r, uint64_t ptr, struct gs_alloc_rec *out);
/* Replaces handle and user of the record based at va (e.g. a new handle after resume). */
bool gs_alloc_registry_update(struct gs_alloc_registry *r, uint64_t va, uint64_t handle, uint64_t user);

/* Record count and sum of sizes (one consistent snapshot). */
void gs_alloc_registry_stats(struct gs_alloc_registry *r, uint64_t *count, uint64_t *bytes);

/*
 * Calls fn for every record intersecting [lo, hi) whose kind is in kind_mask
 * (0 = all), in ascending address order. fn returns 0 to go on; a non-zero
 * value stops the walk and is returned. Use lo = 0, hi = UINT64_MAX for all.
 */
typedef int (*gs_alloc_visit_fn)(void *ctx, const struct gs_alloc_rec *rec);
int gs_alloc_registry_foreach(struct gs_alloc_registry *r, uint64_t lo, uint64_t hi, uint32_t kind_mask,
			      gs_alloc_visit_fn fn, void *ctx);

/*
 * Copies the records of kind_mask (0 = all) in address order into a malloc'd
 * array (*out, caller frees; NULL when *count is 0). GS_E_FAILURE if out of memory.
 */
int gs_alloc_registry_snapshot(struct gs_alloc_registry *r, uint32_t kind_mask, struct gs_alloc_rec **out,
			       size_t *count, struct gs_err *err);

#endif
