/*
 * pattern_core.cuh - the "pattern" test app: device memory filled with a known
 * pattern that verifies bit for bit on request. pattern.cu runs it on one GPU,
 * multigpu.cu on every visible GPU; both are this one main.
 *
 * Every 8-byte word of allocation r holds mix64(key(seed, r) ^ word * C), so each
 * word of each allocation differs and a restore that swaps, shifts, zeroes or
 * truncates memory is caught. Fill and verify run on the GPU (verify counts
 * mismatches with a warp reduction and keeps the first one), so even 32 GiB
 * verifies in milliseconds on the GPU.
 *
 * Allocation APIs (--api): runtime (cudaMalloc), driver (cuMemAlloc), pitch
 * (cuMemAllocPitch), async (cudaMallocAsync on a stream), vmm (cuMemCreate +
 * cuMemAddressReserve + cuMemMap + cuMemSetAccess), so the suspend paths are
 * tested against every way an app gets device memory.
 */
#ifndef GPUSNAP_TEST_PATTERN_CORE_CUH
#define GPUSNAP_TEST_PATTERN_CORE_CUH

#include "app_common.cuh"

#include <chrono>
#include <vector>

enum alloc_api { API_RUNTIME, API_DRIVER, API_PITCH, API_ASYNC, API_VMM };
static const char *const api_names[] = {"runtime", "driver", "pitch", "async", "vmm"};

/* The verify kernel reports a mismatch as (region << 40 | byte offset): limits checked at allocation. */
#define PATTERN_OFFSET_BITS 40
#define PATTERN_MAX_REGIONS (1ULL << (64 - PATTERN_OFFSET_BITS))
#define PATTERN_MAX_REGION_SIZE (1ULL << PATTERN_OFFSET_BITS)

struct verify_result {
	unsigned long long mismatches; /* words (or tail bytes) that differ */
	unsigned long long first_key;  /* lowest (region << 40 | byte offset) that differs; all ones if none */
};

struct region {
	int device;
	enum alloc_api api;
	uint64_t *ptr;        /* base of the pattern: 8-byte aligned (every API aligns to >= 256) */
	size_t size;          /* bytes of pattern */
	size_t mapped;        /* vmm: size reserved and mapped (rounded to the granularity) */
	CUmemGenericAllocationHandle handle; /* vmm only */
};

struct pattern_device {
	int device;
	int sm_count;
	cudaStream_t stream;         /* for cudaMallocAsync / cudaFreeAsync */
	struct verify_result *result; /* device memory, one per device */
};

static uint64_t region_key(uint64_t seed, uint64_t region)
{
	return mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) + region * 0x9e3779b97f4a7c15ULL);
}

__host__ __device__ static inline uint64_t pattern_word(uint64_t key, uint64_t word)
{
	return mix64(key ^ (word * 0xd6e8feb86659fd93ULL));
}

/* Expected byte at a byte offset: bytes of a word in little-endian order, also for the tail. */
static uint8_t pattern_byte(uint64_t key, uint64_t offset)
{
	return (uint8_t)(pattern_word(key, offset / 8) >> (8 * (offset % 8)));
}

/* zero: the region is one of --zero-percent's, all zero (as memory a framework reserves and leaves unused) */
__global__ void pattern_fill_kernel(uint64_t *p, size_t nwords, unsigned tail, uint64_t key, int zero)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
		p[i] = zero ? 0 : pattern_word(key, i);
	if (blockIdx.x == 0 && threadIdx.x < tail) {
		uint8_t *bytes = (uint8_t *)(p + nwords);
		bytes[threadIdx.x] = zero ? 0 : (uint8_t)(pattern_word(key, nwords) >> (8 * threadIdx.x));
	}
}

