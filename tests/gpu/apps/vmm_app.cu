/*
 * vmm_app.cu - an app that manages its GPU memory with the VMM API itself,
 * as PyTorch's expandable segments, vLLM and TensorRT-LLM do, for
 * tests/gpu/t95-app-vmm.sh (the CPU twin is tests/agent/app_vmm.c).
 *
 * On GPU --device (default 0), with G the allocation granularity:
 *   big  --size bytes (default 4G) in handles of --chunk (default 1G, rounded
 *        to G) mapped side by side in one reservation, access given by one
 *        cuMemSetAccess over all of them (PyTorch's pattern)
 *   h1   64 G mapped twice: read-write at r1, read-only at r1 + 128 G
 *   h2   96 G (exportable type, never exported) filled through one mapping,
 *        unmapped, and mapped again at another address of its reservation
 *   h3   64 G mapped, then released by the app (the mapping keeps it)
 *   h4   32 G exported as a POSIX file descriptor: never releasable
 * Every 8-byte word holds mix64(key ^ index * C) (fill and verify on the GPU).
 * cuMemRetainAllocationHandle must give back the app's handle values and
 * cuMemGetAllocationPropertiesFromHandle the properties it passed.
 *
 * Prints "READY <pid>", then answers one command per line:
 *   sizes    "SIZES releasable <bytes> exported <bytes>"
 *   verify   "VERIFY OK <ranges>" or "VERIFY FAIL <what>"
 *   cleanup  unmaps, releases and frees everything -> "CLEAN OK" / "CLEAN FAIL"
 *   quit     exits (0 only if no CUDA error was ever seen)
 */
#include "app_common.cuh"

#include <vector>

static const char *const usage = "[--size BYTES] [--chunk BYTES] [--device N] [--seed S]";

__host__ __device__ static inline uint64_t word(uint64_t key, size_t index)
{
	return mix64(key ^ ((uint64_t)index * 0x9e3779b97f4a7c15ULL));
}

/* first_word: index of p[0] within the handle (for a mapping at an offset) */
__global__ void fill_kernel(uint64_t *p, size_t nwords, uint64_t key, size_t first_word)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
		p[i] = word(key, first_word + i);
}

__global__ void verify_kernel(const uint64_t *p, size_t nwords, uint64_t key, size_t first_word,
			      unsigned long long *bad, unsigned long long *first)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
		if (p[i] != word(key, first_word + i)) {
			atomicAdd(bad, 1ULL);
			atomicMin(first, (unsigned long long)i * 8);
		}
}

struct range {
	const char *name;
	CUdeviceptr va;
	size_t size;
	uint64_t key;
	size_t first_word;
};

struct mapping {
	CUdeviceptr va;
	size_t size;
};

static struct {
	int device, sm_count;
	uint64_t seed;
	size_t gran, size, chunk;
	CUmemAllocationProp prop, prop_fd;
	std::vector<CUmemGenericAllocationHandle> big_handles;
	CUmemGenericAllocationHandle h1, h2, h3, h4;
	CUdeviceptr big, r1, r2, r3, r4;
	size_t big_reserved;
	std::vector<range> ranges;
	std::vector<mapping> maps;
	int fd;
	unsigned long long *result; /* device: mismatches, first offset */
} g;

static bool set_access(CUdeviceptr va, size_t size, CUmemAccess_flags flags)
{
	CUmemAccessDesc d;
	memset(&d, 0, sizeof(d));
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = g.device;
	d.flags = flags;
	return CKD(cuMemSetAccess(va, size, &d, 1));
}

static bool map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h)
{
	if (!CKD(cuMemMap(va, size, offset, h, 0)))
		return false;
	g.maps.push_back({va, size});
	return true;
}

static bool fill(CUdeviceptr va, size_t size, uint64_t key, size_t first_word)
{
	fill_kernel<<<g.sm_count * 4, 256>>>((uint64_t *)va, size / 8, key, first_word);
	return CK_LAUNCH("fill_kernel") && CK(cudaDeviceSynchronize());
}

/* 0 mismatches: true. Otherwise prints VERIFY FAIL and returns false. */
static bool check(const range &r)
{
	unsigned long long init[2] = {0, ~0ULL}, got[2];
	if (!CK(cudaMemcpy(g.result, init, sizeof(init), cudaMemcpyHostToDevice)))
		return false;
	verify_kernel<<<g.sm_count * 4, 256>>>((const uint64_t *)r.va, r.size / 8, r.key, r.first_word, g.result,
					       g.result + 1);
	if (!CK_LAUNCH("verify_kernel") || !CK(cudaMemcpy(got, g.result, sizeof(got), cudaMemcpyDeviceToHost)))
		return false;
	if (got[0]) {
		reply("VERIFY FAIL %s: %llu words differ, the first at byte %llu", r.name, got[0], got[1]);
		return false;
	}
	return true;
}

