/*
 * agent_io_uring.h - io_uring kept out of the app, so CRIU can dump it.
 *
 * CRIU cannot dump an io_uring instance (CRIU 4.2: "Unknown ... anon_inode:
 * [io_uring]"), and libuv sets one up in every event loop it starts (1.45
 * and later; PyTorch's TCPStore is one), so a dump of a torch.distributed
 * job failed in CRIU after its GPU part. glibc has no io_uring_setup
 * wrapper: libraries reach it through syscall(3), which the agent
 * interposes (syscall_x86_64.S). io_uring_setup then fails with ENOSYS, as
 * on a kernel without io_uring, and libuv (like liburing's users with a
 * fallback, and every library that runs under Docker's default seccomp
 * profile, which refuses io_uring) goes on with epoll. Every other system
 * call passes through to libc's syscall(3) with its registers untouched.
 * GPUSNAP_ALLOW_IO_URING=1 lets io_uring through (the process then cannot
 * be dumped while it holds one). What issues the system call itself (an
 * inline `syscall` instruction, as liburing >= 2.2 can) is not seen here;
 * `gpusnap dump` refuses such a process before anything moves.
 */
#ifndef GPUSNAP_AGENT_IO_URING_H
#define GPUSNAP_AGENT_IO_URING_H

/* Reads GPUSNAP_ALLOW_IO_URING and finds libc's syscall(3); called once from the agent's constructor. */
void gs_agent_io_uring_init(void);

#endif