__global__ void pattern_verify_kernel(const uint64_t *p, size_t nwords, unsigned tail, uint64_t key, int zero,
				      unsigned long long region, struct verify_result *res)
{
	unsigned long long bad = 0, first = ~0ULL;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
		if (p[i] != (zero ? 0 : pattern_word(key, i))) {
			if (!bad)
				first = (unsigned long long)i * 8;
			bad++;
		}
	}
	if (blockIdx.x == 0 && threadIdx.x < tail) {
		const uint8_t *bytes = (const uint8_t *)(p + nwords);
		uint8_t want = zero ? 0 : (uint8_t)(pattern_word(key, nwords) >> (8 * threadIdx.x));
		if (bytes[threadIdx.x] != want) {
			unsigned long long off = (unsigned long long)nwords * 8 + threadIdx.x;
			bad++;
			if (off < first)
				first = off;
		}
	}
	/* Warp reduction: one atomic per warp that saw a mismatch, so a fully broken buffer stays fast. */
	for (int d = 16; d > 0; d >>= 1) {
		bad += __shfl_down_sync(0xffffffffu, bad, d);
		unsigned long long f = __shfl_down_sync(0xffffffffu, first, d);
		first = f < first ? f : first;
	}
	if ((threadIdx.x & 31) == 0 && bad) {
		atomicAdd(&res->mismatches, bad);
		atomicMin(&res->first_key, (region << PATTERN_OFFSET_BITS) | first);
	}
}

static const int PATTERN_BLOCK = 256;

static unsigned pattern_grid(const struct pattern_device *dev, size_t nwords)
{
	size_t want = (nwords + PATTERN_BLOCK - 1) / PATTERN_BLOCK;
	size_t cap = (size_t)dev->sm_count * 16;
	if (want > cap)
		want = cap;
	return want ? (unsigned)want : 1;
}

/* The whole app state: one list of regions over one or more devices. */
struct pattern_app {
	enum alloc_api api;
	uint64_t seed;
	unsigned zero_percent; /* --zero-percent: the first this many percent of the regions are all zero */
	std::vector<struct pattern_device> devices;
	std::vector<struct region> regions;
	unsigned long long total_bytes;
};

static bool region_zero(const struct pattern_app *app, size_t i)
{
	return app->zero_percent && (i * 100 + 50) / app->regions.size() < app->zero_percent;
}

static struct pattern_device *device_of(struct pattern_app *app, int device)
{
	for (auto &d : app->devices)
		if (d.device == device)
			return &d;
	return NULL;
}

