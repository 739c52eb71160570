/*
 * gate_x86_64.S - the machine-level half of the interposer (x86-64 System V
 * ABI only; other architectures need their own): the gate, the exported
 * driver symbols, and the dlsym interposer. interpose.c is the C half.
 *
 * gs_gate_common: every gated call arrives here from a stub (interpose.c's
 *   trampolines) or a resolved export (below) with the real function in %r11
 *   and the app's arguments untouched. The fast path (the thread has a slot,
 *   the gate is open) does gate.c's entry protocol inline using only r10 and
 *   a saved rax/rcx: depth=1, then look at gs_gate_closed, push the return
 *   address on the thread's shadow stack and put gs_gate_return in its place
 *   at (%rsp). So the call's exit is seen without knowing the prototype, and
 *   arguments on the stack stay exactly where the callee expects them.
 *   Anything else (first call of a thread, gate closed) takes the slow path:
 *   save the argument registers (rdi rsi rdx rcx r8 r9, rax = vector-register
 *   count of varargs calls, xmm0-7), call gs_gate_enter(return address),
 *   which may block, and restore them. r10 and r11 are scratch: at a call
 *   they carry nothing but a GNU C nested function's static chain (r10),
 *   which no driver entry point takes.
 *
 * gs_gate_return: the real function returns here. Fast path: pop the shadow
 *   stack, depth-1, and if that left the driver while the gate is closed call
 *   gs_gate_notify_closer (saving rax rdx xmm0 xmm1, the return registers).
 *   Functions returning long double (x87) are not supported; the driver API
 *   has none.
 *
 * Limits of the return-address swap: unwinding stops at gs_gate_return (its
 *   caller lives in thread-local storage, which DWARF cannot describe), so
 *   debugger/profiler backtraces taken inside the driver end there, and a
 *   forced unwind (pthread_cancel, pthread_exit) from inside a gated call
 *   skips the app's cleanup handlers above it. It is incompatible with
 *   hardware shadow stacks (CET SHSTK); this file carries no CET property note,
 *   so the linked library is not marked SHSTK/IBT-compatible and glibc leaves
 *   them off unless they are forced on.
 *
 * Exports: one exported function per CUDA driver entry point in
 *   driver_exports.txt, so that with LD_PRELOAD the app's own references to
 *   the driver (apps linked with -lcuda) bind here instead of to libcuda.so.1.
 *   Export i is a single indirect jump through gs_export_slots[i]. The slot
 *   starts at a small per-export stub that passes i to gs_export_lazy, which
 *   resolves the name in the real driver on the first call and stores where
 *   the export leads from then on: the gated stub of the real function, the
 *   agent's replacement, or gs_export_missing when the driver lacks the name.
 *   The list is turned into driver_exports.inc (GS_DRIVER_EXPORT(name) lines)
 *   by src/agent/CMakeLists.txt; interpose.c expands the same file into the
 *   table of names, in the same order.
 *
 * dlsym / dlvsym: our exported interposers. Names that cannot be driver
 *   entry points (not starting with "cu") go straight to the real function by
 *   a tail jump, so the real one sees the original caller's return address and
 *   RTLD_NEXT keeps its exact meaning; "cu..." names go to the C side.
 */

	.text

/* Frame of gs_gate_common and gs_export_lazy: 208 bytes below the saved %rbp. */
.macro save_argument_registers
	pushq %rbp
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %rbp, 0
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	subq $208, %rsp             /* entry %rsp = 8 mod 16, so now 0 mod 16 for the call */
	movq %rdi, 0(%rsp)
	movq %rsi, 8(%rsp)
	movq %rdx, 16(%rsp)
	movq %rcx, 24(%rsp)
	movq %r8, 32(%rsp)
	movq %r9, 40(%rsp)
	movq %rax, 48(%rsp)
	movq %r10, 56(%rsp)
	movq %r11, 64(%rsp)
	movups %xmm0, 80(%rsp)
	movups %xmm1, 96(%rsp)
	movups %xmm2, 112(%rsp)
	movups %xmm3, 128(%rsp)
	movups %xmm4, 144(%rsp)
	movups %xmm5, 160(%rsp)
	movups %xmm6, 176(%rsp)
	movups %xmm7, 192(%rsp)
.endm

