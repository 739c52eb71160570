/*
 * context_floor.cu - what a CUDA context alone costs the driver's checkpoint:
 * a process that holds no data of its own (what the agent leaves behind once
 * it has released every allocation), with the context's per-thread stack
 * (local memory, sized for every thread the GPU can run at once) as the
 * driver made it or shrunk first with cudaDeviceSetLimit(cudaLimitStackSize).
 *
 * usage: context_floor [STACK_BYTES|default [CONTEXTS]]
 *   Creates the context (prints "context_only_mib": device memory in use
 *   before any kernel, cuMemGetInfo), runs a kernel, prints "used_mib A",
 *   then with STACK_BYTES sets the stack limit and prints "shrunk_mib B".
 *   CONTEXT_FLOOR_LIMITS (below) sets other limits too.
 *   CONTEXTS > 1: that many contexts on the GPU (cuCtxCreate), each with its
 *   kernel and stack limit, to see whether the driver's cost grows per
 *   context. Then "ready" and waits: on SIGUSR1 it runs the kernel again in
 *   every context and prints "kernel ok" (or "kernel FAILED: ..."); SIGTERM
 *   ends it.
 * bench/context_floor.sh times gpusnap's driver path on it.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t run_kernel, stop;

static void on_usr1(int sig)
{
	(void)sig;
	run_kernel = 1;
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

__global__ void touch(int *out)
{
	/* a little local memory so the launch needs a stack */
	volatile int scratch[64];
	for (int i = 0; i < 64; i++)
		scratch[i] = i * (int)threadIdx.x;
	if (threadIdx.x == 0 && blockIdx.x == 0)
		*out = scratch[63] + 1;
}

static double used_mib(void)
{
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	return (double)(total_b - free_b) / (1 << 20);
}

static int launch(int *d)
{
	touch<<<1024, 256>>>(d);
	cudaError_t e = cudaDeviceSynchronize();
	if (e != cudaSuccess) {
		printf("kernel FAILED: %s\n", cudaGetErrorString(e));
		return 1;
	}
	printf("kernel ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGUSR1, on_usr1);
	signal(SIGTERM, on_term);
	const char *stack_arg = argc > 1 && strcmp(argv[1], "default") ? argv[1] : NULL;
	int contexts = argc > 2 ? atoi(argv[2]) : 1;
	if (contexts < 1 || contexts > 16) {
		printf("CONTEXTS must be 1 to 16\n");
		return 2;
	}
	cudaFree(0);
	printf("context_only_mib %.1f\n", used_mib());
	CUcontext ctx[16] = { 0 };
	int *d[16] = { 0 };
	for (int c = 0; c < contexts; c++) {
		if (c > 0 && cuCtxCreate(&ctx[c], NULL, 0, 0) != CUDA_SUCCESS) {
			printf("cuCtxCreate failed\n");
			return 1;
		}
		if (c == 0)
			cuCtxGetCurrent(&ctx[0]);
		if (cudaMalloc(&d[c], sizeof(int)) != cudaSuccess) {
			printf("cudaMalloc failed\n");
			return 1;
		}
		if (launch(d[c]))
			return 1;
	}
	size_t stack = 0;
	cudaDeviceGetLimit(&stack, cudaLimitStackSize);
	printf("stack_bytes %zu used_mib %.1f\n", stack, used_mib());
	if (stack_arg) {
		cudaError_t e = cudaSuccess;
		for (int c = 0; c < contexts && e == cudaSuccess; c++) {
			cuCtxSetCurrent(ctx[c]);
			e = cudaDeviceSetLimit(cudaLimitStackSize, (size_t)strtoull(stack_arg, NULL, 0));
		}
		cudaDeviceGetLimit(&stack, cudaLimitStackSize);
		printf("set %s: %s; stack_bytes %zu shrunk_mib %.1f\n", stack_arg, cudaGetErrorString(e), stack, used_mib());
	}
	/*
	 * CONTEXT_FLOOR_LIMITS="L:V,...": other cuCtxSetLimit limits (cudaLimit
	 * numbers: 1 printf FIFO, 2 malloc heap, 3 sync depth, 4 pending launches)
	 * set in every context, to see what else a context's memory is made of.
	 */
	const char *more = getenv("CONTEXT_FLOOR_LIMITS");
	for (const char *p = more; p && *p;) {
		int limit = 0;
		unsigned long long value = 0;
		int used = 0;
		if (sscanf(p, "%d:%llu%n", &limit, &value, &used) != 2)
			break;
		cudaError_t e = cudaSuccess;
		for (int c = 0; c < contexts && e == cudaSuccess; c++) {
			cuCtxSetCurrent(ctx[c]);
			e = cudaDeviceSetLimit((cudaLimit)limit, (size_t)value);
		}
		printf("limit %d = %llu: %s; used_mib %.1f\n", limit, value, cudaGetErrorString(e), used_mib());
		p += used;
		if (*p == ',')
			p++;
	}
	printf("ready\n");
	while (!stop) {
		if (run_kernel) {
			run_kernel = 0;
			int failed = 0;
			for (int c = 0; c < contexts && !failed; c++) {
				cuCtxSetCurrent(ctx[c]);
				failed = launch(d[c]);
			}
			printf("stack_bytes_after used_mib %.1f\n", used_mib());
		}
		usleep(10000);
	}
	return 0;
}
