/*
 * run.c - fork/exec of a helper with captured output and a time limit (see run.h).
 *
 * Between fork and exec the child only calls async-signal-safe functions: the
 * environment is built before fork, because gpusnap may have threads.
 */
#define LOG_PREFIX "run: "
#include "criu/run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

extern char **environ;

/* The child running now, for gs_run_child (read from signal handlers). */
static volatile sig_atomic_t running_child;

/* environ without LD_PRELOAD; the strings are shared, only the array is malloc'd. */
static char **env_without_preload(void)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **env = calloc(n + 1, sizeof(*env));
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	env[k] = NULL;
	return env;
}

/* Keeps the tail of the output: when full, the older half is dropped. */
static void append_output(struct gs_run_result *res, size_t *len, const char *buf, size_t n)
{
	const size_t cap = sizeof(res->output) - 1;
	if (n >= cap) {
		memcpy(res->output, buf + n - cap, cap);
		*len = cap;
	} else {
		if (*len + n > cap) {
			size_t drop = *len + n - cap;
			if (drop < *len / 2)
				drop = *len / 2;
			memmove(res->output, res->output + drop, *len - drop);
			*len -= drop;
		}
		memcpy(res->output + *len, buf, n);
		*len += n;
	}
	res->output[*len] = '\0';
}

static void child_exec(char *const argv[], char **env, int flags, int out_fd, int err_fd, const int *keep_fds,
		       int nkeep)
{
	if (flags & GS_RUN_PRIVATE_FILES)
		umask(077);
	/* a group of its own: gpusnap's terminal and group signals stay ours; a time-out kills the whole group */
	if (!(flags & GS_RUN_SHARE_GROUP))
		setpgid(0, 0);
	static const int reset[] = { SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2 };
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (size_t i = 0; i < GS_ARRAY_SIZE(reset); i++)
		sigaction(reset[i], &sa, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0)
		goto fail;
	/* Everything else of ours closes at exec (err_fd already does, so exec failure can be reported). */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
		long max = sysconf(_SC_OPEN_MAX);
		if (max < 0 || max > 1 << 20)
			max = 1 << 20;
		for (int fd = 3; fd < max; fd++)
			if (fd != err_fd)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	for (int i = 0; i < nkeep; i++)
		if (keep_fds[i] >= 3 && fcntl(keep_fds[i], F_SETFD, 0) != 0)
			goto fail;
	execve(argv[0], argv, env);
fail:;
	int e = errno;
	ssize_t w = write(err_fd, &e, sizeof(e));
	(void)w;
	_exit(127);
}

/* The last sizeof(res->output) - 1 bytes the child wrote to fd (a file), into res->output. */
static void read_output_tail(int fd, struct gs_run_result *res)
{
	const size_t cap = sizeof(res->output) - 1;
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > (off_t)cap ? size - (off_t)cap : 0;
	size_t len = 0;
	char buf[4096];
	ssize_t r;
	while (size > 0 && (r = pread(fd, buf, sizeof(buf), from)) > 0) {
		append_output(res, &len, buf, (size_t)r);
		from += r;
	}
}

static int spawn(char *const argv[], int flags, const int *keep_fds, int nkeep, bool track, struct gs_run_proc *p,
		 struct gs_err *err);

int gs_run(char *const argv[], double timeout_s, int flags, struct gs_run_result *res, struct gs_err *err)
{
	return gs_run_fd(argv, timeout_s, flags, -1, res, err);
}

int gs_run_fd(char *const argv[], double timeout_s, int flags, int keep_fd, struct gs_run_result *res,
	      struct gs_err *err)
{
	memset(res, 0, sizeof(*res));
	struct gs_run_proc p;
	int rc = spawn(argv, flags, &keep_fd, keep_fd >= 0 ? 1 : 0, true, &p, err);
	if (rc)
		return rc;
	/* Wait for the child itself: processes it started (criu's restored tasks) may live on. */
	rc = gs_run_wait(&p, timeout_s, res, err);
	running_child = 0;
	return rc;
}

