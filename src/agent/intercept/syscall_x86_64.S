/*
 * syscall_x86_64.S - the agent's syscall(3), exported so that the app's
 * calls bind here (agent_io_uring.h says why). io_uring_setup goes to
 * gs_io_uring_setup (agent_io_uring.c), which refuses it unless it is
 * allowed; every other number
 * leaves by a tail jump into libc's syscall(3), registers and stack as the
 * caller left them (a vfork or clone through syscall(3) sees no frame of
 * ours). Before the agent's constructor found libc's (code run from an
 * executable's preinit_array, say), the system call is issued here exactly
 * as glibc does.
 */

	.set NR_io_uring_setup, 425

	.text
	.globl syscall
	.type syscall, @function
	.p2align 4
syscall:
	cmpq $NR_io_uring_setup, %rdi
	je gs_io_uring_setup
	movq gs_libc_syscall(%rip), %rax
	testq %rax, %rax
	jz .Lown
	jmp *%rax
.Lown:
	/* glibc's convention: number in rdi, arguments in rsi, rdx, rcx, r8, r9 and on the stack */
	movq %rdi, %rax
	movq %rsi, %rdi
	movq %rdx, %rsi
	movq %rcx, %rdx
	movq %r8, %r10
	movq %r9, %r8
	movq 8(%rsp), %r9
	syscall
	cmpq $-4095, %rax
	jae .Lfailed
	ret
.Lfailed:
	movq %rax, %rdi
	jmp gs_syscall_failed
	.size syscall, .-syscall

	.section .note.GNU-stack, "", @progbits
