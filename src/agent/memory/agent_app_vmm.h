/*
 * agent_app_vmm.h - the app's own VMM memory (cuMemCreate + cuMemMap, as
 * PyTorch's expandable segments, vLLM and TensorRT-LLM use it) made
 * releasable: the agent hands out virtual allocation handles
 * (core/vmm_handles.h), translates them in every driver entry point that
 * takes or returns one, and lets the data mover release the physical memory
 * on suspend and re-create it, mapped and accessible as before, on resume.
 *
 * The hooks run inside the gate; the mover's calls below run with the gate
 * closed. One lock serializes both on the table.
 */
#ifndef GPUSNAP_AGENT_AGENT_APP_VMM_H
#define GPUSNAP_AGENT_AGENT_APP_VMM_H

#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/memory/memkind.h"

/* Installs the replacements of the VMM entry points (its memory kind's install_hooks). */
int gs_app_vmm_install_hooks(struct gs_err *err);

/* The app's handles the agent can release now: count and bytes (for `gpusnap state`). */
void gs_app_vmm_stats(uint64_t *count, uint64_t *bytes);

/*
 * Suspend, before the copy: calls fn once per releasable handle with the
 * address its whole content can be copied from and to (a mapping of the app
 * that covers it and lets its device read and write, or else a window the
 * agent reserves and maps for it; the window stays reserved until
 * gs_app_vmm_finish). On failure nothing is left prepared.
 */
typedef int (*gs_app_vmm_region_fn)(void *ctx, uint64_t vh, uint64_t va, uint64_t size, int device);
int gs_app_vmm_prepare(struct gs_agent *a, gs_app_vmm_region_fn fn, void *ctx, struct gs_err *err);
/*
 * Unmaps every mapping of the handle (the app's reservations stay) and
 * releases its physical memory. On failure the handle is as before.
 */
CUresult gs_app_vmm_release(struct gs_agent *a, uint64_t vh);
/*
 * Creates the handle's physical memory again with its recorded properties,
 * maps it where it was mapped (and the window), and gives every range the
 * access it had. *real gets the new driver handle. On failure nothing of it is left.
 */
CUresult gs_app_vmm_recreate(struct gs_agent *a, uint64_t vh, CUmemGenericAllocationHandle *real);
/* After a resume (or a suspend that failed): frees the windows that prepare made. */
void gs_app_vmm_finish(struct gs_agent *a);
/*
 * For agent_share.c, whose records are under the same lock: the table's
 * lock, a handle's record, and the driver work on shared handles (all with
 * the lock held).
 */
void gs_app_vmm_lock(void);
void gs_app_vmm_unlock(void);
struct gs_vh_handle *gs_app_vmm_get_locked(uint64_t vh);
void gs_app_vmm_mark_unreleasable_locked(struct gs_vh_handle *h, const char *why);
/* An import: unmaps it everywhere and releases the driver's handle (real = 0); on failure as before. */
CUresult gs_app_vmm_let_go_locked(struct gs_agent *a, struct gs_vh_handle *h);
/* An import let go: imports fd again and maps it where it was, with its access; on failure nothing of it is left. */
CUresult gs_app_vmm_import_again_locked(struct gs_agent *a, struct gs_vh_handle *h, int fd);
/* A released exported handle: creates its memory (unmapped, unfilled: the resume does that) and exports it (*fd). */
CUresult gs_app_vmm_create_exported_locked(struct gs_agent *a, struct gs_vh_handle *h, int *fd);
/* In a fork child (one thread): forgets the parent's handles, which are not the child's. */
void gs_app_vmm_forget_after_fork(void);

/* The memory kind of the app's own VMM handles (memory/memkind.h). */
extern const struct gs_memkind gs_app_vmm_kind;

#endif
