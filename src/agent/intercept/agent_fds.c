/*
 * agent_fds.c - close_range and closefrom around the agent's descriptors
 * (see agent_fds.h).
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/agent_fds.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/control_socket.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static struct gs_ctl_server *kept_server; /* atomic */
static int kept_log = -1;                 /* atomic */
static void (*libc_closefrom)(int);       /* atomic; set once at load */

void gs_agent_fds_set_server(struct gs_ctl_server *s)
{
	__atomic_store_n(&kept_server, s, __ATOMIC_RELEASE);
}

void gs_agent_fds_set_log(int fd)
{
	__atomic_store_n(&kept_log, fd, __ATOMIC_RELEASE);
}

void gs_agent_fds_init(void)
{
	/* resolved now: dlsym is not safe in the fork child where closefrom is often called */
	void (*f)(int) = (void (*)(int))dlsym(RTLD_NEXT, "closefrom");
	__atomic_store_n(&libc_closefrom, f, __ATOMIC_RELEASE);
}

/* The agent's long-lived descriptors now, ascending, each once; how many (at most 3). */
static int kept_fds(int out[3])
{
	int fds[3] = { __atomic_load_n(&kept_log, __ATOMIC_ACQUIRE), -1, -1 };
	gs_ctl_server_own_fds(__atomic_load_n(&kept_server, __ATOMIC_ACQUIRE), fds + 1);
	int n = 0;
	for (int i = 0; i < 3; i++) {
		int fd = fds[i], j = n;
		if (fd < 0)
			continue;
		while (j > 0 && out[j - 1] > fd)
			j--;
		if (j > 0 && out[j - 1] == fd)
			continue;
		for (int k = n; k > j; k--)
			out[k] = out[k - 1];
		out[j] = fd;
		n++;
	}
	return n;
}

static int sys_close_range(unsigned int first, unsigned int last, unsigned int flags)
{
	return (int)syscall(SYS_close_range, first, last, flags);
}

/*
 * close_range(2) with the agent's descriptors left open: the range is
 * closed in pieces around them. Marking them close-on-exec changes nothing
 * (they are already), so CLOSE_RANGE_CLOEXEC goes through as asked.
 */
__attribute__((visibility("default"))) int close_range(unsigned int first, unsigned int last, int flags)
{
	unsigned int f = (unsigned int)flags;
	if (f & CLOSE_RANGE_CLOEXEC)
		return sys_close_range(first, last, f);
	if (first > last) {
		errno = EINVAL;
		return -1;
	}
	if (f & CLOSE_RANGE_UNSHARE) {
		/* the table is made private first, as the kernel would, then closed in pieces */
		if (syscall(SYS_unshare, CLONE_FILES))
			return -1;
		f &= ~CLOSE_RANGE_UNSHARE;
	}
	int kept[3];
	int n = kept_fds(kept);
	unsigned int from = first;
	for (int i = 0; i < n; i++) {
		unsigned int k = (unsigned int)kept[i];
		if (k < from || k > last)
			continue;
		if (k > from && sys_close_range(from, k - 1, f))
			return -1;
		from = k + 1;
	}
	if (from > last || from == 0) /* the last kept one ended the range (from == 0: it wrapped) */
		return 0;
	return sys_close_range(from, last, f);
}

/* closefrom(3): every descriptor from lowfd on, the agent's left open. */
__attribute__((visibility("default"))) void closefrom(int lowfd)
{
	if (lowfd < 0)
		lowfd = 0;
	if (!close_range((unsigned int)lowfd, ~0U, 0) || errno != ENOSYS)
		return;
	/* a kernel without close_range (before 5.9): libc's own way, which does not know the agent's */
	void (*f)(int) = __atomic_load_n(&libc_closefrom, __ATOMIC_ACQUIRE);
	if (f)
		f(lowfd);
}
