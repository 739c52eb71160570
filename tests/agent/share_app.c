/*
 * share_app.c - the app of tests/cli/t4015-agent-share.sh: two processes
 * that share GPU memory as NCCL does with cuMem, against the host-memory
 * fake driver under the gpusnap agent. Each rank (the parent, and a child it
 * starts by fork+exec of itself) creates a 4 MiB allocation, maps it, fills
 * it and exports it as a POSIX file descriptor, sends the descriptor to the
 * other rank over a socketpair (SCM_RIGHTS), and closes its own copy; the
 * other rank imports it, maps it at an address of its own with read-write
 * access and closes the descriptor it received. So each rank reads and
 * writes its own buffer and its peer's.
 *
 * The parent prints "READY <pid> <child pid>", then serves stdin commands:
 *   verify     both ranks check both buffers (own and imported) hold the
 *              expected patterns -> "VERIFY OK 4" / "VERIFY FAIL ..."
 *   ring       each rank writes a new pattern into its peer's buffer through
 *              its import, then both verify -> "RING OK" / "RING FAIL ..."
 *   keepfd     the parent exports its buffer again and the child imports
 *              it a second time, keeping that descriptor open -> "KEEPFD OK"
 *              (a suspend must then be refused)
 *   ipc        cuMemAlloc + cuIpcGetMemHandle (legacy CUDA IPC) -> "IPC <result>"
 *   sync       cuCtxSynchronize, which waits while the agent's gate is closed -> "SYNC <result>"
 *   quit       both exit
 *
 * With --signals (for dumps by CRIU, tests/cli/t4016-share-tree-image.sh)
 * it reads no stdin: SIGUSR1 runs verify, SIGUSR2 ring, the answers go to
 * stdout; it runs until killed.
 *
 * SHARE_APP_CHILD_FAULT, when set, is the child's GPUSNAP_FAULT (empty:
 * none), so a test can fail one rank's agent; otherwise both inherit it.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/fd_passing.h"
#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUhandle;

#define MiB (1ULL << 20)
#define SIZE (4 * MiB)
#define POSIX_FD 1

static CUresult (*p_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*p_create)(CUhandle *, size_t, const struct fake_mem_prop *, unsigned long long);
static CUresult (*p_map)(CUdeviceptr, size_t, size_t, CUhandle, unsigned long long);
static CUresult (*p_set_access)(CUdeviceptr, size_t, const struct fake_mem_access *, size_t);
static CUresult (*p_export)(void *, CUhandle, int, unsigned long long);
static CUresult (*p_import)(CUhandle *, void *, int);

static CUdeviceptr own_va, peer_va;
static CUhandle own_h;
static int sock = -1;
static int rank;

static void die(const char *what)
{
	fprintf(stderr, "share_app rank %d: %s\n", rank, what);
	exit(1);
}

static unsigned char pattern(unsigned seed, size_t k) { return (unsigned char)(seed * 131u + k * 7u + (k >> 12) + 1u); }

static void fill(CUdeviceptr va, unsigned seed)
{
	unsigned char *p = (unsigned char *)(uintptr_t)va;
	for (size_t k = 0; k < SIZE; k++)
		p[k] = pattern(seed, k);
}

static int check(CUdeviceptr va, unsigned seed, char *why, size_t n, const char *what)
{
	const unsigned char *p = (const unsigned char *)(uintptr_t)va;
	for (size_t k = 0; k < SIZE; k++)
		if (p[k] != pattern(seed, k)) {
			snprintf(why, n, "rank %d %s byte %zu is %u, expected %u", rank, what, k, p[k], pattern(seed, k));
			return -1;
		}
	return 0;
}

static void send_fd(int fd)
{
	if (test_send_fd(sock, fd))
		die("cannot send the descriptor");
}

static int recv_fd(void)
{
	int fd = test_recv_fd(sock);
	if (fd < 0)
		die("cannot receive the descriptor");
	return fd;
}

/* One line over the socket, and its answer. */
static void send_line(const char *s)
{
	size_t n = strlen(s);
	if (write(sock, s, n) != (ssize_t)n)
		die("cannot write to the peer");
}

static int read_line(char *buf, size_t n)
{
	size_t k = 0;
	while (k + 1 < n) {
		char ch;
		if (read(sock, &ch, 1) != 1)
			return -1;
		if (ch == '\n')
			break;
		buf[k++] = ch;
	}
	buf[k] = '\0';
	return 0;
}

