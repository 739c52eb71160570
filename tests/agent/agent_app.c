/*
 * agent_app.c - the app of tests/cli/t4002-agent-fake.sh: runs under the
 * gpusnap agent against the host-memory fake driver (tests/fake/
 * fake_vmm_driver.c), so its "device memory" can be read and written through
 * the device pointers and its contents checked across suspend and resume.
 *
 * It dlopen()s the driver named by GPUSNAP_LIBCUDA (no CUDA headers, no
 * libcuda link), reaches the allocation entry points by dlsym and by
 * cuGetProcAddress_v2, allocates three large blocks and SMALL_COUNT small
 * ones, fills each with its own pattern, registers itself with the fake's
 * checkpoint state (FAKE_CUDA_DIR/<pid> = "0 0"), prints "READY <pid>" and
 * serves commands read from stdin, one per line:
 *   verify     every live block still holds its pattern -> "VERIFY OK n" / "VERIFY FAIL ..."
 *   free-some  frees every other small block through cuMemFree_v2 -> "FREED n"
 *   zero-flip  with AGENT_APP_ZERO_MB: fills the zero block with a pattern, or
 *              zeroes it again -> "ZERO 0" (now zero) / "ZERO 1" (now filled)
 *   quit       exits
 * With --signals (for dumps by CRIU, tests/cli/t4004-agent-image.sh) it reads
 * no stdin: SIGUSR1 runs verify, SIGUSR2 zero-flip, SIGTERM ends it; stdout is the test's log.
 * AGENT_APP_BIG_MB=N makes the second large block N MiB (several copy chunks).
 * AGENT_APP_ZERO_MB=N adds a block of N MiB that the app leaves zero (as a
 * framework's reserved but unused memory), checked to be zero by verify.
 * AGENT_APP_HOST_MB=N adds N MiB of the app's own CPU memory (anonymous,
 * every page a pattern of its own), checked by verify too: what a restore
 * must bring back byte for byte besides the GPU data.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define SMALL_COUNT 2000
#define LARGE_COUNT 3
#define ZERO_BLOCK (LARGE_COUNT + SMALL_COUNT) /* blocks[] index of the AGENT_APP_ZERO_MB block */

struct block {
	CUdeviceptr ptr;
	size_t size;
	int live;
};

static CUresult (*p_cuMemAlloc_dlsym)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemAlloc_gpa)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemAllocAsync)(CUdeviceptr *, size_t, void *);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemFree_gpa)(CUdeviceptr);
static CUresult (*p_cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);

static struct block blocks[LARGE_COUNT + SMALL_COUNT + 1];
static int zero_filled; /* the zero block holds a pattern now (zero-flip) */
static unsigned char *host_block; /* AGENT_APP_HOST_MB */
static size_t host_size;

static unsigned char host_pattern(size_t offset)
{
	return (unsigned char)(offset * 13u + (offset >> 12) * 101u + 5u);
}

static unsigned char pattern(size_t block, size_t offset)
{
	if (block == ZERO_BLOCK && !zero_filled)
		return 0;
	return (unsigned char)(block * 131u + offset * 7u + (offset >> 12) + 1u);
}

static void fill(size_t i)
{
	unsigned char *p = (unsigned char *)(uintptr_t)blocks[i].ptr;
	for (size_t k = 0; k < blocks[i].size; k++)
		p[k] = pattern(i, k);
}

static int check(size_t i)
{
	const unsigned char *p = (const unsigned char *)(uintptr_t)blocks[i].ptr;
	for (size_t k = 0; k < blocks[i].size; k++)
		if (p[k] != pattern(i, k)) {
			printf("VERIFY FAIL block %zu (%#llx, %zu bytes) byte %zu is %u, expected %u\n", i, blocks[i].ptr,
			       blocks[i].size, k, p[k], pattern(i, k));
			return -1;
		}
	return 0;
}

static void verify(void)
{
	size_t n = 0;
	for (size_t i = 0; i < LARGE_COUNT + SMALL_COUNT + 1; i++) {
		if (!blocks[i].live)
			continue;
		if (check(i))
			return;
		n++;
	}
	for (size_t k = 0; k < host_size; k++)
		if (host_block[k] != host_pattern(k)) {
			printf("VERIFY FAIL host memory byte %zu is %u, expected %u\n", k, host_block[k], host_pattern(k));
			return;
		}
	/* a small block's range is its own, not its slab's */
	for (size_t i = LARGE_COUNT; i < LARGE_COUNT + SMALL_COUNT; i++) {
		if (!blocks[i].live || blocks[i].size < 2)
			continue;
		CUdeviceptr base = 0;
		size_t size = 0;
		CUresult r = p_cuMemGetAddressRange(&base, &size, blocks[i].ptr + blocks[i].size / 2);
		if (r || base != blocks[i].ptr || size != blocks[i].size) {
			printf("VERIFY FAIL address range of block %zu: rc %d base %#llx size %zu, expected %#llx %zu\n", i, r,
			       base, size, blocks[i].ptr, blocks[i].size);
			return;
		}
		break;
	}
	printf("VERIFY OK %zu\n", n);
}

