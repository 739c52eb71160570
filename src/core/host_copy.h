/*
 * host_copy.h - the host-side copy of a bounce transfer (agent_ring.c): bytes
 * between a pinned ring buffer and the staging pool, tens of GiB per suspend,
 * while the GPU's DMA reads or writes other ring buffers.
 *
 * Such a copy is bound by the memory bus, not the CPU: the DMA, the copy's
 * reads and its writes share it. An ordinary store first reads the line it
 * writes (read for ownership) unless the C library chose non-temporal stores
 * for that size, which depends on its version and on the cache size it sees.
 * gs_host_copy_stream always writes with non-temporal stores (x86-64: SSE2,
 * which every x86-64 CPU has), so the destination costs one write per line;
 * elsewhere it is memcpy.
 */
#ifndef GPUSNAP_CORE_HOST_COPY_H
#define GPUSNAP_CORE_HOST_COPY_H

#include <stddef.h>

/* Copies n bytes (the areas must not overlap), the destination written around the caches where the CPU can. */
void gs_host_copy_stream(void *dst, const void *src, size_t n);

#endif
