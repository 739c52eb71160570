/*
 * agent_peer.h - the agent's memory as other GPUs and NICs see it: peer
 * access that follows the app's cuCtxEnablePeerAccess, GPUDirect RDMA on
 * the agent's allocations, and dma-buf exports that pin an allocation.
 *
 * The agent backs cudaMalloc with cuMemCreate + cuMemMap, which the driver's
 * peer enable does not reach (it covers the driver's own allocations only):
 * a mapping needs cuMemSetAccess for each device that may use it. So this
 * module keeps every *backing* of the agent (a reservation with its physical
 * memory: a large allocation's own, or a slab that sub-allocated blocks
 * share), per owning device, and which devices have enabled peer access to
 * which: when device A's context enables access to a context of device B,
 * every backing of B gets read-write access for A, now, for backings made
 * later, and for those re-created on resume (agent_vmm.c asks
 * gs_peer_devices when it sets a mapping's access). Disabling takes it away
 * again, unless another enabled pair, or a memory pool's access list, still
 * gives it.
 *
 * A backing exported as a dma-buf (cuMemGetHandleForAddressRange) is
 * *pinned*: a NIC may write into it at any time, so it is never released
 * (the mover leaves it out of the plan; the driver path moves it), and it is
 * counted as unmanaged memory until freed.
 *
 * Threads: the hooks and gs_peer_backing_add/remove run on app threads
 * inside the gate; gs_peer_devices also on the thread of a control request
 * (resume, with the gate closed). One rwlock: an enable or disable holds it
 * exclusively while it records the pair and sets the access of every
 * backing, and agent_vmm.c holds it shared from reading gs_peer_devices to
 * recording the new backing (gs_peer_map_begin/end), so a backing made
 * meanwhile is either seen by the walk or maps with the new access.
 */
#ifndef GPUSNAP_AGENT_AGENT_PEER_H
#define GPUSNAP_AGENT_AGENT_PEER_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/memory/memkind.h"
#include "common/err.h"

/* Installs the replacements of cuCtxEnablePeerAccess and cuCtxDisablePeerAccess. */
int gs_peer_install_hooks(struct gs_err *err);

/* Devices (bit i = device i) that enabled peer access to memory of `device`; never includes device itself. */
uint64_t gs_peer_devices(int device);

/*
 * Brackets a backing's mapping and its record (agent_vmm.c): between them no
 * enable or disable runs, so the access it reads stays true until the backing
 * is recorded.
 */
void gs_peer_map_begin(void);
void gs_peer_map_end(void);
/* Records a backing of the agent [va, va+reserved) on device (0, or CUDA_ERROR_OUT_OF_MEMORY). */
int gs_peer_backing_add(uint64_t va, uint64_t reserved, int device);
/* Forgets the backing at va (freed); a pinned one stops counting as unmanaged. */
void gs_peer_backing_remove(uint64_t va);

/* Whether the backing at va was exported as a dma-buf and so must never be released. */
bool gs_peer_backing_pinned(uint64_t va);
/*
 * The app exported [va, va+size) as a dma-buf: every backing of the agent it
 * touches becomes pinned (counted as unmanaged once). Returns how many
 * backings it pinned now.
 */
size_t gs_peer_pin_range(uint64_t va, uint64_t size);

/* Whether cuMemCreate on device may ask for gpuDirectRDMACapable (asked of the driver once per device). */
bool gs_peer_rdma_capable(struct gs_agent *a, int device);

/* In a fork child: forgets the parent's backings, pairs and device answers. */
void gs_peer_forget_after_fork(void);

/* Peer access as a memory kind (memory/memkind.h). */
extern const struct gs_memkind gs_peer_kind;

#endif
