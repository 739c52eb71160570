/*
 * ctx_app.c - the app of tests/cli/t4008-agent-contexts.sh: GPU work in
 * several contexts, on the host-memory fake driver
 * (tests/fake/fake_vmm_driver.c, whose kernels are named by their function
 * handle: 1 runs gridDimX ms, 2 until FAKE_CUDA_DIR/<pid>.kernel-done exists,
 * 3 is step gridDimX of a collective that ends when FAKE_COLL_SIZE processes
 * reached it).
 *
 * It makes its first context with cuCtxCreate (the one current at its first
 * allocation), allocates two blocks through the agent (A: 8 MiB, B: 4 MiB)
 * and fills them with patterns. Commands, one per stdin line:
 *   verify       both blocks hold what they should -> "VERIFY OK 2" / "VERIFY FAIL ..."
 *   ctx2         makes a second context (current from then on) -> "CTX2"
 *   destroy1     destroys the first context -> "DESTROYED <rc>"
 *   kernel MS    a kernel in the current context that runs MS ms and then
 *                fills block B with a new value -> "LAUNCHED <rc>"
 *   hang         a kernel in the current context that runs until told -> "LAUNCHED <rc>"
 *   sync         cuCtxSynchronize in the current context -> "SYNC <rc>"
 *   stack 4096   sets the current context's stack limit -> "STACK SET <rc>"
 *   stack        the current context's stack limit -> "STACK <bytes>" (or "STACK FAIL <rc>")
 *   quit
 * With --signals (CTX_APP_COLL=1: for the --tree test) a thread runs a
 * collective step after step, 200 ms apart, on a stream of the first
 * context, polling with cuStreamQuery as a rank of a job would; SIGUSR1
 * prints "VERIFY OK 2 steps N" (or FAIL with the step's error).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define KERNEL_TIMED ((void *)1)
#define KERNEL_HANG ((void *)2)
#define KERNEL_COLLECTIVE ((void *)3)
#define NOT_READY 600

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuCtxCreate)(void **, unsigned, int);
static CUresult (*p_cuCtxDestroy)(void *);
static CUresult (*p_cuCtxSetCurrent)(void *);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
				    void **, void **);
static CUresult (*p_cuStreamCreate)(void **, unsigned);
static CUresult (*p_cuStreamQuery)(void *);
static CUresult (*p_cuCtxGetLimit)(size_t *, int);
static CUresult (*p_cuCtxSetLimit)(int, size_t);

static void *ctx1;
static CUdeviceptr block_a, block_b;
static const size_t size_a = 8u << 20, size_b = 4u << 20;
static unsigned char b_value; /* 0: B holds its pattern; else every byte of B is this */

static unsigned char pattern(size_t block, size_t off) { return (unsigned char)(block * 77u + off * 13u + (off >> 12) + 1u); }

static int check(CUdeviceptr p, size_t n, size_t block, unsigned char value)
{
	const unsigned char *b = (const unsigned char *)(uintptr_t)p;
	for (size_t k = 0; k < n; k++) {
		unsigned char want = value ? value : pattern(block, k);
		if (b[k] != want) {
			printf("VERIFY FAIL block %zu byte %zu is %u, expected %u\n", block, k, b[k], want);
			return -1;
		}
	}
	return 0;
}

/* collectives (--signals with CTX_APP_COLL=1) */
static volatile unsigned steps_done;
static volatile int step_error;