static void free_some(void)
{
	size_t n = 0;
	for (size_t i = LARGE_COUNT; i < LARGE_COUNT + SMALL_COUNT; i += 2) {
		if (!blocks[i].live)
			continue;
		/* both ways the app may have obtained cuMemFree */
		CUresult r = (n % 2 ? p_cuMemFree_gpa : p_cuMemFree)(blocks[i].ptr);
		if (r) {
			printf("FREE FAIL block %zu: rc %d\n", i, r);
			return;
		}
		blocks[i].live = 0;
		n++;
	}
	printf("FREED %zu\n", n);
}

static void zero_flip(void)
{
	if (!blocks[ZERO_BLOCK].live) {
		printf("ZERO FAIL no zero block (AGENT_APP_ZERO_MB)\n");
		return;
	}
	zero_filled = !zero_filled;
	fill(ZERO_BLOCK);
	printf("ZERO %d\n", zero_filled);
}

int main(int argc, char **argv)
{
	int signals = argc == 2 && !strcmp(argv[1], "--signals");
	if (signals && fake_app_signals_setup())
		return 1;
	fake_app_open_driver("agent_app");
	*(void **)&p_cuMemAlloc_dlsym = fake_app_need("cuMemAlloc_v2");
	*(void **)&p_cuMemFree = fake_app_need("cuMemFree_v2");
	*(void **)&p_cuMemGetAddressRange = fake_app_need("cuMemGetAddressRange_v2");
	fake_app_gpa("cuMemAlloc", &p_cuMemAlloc_gpa);
	fake_app_gpa("cuMemFree", &p_cuMemFree_gpa);
	fake_app_gpa("cuMemAllocAsync", &p_cuMemAllocAsync);
	if (fake_app_make_context())
		return 1;

	size_t large[LARGE_COUNT] = { 3u << 20, 8u << 20, (5u << 20) + 1 };
	const char *big = getenv("AGENT_APP_BIG_MB");
	if (big && atoi(big) > 0)
		large[1] = (size_t)atoi(big) << 20;
	for (size_t i = 0; i < LARGE_COUNT + SMALL_COUNT; i++) {
		blocks[i].size = i < LARGE_COUNT ? large[i] : 1 + (i * 2654435761u) % 4096;
		CUresult r;
		switch (i % 3) { /* every way the app has to allocate */
		case 0: r = p_cuMemAlloc_dlsym(&blocks[i].ptr, blocks[i].size); break;
		case 1: r = p_cuMemAlloc_gpa(&blocks[i].ptr, blocks[i].size); break;
		default: r = p_cuMemAllocAsync(&blocks[i].ptr, blocks[i].size, NULL); break;
		}
		if (r) {
			fprintf(stderr, "agent_app: allocation %zu of %zu bytes failed: %d\n", i, blocks[i].size, r);
			return 1;
		}
		blocks[i].live = 1;
		fill(i);
	}
	const char *zmb = getenv("AGENT_APP_ZERO_MB");
	if (zmb && atoi(zmb) > 0) {
		struct block *z = &blocks[ZERO_BLOCK];
		z->size = (size_t)atoi(zmb) << 20;
		if (p_cuMemAlloc_dlsym(&z->ptr, z->size)) {
			fprintf(stderr, "agent_app: the zero block of %zu bytes failed\n", z->size);
			return 1;
		}
		z->live = 1;
		fill(ZERO_BLOCK); /* zeros: fresh memory need not be */
	}
	const char *hmb = getenv("AGENT_APP_HOST_MB");
	if (hmb && atoi(hmb) > 0) {
		host_size = (size_t)atoi(hmb) << 20;
		host_block = malloc(host_size);
		if (!host_block) {
			fprintf(stderr, "agent_app: no %zu bytes of host memory\n", host_size);
			return 1;
		}
		for (size_t k = 0; k < host_size; k++)
			host_block[k] = host_pattern(k);
	}
	static const struct fake_app_command commands[] = { { "free-some", free_some }, { "zero-flip", zero_flip },
							    { NULL, NULL } };
	return fake_app_serve("agent_app", signals, verify, commands);
}