static CUdeviceptr import_and_map(int fd)
{
	CUhandle h;
	CUdeviceptr va = 0;
	struct fake_mem_access a = { 1, 0, 3 };
	if (p_import(&h, (void *)(intptr_t)fd, POSIX_FD) || p_reserve(&va, SIZE, 0, 0, 0) || p_map(va, SIZE, 0, h, 0) ||
	    p_set_access(va, SIZE, &a, 1))
		die("cannot import the peer's memory");
	return va;
}

/* Both ranks: own buffer made, exported and swapped with the peer's. */
static void setup(void)
{
	fake_app_open_driver("share_app");
	if (fake_app_make_context())
		exit(1);
	*(void **)&p_reserve = fake_app_need("cuMemAddressReserve");
	*(void **)&p_create = fake_app_need("cuMemCreate");
	*(void **)&p_map = fake_app_need("cuMemMap");
	*(void **)&p_set_access = fake_app_need("cuMemSetAccess");
	fake_app_gpa("cuMemExportToShareableHandle", &p_export);
	fake_app_gpa("cuMemImportFromShareableHandle", &p_import);
	struct fake_mem_prop prop = { .type = 1, .handle_types = POSIX_FD, .loc_type = 1, .loc_id = 0 };
	struct fake_mem_access a = { 1, 0, 3 };
	int fd = -1;
	if (p_reserve(&own_va, SIZE, 0, 0, 0) || p_create(&own_h, SIZE, &prop, 0) || p_map(own_va, SIZE, 0, own_h, 0) ||
	    p_set_access(own_va, SIZE, &a, 1))
		die("cannot make the own buffer");
	fill(own_va, (unsigned)rank + 1);
	if (p_export(&fd, own_h, POSIX_FD, 0))
		die("cannot export");
	send_fd(fd);
	close(fd); /* as NCCL does: the importer holds the memory now */
	int got = recv_fd();
	peer_va = import_and_map(got);
	close(got);
}

static int kept_fd = -1;

/* The child: answers the parent's lines until "quit". */
static int child_main(void)
{
	setup();
	char line[128];
	while (!read_line(line, sizeof(line))) {
		unsigned own_seed, peer_seed, seed;
		char why[256] = "";
		if (sscanf(line, "verify %u %u", &own_seed, &peer_seed) == 2) {
			/* own_seed: the parent's buffer, peer_seed: this rank's */
			if (!check(own_va, peer_seed, why, sizeof(why), "own buffer") &&
			    !check(peer_va, own_seed, why, sizeof(why), "imported buffer"))
				snprintf(why, sizeof(why), "ok");
		} else if (sscanf(line, "write %u", &seed) == 1) {
			fill(peer_va, seed);
			snprintf(why, sizeof(why), "ok");
		} else if (!strcmp(line, "keepfd")) {
			send_line("sendfd\n");
			kept_fd = recv_fd();
			import_and_map(kept_fd);
			snprintf(why, sizeof(why), "ok");
		} else if (!strcmp(line, "quit")) {
			return 0;
		} else {
			snprintf(why, sizeof(why), "unknown command %s", line);
		}
		char out[300];
		snprintf(out, sizeof(out), "%s\n", why);
		send_line(out);
	}
	return 0;
}

static unsigned parent_seed = 1, child_seed = 2;

static void verify(char *why, size_t n)
{
	char line[300];
	why[0] = '\0';
	if (check(own_va, parent_seed, why, n, "own buffer") || check(peer_va, child_seed, why, n, "imported buffer"))
		return;
	snprintf(line, sizeof(line), "verify %u %u\n", parent_seed, child_seed);
	send_line(line);
	if (read_line(line, sizeof(line)))
		snprintf(why, n, "the child did not answer");
	else if (strcmp(line, "ok"))
		snprintf(why, n, "%s", line);
}

static void say_verify(void)
{
	char why[300];
	verify(why, sizeof(why));
	if (why[0])
		printf("VERIFY FAIL %s\n", why);
	else
		printf("VERIFY OK 4\n");
}

/* Each rank writes a new pattern into the other's buffer through its import, then both verify. */
static void ring(void)
{
	char line[300], why[300];
	parent_seed += 10;
	child_seed += 10;
	fill(peer_va, child_seed); /* into the child's buffer, through the import */
	snprintf(line, sizeof(line), "write %u\n", parent_seed);
	send_line(line);
	if (read_line(line, sizeof(line)) || strcmp(line, "ok")) {
		printf("RING FAIL the child could not write\n");
		return;
	}
	verify(why, sizeof(why));
	if (why[0])
		printf("RING FAIL %s\n", why);
	else
		printf("RING OK\n");
}

