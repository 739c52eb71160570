/*
 * trampolines.h - entry stubs made at run time, one per real driver function,
 * each leading into the gate (gate_x86_64.S) with the function's address.
 *
 * A stub needs no prototype: it only loads the target and jumps, leaving
 * every argument register and the stack as the caller set them up.
 */
#ifndef GPUSNAP_AGENT_TRAMPOLINES_H
#define GPUSNAP_AGENT_TRAMPOLINES_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The gated stub for target (the same stub for the same target every time).
 * NULL if no stub can be made (out of memory, or executable mappings refused
 * by the system's policy); callers then hand out target ungated.
 */
void *gs_tramp_for(void *target);
/*
 * Makes the stub made for target lead to new_target instead (still through
 * the gate). Returns false if no stub exists for target.
 */
bool gs_tramp_retarget(void *target, void *new_target);
/* True if p is the entry of one of our stubs. */
bool gs_tramp_owns(const void *p);
/* Number of stubs made so far. */
size_t gs_tramp_count(void);

#endif