static bool region_alloc(struct pattern_app *app, struct pattern_device *dev, size_t size)
{
	struct region r;
	memset(&r, 0, sizeof(r));
	r.device = dev->device;
	r.api = app->api;
	r.size = size;
	if (app->regions.size() >= PATTERN_MAX_REGIONS || size >= PATTERN_MAX_REGION_SIZE) {
		app_error("allocation %zu of %zu bytes is beyond what verify can report (max %llu allocations of < %llu bytes)",
			  app->regions.size(), size, PATTERN_MAX_REGIONS, PATTERN_MAX_REGION_SIZE);
		return false;
	}
	CUdeviceptr dptr = 0;
	void *p = NULL;
	switch (app->api) {
	case API_RUNTIME:
		if (!CK(cudaMalloc(&p, size)))
			return false;
		break;
	case API_DRIVER:
		if (!CKD(cuMemAlloc(&dptr, size)))
			return false;
		p = (void *)dptr;
		break;
	case API_PITCH: {
		/* Rows of at most 64 KiB; the pattern covers the first `size` bytes of the pitched block. */
		size_t width = size < 65536 ? size : 65536;
		size_t height = (size + width - 1) / width;
		size_t pitch = 0;
		if (!CKD(cuMemAllocPitch(&dptr, &pitch, width, height, 4)))
			return false;
		p = (void *)dptr;
		break;
	}
	case API_ASYNC:
		if (!CK(cudaMallocAsync(&p, size, dev->stream)) || !CK(cudaStreamSynchronize(dev->stream)))
			return false;
		break;
	case API_VMM: {
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = dev->device;
		size_t gran = 0;
		if (!CKD(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
			return false;
		r.mapped = (size + gran - 1) / gran * gran;
		if (!CKD(cuMemCreate(&r.handle, r.mapped, &prop, 0)))
			return false;
		if (!CKD(cuMemAddressReserve(&dptr, r.mapped, 0, 0, 0))) {
			cuMemRelease(r.handle);
			return false;
		}
		CUmemAccessDesc access;
		memset(&access, 0, sizeof(access));
		access.location = prop.location;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		if (!CKD(cuMemMap(dptr, r.mapped, 0, r.handle, 0)) || !CKD(cuMemSetAccess(dptr, r.mapped, &access, 1))) {
			cuMemUnmap(dptr, r.mapped);
			cuMemAddressFree(dptr, r.mapped);
			cuMemRelease(r.handle);
			return false;
		}
		p = (void *)dptr;
		break;
	}
	}
	if ((uintptr_t)p % 8) {
		app_error("allocation %zu at %p is not 8-byte aligned", app->regions.size(), p);
		return false;
	}
	r.ptr = (uint64_t *)p;
	app->regions.push_back(r);
	app->total_bytes += size;
	return true;
}

static bool region_free(struct pattern_app *app, struct region *r)
{
	bool ok = true;
	struct pattern_device *dev = device_of(app, r->device);
	switch (r->api) {
	case API_RUNTIME:
		ok = CK(cudaFree(r->ptr));
		break;
	case API_DRIVER:
	case API_PITCH:
		ok = CKD(cuMemFree((CUdeviceptr)r->ptr));
		break;
	case API_ASYNC:
		ok = CK(cudaFreeAsync(r->ptr, dev->stream)) && CK(cudaStreamSynchronize(dev->stream));
		break;
	case API_VMM:
		ok = CKD(cuMemUnmap((CUdeviceptr)r->ptr, r->mapped));
		ok = CKD(cuMemAddressFree((CUdeviceptr)r->ptr, r->mapped)) && ok;
		ok = CKD(cuMemRelease(r->handle)) && ok;
		break;
	}
	r->ptr = NULL;
	return ok;
}

static double seconds_since(std::chrono::steady_clock::time_point t0)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/* Fills every region with the pattern of app->seed; all devices work in parallel. */
static bool pattern_fill(struct pattern_app *app)
{
	auto t0 = std::chrono::steady_clock::now();
	bool ok = true;
	for (size_t i = 0; i < app->regions.size(); i++) {
		struct region *r = &app->regions[i];
		struct pattern_device *dev = device_of(app, r->device);
		if (!CK(cudaSetDevice(r->device)))
			return false;
		size_t nwords = r->size / 8;
		pattern_fill_kernel<<<pattern_grid(dev, nwords), PATTERN_BLOCK>>>(
			r->ptr, nwords, (unsigned)(r->size % 8), region_key(app->seed, i), region_zero(app, i));
		if (!CK_LAUNCH("pattern_fill_kernel"))
			return false;
	}
	for (auto &d : app->devices)
		ok = CK(cudaSetDevice(d.device)) && CK(cudaDeviceSynchronize()) && ok;
	if (ok)
		app_info("filled %llu bytes in %zu allocation(s) with seed %llu in %.3f s", app->total_bytes,
			 app->regions.size(), (unsigned long long)app->seed, seconds_since(t0));
	return ok;
}

/*
 * Verifies every region on the GPU. On a mismatch, *detail names the count and
 * the first bad byte (region, offset, expected and found value).
 */
static bool pattern_verify(struct pattern_app *app, std::string *detail)
{
	auto t0 = std::chrono::steady_clock::now();
	for (auto &d : app->devices) {
		if (!CK(cudaSetDevice(d.device)) || !CK(cudaMemset(&d.result->mismatches, 0, sizeof(d.result->mismatches))) ||
		    !CK(cudaMemset(&d.result->first_key, 0xff, sizeof(d.result->first_key)))) {
			*detail = "cuda error before verify: " + first_error();
			return false;
		}
	}
	for (size_t i = 0; i < app->regions.size(); i++) {
		struct region *r = &app->regions[i];
		struct pattern_device *dev = device_of(app, r->device);
		if (!CK(cudaSetDevice(r->device))) {
			*detail = "cuda error: " + first_error();
			return false;
		}
		size_t nwords = r->size / 8;
		pattern_verify_kernel<<<pattern_grid(dev, nwords), PATTERN_BLOCK>>>(
			r->ptr, nwords, (unsigned)(r->size % 8), region_key(app->seed, i), region_zero(app, i), i, dev->result);
		if (!CK_LAUNCH("pattern_verify_kernel")) {
			*detail = "cuda error: " + first_error();
			return false;
		}
	}
	unsigned long long total_bad = 0, first_key = ~0ULL;
	for (auto &d : app->devices) {
		struct verify_result res;
		if (!CK(cudaSetDevice(d.device)) || !CK(cudaDeviceSynchronize()) ||
		    !CK(cudaMemcpy(&res, d.result, sizeof(res), cudaMemcpyDeviceToHost))) {
			*detail = "cuda error during verify: " + first_error();
			return false;
		}
		total_bad += res.mismatches;
		if (res.first_key < first_key)
			first_key = res.first_key;
	}
	double secs = seconds_since(t0);
	app_info("verified %llu bytes in %.3f s (%.1f GB/s): %llu mismatch(es)", app->total_bytes, secs,
		 secs > 0 ? app->total_bytes / secs / 1e9 : 0.0, total_bad);
	if (total_bad == 0)
		return true;

	char buf[512];
	size_t ri = (size_t)(first_key >> PATTERN_OFFSET_BITS);
	unsigned long long off = first_key & (PATTERN_MAX_REGION_SIZE - 1);
	if (ri >= app->regions.size()) {
		snprintf(buf, sizeof(buf), "%llu mismatched word(s); first at impossible region %zu", total_bad, ri);
	} else {
		struct region *r = &app->regions[ri];
		uint8_t got = 0;
		CK(cudaSetDevice(r->device));
		CK(cudaMemcpy(&got, (uint8_t *)r->ptr + off, 1, cudaMemcpyDeviceToHost));
		snprintf(buf, sizeof(buf),
			 "%llu mismatched word(s); first: allocation %zu (%s, %zu bytes at %p, device %d) offset %llu expected 0x%02x found 0x%02x",
			 total_bad, ri, api_names[r->api], r->size, (void *)r->ptr, r->device, off,
			 region_zero(app, ri) ? 0 : pattern_byte(region_key(app->seed, ri), off), got);
	}
	*detail = buf;
	return false;
}

static const char *const pattern_usage =
	"[--size BYTES] [--alloc-size BYTES] [--count N --min BYTES --max BYTES]\n"
	"       [--api runtime|driver|pitch|async|vmm] [--device N|all] [--seed S] [--zero-percent P] [--stack BYTES]\n"
	"  --zero-percent P: the first P percent of the allocations hold zeros instead of the pattern\n"
	"  --stack BYTES: sets each device's per-thread stack limit (cudaLimitStackSize); command 'stack' reports it\n"
	"  commands capture-open / capture-close: a global-mode stream capture left open, then ended, run as a graph\n"
	"  --size/--alloc-size: hold BYTES (default 1G) in allocations of at most --alloc-size (default 1G)\n"
	"  --count N: instead, N allocations of seeded random sizes in [--min, --max] (the first is --min, the second --max)\n"
	"  --device all: the same allocations on every visible GPU\n"
	"  sizes take K, M, G, T suffixes (binary). Commands on stdin: verify, rewrite, info, ping, quit";

static int pattern_main(int argc, char **argv, bool all_devices)
{
	unsigned long long size = 1ULL << 30, alloc_size = 1ULL << 30, min_size = 1, max_size = 1ULL << 20;
	long count = 0, device = 0;
	enum alloc_api api = API_RUNTIME;
	uint64_t seed = 1;
	unsigned long long stack = 0; /* 0: the driver's default */
	/* PATTERN_ZERO_PERCENT: the same as --zero-percent, for benchmarks that can only set the environment */
	const char *zp = getenv("PATTERN_ZERO_PERCENT");
	long zero_percent = zp ? atol(zp) : 0;
	if (zero_percent < 0 || zero_percent > 100)
		die_usage(pattern_usage, "PATTERN_ZERO_PERCENT must be 0 to 100");

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--size"))
			size = opt_size(argc, argv, &i, pattern_usage);
		else if (!strcmp(a, "--alloc-size"))
			alloc_size = opt_size(argc, argv, &i, pattern_usage);
		else if (!strcmp(a, "--count"))
			count = opt_long(argc, argv, &i, pattern_usage, 1, (long)PATTERN_MAX_REGIONS - 1);
		else if (!strcmp(a, "--min"))
			min_size = opt_size(argc, argv, &i, pattern_usage);
		else if (!strcmp(a, "--max"))
			max_size = opt_size(argc, argv, &i, pattern_usage);
		else if (!strcmp(a, "--zero-percent"))
			zero_percent = opt_long(argc, argv, &i, pattern_usage, 0, 100);
		else if (!strcmp(a, "--stack"))
			stack = opt_size(argc, argv, &i, pattern_usage);
		else if (!strcmp(a, "--seed"))
			seed = (uint64_t)opt_long(argc, argv, &i, pattern_usage, 0, 0x7fffffffffffffffL);
		else if (!strcmp(a, "--device")) {
			if (i + 1 < argc && !strcmp(argv[i + 1], "all")) {
				all_devices = true;
				i++;
			} else {
				device = opt_long(argc, argv, &i, pattern_usage, 0, 1024);
			}
		} else if (!strcmp(a, "--api")) {
			const char *v = opt_value(argc, argv, &i, pattern_usage);
			bool found = false;
			for (int k = 0; k < 5; k++)
				if (!strcmp(v, api_names[k])) {
					api = (enum alloc_api)k;
					found = true;
				}
			if (!found)
				die_usage(pattern_usage, "unknown --api '%s'", v);
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("usage: %s %s\n", g_app_name, pattern_usage);
			return 0;
		} else {
			die_usage(pattern_usage, "unknown argument '%s'", a);
		}
	}
	if (size == 0 || alloc_size == 0)
		die_usage(pattern_usage, "--size and --alloc-size must be > 0");
	if (count && (min_size == 0 || min_size > max_size))
		die_usage(pattern_usage, "--count needs 1 <= --min <= --max");

	struct pattern_app app;
	app.api = api;
	app.seed = seed;
	app.zero_percent = (unsigned)zero_percent;
	app.total_bytes = 0;

	int ndev = 0;
	if (!CK(cudaGetDeviceCount(&ndev)) || ndev < 1) {
		app_error("no CUDA device visible");
		return 1;
	}
	if (!CKD(cuInit(0)))
		return 1;
	std::vector<int> devs;
	if (all_devices) {
		for (int d = 0; d < ndev; d++)
			devs.push_back(d);
	} else {
		if (device >= ndev) {
			app_error("--device %ld but only %d device(s) visible", device, ndev);
			return 1;
		}
		devs.push_back((int)device);
	}

	for (int d : devs) {
		struct pattern_device pd;
		memset(&pd, 0, sizeof(pd));
		pd.device = d;
		/* cudaFree(0) makes the primary context current, so the driver API calls below use it. */
		if (!CK(cudaSetDevice(d)) || !CK(cudaFree(0)) ||
		    !CK(cudaDeviceGetAttribute(&pd.sm_count, cudaDevAttrMultiProcessorCount, d)) ||
		    !CK(cudaStreamCreateWithFlags(&pd.stream, cudaStreamNonBlocking)) ||
		    !CK(cudaMalloc((void **)&pd.result, sizeof(struct verify_result))))
			return 1;
		if (stack && !CK(cudaDeviceSetLimit(cudaLimitStackSize, (size_t)stack)))
			return 1;
		app.devices.push_back(pd);
	}

	/* Sizes are the same on every device; region indexes run on across devices. */
	std::vector<size_t> sizes;
	if (count) {
		uint64_t state = seed ^ 0x2545f4914f6cdd1dULL;
		for (long k = 0; k < count; k++) {
			size_t s;
			if (k == 0)
				s = min_size;
			else if (k == 1)
				s = max_size;
			else {
				state += 0x9e3779b97f4a7c15ULL;
				s = min_size + mix64(state) % (max_size - min_size + 1);
			}
			sizes.push_back(s);
		}
	} else {
		for (unsigned long long left = size; left;) {
			size_t s = left < alloc_size ? left : alloc_size;
			sizes.push_back(s);
			left -= s;
		}
	}
	for (auto &pd : app.devices) {
		if (!CK(cudaSetDevice(pd.device)))
			return 1;
		for (size_t s : sizes) {
			if (!region_alloc(&app, &pd, s)) {
				app_error("could not allocate %zu bytes (allocation %zu, api %s, device %d)", s,
					  app.regions.size(), api_names[api], pd.device);
				return 1;
			}
		}
	}
	if (!pattern_fill(&app))
		return 1;
	std::string detail;
	if (!pattern_verify(&app, &detail)) {
		app_error("verify right after fill failed: %s", detail.c_str());
		return 1;
	}
	app_info("holding %llu bytes in %zu allocation(s) (api %s) on %zu device(s)", app.total_bytes, app.regions.size(),
		 api_names[api], app.devices.size());
	reply("READY %d", (int)getpid());

	char line[4096];
	while (read_command(line, sizeof(line))) {
		if (!strcmp(line, "verify")) {
			if (pattern_verify(&app, &detail)) {
				reply("VERIFY OK %llu", app.total_bytes);
			} else {
				app_error("verify failed: %s", detail.c_str());
				reply("VERIFY FAIL %s", detail.c_str());
			}
		} else if (!strcmp(line, "rewrite")) {
			app.seed++;
			if (pattern_fill(&app))
				reply("REWRITE OK seed=%llu", (unsigned long long)app.seed);
			else
				reply("REWRITE FAIL %s", first_error().c_str());
		} else if (!strcmp(line, "info")) {
			std::string ds;
			for (auto &d : app.devices)
				ds += (ds.empty() ? "" : ",") + std::to_string(d.device);
			reply("INFO pid=%d allocations=%zu bytes=%llu api=%s devices=%s seed=%llu errors=%llu", (int)getpid(),
			      app.regions.size(), app.total_bytes, api_names[api], ds.c_str(), (unsigned long long)app.seed,
			      g_errors.load());
		} else if (!strcmp(line, "capture-open")) {
			/* a global-mode capture left open, as a framework's graph capture is while it runs */
			struct pattern_device &d = app.devices[0];
			cudaError_t e = cudaSetDevice(d.device);
			if (e == cudaSuccess)
				e = cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeGlobal);
			if (e == cudaSuccess)
				e = cudaMemsetAsync(d.result, 0, sizeof(*d.result), d.stream);
			reply(e == cudaSuccess ? "CAPTURE OPEN" : "CAPTURE FAIL %s", cudaGetErrorString(e));
		} else if (!strcmp(line, "capture-close")) {
			/* ends it: a capture some other thread's call invalidated meanwhile fails here */
			struct pattern_device &d = app.devices[0];
			cudaGraph_t g = NULL;
			cudaGraphExec_t x = NULL;
			cudaError_t e = cudaStreamEndCapture(d.stream, &g);
			if (e == cudaSuccess)
				e = cudaGraphInstantiate(&x, g, 0);
			if (e == cudaSuccess)
				e = cudaGraphLaunch(x, d.stream);
			if (e == cudaSuccess)
				e = cudaStreamSynchronize(d.stream);
			if (x)
				cudaGraphExecDestroy(x);
			if (g)
				cudaGraphDestroy(g);
			reply(e == cudaSuccess ? "CAPTURE CLOSED" : "CAPTURE FAIL %s", cudaGetErrorString(e));
		} else if (!strcmp(line, "stack")) {
			/* each device's stack limit: a suspend may shrink it for the driver's checkpoint, the resume gives it back */
			std::string limits;
			for (auto &d : app.devices) {
				size_t v = 0;
				if (!CK(cudaSetDevice(d.device)) || !CK(cudaDeviceGetLimit(&v, cudaLimitStackSize)))
					v = 0;
				limits += (limits.empty() ? "" : ",") + std::to_string(v);
			}
			reply("STACK %s", limits.c_str());
		} else if (!strcmp(line, "ping")) {
			reply("PONG");
		} else if (!strcmp(line, "quit")) {
			break;
		} else if (line[0]) {
			reply("ERROR unknown command '%s'", line);
		}
	}
	for (auto &r : app.regions) {
		CK(cudaSetDevice(r.device));
		region_free(&app, &r);
	}
	for (auto &d : app.devices) {
		CK(cudaSetDevice(d.device));
		CK(cudaFree(d.result));
		CK(cudaStreamDestroy(d.stream));
	}
	int status = app_exit_status();
	reply("BYE %d", status);
	return status;
}

#endif
