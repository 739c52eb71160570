/*
 * fake_driver.c - libfakecudadrv.so, a stand-in for libcuda.so.1 in the tests
 * of the agent's interposer (tests/agent, tests/cli/t4001-interpose.sh).
 *
 * A few entry points under real driver names (so the agent's exports cover
 * them) with shapes that stress argument passing: cuLaunchKernel's eleven
 * arguments (five on the stack) folded into a checksum, float arguments, and
 * cuStreamSynchronize sleeping for as many milliseconds as its stream handle
 * says. Fake-only cuFake* functions (reached by dlsym or cuGetProcAddress)
 * cover mixed int/double stack arguments, double and struct returns, calls
 * back into the app, and a cheap call for benchmarks. cuGetProcAddress picks
 * variants by version and flags like the real driver (cuMemAlloc -> _v2 from
 * 3020, per-thread flag -> _ptsz) and returns internal addresses, except for
 * cuCtxSynchronize, whose address it takes through the GOT (so an
 * interposer's export comes back, as it would from a driver that does that).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;

#define API __attribute__((visibility("default")))
#define EXPORT_AS(name, impl) API __typeof__(impl) name __attribute__((alias(#impl)));

#define FAKE_NOT_FOUND 500
#define FAKE_PER_THREAD 2 /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

static atomic_long call_counter;

struct fake_big {
	long v[5];
};

static CUresult fd_init(unsigned int flags) { return flags == 0 ? 0 : 1; }
static CUresult fd_driver_get_version(int *v) { *v = 13000; return 0; }

/* A pure query the agent hands out ungated (interpose.c, ungated_names). */
static CUresult fd_ctx_get_current(void **ctx) { *ctx = NULL; return 0; }

static CUresult fd_device_get_count(int *n)
{
	atomic_fetch_add(&call_counter, 1);
	*n = 1;
	return 0;
}

static CUresult fd_mem_alloc_v2(CUdeviceptr *p, size_t n) { *p = 0x7000000000ULL + n; return 0; }
static CUresult fd_mem_alloc_v1(unsigned int *p, unsigned int n) { *p = 0x10000u + n; return 0; }

static CUresult launch_checksum(uint64_t salt, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				unsigned by, unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	uint64_t v[] = { (uintptr_t)f, gx, gy, gz, bx, by, bz, shmem, (uintptr_t)stream, (uintptr_t)params,
			 (uintptr_t)extra };
	uint64_t h = salt;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		h = h * 1000003u ^ (v[i] + i);
	return (CUresult)(h % 1000000007u) + 1;
}

static CUresult fd_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			  unsigned shmem, void *stream, void **params, void **extra)
{
	return launch_checksum(17, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

static CUresult fd_launch_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			       unsigned shmem, void *stream, void **params, void **extra)
{
	return launch_checksum(29, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

static void sleep_ms(uintptr_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts))
		;
}

static CUresult fd_stream_sync(void *stream) { sleep_ms((uintptr_t)stream); return 0; }
static CUresult fd_stream_sync_ptsz(void *stream) { sleep_ms((uintptr_t)stream); return 0; }

static CUresult fd_texref_mip_clamp(void *tex, float lo, float hi)
{
	(void)tex;
	return (CUresult)(lo * 1000.0f + hi * 10.0f);
}

static const void *export_table[4] = { (const void *)0x1, (const void *)0x2, (const void *)0x3, NULL };
static CUresult fd_get_export_table(const void **table, const void *uuid)
{
	(void)uuid;
	*table = export_table;
	return 0;
}

/* Plain function, address taken through the GOT below: interposable. */
API CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize(void) { return 0; }

static int fd_fake_nop(int x) { return x; }

static int fd_fake_count(int x)
{
	atomic_fetch_add(&call_counter, 1);
	return x + 1;
}

static long fd_fake_count_value(void) { return atomic_load(&call_counter); }

static double fd_fake_mix(int a, int b, int c, int d, int e, int f, int g, int h, double d0, double d1, double d2,
			  double d3, double d4, double d5, double d6, double d7, double d8, double d9)
{
	return a + 2.0 * b + 3.0 * c + 4.0 * d + 5.0 * e + 6.0 * f + 7.0 * g + 8.0 * h + d0 * 0.5 + d1 * 0.25 +
	       d2 * 0.125 + d3 * 1.5 + d4 * 2.5 + d5 * 3.5 + d6 * 4.5 + d7 * 5.5 + d8 * 6.5 + d9 * 7.5;
}

static struct fake_big fd_fake_big(int seed)
{
	struct fake_big b;
	for (int i = 0; i < 5; i++)
		b.v[i] = (long)seed * (i + 1) + i;
	return b;
}

static int fd_fake_callback(void (*cb)(void *), void *arg)
{
	cb(arg);
	return 7;
}

static int fd_fake_recurse(int n, int (*cb)(int))
{
	return n <= 0 ? 0 : n + cb(n - 1);
}

struct proc_entry {
	const char *name;
	void *fn;
};

static CUresult fd_get_proc_address_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status);