/* gs_run_spawn; track: the child is gs_run_child's from the fork on (a signal handler may kill it then). */
static int spawn(char *const argv[], int flags, const int *keep_fds, int nkeep, bool track, struct gs_run_proc *p,
		 struct gs_err *err)
{
	memset(p, 0, sizeof(*p));
	p->out = -1;
	snprintf(p->name, sizeof(p->name), "%s", argv[0]);
	char **env = env_without_preload();
	if (!env)
		return gs_fail(err, GS_E_FAILURE, "out of memory starting '%s'", argv[0]);
	/*
	 * The output goes to an anonymous file, not a pipe: a helper that outlives
	 * gpusnap (kill -9 of gpusnap while criu dumps) must not die of SIGPIPE
	 * half-way through its work, leaving a process frozen or half-restored.
	 */
	int out = memfd_create("gpusnap-helper-output", MFD_CLOEXEC);
	if (out < 0) {
		int e = errno;
		free(env);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot create an output file for '%s'", argv[0]);
	}
	int errp[2];
	if (pipe2(errp, O_CLOEXEC) != 0) {
		int e = errno;
		close(out);
		free(env);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot create a pipe for '%s'", argv[0]);
	}
	pid_t pid = fork();
	if (pid == 0)
		child_exec(argv, env, flags, out, errp[1], keep_fds, nkeep);
	int fork_errno = errno;
	/* also here, so the group exists before gs_run returns to anyone who might signal it */
	if (pid > 0 && !(flags & GS_RUN_SHARE_GROUP))
		setpgid(pid, pid);
	if (pid > 0 && track)
		running_child = pid;
	free(env);
	close(errp[1]);
	if (pid < 0) {
		close(out);
		close(errp[0]);
		return gs_fail_errno(err, GS_E_FAILURE, fork_errno, "cannot fork to run '%s'", argv[0]);
	}

	/* exec succeeded when the CLOEXEC pipe closes without data. */
	int exec_errno = 0;
	ssize_t r;
	do
		r = read(errp[0], &exec_errno, sizeof(exec_errno));
	while (r < 0 && errno == EINTR);
	close(errp[0]);
	if (r == (ssize_t)sizeof(exec_errno)) {
		close(out);
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (track)
			running_child = 0;
		return gs_fail_errno(err, GS_E_FAILURE, exec_errno, "cannot run '%s'", argv[0]);
	}
	p->pid = pid;
	p->own_group = !(flags & GS_RUN_SHARE_GROUP);
	p->out = out;
	return 0;
}

int gs_run_wait(struct gs_run_proc *p, double timeout_s, struct gs_run_result *res, struct gs_err *err)
{
	memset(res, 0, sizeof(*res));
	double deadline = timeout_s > 0 ? gs_now() + timeout_s : 0;
	for (;;) {
		pid_t w = waitpid(p->pid, &res->status, WNOHANG);
		if (w == p->pid)
			break;
		if (w < 0 && errno != EINTR) {
			int e = errno;
			close(p->out);
			p->out = -1;
			p->pid = 0;
			return gs_fail_errno(err, GS_E_FAILURE, e, "cannot wait for '%s'", p->name);
		}
		if (timeout_s < 0)
			return GS_RUN_STILL;
		int wait_ms = 20;
		if (deadline > 0) {
			double left = deadline - gs_now();
			if (left <= 0) {
				pr_info("'%s' ran past %.1f s, killing it%s", p->name, timeout_s,
					p->own_group ? " and its process group" : "");
				gs_run_kill(p);
				while (waitpid(p->pid, &res->status, 0) < 0 && errno == EINTR)
					;
				res->timed_out = true;
				break;
			}
			if (left * 1000 < wait_ms)
				wait_ms = (int)(left * 1000) + 1;
		}
		poll(NULL, 0, wait_ms);
	}
	read_output_tail(p->out, res);
	close(p->out);
	p->out = -1;
	p->pid = 0;
	return 0;
}

int gs_run_spawn(char *const argv[], int flags, const int *keep_fds, int nkeep, struct gs_run_proc *p,
		 struct gs_err *err)
{
	return spawn(argv, flags, keep_fds, nkeep, false, p, err);
}

void gs_run_kill(const struct gs_run_proc *p)
{
	if (p->pid <= 0)
		return;
	if (p->own_group)
		kill(-p->pid, SIGKILL);
	kill(p->pid, SIGKILL);
}

pid_t gs_run_child(void)
{
	return (pid_t)running_child;
}

const char *gs_run_status_str(int status, char *buf, unsigned n)
{
	if (WIFEXITED(status))
		snprintf(buf, n, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, n, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, n, "wait status 0x%x", (unsigned)status);
	return buf;
}
