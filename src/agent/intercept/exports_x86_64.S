/*
 * exports_x86_64.S - one exported function per CUDA driver entry point in
 * driver_exports.txt, so that with LD_PRELOAD the app's own references to the
 * driver (apps linked with -lcuda) bind here instead of to libcuda.so.1.
 *
 * Export i is a single indirect jump through gs_export_slots[i]. The slot
 * starts at a small per-export stub that passes i to gs_export_lazy, which
 * resolves the name in the real driver on the first call and stores where
 * the export leads from then on: the gated stub of the real function, the
 * agent's replacement, or gs_export_missing when the driver lacks the name.
 * The list is turned into driver_exports.inc (GS_DRIVER_EXPORT(name) lines)
 * by src/agent/CMakeLists.txt; interpose.c expands the same file into the
 * table of names, in the same order.
 */

	.set gs_export_count, 0

.macro gs_export name
	.pushsection .text.gs_exports, "ax", @progbits
	.globl \name
	.type \name, @function
	.p2align 3
\name:
	jmp *gs_export_slots + 8 * gs_export_count(%rip)
	.size \name, .-\name
	.popsection

	.pushsection .text.gs_export_lazy, "ax", @progbits
.Llazy_\name:
	movl $gs_export_count, %r11d
	jmp gs_export_lazy
	.popsection

	.pushsection .data.rel.gs_export_slots, "aw", @progbits
	.quad .Llazy_\name
	.popsection

	.set gs_export_count, gs_export_count + 1
.endm

	.pushsection .text.gs_exports, "ax", @progbits
	.globl gs_exports_begin
	.hidden gs_exports_begin
gs_exports_begin:
	.popsection

	.pushsection .data.rel.gs_export_slots, "aw", @progbits
	.p2align 3
	.globl gs_export_slots
	.hidden gs_export_slots
gs_export_slots:
	.popsection

#define GS_DRIVER_EXPORT(name) gs_export name
#include "driver_exports.inc"

	.pushsection .text.gs_exports, "ax", @progbits
	.globl gs_exports_end
	.hidden gs_exports_end
gs_exports_end:
	.popsection

	.section .note.GNU-stack,"",@progbits
