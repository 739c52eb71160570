/*
 * app_vmm.c - the app of tests/cli/t4003-app-vmm.sh: uses the VMM API itself
 * (cuMemAddressReserve + cuMemCreate + cuMemMap + cuMemSetAccess, as
 * PyTorch's expandable segments do) under the gpusnap agent against the
 * host-memory fake driver (tests/fake/fake_vmm_driver.c), so its data can be
 * checked through its own pointers across suspend and resume.
 *
 * Its allocations (granularity 2 MiB):
 *   h1  4 MiB mapped twice: at r1 (read-write) and at r1+8M (read-only)
 *   h2  6 MiB, exportable type but never exported, filled through one
 *       mapping, unmapped, and mapped again at r2+6M (the driver refuses a
 *       mapping at a non-zero offset into a handle, and so does the fake)
 *   h3  4 MiB mapped at r3, released by the app right away (the mapping
 *       keeps the memory, as with the driver)
 *   h4  2 MiB exported as a file descriptor: never releasable
 *   h5a, h5b  4 MiB each, mapped side by side at r5, access given by one
 *       cuMemSetAccess over both
 * It checks cuMemRetainAllocationHandle (same value back, also for h3) and
 * cuMemGetAllocationPropertiesFromHandle (the properties it gave).
 * Entry points come by dlsym and by cuGetProcAddress_v2.
 *
 * With --signals (for dumps by CRIU, tests/cli/t4006-app-vmm-image.sh) it
 * reads no stdin: SIGUSR1 runs verify, SIGTERM ends it; stdout is the log.
 *
 * Prints "READY <pid>", then serves commands on stdin, one per line:
 *   verify   every range holds its pattern -> "VERIFY OK n" / "VERIFY FAIL ..."
 *   cleanup  unmaps, releases and frees everything -> "CLEAN OK" / "CLEAN FAIL ..."
 *   quit     exits
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUhandle;

#define MiB (1ULL << 20)
#define POSIX_FD 1

static CUresult (*p_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*p_cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*p_cuMemCreate)(CUhandle *, size_t, const struct fake_mem_prop *, unsigned long long);
static CUresult (*p_cuMemRelease)(CUhandle);
static CUresult (*p_cuMemMap)(CUdeviceptr, size_t, size_t, CUhandle, unsigned long long);
static CUresult (*p_cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*p_cuMemSetAccess)(CUdeviceptr, size_t, const struct fake_mem_access *, size_t);
static CUresult (*p_cuMemRetainAllocationHandle)(CUhandle *, void *);
static CUresult (*p_cuMemGetAllocationPropertiesFromHandle)(struct fake_mem_prop *, CUhandle);
static CUresult (*p_cuMemExportToShareableHandle)(void *, CUhandle, int, unsigned long long);

static CUhandle h1, h2, h3, h4, h5a, h5b;
static CUdeviceptr r1, r2, r3, r4, r5;
static struct fake_mem_prop prop_plain, prop_fd;
static int exported_fd = -1;

static unsigned char pattern(unsigned seed, size_t offset)
{
	return (unsigned char)(seed * 131u + offset * 7u + (offset >> 12) + 1u);
}

static void fill(CUdeviceptr va, size_t size, unsigned seed, size_t first)
{
	unsigned char *p = (unsigned char *)(uintptr_t)va;
	for (size_t k = 0; k < size; k++)
		p[k] = pattern(seed, first + k);
}

/* 0 if [va, va+size) holds seed's pattern from offset `first` on */
static int check(const char *what, CUdeviceptr va, size_t size, unsigned seed, size_t first)
{
	const unsigned char *p = (const unsigned char *)(uintptr_t)va;
	for (size_t k = 0; k < size; k++)
		if (p[k] != pattern(seed, first + k)) {
			printf("VERIFY FAIL %s byte %zu is %u, expected %u\n", what, k, p[k], pattern(seed, first + k));
			return -1;
		}
	return 0;
}

static int die(const char *what, CUresult r)
{
	fprintf(stderr, "app_vmm: %s failed: %d\n", what, r);
	exit(1);
}