static volatile sig_atomic_t verify_asked, ring_asked;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		verify_asked = 1;
	else
		ring_asked = 1;
}

/* --signals: SIGUSR1 verifies, SIGUSR2 runs the ring exchange, answers on stdout; until killed. */
__attribute__((noreturn)) static void serve_signals(void)
{
	for (;;) {
		if (verify_asked) {
			verify_asked = 0;
			say_verify();
			fflush(stdout);
		}
		if (ring_asked) {
			ring_asked = 0;
			ring();
			fflush(stdout);
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

int main(int argc, char **argv)
{
	bool signals = argc == 2 && !strcmp(argv[1], "--signals");
	if (signals) {
		struct sigaction sa = { .sa_handler = on_signal };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		sigaction(SIGUSR2, &sa, NULL);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0)
			die("cannot read stdin from /dev/null");
		close(null);
	}
	if (argc == 3 && !strcmp(argv[1], "--child")) {
		rank = 1;
		sock = atoi(argv[2]);
		const char *dir = getenv("FAKE_CUDA_DIR");
		if (dir) {
			char path[512];
			snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
			FILE *f = fopen(path, "w");
			if (!f || fprintf(f, "0 0\n") < 0 || fclose(f))
				die("cannot register with the fake driver");
		}
		return child_main();
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("no socketpair");
	pid_t child = fork();
	if (child < 0)
		die("cannot fork");
	if (child == 0) {
		close(sv[0]);
		char arg[16];
		snprintf(arg, sizeof(arg), "%d", sv[1]);
		/* the child's agent gets faults of its own, so a test can fail one rank */
		const char *child_fault = getenv("SHARE_APP_CHILD_FAULT");
		if (child_fault && *child_fault)
			setenv("GPUSNAP_FAULT", child_fault, 1);
		else if (child_fault)
			unsetenv("GPUSNAP_FAULT");
		execl("/proc/self/exe", argv[0], "--child", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	sock = sv[0];
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (dir) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
		FILE *f = fopen(path, "w");
		if (!f || fprintf(f, "0 0\n") < 0 || fclose(f))
			die("cannot register with the fake driver");
	}
	setup();
	printf("READY %d %d\n", (int)getpid(), (int)child);
	fflush(stdout);
	if (signals)
		serve_signals();
	char cmd[128];
	while (fgets(cmd, sizeof(cmd), stdin)) {
		cmd[strcspn(cmd, "\n")] = '\0';
		if (!strcmp(cmd, "verify")) {
			say_verify();
		} else if (!strcmp(cmd, "ring")) {
			ring();
		} else if (!strcmp(cmd, "keepfd")) {
			char line[64];
			send_line("keepfd\n");
			if (read_line(line, sizeof(line)) || strcmp(line, "sendfd"))
				die("the child did not ask for a descriptor");
			int fd = -1;
			/* the parent's own buffer again: a second export, which the child keeps open */
			if (p_export(&fd, own_h, POSIX_FD, 0))
				die("cannot export again");
			send_fd(fd);
			close(fd);
			if (read_line(line, sizeof(line)) || strcmp(line, "ok"))
				printf("KEEPFD FAIL the child could not import\n");
			else
				printf("KEEPFD OK\n");
		} else if (!strcmp(cmd, "ipc")) {
			CUresult (*alloc)(CUdeviceptr *, size_t);
			CUresult (*ipc)(void *, CUdeviceptr);
			*(void **)&alloc = fake_app_need("cuMemAlloc_v2");
			*(void **)&ipc = fake_app_need("cuIpcGetMemHandle");
			CUdeviceptr p = 0;
			char handle[64];
			if (alloc(&p, MiB))
				die("cannot allocate");
			printf("IPC %d\n", ipc(handle, p));
		} else if (!strcmp(cmd, "sync")) {
			/* a driver call: it waits while the agent's gate is closed */
			CUresult (*sync)(void);
			*(void **)&sync = fake_app_need("cuCtxSynchronize");
			printf("SYNC %d\n", sync());
		} else if (!strcmp(cmd, "quit")) {
			send_line("quit\n");
			int st = 0;
			waitpid(child, &st, 0);
			return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
		} else {
			printf("UNKNOWN %s\n", cmd);
		}
		fflush(stdout);
	}
	return 0;
}
