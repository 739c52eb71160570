/*
 * pools.cu - memory pools, managed memory and graph capture under the agent,
 * for tests/gpu/t98-agent-pools.sh. At start it allocates and fills:
 *   A  64 MiB  cudaMalloc                      (the agent's)
 *   B  16 MiB  cudaMallocAsync, default pool   (the agent's)
 *   H  16 MiB  from a pool located in host memory (the driver's; "host=0" where
 *              the driver has no host pools)
 *   I  16 MiB  cudaMallocAsync after cudaDeviceSetMemPool to a pool with a POSIX
 *              file descriptor handle type (the driver's: shared with others)
 *   M  16 MiB  cudaMallocManaged                (the driver's)
 *   C  64 MiB  cudaMalloc, for capture-free
 * then prints "READY <pid>". Commands (one line each):
 *   host          "HOST 1" if H exists (the driver has pools in host memory), else "HOST 0"
 *   where         H and I come from their pools and A, B from none (the agent's
 *                 own memory) -> "WHERE OK" / "WHERE FAIL <what>"
 *   capture-free  frees C with cudaFreeAsync inside a stream capture, launches
 *                 the graph, then allocates once (the agent frees C then) ->
 *                 "CAPFREE OK"
 *   verify        every buffer holds its pattern -> "VERIFY OK <n>"
 *   quit
 */
#include "app_common.cuh"

#include <vector>

#define MiB (1ULL << 20)

struct buffer {
	const char *name;
	void *p;
	size_t size;
	uint64_t seed;
};
static std::vector<buffer> g_bufs;
static cudaMemPool_t g_host_pool, g_ipc_pool;
static void *g_capture_free;
static int g_host; /* 1: the driver has memory pools in host memory (H exists) */
static cudaStream_t g_stream;

static bool fill(const char *name, void *p, size_t size, uint64_t seed)
{
	std::vector<uint64_t> h(size / 8);
	for (size_t i = 0; i < h.size(); i++)
		h[i] = mix64(seed * 1000003 + i);
	if (!CK(cudaMemcpy(p, h.data(), size, cudaMemcpyDefault)))
		return false;
	g_bufs.push_back({ name, p, size, seed });
	return true;
}

static void verify(void)
{
	for (const buffer &b : g_bufs) {
		std::vector<uint64_t> h(b.size / 8);
		if (!CK(cudaMemcpy(h.data(), b.p, b.size, cudaMemcpyDefault))) {
			reply("VERIFY FAIL %s: copy failed", b.name);
			return;
		}
		for (size_t i = 0; i < h.size(); i++)
			if (h[i] != mix64(b.seed * 1000003 + i)) {
				reply("VERIFY FAIL %s word %zu", b.name, i);
				return;
			}
	}
	reply("VERIFY OK %zu", g_bufs.size());
}

/* The pool p came from; NULL for memory of no pool (the driver may answer an error for VMM memory: the same). */
static CUmemoryPool pool_of(void *p)
{
	CUmemoryPool pool = nullptr;
	if (cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
		return nullptr;
	return pool;
}

static void where(void)
{
	for (const buffer &b : g_bufs) {
		CUmemoryPool want = !strcmp(b.name, "H") ? (CUmemoryPool)g_host_pool
				    : !strcmp(b.name, "I") ? (CUmemoryPool)g_ipc_pool
							   : (CUmemoryPool) nullptr;
		if (!strcmp(b.name, "M"))
			continue;
		if (pool_of(b.p) != want) {
			reply("WHERE FAIL %s comes from pool %p, wanted %p", b.name, (void *)pool_of(b.p), (void *)want);
			return;
		}
	}
	reply("WHERE OK");
}

static void capture_free(void)
{
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	void *x = nullptr;
	bool ok = CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal)) &&
		  CK(cudaFreeAsync(g_capture_free, g_stream)) && CK(cudaStreamEndCapture(g_stream, &graph)) &&
		  CK(cudaGraphInstantiate(&exec, graph, 0)) && CK(cudaGraphLaunch(exec, g_stream)) &&
		  CK(cudaStreamSynchronize(g_stream)) && CK(cudaMalloc(&x, 256)) && CK(cudaFree(x));
	if (ok) {
		CK(cudaGraphExecDestroy(exec));
		CK(cudaGraphDestroy(graph));
	}
	if (ok)
		reply("CAPFREE OK");
	else
		reply("CAPFREE FAIL %s", first_error().c_str());
}

/* POOLS_SKIP (comma list of ipc, host, managed): kinds of memory this instance does not make. */
static bool skipped(const char *kind)
{
	const char *v = getenv("POOLS_SKIP");
	return v && strstr(v, kind);
}

static bool setup(int *host)
{
	void *a, *b, *h = nullptr, *i, *m;
	if (!CK(cudaMalloc(&a, 64 * MiB)) || !fill("A", a, 64 * MiB, 1) || !CK(cudaMallocAsync(&b, 16 * MiB, 0)) ||
	    !CK(cudaStreamSynchronize(0)) || !fill("B", b, 16 * MiB, 2) || !CK(cudaMalloc(&g_capture_free, 64 * MiB)) ||
	    !CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)))
		return false;

	cudaMemPoolProps props = {};
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeHost;
	props.location.id = 0;
	*host = !skipped("host") && cudaMemPoolCreate(&g_host_pool, &props) == cudaSuccess;
	if (!*host) {
		cudaGetLastError();
		app_info("no memory pools in host memory on this driver: that case is not tested");
	} else {
		cudaMemAccessDesc acc = {};
		acc.location.type = cudaMemLocationTypeDevice;
		acc.location.id = 0;
		acc.flags = cudaMemAccessFlagsProtReadWrite;
		if (!CK(cudaMemPoolSetAccess(g_host_pool, &acc, 1)) || !CK(cudaMallocFromPoolAsync(&h, 16 * MiB, g_host_pool, 0)) ||
		    !CK(cudaStreamSynchronize(0)) || !fill("H", h, 16 * MiB, 3))
			return false;
	}

	cudaMemPool_t dflt;
	if (skipped("ipc"))
		return skipped("managed") || (CK(cudaMallocManaged(&m, 16 * MiB)) && fill("M", m, 16 * MiB, 5));
	props = {};
	props.allocType = cudaMemAllocationTypePinned;
	props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	if (!CK(cudaMemPoolCreate(&g_ipc_pool, &props)) || !CK(cudaDeviceGetDefaultMemPool(&dflt, 0)) ||
	    !CK(cudaDeviceSetMemPool(0, g_ipc_pool)) || !CK(cudaMallocAsync(&i, 16 * MiB, 0)) ||
	    !CK(cudaDeviceSetMemPool(0, dflt)) || !CK(cudaStreamSynchronize(0)) || !fill("I", i, 16 * MiB, 4))
		return false;
	return skipped("managed") || (CK(cudaMallocManaged(&m, 16 * MiB)) && fill("M", m, 16 * MiB, 5));
}

int main(void)
{
	g_app_name = "pools";
	if (!CK(cudaSetDevice(0)) || !CK(cudaFree(0)) || !setup(&g_host)) {
		app_info("setup failed: %s", first_error().c_str());
		return 1;
	}
	reply("READY %d", (int)getpid());
	static const app_command commands[] = {
		{ "host", [] { reply("HOST %d", g_host ? 1 : 0); } },
		{ "where", where },
		{ "capture-free", capture_free },
		{ "verify", verify },
	};
	serve_commands(commands);
	return app_exit_status();
}
