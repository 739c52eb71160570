// malloc_bench.cu - cost of cudaMalloc/cudaFree pairs (and a kernel launch
// loop), for comparing a run with and without the gpusnap agent.
// Prints "MALLOC_US <median us per pair of size S>" lines and "LAUNCH_US <us>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ void nop(int *p) { if (p && threadIdx.x == 1024) *p = 0; }

static double now_us()
{
	return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 2000;
	if (cudaFree(0) != cudaSuccess) {
		fprintf(stderr, "malloc_bench: no CUDA device\n");
		return 1;
	}
	const size_t sizes[] = { 256, 64 << 10, 2 << 20, 64 << 20 };
	for (size_t s : sizes) {
		std::vector<double> t;
		for (int i = 0; i < iters; i++) {
			void *p = nullptr;
			double t0 = now_us();
			if (cudaMalloc(&p, s) != cudaSuccess || cudaFree(p) != cudaSuccess) {
				fprintf(stderr, "malloc_bench: cudaMalloc/cudaFree of %zu failed\n", s);
				return 1;
			}
			t.push_back(now_us() - t0);
		}
		std::sort(t.begin(), t.end());
		printf("MALLOC_US size=%zu %.3f\n", s, t[t.size() / 2]);
	}
	std::vector<double> t;
	for (int i = 0; i < iters; i++) {
		double t0 = now_us();
		nop<<<1, 32>>>(nullptr);
		t.push_back(now_us() - t0);
	}
	cudaDeviceSynchronize();
	std::sort(t.begin(), t.end());
	printf("LAUNCH_US %.3f\n", t[t.size() / 2]);
	return 0;
}
