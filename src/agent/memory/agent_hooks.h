/*
 * agent_hooks.h - the agent's replacements of the driver's allocation entry
 * points (agent_hooks.c), which give the app releasable memory.
 */
#ifndef GPUSNAP_AGENT_MEMORY_AGENT_HOOKS_H
#define GPUSNAP_AGENT_MEMORY_AGENT_HOOKS_H

#include <stdbool.h>

#include "agent/base/agent.h"
#include "agent/memory/memkind.h"

/* The memory kind of the agent's own allocations and slabs (memory/memkind.h). */
extern const struct gs_memkind gs_alloc_kind;
/*
 * Frees the stream-ordered frees whose streams reached them (and those of
 * CUDA graphs that ran); all of them (after a sync) when `all`.
 */
void gs_agent_drain_deferred(struct gs_agent *a, bool all);

#endif