static bool setup(void)
{
	memset(&g.prop, 0, sizeof(g.prop));
	g.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	g.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	g.prop.location.id = g.device;
	g.prop_fd = g.prop;
	g.prop_fd.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (!CKD(cuMemGetAllocationGranularity(&g.gran, &g.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
		return false;
	size_t G = g.gran;
	g.chunk = (g.chunk + G - 1) / G * G;
	size_t nchunks = (g.size + g.chunk - 1) / g.chunk;
	g.big_reserved = nchunks * g.chunk;

	/* big: many handles side by side, one access call */
	if (!CKD(cuMemAddressReserve(&g.big, g.big_reserved, 0, 0, 0)))
		return false;
	for (size_t i = 0; i < nchunks; i++) {
		CUmemGenericAllocationHandle h;
		if (!CKD(cuMemCreate(&h, g.chunk, &g.prop, 0)))
			return false;
		g.big_handles.push_back(h);
		if (!map(g.big + i * g.chunk, g.chunk, 0, h))
			return false;
	}
	if (!set_access(g.big, g.big_reserved, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) || !fill(g.big, g.big_reserved, g.seed, 0))
		return false;
	g.ranges.push_back({"big", g.big, g.big_reserved, g.seed, 0});

	/* h1: two mappings */
	if (!CKD(cuMemAddressReserve(&g.r1, 256 * G, 0, 0, 0)) || !CKD(cuMemCreate(&g.h1, 64 * G, &g.prop, 0)) ||
	    !map(g.r1, 64 * G, 0, g.h1) || !map(g.r1 + 128 * G, 64 * G, 0, g.h1) ||
	    !set_access(g.r1, 64 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
	    !set_access(g.r1 + 128 * G, 64 * G, CU_MEM_ACCESS_FLAGS_PROT_READ) || !fill(g.r1, 64 * G, g.seed + 1, 0))
		return false;
	g.ranges.push_back({"h1 at r1", g.r1, 64 * G, g.seed + 1, 0});
	g.ranges.push_back({"h1 at r1+128G (read-only)", g.r1 + 128 * G, 64 * G, g.seed + 1, 0});

	/*
	 * h2: an exportable type (never exported), filled through one mapping, then
	 * unmapped and mapped again elsewhere in its reservation. (A mapping at a
	 * non-zero offset into a handle is what the driver refuses: "currently
	 * must be zero", CUDA_ERROR_NOT_SUPPORTED on driver 580.)
	 */
	if (!CKD(cuMemAddressReserve(&g.r2, 192 * G, 0, 0, 0)) || !CKD(cuMemCreate(&g.h2, 96 * G, &g.prop_fd, 0)) ||
	    !CKD(cuMemMap(g.r2, 96 * G, 0, g.h2, 0)) || !set_access(g.r2, 96 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
	    !fill(g.r2, 96 * G, g.seed + 2, 0) || !CKD(cuMemUnmap(g.r2, 96 * G)) || !map(g.r2 + 96 * G, 96 * G, 0, g.h2) ||
	    !set_access(g.r2 + 96 * G, 96 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
		return false;
	g.ranges.push_back({"h2 mapped again at r2+96G", g.r2 + 96 * G, 96 * G, g.seed + 2, 0});

	/* h3: released by the app while mapped */
	if (!CKD(cuMemAddressReserve(&g.r3, 64 * G, 0, 0, 0)) || !CKD(cuMemCreate(&g.h3, 64 * G, &g.prop, 0)) ||
	    !map(g.r3, 64 * G, 0, g.h3) || !set_access(g.r3, 64 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
	    !fill(g.r3, 64 * G, g.seed + 3, 0) || !CKD(cuMemRelease(g.h3)))
		return false;
	g.ranges.push_back({"h3 (released) at r3", g.r3, 64 * G, g.seed + 3, 0});

	/* h4: exported */
	if (!CKD(cuMemAddressReserve(&g.r4, 32 * G, 0, 0, 0)) || !CKD(cuMemCreate(&g.h4, 32 * G, &g.prop_fd, 0)) ||
	    !map(g.r4, 32 * G, 0, g.h4) || !set_access(g.r4, 32 * G, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
	    !fill(g.r4, 32 * G, g.seed + 4, 0) ||
	    !CKD(cuMemExportToShareableHandle(&g.fd, g.h4, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)))
		return false;
	g.ranges.push_back({"h4 (exported) at r4", g.r4, 32 * G, g.seed + 4, 0});
	return true;
}

static bool check_handles(void)
{
	CUmemGenericAllocationHandle h = 0;
	if (!CKD(cuMemRetainAllocationHandle(&h, (void *)(g.r1 + 128 * g.gran + 4096))))
		return false;
	if (h != g.h1) {
		reply("VERIFY FAIL retain of h1's second mapping gave %#llx, not %#llx", h, g.h1);
		return false;
	}
	if (!CKD(cuMemRelease(h)) || !CKD(cuMemRetainAllocationHandle(&h, (void *)(g.r3 + 8))))
		return false;
	if (h != g.h3) {
		reply("VERIFY FAIL retain of the released h3 gave %#llx, not %#llx", h, g.h3);
		return false;
	}
	if (!CKD(cuMemRelease(h)))
		return false;
	CUmemAllocationProp got;
	memset(&got, 0, sizeof(got));
	if (!CKD(cuMemGetAllocationPropertiesFromHandle(&got, g.h2)))
		return false;
	if (got.type != g.prop_fd.type || got.location.type != g.prop_fd.location.type ||
	    got.location.id != g.prop_fd.location.id || got.requestedHandleTypes != g.prop_fd.requestedHandleTypes) {
		reply("VERIFY FAIL properties of h2: type %d handle types %d location %d/%d", (int)got.type,
		      (int)got.requestedHandleTypes, (int)got.location.type, got.location.id);
		return false;
	}
	return true;
}

static void verify(void)
{
	for (const range &r : g.ranges)
		if (!check(r))
			return;
	if (!check_handles()) {
		if (g_errors.load())
			reply("VERIFY FAIL handle calls: %s", first_error().c_str());
		return;
	}
	reply("VERIFY OK %zu", g.ranges.size());
}

static void cleanup(void)
{
	bool ok = true;
	for (const mapping &m : g.maps)
		ok = CKD(cuMemUnmap(m.va, m.size)) && ok;
	g.maps.clear();
	for (CUmemGenericAllocationHandle h : g.big_handles)
		ok = CKD(cuMemRelease(h)) && ok;
	g.big_handles.clear();
	ok = CKD(cuMemRelease(g.h1)) && ok;
	ok = CKD(cuMemRelease(g.h2)) && ok;
	ok = CKD(cuMemRelease(g.h4)) && ok;
	size_t G = g.gran;
	ok = CKD(cuMemAddressFree(g.big, g.big_reserved)) && ok;
	ok = CKD(cuMemAddressFree(g.r1, 256 * G)) && ok;
	ok = CKD(cuMemAddressFree(g.r2, 192 * G)) && ok;
	ok = CKD(cuMemAddressFree(g.r3, 64 * G)) && ok;
	ok = CKD(cuMemAddressFree(g.r4, 32 * G)) && ok;
	close(g.fd);
	g.ranges.clear();
	if (ok)
		reply("CLEAN OK");
	else
		reply("CLEAN FAIL %s", first_error().c_str());
}

int main(int argc, char **argv)
{
	g_app_name = "vmm_app";
	g.size = 4ULL << 30;
	g.chunk = 1ULL << 30;
	g.seed = 95;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size"))
			g.size = opt_size(argc, argv, &i, usage);
		else if (!strcmp(argv[i], "--chunk"))
			g.chunk = opt_size(argc, argv, &i, usage);
		else if (!strcmp(argv[i], "--device"))
			g.device = (int)opt_long(argc, argv, &i, usage, 0, 63);
		else if (!strcmp(argv[i], "--seed"))
			g.seed = (uint64_t)opt_long(argc, argv, &i, usage, 0, 1L << 40);
		else
			die_usage(usage, "unknown option '%s'", argv[i]);
	}
	if (!g.size || !g.chunk)
		die_usage(usage, "--size and --chunk must not be 0");
	if (!CK(cudaSetDevice(g.device)) || !CK(cudaFree(0)) ||
	    !CK(cudaDeviceGetAttribute(&g.sm_count, cudaDevAttrMultiProcessorCount, g.device)) ||
	    !CK(cudaMalloc(&g.result, 2 * sizeof(unsigned long long))))
		return 1;
	if (!setup()) {
		app_info("setup failed: %s", first_error().c_str());
		return 1;
	}
	size_t G = g.gran;
	app_info("%zu bytes in %zu handles of %zu, granularity %zu", g.big_reserved, g.big_handles.size(), g.chunk, G);
	reply("READY %d", (int)getpid());

	char line[256];
	while (read_command(line, sizeof(line))) {
		if (!strcmp(line, "sizes"))
			reply("SIZES releasable %zu exported %zu", g.big_reserved + (64 + 96 + 64) * G, 32 * G);
		else if (!strcmp(line, "verify"))
			verify();
		else if (!strcmp(line, "cleanup"))
			cleanup();
		else if (!strcmp(line, "quit"))
			break;
		else
			reply("UNKNOWN %s", line);
	}
	return app_exit_status();
}