.macro restore_argument_registers
	movq 0(%rsp), %rdi
	movq 8(%rsp), %rsi
	movq 16(%rsp), %rdx
	movq 24(%rsp), %rcx
	movq 32(%rsp), %r8
	movq 40(%rsp), %r9
	movq 48(%rsp), %rax
	movq 56(%rsp), %r10
	movq 64(%rsp), %r11
	movups 80(%rsp), %xmm0
	movups 96(%rsp), %xmm1
	movups 112(%rsp), %xmm2
	movups 128(%rsp), %xmm3
	movups 144(%rsp), %xmm4
	movups 160(%rsp), %xmm5
	movups 176(%rsp), %xmm6
	movups 192(%rsp), %xmm7
	leave
	.cfi_def_cfa %rsp, 8
	.cfi_restore %rbp
.endm

#include "agent/intercept/gate_layout.h"

	.globl gs_gate_common
	.hidden gs_gate_common
	.type gs_gate_common, @function
	.p2align 4
gs_gate_common:
	.cfi_startproc
	movq gs_gate_current_slot@gottpoff(%rip), %r10
	movq %fs:(%r10), %r10            /* this thread's slot */
	testq %r10, %r10
	jz .Lslow_path                   /* first gated call of this thread */
	pushq %rax
	.cfi_adjust_cfa_offset 8
	pushq %rcx
	.cfi_adjust_cfa_offset 8
	movq 16(%rsp), %rcx              /* the caller's return address */
	movq %rcx, %rax
	subq gs_gate_driver_lo(%rip), %rax
	cmpq gs_gate_driver_len(%rip), %rax
	jb .Lpass                        /* the driver calling its own export */
	cmpl $0, GS_SLOT_EXEMPT(%r10)
	jne .Lpass                       /* an agent thread */
	movl GS_SLOT_SP(%r10), %eax
	cmpl $GS_SHADOW_DEPTH, %eax
	jae .Lpass                       /* nested too deep: gated only at entry (see gate_layout.h) */
	cmpl $0, GS_SLOT_DEPTH(%r10)
	jne .Lnested
	movl $1, GS_SLOT_DEPTH(%r10)
	cmpl $0, gs_gate_use_membarrier(%rip)
	jne 1f
	lock orl $0, (%rsp)              /* no membarrier: a full fence here instead (gate.c) */
1:
	cmpl $0, gs_gate_closed(%rip)
	je .Ltrack
	movl $0, GS_SLOT_DEPTH(%r10)     /* closed: back off, the slow path waits */
	popq %rcx
	.cfi_adjust_cfa_offset -8
	popq %rax
	.cfi_adjust_cfa_offset -8
	jmp .Lslow_path
	.cfi_adjust_cfa_offset 16
.Lnested:
	incl GS_SLOT_DEPTH(%r10)
.Ltrack:
	incq GS_SLOT_CALLS(%r10)         /* gs_gate_call_count: the owner thread alone writes it */
	incl GS_SLOT_SP(%r10)            /* first, so a signal handler's nested call uses the next entry */
	movq %rcx, GS_SLOT_SHADOW(%r10,%rax,8)
	leaq gs_gate_return(%rip), %rcx
	movq %rcx, 16(%rsp)              /* the real function will return to gs_gate_return */
.Lpass:
	popq %rcx
	.cfi_adjust_cfa_offset -8
	popq %rax
	.cfi_adjust_cfa_offset -8
	jmp *%r11

.Lslow_path:
	save_argument_registers
	movq 8(%rbp), %rdi               /* the caller's return address */
	call gs_gate_enter
	testl %eax, %eax
	jz 2f
	leaq gs_gate_return(%rip), %rcx
	movq %rcx, 8(%rbp)
2:
	restore_argument_registers
	jmp *%r11
	.cfi_endproc
	.size gs_gate_common, .-gs_gate_common

	.globl gs_gate_return
	.hidden gs_gate_return
	.type gs_gate_return, @function
	.type gs_gate_return_frame, @function
	.p2align 4
	.cfi_startproc
	.cfi_undefined %rip
	/*
	 * Unwinders and debuggers look up the frame of a return address at
	 * (address - 1); this nop puts that byte inside this unwind entry, which
	 * says "end of stack" (the real caller is on the shadow stack, not in
	 * memory), and inside a symbol named for what it is.
	 */
gs_gate_return_frame:
	nop
