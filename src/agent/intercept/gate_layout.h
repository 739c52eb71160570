/*
 * gate_layout.h - the part of the gate's per-thread slot that the assembly
 * fast path (gate_x86_64.S) reads and writes; gate.c checks these offsets
 * against its struct at compile time.
 */
#ifndef GPUSNAP_AGENT_GATE_LAYOUT_H
#define GPUSNAP_AGENT_GATE_LAYOUT_H

#define GS_SLOT_DEPTH 0   /* int: nesting depth of gated calls, > 0 means inside the driver */
#define GS_SLOT_SP 4      /* unsigned: used entries of the shadow stack */
#define GS_SLOT_EXEMPT 8  /* int: an agent thread, never gated */
#define GS_SLOT_CALLS 16  /* uint64_t: gated calls this slot's threads made (written by the owner only) */
#define GS_SLOT_SHADOW 32 /* void *[GS_SHADOW_DEPTH]: the callers' return addresses */

/*
 * Return addresses kept per thread for nested gated calls. Driver calls nest
 * only through app callbacks run synchronously inside the driver (rare and
 * shallow); deeper calls stay gated at entry but are not tracked on return,
 * which is safe because the outer frames keep the thread counted as inside.
 */
#define GS_SHADOW_DEPTH 32

#endif
