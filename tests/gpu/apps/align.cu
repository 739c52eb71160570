/*
 * align.cu - measures the alignment of the pointers cudaMalloc returns, for
 * tests/gpu/t99-agent-alignment.sh, which runs it once alone and once under
 * the agent (`gpusnap run`) and compares. For every size from 1 to 4096 bytes
 * and for 1 MiB it makes 16 allocations at once (so blocks after the first of
 * a region count too) and prints "ALIGN <size> <bytes>": the largest power of
 * two that divides all 16 addresses (capped at 2 MiB). Then frees them and
 * prints "DONE". Exit 0 only if every call succeeded. No stdin protocol: it
 * runs to the end on its own.
 */
#include "app_common.cuh"

#define PER_SIZE 16
#define CAP (2ULL << 20)

static bool measure(size_t size)
{
	void *p[PER_SIZE] = {};
	uint64_t all = CAP;
	bool ok = true;
	for (int i = 0; i < PER_SIZE && ok; i++) {
		ok = CK(cudaMalloc(&p[i], size));
		all |= (uint64_t)(uintptr_t)p[i];
	}
	if (ok)
		printf("ALIGN %zu %llu\n", size, (unsigned long long)(all & (~all + 1)));
	for (int i = 0; i < PER_SIZE; i++)
		if (p[i])
			ok &= CK(cudaFree(p[i]));
	return ok;
}

int main(void)
{
	g_app_name = "align";
	bool ok = CK(cudaSetDevice(0)) && CK(cudaFree(0));
	for (size_t size = 1; size <= 4096 && ok; size++)
		ok = measure(size);
	if (ok)
		ok = measure(1 << 20);
	printf("DONE\n");
	fflush(stdout);
	return ok && g_errors == 0 ? 0 : 1;
}