#define CK(call)                          \
	do {                              \
		CUresult r_ = (call);     \
		if (r_)                   \
			die(#call, r_);   \
	} while (0)

static void set_access(CUdeviceptr va, size_t size, int flags)
{
	struct fake_mem_access a = { 1, 0, flags }; /* device 0 */
	CK(p_cuMemSetAccess(va, size, &a, 1));
}

static void setup(void)
{
	prop_plain = (struct fake_mem_prop){ .type = 1, .loc_type = 1, .loc_id = 0 };
	prop_fd = prop_plain;
	prop_fd.handle_types = POSIX_FD;

	/* h1: two mappings of one handle */
	CK(p_cuMemAddressReserve(&r1, 16 * MiB, 0, 0, 0));
	CK(p_cuMemCreate(&h1, 4 * MiB, &prop_plain, 0));
	CK(p_cuMemMap(r1, 4 * MiB, 0, h1, 0));
	CK(p_cuMemMap(r1 + 8 * MiB, 4 * MiB, 0, h1, 0));
	set_access(r1, 4 * MiB, 3);
	set_access(r1 + 8 * MiB, 4 * MiB, 1);
	fill(r1, 4 * MiB, 1, 0);

	/* h2: filled through one mapping, then mapped again elsewhere; a non-zero offset is refused */
	CK(p_cuMemAddressReserve(&r2, 12 * MiB, 0, 0, 0));
	CK(p_cuMemCreate(&h2, 6 * MiB, &prop_fd, 0));
	CK(p_cuMemMap(r2, 6 * MiB, 0, h2, 0));
	set_access(r2, 6 * MiB, 3);
	fill(r2, 6 * MiB, 2, 0);
	CK(p_cuMemUnmap(r2, 6 * MiB));
	if (p_cuMemMap(r2, 4 * MiB, 2 * MiB, h2, 0) == 0) {
		fprintf(stderr, "app_vmm: a mapping at an offset into a handle was accepted\n");
		exit(1);
	}
	CK(p_cuMemMap(r2 + 6 * MiB, 6 * MiB, 0, h2, 0));
	set_access(r2 + 6 * MiB, 6 * MiB, 3);

	/* h3: released while mapped */
	CK(p_cuMemAddressReserve(&r3, 4 * MiB, 0, 0, 0));
	CK(p_cuMemCreate(&h3, 4 * MiB, &prop_plain, 0));
	CK(p_cuMemMap(r3, 4 * MiB, 0, h3, 0));
	set_access(r3, 4 * MiB, 3);
	fill(r3, 4 * MiB, 3, 0);
	CK(p_cuMemRelease(h3));

	/* h4: exported */
	CK(p_cuMemAddressReserve(&r4, 2 * MiB, 0, 0, 0));
	CK(p_cuMemCreate(&h4, 2 * MiB, &prop_fd, 0));
	CK(p_cuMemMap(r4, 2 * MiB, 0, h4, 0));
	set_access(r4, 2 * MiB, 3);
	fill(r4, 2 * MiB, 4, 0);
	CK(p_cuMemExportToShareableHandle(&exported_fd, h4, POSIX_FD, 0));

	/* h5a, h5b: one access call over two mappings */
	CK(p_cuMemAddressReserve(&r5, 8 * MiB, 0, 0, 0));
	CK(p_cuMemCreate(&h5a, 4 * MiB, &prop_plain, 0));
	CK(p_cuMemCreate(&h5b, 4 * MiB, &prop_plain, 0));
	CK(p_cuMemMap(r5, 4 * MiB, 0, h5a, 0));
	CK(p_cuMemMap(r5 + 4 * MiB, 4 * MiB, 0, h5b, 0));
	set_access(r5, 8 * MiB, 3);
	fill(r5, 8 * MiB, 5, 0);
}

/* The handle API answers as the driver would. */
static int check_handles(void)
{
	CUhandle h = 0;
	CUresult r = p_cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(r1 + 8 * MiB + 100));
	if (r || h != h1) {
		printf("VERIFY FAIL retain of h1's second mapping: rc %d handle %#llx, expected %#llx\n", r, h, h1);
		return -1;
	}
	if ((r = p_cuMemRelease(h))) {
		printf("VERIFY FAIL release of the retained h1: rc %d\n", r);
		return -1;
	}
	/* h3 was released by the app: retaining it through its mapping gives it back (and it must be released again) */
	r = p_cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(r3 + 5));
	if (r || h != h3) {
		printf("VERIFY FAIL retain of released h3: rc %d handle %#llx, expected %#llx\n", r, h, h3);
		return -1;
	}
	if ((r = p_cuMemRelease(h))) {
		printf("VERIFY FAIL release of the retained h3: rc %d\n", r);
		return -1;
	}
	struct fake_mem_prop got;
	memset(&got, 0xee, sizeof(got));
	r = p_cuMemGetAllocationPropertiesFromHandle(&got, h2);
	if (r || memcmp(&got, &prop_fd, sizeof(got))) {
		printf("VERIFY FAIL properties of h2: rc %d type %d handle types %d location %d/%d\n", r, got.type,
		       got.handle_types, got.loc_type, got.loc_id);
		return -1;
	}
	return 0;
}

