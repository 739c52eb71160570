/*
 * agent_pointer.h - cuPointerGetAttribute(s) on the agent's memory answered
 * as for the cudaMalloc allocation the app asked for.
 *
 * The driver sees the agent's mappings: a slab that many small blocks share,
 * or a reservation rounded up to the granularity. Asked about a pointer into
 * an allocation of the agent (a->allocs), the range start and size are the
 * allocation's (as cuMemGetAddressRange's hook answers), the buffer id is the
 * allocation's own (its registry id, tagged so it never equals one of the
 * driver's, and kept across suspend and resume as the allocation is), the
 * memory type is device memory, the device ordinal the allocation's, the
 * context the one the agent knows for that device. Every other attribute,
 * and every pointer that is not the agent's, is the driver's answer.
 *
 * Runs on app threads, inside the gate.
 */
#ifndef GPUSNAP_AGENT_AGENT_POINTER_H
#define GPUSNAP_AGENT_AGENT_POINTER_H

#include "agent/memory/memkind.h"
#include "common/err.h"

/* Installs the replacements of cuPointerGetAttribute and cuPointerGetAttributes. */
int gs_pointer_install_hooks(struct gs_err *err);

/* Pointer attributes as a memory kind (memory/memkind.h). */
extern const struct gs_memkind gs_pointer_kind;

#endif
