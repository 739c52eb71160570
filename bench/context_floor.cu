/*
 * context_floor.cu - what a CUDA context alone costs the driver's checkpoint:
 * a process that holds no data of its own (what the agent leaves behind once
 * it has released every allocation), with the context's per-thread stack
 * (local memory, sized for every thread the GPU can run at once) as the
 * driver made it or shrunk first with cudaDeviceSetLimit(cudaLimitStackSize).
 *
 * usage: context_floor [STACK_BYTES]
 *   Creates the context, runs a kernel, prints "used_mib A" (device memory in
 *   use, cuMemGetInfo), then with STACK_BYTES sets the stack limit and prints
 *   "shrunk_mib B", then "ready" and waits: on SIGUSR1 it runs the kernel again
 *   and prints "kernel ok" (or "kernel FAILED: ..."); SIGTERM ends it.
 * bench/context_floor.sh times gpusnap's driver path on it.
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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
	int *d = NULL;
	if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) {
		printf("cudaMalloc failed\n");
		return 1;
	}
	if (launch(d))
		return 1;
	size_t stack = 0;
	cudaDeviceGetLimit(&stack, cudaLimitStackSize);
	printf("stack_bytes %zu used_mib %.1f\n", stack, used_mib());
	if (argc > 1) {
		cudaError_t e = cudaDeviceSetLimit(cudaLimitStackSize, (size_t)strtoull(argv[1], NULL, 0));
		cudaDeviceGetLimit(&stack, cudaLimitStackSize);
		printf("set %s: %s; stack_bytes %zu shrunk_mib %.1f\n", argv[1], cudaGetErrorString(e), stack, used_mib());
	}
	printf("ready\n");
	while (!stop) {
		if (run_kernel) {
			run_kernel = 0;
			launch(d);
			printf("stack_bytes_after used_mib %.1f\n", used_mib());
		}
		usleep(10000);
	}
	return 0;
}
