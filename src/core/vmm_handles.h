/*
 * vmm_handles.h - the bookkeeping behind the virtual allocation handles the
 * agent gives an app that uses the VMM API itself (cuMemCreate, cuMemMap:
 * PyTorch's expandable segments, vLLM, TensorRT-LLM).
 *
 * Why virtual: suspend releases the physical memory and resume creates it
 * again, which gives a new driver handle; the app keeps the value it was
 * given, so that value must be ours. Each record maps a virtual handle to
 * the driver's (real) one and remembers what is needed to re-create it: the
 * allocation's properties (opaque bytes), its size and device, the app's
 * references, its mappings (address, size, offset into the handle) and the
 * access each mapped range was given (cuMemSetAccess), in the order given.
 *
 * Lifetime follows the driver: cuMemCreate and cuMemRetainAllocationHandle
 * add a reference, cuMemRelease drops one, and the physical memory lives
 * until no reference and no mapping is left; the agent holds exactly one
 * driver reference per record for as long as the record lives.
 *
 * No CUDA here (the agent makes the driver calls); no limits besides memory.
 * Not thread-safe: the caller serializes all calls on one table. Virtual
 * handle values are never reused within a process.
 */
#ifndef GPUSNAP_CORE_VMM_HANDLES_H
#define GPUSNAP_CORE_VMM_HANDLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Virtual handles carry this tag in their top 16 bits ("GS"); the rest is a counter. */
#define GS_VH_TAG 0x4753000000000000ULL
#define GS_VH_TAG_MASK 0xffff000000000000ULL
/* Room for the allocation properties (CUmemAllocationProp is 32 bytes in CUDA 12 and 13). */
#define GS_VH_PROP_MAX 64

static inline bool gs_vh_is_virtual(uint64_t v) { return (v & GS_VH_TAG_MASK) == GS_VH_TAG; }

/* One access descriptor as cuMemSetAccess takes it (CUmemAccessDesc: location type, id, flags). */
struct gs_vh_access {
	int32_t loc_type, loc_id, flags;
};

/* One cuMemSetAccess, clipped to a mapping: [offset, offset+size) of the mapping. */
struct gs_vh_access_op {
	uint64_t offset, size;
	size_t n;
	struct gs_vh_access *desc;
};

struct gs_vh_mapping {
	uint64_t va, size, offset; /* the app's cuMemMap(va, size, offset, handle) */
	uint64_t vh;
	struct gs_vh_access_op *ops; /* replayed in order after a re-map */
	size_t nops, cap;
};

struct gs_vh_handle {
	uint64_t vh;    /* the value the app holds */
	uint64_t real;  /* the driver's handle; 0 while released by suspend */
	uint64_t size;
	int32_t device; /* prop's location id */
	uint32_t refs;  /* the app's references; 0: released by the app, alive through its mappings */
	bool releasable; /* device memory the agent may release (not exported, on a device it serves) */
	bool exported;   /* shared with another process or device: never released by the agent */
	bool imported;   /* another process's memory (cuMemImportFromShareableHandle): never copied; let go and
			    imported again around a suspend (agent/agent_share.h); size unknown (the driver checks) */
	unsigned char prop[GS_VH_PROP_MAX];
	size_t prop_len;
	struct gs_vh_mapping **maps;
	size_t nmaps, maps_cap;
	/* the mover's: where suspend copies it from (a mapping of the app, or one of its own) */
	uint64_t window_va;
	bool window_own; /* window_va is the agent's reservation, mapped only for copies */
};

struct gs_vh_table;

/* NULL when out of memory. */
struct gs_vh_table *gs_vh_table_new(void);
void gs_vh_table_free(struct gs_vh_table *t);

/*
 * Adds a handle: copies `init` (vh, refs, maps and window are set here: one
 * reference, no mapping) and gives it a fresh virtual value in *vh.
 * GS_E_USAGE when prop_len is too large, GS_E_FAILURE when out of memory.
 */
int gs_vh_add(struct gs_vh_table *t, const struct gs_vh_handle *init, uint64_t *vh, struct gs_err *err);
/* The record of vh (also one the app released but still maps), or NULL. Valid until the next change. */
struct gs_vh_handle *gs_vh_get(struct gs_vh_table *t, uint64_t vh);
/* Drops the record (after the caller released the driver handle). */
void gs_vh_remove(struct gs_vh_table *t, uint64_t vh);

/* The app's reference count: +1 (retain). */
void gs_vh_retain(struct gs_vh_handle *h);
/* -1 (release). Returns true when the record is now dead: no reference and no mapping. */
bool gs_vh_release(struct gs_vh_handle *h);

/*
 * Records a mapping of vh at [va, va+size), offset bytes into it. GS_E_STATE
 * if it overlaps a recorded mapping or exceeds the handle, GS_E_FAILURE when
 * out of memory.
 */
int gs_vh_map(struct gs_vh_table *t, uint64_t vh, uint64_t va, uint64_t size, uint64_t offset, struct gs_err *err);
/* The mapping containing addr, or NULL. */
struct gs_vh_mapping *gs_vh_mapping_at(struct gs_vh_table *t, uint64_t addr);
/* True if a recorded mapping intersects [va, va+size). */
bool gs_vh_range_known(struct gs_vh_table *t, uint64_t va, uint64_t size);
/*
 * Forgets every mapping intersecting [va, va+size). The handles that are now
 * dead (no reference, no mapping) are returned in *dead (malloc'd, caller
 * frees; NULL when *ndead is 0): the caller releases their driver handles and
 * removes them. GS_E_FAILURE when out of memory (nothing changed then).
 */
int gs_vh_unmap(struct gs_vh_table *t, uint64_t va, uint64_t size, uint64_t **dead, size_t *ndead, struct gs_err *err);

/*
 * Records cuMemSetAccess(va, size, desc, n) on every mapping it touches,
 * clipped to each. An earlier record that this one covers entirely (same or
 * larger range, every location it set set again) is dropped, so an app that
 * sets the same access again and again does not grow the list.
 */
int gs_vh_set_access(struct gs_vh_table *t, uint64_t va, uint64_t size, const struct gs_vh_access *desc, size_t n,
		     struct gs_err *err);
/* True if one recorded access covers the whole mapping and lets the location (type, id) read and write it. */
bool gs_vh_mapping_writable_by(const struct gs_vh_mapping *m, int32_t loc_type, int32_t loc_id, int32_t rw_flags);

/*
 * Marks vh (and every handle with a mapping in [va, va+size), for the range
 * form) as exported: never releasable. Returns the number of handles that
 * became unreleasable by this call and adds their bytes to *bytes.
 */
size_t gs_vh_mark_exported(struct gs_vh_handle *h, uint64_t *bytes);
size_t gs_vh_mark_range_exported(struct gs_vh_table *t, uint64_t va, uint64_t size, uint64_t *bytes);

/* Calls fn for every record in creation order; a non-zero return stops the walk and is returned. */
typedef int (*gs_vh_visit_fn)(void *ctx, struct gs_vh_handle *h);
int gs_vh_foreach(struct gs_vh_table *t, gs_vh_visit_fn fn, void *ctx);

/* Records that are releasable, and their bytes. */
void gs_vh_stats(struct gs_vh_table *t, uint64_t *count, uint64_t *bytes);

#endif