static void *collectives(void *arg)
{
	(void)arg;
	void *stream = NULL;
	if (p_cuCtxSetCurrent(ctx1) || p_cuStreamCreate(&stream, 0)) {
		step_error = -1;
		return NULL;
	}
	for (unsigned step = 1;; step++) {
		CUresult r = p_cuLaunchKernel(KERNEL_COLLECTIVE, step, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
		if (!r)
			while ((r = p_cuStreamQuery(stream)) == NOT_READY)
				usleep(1000);
		if (r) {
			step_error = r;
			return NULL;
		}
		steps_done = step;
		usleep(200 * 1000);
	}
}

static void verify(void)
{
	if (check(block_a, size_a, 0, 0) || check(block_b, size_b, 1, b_value))
		return;
	if (step_error)
		printf("VERIFY FAIL collective step %u: error %d\n", steps_done + 1, step_error);
	else if (getenv("CTX_APP_COLL"))
		printf("VERIFY OK 2 steps %u\n", steps_done);
	else
		printf("VERIFY OK 2\n");
}

static void make_ctx2(void)
{
	void *ctx2 = NULL;
	printf(p_cuCtxCreate(&ctx2, 0, 0) ? "CTX2 FAIL\n" : "CTX2\n");
}

static void destroy1(void) { printf("DESTROYED %d\n", p_cuCtxDestroy(ctx1)); }

static void launch(void *kind, unsigned ms)
{
	static unsigned char value = 0x40;
	value++;
	size_t n = size_b;
	void *params[] = { &block_b, &n, &value };
	CUresult r = p_cuLaunchKernel(kind, ms, 1, 1, 1, 1, 1, 0, NULL, kind == KERNEL_HANG ? NULL : params, NULL);
	if (!r && kind != KERNEL_HANG)
		b_value = value; /* once it has run */
	printf("LAUNCHED %d\n", r);
}

static void kernel_300(void) { launch(KERNEL_TIMED, 300); }
static void hang(void) { launch(KERNEL_HANG, 0); }
static void sync_ctx(void) { printf("SYNC %d\n", p_cuCtxSynchronize()); }
static void set_stack_4096(void) { printf("STACK SET %d\n", p_cuCtxSetLimit(0 /* CU_LIMIT_STACK_SIZE */, 4096)); }

static void get_stack(void)
{
	size_t v = 0;
	CUresult r = p_cuCtxGetLimit(&v, 0);
	if (r)
		printf("STACK FAIL %d\n", r);
	else
		printf("STACK %zu\n", v);
}

int main(int argc, char **argv)
{
	int signals = argc == 2 && !strcmp(argv[1], "--signals");
	if (signals && fake_app_signals_setup())
		return 1;
	fake_app_open_driver("ctx_app");
	*(void **)&p_cuInit = fake_app_need("cuInit");
	*(void **)&p_cuCtxCreate = fake_app_need("cuCtxCreate_v2");
	*(void **)&p_cuCtxDestroy = fake_app_need("cuCtxDestroy_v2");
	*(void **)&p_cuCtxSetCurrent = fake_app_need("cuCtxSetCurrent");
	*(void **)&p_cuCtxSynchronize = fake_app_need("cuCtxSynchronize");
	*(void **)&p_cuMemAlloc = fake_app_need("cuMemAlloc_v2");
	*(void **)&p_cuLaunchKernel = fake_app_need("cuLaunchKernel");
	*(void **)&p_cuStreamCreate = fake_app_need("cuStreamCreate");
	fake_app_gpa("cuStreamQuery", &p_cuStreamQuery);
	fake_app_gpa("cuCtxGetLimit", &p_cuCtxGetLimit);
	fake_app_gpa("cuCtxSetLimit", &p_cuCtxSetLimit);
	if (p_cuInit(0) || p_cuCtxCreate(&ctx1, 0, 0)) {
		fprintf(stderr, "ctx_app: no context\n");
		return 1;
	}
	if (p_cuMemAlloc(&block_a, size_a) || p_cuMemAlloc(&block_b, size_b)) {
		fprintf(stderr, "ctx_app: allocation failed\n");
		return 1;
	}
	for (size_t k = 0; k < size_a; k++)
		((unsigned char *)(uintptr_t)block_a)[k] = pattern(0, k);
	for (size_t k = 0; k < size_b; k++)
		((unsigned char *)(uintptr_t)block_b)[k] = pattern(1, k);
	pthread_t t;
	if (signals && getenv("CTX_APP_COLL") && pthread_create(&t, NULL, collectives, NULL)) {
		fprintf(stderr, "ctx_app: no thread\n");
		return 1;
	}
	static const struct fake_app_command commands[] = {
		{ "ctx2", make_ctx2 }, { "destroy1", destroy1 }, { "kernel 300", kernel_300 },
		{ "hang", hang },      { "sync", sync_ctx },     { "stack 4096", set_stack_4096 },
		{ "stack", get_stack }, { NULL, NULL },
	};
	return fake_app_serve("ctx_app", signals, verify, commands);
}
