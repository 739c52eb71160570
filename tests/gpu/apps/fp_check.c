/*
 * fp_check.c - the agent's chunk fingerprint kernel against the CPU's
 * (tests/gpu/t22-fingerprint.sh): the PTX of src/agent/movement/
 * fingerprint_ptx.h, launched in the agent's shape, over random and
 * edge-case chunks (every length 1 to 48 and around 4 KiB, all zero, all
 * ones, 1 and 64 MiB, 1 GiB of random bytes, chunks at every 16-byte
 * alignment of a page), each compared with src/core/fingerprint.c on the
 * same bytes; then its rate over GiB of device memory in 64 MiB chunks.
 *
 *   fp_check [--rate-gib N] [--device N]
 *
 * Prints "FP_CHECK OK <n> chunks" or "FP_CHECK FAIL ..." (exit 1), then
 * "FP_RATE <GB/s> GB/s over <bytes> bytes" (best of 5 passes, kernel time by
 * CUDA events).
 */
#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/movement/fingerprint_ptx.h"
#include "core/fingerprint.h"

#define CK(call)                                                                       \
	do {                                                                           \
		CUresult r_ = (call);                                                  \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = "?";                                           \
			cuGetErrorString(r_, &s_);                                      \
			printf("FP_CHECK FAIL %s: %s (%d)\n", #call, s_, (int)r_);      \
			exit(1);                                                        \
		}                                                                      \
	} while (0)

static uint64_t rng = 0x853c49e6748fea9bULL;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct chunk {
	uint64_t va, bytes;
};

static CUfunction fn;
static CUstream stream;

/* One pass of the kernel over n chunks, as the agent launches it; sums[2n] out; kernel time in *ms. */
static void pass(const struct chunk *c, size_t n, uint64_t *sums, float *ms)
{
	CUdeviceptr buf;
	size_t tb = n * sizeof(*c), sb = n * 2 * sizeof(uint64_t);
	CK(cuMemAlloc(&buf, tb + sb));
	CK(cuMemcpyHtoD(buf, c, tb));
	CK(cuMemsetD8(buf + tb, 0, sb));
	CUdeviceptr chunks = buf, out = buf + tb;
	void *args[] = { &chunks, &out };
	CUevent e0, e1;
	CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
	CK(cuEventRecord(e0, stream));
	CK(cuLaunchKernel(fn, (unsigned)n, gs_fingerprint_slices(n), 1, GS_FP_THREADS, 1, 1, 0, stream, args, NULL));
	CK(cuEventRecord(e1, stream));
	CK(cuStreamSynchronize(stream));
	CK(cuEventElapsedTime(ms, e0, e1));
	CK(cuMemcpyDtoH(sums, out, sb));
	cuEventDestroy(e0);
	cuEventDestroy(e1);
	CK(cuMemFree(buf));
}

int main(int argc, char **argv)
{
	int device = 0;
	uint64_t rate_gib = 16;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rate-gib") && i + 1 < argc)
			rate_gib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			device = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: fp_check [--rate-gib N] [--device N]\n");
			return 2;
		}
	}
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, device));
	/* the primary context: cuCtxCreate's signature differs between CUDA 12 and 13 headers */
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CK(cuModuleLoadData(&mod, gs_fingerprint_ptx));
	CK(cuModuleGetFunction(&fn, mod, "gs_fingerprint"));

	/* the cases: lengths and contents, laid out in one device buffer at 16-byte aligned offsets */
	enum { MAXC = 4096 };
	static struct chunk cases[MAXC];
	static uint64_t off[MAXC];
	size_t n = 0, total = 0;