gs_gate_return:
	/* rax rdx xmm0 xmm1 hold the result; rcx rsi rdi r8-r11 are free here */
	movq gs_gate_current_slot@gottpoff(%rip), %r10
	movq %fs:(%r10), %r10
	movl GS_SLOT_SP(%r10), %ecx
	decl %ecx
	movq GS_SLOT_SHADOW(%r10,%rcx,8), %r11   /* the original return address */
	movl %ecx, GS_SLOT_SP(%r10)              /* after the read: a signal's nested call keeps off it */
	movl GS_SLOT_DEPTH(%r10), %ecx
	decl %ecx
	movl %ecx, GS_SLOT_DEPTH(%r10)
	jnz 2f                                   /* still inside (flags from decl) */
	cmpl $0, gs_gate_use_membarrier(%rip)
	jne 1f
	lock orl $0, (%rsp)
1:
	cmpl $0, gs_gate_closed(%rip)
	jne 3f
2:
	jmp *%r11
3:
	subq $64, %rsp                           /* %rsp was 0 mod 16 (the callee popped our slot): still 0 */
	.cfi_adjust_cfa_offset 64
	movq %rax, 0(%rsp)
	movq %rdx, 8(%rsp)
	movq %r11, 16(%rsp)
	movups %xmm0, 32(%rsp)
	movups %xmm1, 48(%rsp)
	call gs_gate_notify_closer
	movq 0(%rsp), %rax
	movq 8(%rsp), %rdx
	movq 16(%rsp), %r11
	movups 32(%rsp), %xmm0
	movups 48(%rsp), %xmm1
	addq $64, %rsp
	.cfi_adjust_cfa_offset -64
	jmp *%r11
	.cfi_endproc
	.size gs_gate_return, .-gs_gate_return
	.size gs_gate_return_frame, .-gs_gate_return_frame

/*
 * The exports (see the top of this file): their jumps in .text.gs_exports,
 * between gs_exports_begin and gs_exports_end; their lazy stubs; their slots.
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

/*
 * gs_export_lazy: first call of an exported driver entry point (above)
 * with the export's index in %r11d: resolve it, then go where it now leads.
 */
	.globl gs_export_lazy
	.hidden gs_export_lazy
	.type gs_export_lazy, @function
	.p2align 4
gs_export_lazy:
	.cfi_startproc
	save_argument_registers
	movl %r11d, %edi
	call gs_export_resolve
	movq %rax, 64(%rsp)         /* restored into %r11 */
	restore_argument_registers
	jmp *%r11
	.cfi_endproc
	.size gs_export_lazy, .-gs_export_lazy

/* Where an export leads when the driver lacks it: CUDA_ERROR_NOT_FOUND. */
	.globl gs_export_missing
	.hidden gs_export_missing
	.type gs_export_missing, @function
	.p2align 4
gs_export_missing:
	.cfi_startproc
	movl $500, %eax
	ret
	.cfi_endproc
	.size gs_export_missing, .-gs_export_missing

/*
 * dlsym(handle, name) and dlvsym(handle, name, version). Until the real ones
 * are known (the sanitizer runtime can call dlsym before any constructor of
 * ours ran), gs_dl_bootstrap finds them without calling dlsym.
 */
	.globl dlsym
	.type dlsym, @function
	.p2align 4
dlsym:
	.cfi_startproc
	movq gs_real_dlsym_fn(%rip), %rax
	testq %rax, %rax
	jz 3f
	testq %rsi, %rsi
	jz 1f
	cmpb $0x63, (%rsi)          /* 'c' */
	jne 1f
	cmpb $0x75, 1(%rsi)         /* 'u' */
	je gs_dlsym_cu
1:
	jmp *%rax
3:
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	call gs_dl_bootstrap
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testl %eax, %eax
	jnz dlsym
	xorl %eax, %eax             /* no real dlsym anywhere: behave as "not found" */
	ret
	.cfi_endproc
	.size dlsym, .-dlsym

	.globl dlvsym
	.type dlvsym, @function
	.p2align 4
dlvsym:
	.cfi_startproc
	movq gs_real_dlvsym_fn(%rip), %rax
	testq %rax, %rax
	jz 3f
	testq %rsi, %rsi
	jz 1f
	cmpb $0x63, (%rsi)
	jne 1f
	cmpb $0x75, 1(%rsi)
	je gs_dlvsym_cu
1:
	jmp *%rax
3:
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	pushq %rdx
	.cfi_adjust_cfa_offset 8
	call gs_dl_bootstrap
	popq %rdx
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testl %eax, %eax
	jnz dlvsym
	xorl %eax, %eax
	ret
	.cfi_endproc
	.size dlvsym, .-dlvsym

	.section .note.GNU-stack,"",@progbits
