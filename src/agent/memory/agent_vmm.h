/*
 * agent_vmm.h - the memory kind of the agent's own allocations: device
 * memory it can release and re-create at the same virtual address (a
 * reservation backed by physical memory), carved into slabs by the
 * sub-allocator of each device (core/suballoc.h) or given whole to a large
 * allocation. agent_hooks.c gives the app's allocation calls this memory.
 */
#ifndef GPUSNAP_AGENT_MEMORY_AGENT_VMM_H
#define GPUSNAP_AGENT_MEMORY_AGENT_VMM_H

#include "agent/base/agent.h"

/* Makes each device's sub-allocator at its first use (base/agent.h's device_setup). */
extern const struct gs_agent_listener gs_vmm_listener;

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

#endif
