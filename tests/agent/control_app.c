/*
 * control_app.c - the app of tests/cli/t4012-agent-control.sh: the agent's
 * control server and lifecycle around an app that makes its first
 * allocation late and forks. It allocates nothing at start. Commands, one per
 * stdin line, each answered with one line:
 *   alloc-thread  a new thread allocates 4 MiB (its first allocation), waits
 *                 for the device through the driver (so it never touches the
 *                 memory while the agent has it released), fills it and
 *                 prints "ALLOC OK" from that thread; the command itself
 *                 answers "STARTED"
 *   fork-child    forks a child that registers with the fake driver as a CUDA
 *                 process and waits to be killed -> "CHILD <pid>"; where
 *                 CONTROL_APP_DEVICE_FILE named a file that main opened and
 *                 mapped shared (standing for a GPU device file the driver
 *                 has open and maps),
 *                 the child first writes 0xab to its first byte
 *   fork-exit     forks a child that leaves at once through _exit (no
 *                 destructors) -> "EXITED <pid>" once it is reaped
 *   fork-return   the same through exit() (destructors run) -> "RETURNED <pid>"
 *   verify        the 4 MiB hold their pattern -> "VERIFY OK 1" (or 0 before alloc-thread's)
 *   quit
 * CONTROL_APP_CLOSE_ALL closes every descriptor above 2 first thing in main,
 * as daemons do: "close_range" and "closefrom" through libc (the agent keeps
 * its own), "syscall" (the raw system call) and "loop" (close() of each, then
 * two files opened, which take the lowest numbers, the agent's old ones):
 * the agent's control server must notice and listen anew.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define BLOCK (4u << 20)

static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_sync)(void);
static CUresult (*p_retain)(void **, int);
static CUresult (*p_set_current)(void *);
static CUdeviceptr block;
static int filled; /* atomic */
static pthread_t allocator;
static bool started;
static volatile unsigned char *device_map; /* CONTROL_APP_DEVICE_FILE, mapped shared */

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 29 + (i >> 12) + 7);
}

static void *alloc_main(void *arg)
{
	(void)arg;
	CUdeviceptr p = 0;
	void *ctx = NULL;
	CUresult r = p_retain(&ctx, 0);
	if (!r)
		r = p_set_current(ctx); /* a new thread has no current context */
	if (!r)
		r = p_alloc(&p, BLOCK);
	if (!r)
		r = p_sync(); /* through the gate: waits while the agent holds the memory released */
	if (!r) {
		for (size_t i = 0; i < BLOCK; i++)
			((unsigned char *)(uintptr_t)p)[i] = pattern(i);
		block = p;
		__atomic_store_n(&filled, 1, __ATOMIC_RELEASE);
	}
	printf(r ? "ALLOC FAIL %d\n" : "ALLOC OK\n", r);
	fflush(stdout);
	return NULL;
}

static void alloc_thread(void)
{
	if (started) {
		printf("STARTED FAIL already\n");
		return;
	}
	started = pthread_create(&allocator, NULL, alloc_main, NULL) == 0;
	printf(started ? "STARTED\n" : "STARTED FAIL\n");
}

static void verify(void)
{
	if (!__atomic_load_n(&filled, __ATOMIC_ACQUIRE)) {
		printf("VERIFY OK 0\n");
		return;
	}
	for (size_t i = 0; i < BLOCK; i++)
		if (((unsigned char *)(uintptr_t)block)[i] != pattern(i)) {
			printf("VERIFY FAIL byte %zu\n", i);
			return;
		}
	printf("VERIFY OK 1\n");
}

static void register_child(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	char path[512];
	snprintf(path, sizeof(path), "%s/%d", dir ? dir : ".", (int)getpid());
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "0 0\n");
		fclose(f);
	}
}

static void fork_child(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (device_map)
			device_map[0] = 0xab; /* the agent replaced the inherited mapping: this reaches no file */
		register_child();
		for (;;)
			pause();
	}
	printf(pid > 0 ? "CHILD %d\n" : "CHILD FAIL %d\n", (int)pid);
}

static void fork_and_leave(bool through_exit)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* once its agent's server is up: its socket is in the run directory (30 s at most) */
		const char *run = getenv("GPUSNAP_RUN_DIR");
		char sock[4096];
		snprintf(sock, sizeof(sock), "%s/agent-%d.sock", run ? run : "", (int)getpid());
		for (int i = 0; run && i < 3000 && access(sock, F_OK); i++)
			usleep(10000);
		if (!run)
			usleep(200000);
		if (through_exit)
			exit(0);
		_exit(0);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		printf("%s FAIL\n", through_exit ? "RETURNED" : "EXITED");
	else
		printf("%s %d\n", through_exit ? "RETURNED" : "EXITED", (int)pid);
}

static void fork_exit(void)
{
	fork_and_leave(false);
}

static void fork_return(void)
{
	fork_and_leave(true);
}

static int close_all(void)
{
	const char *how = getenv("CONTROL_APP_CLOSE_ALL");
	if (!how || !*how)
		return 0;
	int rc = 0;
	if (!strcmp(how, "close_range")) {
		rc = close_range(3, ~0U, 0);
	} else if (!strcmp(how, "closefrom")) {
		closefrom(3);
	} else if (!strcmp(how, "syscall")) {
		rc = (int)syscall(SYS_close_range, 3U, ~0U, 0U);
	} else if (!strcmp(how, "loop")) {
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		/* kept open for the app's life: they take the numbers the agent's socket and eventfd had */
		if (open("/dev/null", O_RDONLY) < 0 || open("/dev/null", O_RDONLY) < 0)
			rc = -1;
	} else {
		fprintf(stderr, "control_app: unknown CONTROL_APP_CLOSE_ALL '%s'\n", how);
		return -1;
	}
	if (rc)
		perror("control_app: closing every descriptor");
	return rc;
}

/* Opens CONTROL_APP_DEVICE_FILE and maps it shared, read and write, as the driver does its device files. */
static int map_device_file(void)
{
	const char *path = getenv("CONTROL_APP_DEVICE_FILE");
	if (!path || !*path)
		return 0;
	int fd = open(path, O_RDWR | O_CLOEXEC); /* kept open, as the driver keeps its descriptors */
	void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("control_app: mapping CONTROL_APP_DEVICE_FILE");
		return -1;
	}
	device_map = p;
	return 0;
}

int main(void)
{
	if (close_all() || map_device_file())
		return 1;
	fake_app_open_driver("control_app");
	fake_app_gpa("cuMemAlloc", &p_alloc);
	*(void **)&p_sync = fake_app_need("cuCtxSynchronize");
	*(void **)&p_retain = fake_app_need("cuDevicePrimaryCtxRetain");
	*(void **)&p_set_current = fake_app_need("cuCtxSetCurrent");
	if (fake_app_make_context())
		return 1;
	static const struct fake_app_command commands[] = {
		{ "alloc-thread", alloc_thread }, { "fork-child", fork_child }, { "fork-exit", fork_exit },
		{ "fork-return", fork_return },	  { NULL, NULL },
	};
	int rc = fake_app_serve("control_app", 0, verify, commands);
	if (started)
		pthread_join(allocator, NULL);
	return rc;
}
