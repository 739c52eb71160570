/*
 * suballoc.h - serves small device allocations from shared slabs.
 *
 * Releasable device memory is mapped in 2 MiB granules, so 10,000 one-byte
 * cudaMalloc calls must not each take a granule. Requests up to a threshold
 * (default 1 MiB) are rounded up to a size class and carved out of slabs
 * (default 2 MiB) that the caller provides through slab_alloc / slab_free
 * (the CUDA layer reserves, creates and maps them). Each slab serves one size
 * class at a time, tracked by a bitmap; classes are the powers of two from the
 * alignment up and the midpoints between them that stay multiples of the
 * alignment (512, 1K, 1.5K, 2K, 3K, ...), so a block wastes at most a third
 * (or, below twice the alignment, less than the alignment).
 *
 * Alignment: every address is a multiple of `align`, provided slab_alloc
 * returns aligned slabs (a slab that is not is refused). The default, 512
 * bytes, is what cudaMalloc returns for every size (driver 580; cudaMalloc
 * documents only 256): an app may rely on what it sees, so the agent's
 * memory gives the same (tests/gpu/t97 compares the two on a GPU). A block
 * whose class is a power of two is also aligned to its class size when slabs
 * are aligned to the slab size, as VMM reservations are (2 MiB).
 *
 * Suspend: the data mover copies whole slabs (gs_suballoc_foreach_slab), not
 * individual blocks; the metadata lives in host memory and needs no change
 * when the slab's physical memory is released and re-created at the same
 * address. An empty spare slab may be skipped or trimmed first.
 *
 * Empty slabs go back through slab_free, except `spare_slabs` of them (default
 * 1) kept to avoid churn when one allocation is freed and made again.
 *
 * Thread-safety: all functions may be called from any thread (one mutex).
 * slab_alloc and slab_free are called without that mutex held, so they may
 * take their own locks; they must not call back into the same sub-allocator.
 * The foreach callback runs with the mutex held and must not call it either.
 * Not async-signal-safe.
 */
#ifndef GPUSNAP_CORE_SUBALLOC_H
#define GPUSNAP_CORE_SUBALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

struct gs_suballoc_ops {
	/* Maps size bytes of device memory; stores its base in *va. Returns 0, or non-zero on failure. */
	int (*slab_alloc)(void *ctx, uint64_t size, uint64_t *va);
	/* Releases a slab that slab_alloc returned. */
	void (*slab_free)(void *ctx, uint64_t va, uint64_t size);
	void *ctx;
};

struct gs_suballoc_config {
	uint64_t slab_size;   /* bytes per slab, a multiple of align; 0 = 2 MiB */
	uint64_t threshold;   /* largest request served, <= slab_size; 0 = 1 MiB */
	uint64_t align;       /* a power of two >= 256; 0 = GS_SUBALLOC_DEFAULT_ALIGN */
	uint32_t spare_slabs; /* empty slabs kept instead of freed; GS_SUBALLOC_DEFAULT_SPARES = 1 */
};
#define GS_SUBALLOC_DEFAULT_SPARES UINT32_MAX
/* cudaMalloc's alignment: see above */
#define GS_SUBALLOC_DEFAULT_ALIGN 512

struct gs_slab_info {
	uint64_t va, size;
	uint64_t block_size;   /* class served now; 0 for an empty spare slab */
	uint32_t blocks_used;
	uint32_t blocks_total; /* 0 for an empty spare slab */
};

struct gs_suballoc_stats {
	uint64_t slabs, slab_bytes;   /* slabs held, spares included */
	uint64_t spare_slabs;         /* empty slabs kept */
	uint64_t blocks, block_bytes; /* live allocations and their rounded sizes */
};

struct gs_suballoc;

/* cfg NULL = all defaults. GS_E_USAGE for an inconsistent config. */
int gs_suballoc_new(const struct gs_suballoc_config *cfg, const struct gs_suballoc_ops *ops,
		    struct gs_suballoc **out, struct gs_err *err);
/* Gives every slab back through slab_free (live blocks included) and frees the metadata. */
void gs_suballoc_destroy(struct gs_suballoc *sa);

/* True when a request of this size is served here (0 < size <= threshold). */
bool gs_suballoc_serves(const struct gs_suballoc *sa, uint64_t size);
/*
 * Allocates size bytes; stores the address in *va. GS_E_USAGE for a size not
 * served, GS_E_NO_VRAM when slab_alloc fails (its return value is in the
 * message), GS_E_FAILURE for a misaligned slab or out of host memory.
 */
int gs_suballoc_alloc(struct gs_suballoc *sa, uint64_t size, uint64_t *va, struct gs_err *err);
/*
 * Frees the block starting at va; its rounded size goes to *block_size (may be
 * NULL). GS_E_STATE if va is not the start of a live block here (never
 * allocated, interior pointer, double free).
 */
int gs_suballoc_free(struct gs_suballoc *sa, uint64_t va, uint64_t *block_size, struct gs_err *err);
/* The live block containing ptr: its start and rounded size. */
bool gs_suballoc_find(struct gs_suballoc *sa, uint64_t ptr, uint64_t *block_va, uint64_t *block_size);
/* The rounded size a request of size bytes gets (0 if not served). */
uint64_t gs_suballoc_block_size(const struct gs_suballoc *sa, uint64_t size);

/* Calls fn for every slab in address order; non-zero from fn stops and is returned. */
typedef int (*gs_slab_visit_fn)(void *ctx, const struct gs_slab_info *slab);
int gs_suballoc_foreach_slab(struct gs_suballoc *sa, gs_slab_visit_fn fn, void *ctx);
/* Gives the empty spare slabs back through slab_free. */
void gs_suballoc_trim(struct gs_suballoc *sa);
void gs_suballoc_get_stats(struct gs_suballoc *sa, struct gs_suballoc_stats *st);

#endif
