/*
 * agent_io_uring.c - the C side of the agent's syscall(3) (see
 * agent_io_uring.h): the setting, libc's syscall(3) to pass through to, and
 * the refusal. Everything here may run in a signal handler or a fork child
 * of a threaded process (syscall(3) is called from both): atomics, errno and
 * a fixed log line only.
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/agent_io_uring.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"

/* Read by syscall_x86_64.S: libc's syscall(3), 0 until the constructor found it. */
__attribute__((visibility("hidden"))) void *gs_libc_syscall;

enum { SETTING_UNREAD, SETTING_REFUSE, SETTING_ALLOW };
static int io_uring_setting;  /* atomic */
static unsigned long refused; /* atomic */
static bool refusal_logged;   /* atomic */

static const char allow_var[] = "GPUSNAP_ALLOW_IO_URING=1";

/*
 * GPUSNAP_ALLOW_IO_URING before the constructor (an executable's
 * preinit_array runs before libc's own initialization sets environ): the
 * process's initial environment, with read(2) into the stack.
 */
static bool allowed_in_initial_environment(void)
{
	int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	const size_t len = sizeof(allow_var) - 1;
	char buf[4096];
	size_t pos = 0; /* in the current NUL-ended entry */
	bool same = true, found = false;
	ssize_t n;
	while (!found && (n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n && !found; i++) {
			if (buf[i] == '\0') {
				found = same && pos == len;
				pos = 0;
				same = true;
				continue;
			}
			same = same && pos < len && buf[i] == allow_var[pos];
			pos++;
		}
	}
	close(fd);
	return found;
}

static int read_setting(bool constructed)
{
	bool allow;
	if (constructed) {
		allow = gs_setting_bool(GS_S_ALLOW_IO_URING);
	} else {
		allow = allowed_in_initial_environment();
	}
	int v = allow ? SETTING_ALLOW : SETTING_REFUSE;
	__atomic_store_n(&io_uring_setting, v, __ATOMIC_RELEASE);
	return v;
}

void gs_agent_io_uring_init(void)
{
	read_setting(true);
	/* before this, syscall_x86_64.S issues the system call itself, as libc would */
	__atomic_store_n(&gs_libc_syscall, dlsym(RTLD_NEXT, "syscall"), __ATOMIC_RELEASE);
	/* refusals before the agent's log was set up: said now */
	unsigned long early = __atomic_load_n(&refused, __ATOMIC_ACQUIRE);
	if (early && !__atomic_exchange_n(&refusal_logged, true, __ATOMIC_ACQ_REL))
		pr_info("io_uring_setup refused (ENOSYS) %lu time(s) before the agent started, so that CRIU can dump this "
			"process; GPUSNAP_ALLOW_IO_URING=1 lets it through", early);
}

/*
 * Jumped to by syscall_x86_64.S for io_uring_setup, with syscall(3)'s
 * arguments: ENOSYS as on a kernel without io_uring, or, where allowed, the
 * system call itself (two arguments, no stack: inline is enough).
 */
__attribute__((visibility("hidden"))) long gs_io_uring_setup(long nr, long entries, long params)
{
	int setting = __atomic_load_n(&io_uring_setting, __ATOMIC_ACQUIRE);
	if (setting == SETTING_UNREAD)
		setting = read_setting(false);
	if (setting == SETTING_ALLOW) {
		long ret;
		__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(entries), "S"(params) : "rcx", "r11", "memory");
		if (ret < 0 && ret > -4096) {
			errno = (int)-ret;
			return -1;
		}
		return ret;
	}
	__atomic_fetch_add(&refused, 1, __ATOMIC_ACQ_REL);
	/* once, and only once the agent has set its log up (the constructor says earlier ones) */
	if (__atomic_load_n(&gs_libc_syscall, __ATOMIC_ACQUIRE) &&
	    !__atomic_exchange_n(&refusal_logged, true, __ATOMIC_ACQ_REL))
		gs_log_fixed(GS_LOG_INFO, LOG_PREFIX,
			     "io_uring_setup refused (ENOSYS) so that CRIU can dump this process; "
			     "GPUSNAP_ALLOW_IO_URING=1 lets it through");
	errno = ENOSYS;
	return -1;
}

/* Jumped to by syscall_x86_64.S when the system call it issued itself failed: errno as libc sets it. */
__attribute__((visibility("hidden"))) long gs_syscall_failed(long negative_errno)
{
	errno = (int)-negative_errno;
	return -1;
}
