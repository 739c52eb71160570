/*
 * gate_x86_64.S - the machine-level half of the gate and of the dlsym
 * interposer (x86-64 System V ABI only; other architectures need their own).
 *
 * gs_gate_common: every gated call arrives here from a stub (trampolines.c)
 *   or a resolved export (exports_x86_64.S) with the real function in %r11
 *   and the app's arguments untouched. It saves the argument registers
 *   (rdi rsi rdx rcx r8 r9, rax = vector-register count of varargs calls,
 *   r10 = static chain, xmm0-7), calls gs_gate_enter(return address) which may
 *   block while the gate is closed, restores them, and jumps to the real
 *   function. When gs_gate_enter tracked the call, the return address slot at
 *   (%rsp) now holds gs_gate_return instead (the original is on the thread's
 *   shadow stack), so the call's exit is seen without knowing the prototype:
 *   arguments on the stack stay exactly where the callee expects them.
 *
 * gs_gate_return: the real function returns here; it saves the return value
 *   registers (rax rdx xmm0 xmm1), calls gs_gate_exit() which pops the original
 *   return address, and jumps there. Functions returning long double (x87)
 *   are not supported; the driver API has none.
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

	.globl gs_gate_common
	.hidden gs_gate_common
	.type gs_gate_common, @function
	.p2align 4
gs_gate_common:
	.cfi_startproc
	save_argument_registers
	movq 8(%rbp), %rdi          /* the caller's return address */
	call gs_gate_enter
	testl %eax, %eax
	jz 1f
	leaq gs_gate_return(%rip), %rcx
	movq %rcx, 8(%rbp)          /* the real function will return to gs_gate_return */
1:
	restore_argument_registers
	jmp *%r11
	.cfi_endproc
	.size gs_gate_common, .-gs_gate_common

	.globl gs_gate_return
	.hidden gs_gate_return
	.type gs_gate_return, @function
	.p2align 4
	.cfi_startproc
	.cfi_undefined %rip
	/*
	 * Unwinders look up the frame of a return address at (address - 1); this
	 * nop puts that byte inside this function's unwind entry, which says
	 * "end of stack" (the real caller is on the shadow stack, not in memory).
	 */
	nop
gs_gate_return:
	subq $48, %rsp              /* %rsp was 0 mod 16 (the callee popped our slot): still 0 */
	.cfi_adjust_cfa_offset 48
	movq %rax, 0(%rsp)
	movq %rdx, 8(%rsp)
	movups %xmm0, 16(%rsp)
	movups %xmm1, 32(%rsp)
	call gs_gate_exit           /* the original return address */
	movq %rax, %r11
	movq 0(%rsp), %rax
	movq 8(%rsp), %rdx
	movups 16(%rsp), %xmm0
	movups 32(%rsp), %xmm1
	addq $48, %rsp
	.cfi_adjust_cfa_offset -48
	jmp *%r11
	.cfi_endproc
	.size gs_gate_return, .-gs_gate_return

/*
 * gs_export_lazy: first call of an exported driver entry point (exports_x86_64.S)
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