#define ADD(len_) (off[n] = total, cases[n].bytes = (len_), total += ((len_) + 4095) / 4096 * 4096 + 4096, n++)
	for (uint64_t l = 1; l <= 48; l++)
		ADD(l);
	for (uint64_t l = 4080; l <= 4112; l++)
		ADD(l);
	size_t all_zero = n;
	ADD(4096);
	size_t all_ones = n;
	ADD(4096);
	ADD(1u << 20);
	ADD(64u << 20);
	ADD(1ull << 30);
	size_t first_aligned = n;
	for (uint64_t a = 0; a < 4096; a += 16) /* a chunk starting at every 16-byte alignment of a page */
		off[n] = total + a, cases[n].bytes = 1000 + a, n++;
	total += 8192 + 4096;
	uint8_t *host = malloc(total);
	if (!host) {
		printf("FP_CHECK FAIL out of host memory (%zu bytes)\n", total);
		return 1;
	}
	for (size_t i = 0; i < total; i += 8) {
		uint64_t r = next_rand();
		memcpy(host + i, &r, total - i < 8 ? total - i : 8);
	}
	memset(host + off[all_zero], 0, 4096);
	memset(host + off[all_ones], 0xff, 4096);
	CUdeviceptr dbuf;
	CK(cuMemAlloc(&dbuf, total));
	CK(cuMemcpyHtoD(dbuf, host, total));
	for (size_t i = 0; i < n; i++)
		cases[i].va = dbuf + off[i];
	uint64_t *sums = malloc(n * 2 * sizeof(uint64_t));
	float ms;
	pass(cases, n, sums, &ms);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		struct gs_fp g = gs_fp_final((struct gs_fp_sums){ sums[2 * i], sums[2 * i + 1] }, cases[i].bytes);
		struct gs_fp c = gs_fp_of(host + off[i], cases[i].bytes);
		if (!gs_fp_equal(g, c) && bad++ < 10)
			printf("FP_CHECK mismatch: chunk %zu (%" PRIu64 " bytes at +%" PRIu64 "%s): GPU %016" PRIx64 "%016" PRIx64
			       ", CPU %016" PRIx64 "%016" PRIx64 "\n", i, cases[i].bytes, off[i],
			       i >= first_aligned ? ", unaligned to 4096" : "", g.hi, g.lo, c.hi, c.lo);
	}
	/* each chunk alone as well (one chunk: the most slices per chunk) */
	for (size_t i = 0; i < 100 && i < n; i++) {
		uint64_t s1[2];
		pass(&cases[i], 1, s1, &ms);
		if ((s1[0] != sums[2 * i] || s1[1] != sums[2 * i + 1]) && bad++ < 10)
			printf("FP_CHECK mismatch: chunk %zu alone differs from in a batch\n", i);
	}
	if (bad) {
		printf("FP_CHECK FAIL %zu of %zu chunks differ from the CPU's fingerprint\n", bad, n);
		return 1;
	}
	printf("FP_CHECK OK %zu chunks (%zu bytes)\n", n, total);
	CK(cuMemFree(dbuf));
	free(host);

	/* the rate: rate_gib GiB of device memory (its bytes as they are) in 64 MiB chunks, as a dump plans them */
	uint64_t bytes = rate_gib << 30, piece = 64ull << 20;
	size_t m = (size_t)(bytes / piece);
	CUdeviceptr big;
	CK(cuMemAlloc(&big, bytes));
	CK(cuMemsetD32(big, 0x3f803c00u, bytes / 4));
	struct chunk *rc = malloc(m * sizeof(*rc));
	uint64_t *rs = malloc(m * 2 * sizeof(uint64_t));
	for (size_t i = 0; i < m; i++)
		rc[i] = (struct chunk){ .va = big + i * piece, .bytes = piece };
	float best = 1e30f;
	for (int r = 0; r < 5; r++) {
		pass(rc, m, rs, &ms);
		if (ms < best)
			best = ms;
	}
	printf("FP_RATE %.1f GB/s over %" PRIu64 " bytes (%zu chunks of 64 MiB, best of 5: %.3f ms)\n",
	       (double)bytes / (best / 1e3) / 1e9, bytes, m, best);
	CK(cuMemFree(big));
	cuModuleUnload(mod);
	cuDevicePrimaryCtxRelease(dev);
	return 0;
}