static void verify(void)
{
	if (check("h1 at r1", r1, 4 * MiB, 1, 0) || check("h1 at r1+8M (read-only)", r1 + 8 * MiB, 4 * MiB, 1, 0) ||
	    check("h2 mapped again at r2+6M", r2 + 6 * MiB, 6 * MiB, 2, 0) || check("h3 (released) at r3", r3, 4 * MiB, 3, 0) ||
	    check("h4 (exported) at r4", r4, 2 * MiB, 4, 0) || check("h5a+h5b at r5", r5, 8 * MiB, 5, 0) ||
	    check_handles())
		return;
	printf("VERIFY OK 6\n");
}

static void cleanup(void)
{
	struct {
		CUdeviceptr va;
		size_t size;
	} maps[] = { { r1, 4 * MiB }, { r1 + 8 * MiB, 4 * MiB }, { r2 + 6 * MiB, 6 * MiB }, { r3, 4 * MiB },
		     { r4, 2 * MiB }, { r5, 8 * MiB } /* both of r5's mappings in one call */ };
	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
		CUresult r = p_cuMemUnmap(maps[i].va, maps[i].size);
		if (r) {
			printf("CLEAN FAIL unmap %zu: rc %d\n", i, r);
			return;
		}
	}
	CUhandle hs[] = { h1, h2, h4, h5a, h5b }; /* h3 went already */
	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
		CUresult r = p_cuMemRelease(hs[i]);
		if (r) {
			printf("CLEAN FAIL release %zu: rc %d\n", i, r);
			return;
		}
	}
	/* a second release of a released handle is refused */
	if (!p_cuMemRelease(h1)) {
		printf("CLEAN FAIL a second release of h1 succeeded\n");
		return;
	}
	CK(p_cuMemAddressFree(r1, 16 * MiB));
	CK(p_cuMemAddressFree(r2, 12 * MiB));
	CK(p_cuMemAddressFree(r3, 4 * MiB));
	CK(p_cuMemAddressFree(r4, 2 * MiB));
	CK(p_cuMemAddressFree(r5, 8 * MiB));
	close(exported_fd);
	printf("CLEAN OK\n");
}

int main(int argc, char **argv)
{
	int signals = argc == 2 && !strcmp(argv[1], "--signals");
	if (signals && fake_app_signals_setup())
		return 1;
	fake_app_open_driver("app_vmm");
	*(void **)&p_cuMemAddressReserve = fake_app_need("cuMemAddressReserve");
	*(void **)&p_cuMemAddressFree = fake_app_need("cuMemAddressFree");
	*(void **)&p_cuMemCreate = fake_app_need("cuMemCreate");
	*(void **)&p_cuMemRelease = fake_app_need("cuMemRelease");
	*(void **)&p_cuMemUnmap = fake_app_need("cuMemUnmap");
	*(void **)&p_cuMemExportToShareableHandle = fake_app_need("cuMemExportToShareableHandle");
	/* the rest the way cudart and PyTorch find them */
	fake_app_gpa("cuMemMap", &p_cuMemMap);
	fake_app_gpa("cuMemSetAccess", &p_cuMemSetAccess);
	fake_app_gpa("cuMemRetainAllocationHandle", &p_cuMemRetainAllocationHandle);
	fake_app_gpa("cuMemGetAllocationPropertiesFromHandle", &p_cuMemGetAllocationPropertiesFromHandle);
	if (fake_app_make_context())
		return 1;
	setup();
	static const struct fake_app_command commands[] = { { "cleanup", cleanup }, { NULL, NULL } };
	return fake_app_serve("app_vmm", signals, verify, commands);
}
