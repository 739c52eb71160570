/*
 * fake_app_common.c - the plumbing the fake-driver test apps share (see
 * fake_app_common.h).
 */
#include "fake_app_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *app = "fake_app";
static void *driver;

void fake_app_open_driver(const char *app_name)
{
	app = app_name;
	const char *path = getenv("GPUSNAP_LIBCUDA");
	driver = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!driver) {
		fprintf(stderr, "%s: %s\n", app, dlerror());
		exit(1);
	}
}

void *fake_app_need(const char *name)
{
	void *fn = driver ? dlsym(driver, name) : NULL;
	if (!fn) {
		fprintf(stderr, "%s: the driver lacks %s\n", app, name);
		exit(1);
	}
	return fn;
}

void fake_app_gpa(const char *name, void *out)
{
	int (*gpa)(const char *, void **, int, unsigned long long, int *);
	*(void **)&gpa = fake_app_need("cuGetProcAddress_v2");
	int status = -1;
	if (gpa(name, (void **)out, 12000, 0, &status) || status) {
		fprintf(stderr, "%s: cuGetProcAddress_v2(%s) failed\n", app, name);
		exit(1);
	}
}

int fake_app_make_context(void)
{
	int (*init)(unsigned);
	int (*retain)(void **, int);
	int (*set_current)(void *);
	*(void **)&init = fake_app_need("cuInit");
	*(void **)&retain = fake_app_need("cuDevicePrimaryCtxRetain");
	*(void **)&set_current = fake_app_need("cuCtxSetCurrent");
	void *ctx = NULL;
	if (init(0) || retain(&ctx, 0) || set_current(ctx)) {
		fprintf(stderr, "%s: no context\n", app);
		return -1;
	}
	return 0;
}

/* Writes FAKE_CUDA_DIR/<pid> ("running, no GPU state moved"), so gpusnap sees a CUDA process; exits on failure. */
static void fake_app_register(const char *app_name)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return;
	char path[512];
	snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "0 0\n") < 0 || fclose(f)) {
		fprintf(stderr, "%s: cannot write %s\n", app_name, path);
		exit(1);
	}
}

static volatile sig_atomic_t verify_asked;

static volatile sig_atomic_t flip_asked;

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

/* SIGUSR2 (signals mode): runs the app's "zero-flip" command, where it has one (an incremental dump's change) */
static void on_usr2(int sig)
{
	(void)sig;
	flip_asked = 1;
}

int fake_app_signals_setup(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	struct sigaction sa2 = { .sa_handler = on_usr2 };
	sigemptyset(&sa2.sa_mask);
	sigaction(SIGUSR2, &sa2, NULL);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0)
		return -1;
	close(null);
	return 0;
}

/*
 * FAKE_APP_IO_URING=start (and/or preinit): an io_uring set up through
 * syscall(3), as libuv does, at the start of serving (and from the
 * executable's preinit_array, before any library's constructor, so before
 * the agent's); each ring got is kept open. Said before READY as
 * "IO_URING preinit=R start=R", R a descriptor or an errno name.
 */
static long io_uring_preinit = -1000; /* -1000: not tried; < 0: -errno */

static long try_io_uring(void)
{
	unsigned char params[120]; /* struct io_uring_params */
	memset(params, 0, sizeof(params));
	long r = syscall(SYS_io_uring_setup, 4, params);
	return r >= 0 ? r : -errno;
}

static void io_uring_at_preinit(int argc, char **argv, char **envp)
{
	(void)argc;
	(void)argv;
	for (char **e = envp; *e; e++)
		if (!strncmp(*e, "FAKE_APP_IO_URING=", 18) && strstr(*e + 18, "preinit"))
			io_uring_preinit = try_io_uring();
}
__attribute__((section(".preinit_array"), used)) static void (*const io_uring_preinit_entry)(int, char **,
											   char **) = io_uring_at_preinit;

static const char *io_uring_result(long r, char *buf, size_t n)
{
	if (r == -1000)
		return "untried";
	if (r >= 0)
		snprintf(buf, n, "%ld", r);
	else
		snprintf(buf, n, "%s", r == -ENOSYS ? "ENOSYS" : r == -EPERM ? "EPERM" : strerror((int)-r));
	return buf;
}

static void io_uring_at_start(void)
{
	const char *want = getenv("FAKE_APP_IO_URING");
	if (!want || !*want)
		return;
	long start = strstr(want, "start") ? try_io_uring() : -1000;
	char a[64], b[64];
	printf("IO_URING preinit=%s start=%s\n", io_uring_result(io_uring_preinit, a, sizeof(a)),
	       io_uring_result(start, b, sizeof(b)));
}

int fake_app_serve(const char *app_name, int signals, void (*verify)(void), const struct fake_app_command *commands)
{
	fake_app_register(app_name);
	io_uring_at_start();
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	while (signals) {
		if (verify_asked) {
			verify_asked = 0;
			verify();
			fflush(stdout);
		}
		if (flip_asked) {
			flip_asked = 0;
			for (const struct fake_app_command *c = commands; c && c->name; c++)
				if (!strcmp(c->name, "zero-flip"))
					c->fn();
			fflush(stdout);
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		const struct fake_app_command *c = commands;
		while (c->name && strcmp(line, c->name))
			c++;
		if (!strcmp(line, "verify"))
			verify();
		else if (c->name)
			c->fn();
		else if (!strcmp(line, "quit"))
			break;
		else
			printf("UNKNOWN %s\n", line);
		fflush(stdout);
	}
	return 0;
}