static CUresult fd_get_proc_address_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	int status;
	return fd_get_proc_address_v2(symbol, pfn, version, flags, &status);
}

static CUresult fd_get_proc_address_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
	const struct proc_entry plain[] = {
		{ "cuInit", (void *)fd_init },
		{ "cuDriverGetVersion", (void *)fd_driver_get_version },
		{ "cuCtxGetCurrent", (void *)fd_ctx_get_current },
		{ "cuDeviceGetCount", (void *)fd_device_get_count },
		{ "cuTexRefSetMipmapLevelClamp", (void *)fd_texref_mip_clamp },
		{ "cuGetExportTable", (void *)fd_get_export_table },
		{ "cuFakeNop", (void *)fd_fake_nop },
		{ "cuFakeCount", (void *)fd_fake_count },
		{ "cuFakeCountValue", (void *)fd_fake_count_value },
		{ "cuFakeMix", (void *)fd_fake_mix },
		{ "cuFakeBig", (void *)fd_fake_big },
		{ "cuFakeCallback", (void *)fd_fake_callback },
		{ "cuFakeRecurse", (void *)fd_fake_recurse },
	};
	void *fn = NULL;
	int per_thread = (flags & FAKE_PER_THREAD) != 0;
	if (!strcmp(symbol, "cuMemAlloc"))
		fn = version >= 3020 ? (void *)fd_mem_alloc_v2 : (void *)fd_mem_alloc_v1;
	else if (!strcmp(symbol, "cuLaunchKernel"))
		fn = per_thread ? (void *)fd_launch_ptsz : (void *)fd_launch;
	else if (!strcmp(symbol, "cuStreamSynchronize"))
		fn = per_thread ? (void *)fd_stream_sync_ptsz : (void *)fd_stream_sync;
	else if (!strcmp(symbol, "cuGetProcAddress"))
		fn = version >= 12000 ? (void *)fd_get_proc_address_v2 : (void *)fd_get_proc_address_v1;
	else if (!strcmp(symbol, "cuCtxSynchronize"))
		fn = (void *)&cuCtxSynchronize;
	for (size_t i = 0; !fn && i < sizeof(plain) / sizeof(plain[0]); i++)
		if (!strcmp(symbol, plain[i].name))
			fn = plain[i].fn;
	*pfn = fn;
	if (status)
		*status = fn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
	return fn ? 0 : FAKE_NOT_FOUND;
}

EXPORT_AS(cuInit, fd_init)
EXPORT_AS(cuDriverGetVersion, fd_driver_get_version)
EXPORT_AS(cuCtxGetCurrent, fd_ctx_get_current)
EXPORT_AS(cuDeviceGetCount, fd_device_get_count)
EXPORT_AS(cuMemAlloc_v2, fd_mem_alloc_v2)
EXPORT_AS(cuMemAlloc, fd_mem_alloc_v1)
EXPORT_AS(cuLaunchKernel, fd_launch)
EXPORT_AS(cuLaunchKernel_ptsz, fd_launch_ptsz)
EXPORT_AS(cuStreamSynchronize, fd_stream_sync)
EXPORT_AS(cuStreamSynchronize_ptsz, fd_stream_sync_ptsz)
EXPORT_AS(cuTexRefSetMipmapLevelClamp, fd_texref_mip_clamp)
EXPORT_AS(cuGetExportTable, fd_get_export_table)
EXPORT_AS(cuGetProcAddress, fd_get_proc_address_v1)
EXPORT_AS(cuGetProcAddress_v2, fd_get_proc_address_v2)
EXPORT_AS(cuFakeNop, fd_fake_nop)
EXPORT_AS(cuFakeCount, fd_fake_count)
EXPORT_AS(cuFakeCountValue, fd_fake_count_value)
EXPORT_AS(cuFakeMix, fd_fake_mix)
EXPORT_AS(cuFakeBig, fd_fake_big)
EXPORT_AS(cuFakeCallback, fd_fake_callback)
EXPORT_AS(cuFakeRecurse, fd_fake_recurse)
