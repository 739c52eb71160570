/*
 * agent.h - the state of libgpusnap.so inside the app: the real driver
 * table, the allocations it made releasable, per-device resources, and
 * whether the app's data is on the GPU or held in host memory.
 *
 * Ownership: one global `struct gs_agent` (gs_agent_get()), created by the
 * library constructor, never freed (the process may call CUDA until exit).
 * Allocation hooks run inside the gate and suspend closes the gate first, so
 * hooks and the data mover never run at once. Two locks, taken in this order:
 * `lock` protects the state against two control requests at once (a suspend
 * holds it while it closes the gate and waits for the app's threads to leave
 * the driver); `setup_lock` protects loading the driver table and a device's
 * first-use set-up, which allocation hooks do inside the gate, so no thread
 * holding it ever waits for the gate or for `lock`.
 */
#ifndef GPUSNAP_AGENT_AGENT_H
#define GPUSNAP_AGENT_AGENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "core/alloc_registry.h"
#include "core/protocol.h"
#include "core/suballoc.h"
#include "cuda/driver.h"

#define GS_AGENT_MAX_DEVICES 64
#define GS_AGENT_LANES 4

struct gs_agent_device {
	bool used;
	int ordinal;
	CUcontext ctx;       /* the context the agent copies in here: one of the app's, alive (agent_contexts.c) */
	uint64_t granularity;
	struct gs_suballoc *sub;
	struct gs_agent *agent;
	CUstream lanes[GS_AGENT_LANES]; /* the mover's copy streams, made at the first suspend */
	bool lanes_ready;
	bool announced; /* gs_mover_device_ready was called for it (atomic; set under setup_lock) */
};

struct gs_agent {
	struct gs_cuda cu; /* the real driver: never goes through the gate */
	bool cuda_ready;   /* cu loaded with its memory API */
	struct gs_err cuda_failure; /* why it could not be, after the one attempt */
	pthread_mutex_t lock;
	pthread_mutex_t setup_lock; /* after `lock`: cu's loading, a device's first use */
	struct gs_agent_device devices[GS_AGENT_MAX_DEVICES];
	/* allocations the app sees (DEVICE, SUBALLOC, POOL kinds) */
	struct gs_alloc_registry *allocs;
	/* slabs of the sub-allocators: kind DEVICE, handle = physical handle, user = device */
	struct gs_alloc_registry *slabs;
	enum gs_agent_state state; /* core/protocol.h; written only by agent_lifecycle.c's set_state */
	struct gs_agent_held *held; /* the app's data on its way out or held while suspended (agent_mover.h) */
	/* counters for `gpusnap state`: memory the agent cannot release (left to the driver path) */
	uint64_t unmanaged_allocs, unmanaged_bytes;
	/* stream-ordered frees waiting for their stream (cuMemFreeAsync) */
	struct gs_deferred_free *deferred;
	pthread_mutex_t deferred_lock;
};

struct gs_agent *gs_agent_get(void);

/* Loads the real driver table on first use (not in the constructor: no CUDA before the app's first call). */
int gs_agent_cuda(struct gs_agent *a, struct gs_err *err);
/* The device of the current context, creating its per-device state on first use. */
struct gs_agent_device *gs_agent_current_device(struct gs_agent *a, CUresult *cuerr);

/* agent_vmm.c: releasable device memory at a fixed virtual address */
CUresult gs_vmm_alloc(struct gs_agent_device *d, uint64_t size, uint64_t *va, uint64_t *reserved,
		      CUmemGenericAllocationHandle *handle);
/* Devices (bit i = device i) given access besides the owning device, which always reads and writes. */
struct gs_vmm_access {
	uint64_t rw; /* read and write */
	uint64_t ro; /* read only */
};
/* gs_vmm_alloc with other devices given access as acc says (NULL: none); kept for re-creation. */
CUresult gs_vmm_alloc_access(struct gs_agent_device *d, uint64_t size, const struct gs_vmm_access *acc, uint64_t *va,
			     uint64_t *reserved, CUmemGenericAllocationHandle *handle);
/* The access of the reservation at va besides its device's (zeros: none). */
void gs_vmm_get_access(uint64_t va, struct gs_vmm_access *acc);
/* Sets the access of the mapped reservation at va (its device's, plus acc) and keeps it for re-creation. */
CUresult gs_vmm_set_access(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
			   const struct gs_vmm_access *acc);
/*
 * Sets the access of the mapped reservation at va again from its records (its
 * device's, its pool's, its device's peers'), taking it away from the devices
 * of revoke that none of these name. For agent_peer.c, which holds the peer
 * lock exclusively.
 */
CUresult gs_vmm_apply_access(struct gs_agent *a, int device, uint64_t va, uint64_t reserved, uint64_t revoke);
/* In a fork child: forgets the parent's access records. */
void gs_vmm_forget_after_fork(void);
/* Unmaps and releases the physical memory of [va, va+reserved), keeping the reservation. */
CUresult gs_vmm_release_physical(struct gs_agent *a, uint64_t va, uint64_t reserved, CUmemGenericAllocationHandle handle);
/* Creates physical memory on device and maps it at va (after a release). */
CUresult gs_vmm_recreate_physical(struct gs_agent *a, int device, uint64_t va, uint64_t reserved,
				  CUmemGenericAllocationHandle *handle);
/* Releases physical memory and the reservation. */
CUresult gs_vmm_free(struct gs_agent *a, uint64_t va, uint64_t reserved, CUmemGenericAllocationHandle handle);

/* agent_hooks.c: installs the replacements of the allocation entry points */
int gs_agent_install_hooks(struct gs_err *err);
/*
 * Frees the stream-ordered frees whose streams reached them (and those of
 * CUDA graphs that ran); all of them (after a sync) when `all`.
 */
void gs_agent_drain_deferred(struct gs_agent *a, bool all);
/* In a fork child: forgets the parent's pools, frees in waiting and driver allocations (and access records). */
void gs_agent_hooks_forget_after_fork(void);

#endif
