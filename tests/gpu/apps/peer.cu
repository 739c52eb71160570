/*
 * peer.cu - peer access between GPU 0 and GPU 1, for
 * tests/gpu/t63-peer-access.sh (alone, under the agent, across suspend and
 * resume). Needs 2 GPUs that can access each other.
 *
 * At start: on GPU 1 a large buffer (--size, default 256M) and small ones
 * (1000, 4096 and 70000 bytes, 1 MiB: sub-allocated by the agent) filled with
 * patterns, a 64 MiB target for peer writes, and on GPU 0 a scratch buffer;
 * then peer access is enabled both ways (cudaDeviceEnablePeerAccess). Then
 * "READY <pid>" and commands:
 *   canpeer     "CANPEER 1" when each GPU can access the other, else "CANPEER 0"
 *               (the app then enabled nothing; the other commands fail)
 *   alloc-new   another set like the first on GPU 1, after the enable -> "ALLOC OK <n>"
 *   peer-read   for every buffer on GPU 1, a kernel on GPU 0 checks it in
 *               place (reading GPU 1's memory) and another copies it into
 *               GPU 0's scratch, checked there -> "PEERREAD OK <n>"
 *   peer-write  a kernel on GPU 0 writes a new pattern into the target on
 *               GPU 1, checked by a kernel on GPU 1 -> "PEERWRITE OK"
 *   peer-copy   cudaMemcpyPeer of every buffer of GPU 1 into GPU 0's
 *               scratch, checked there -> "PEERCOPY OK <n>"
 *   verify      every buffer of GPU 1 (target included) checked on GPU 1 -> "VERIFY OK <n>"
 *   peer-off    cudaDeviceDisablePeerAccess both ways -> "PEEROFF OK"
 *   peer-on     cudaDeviceEnablePeerAccess both ways again -> "PEERON OK"
 *               (t52 asks whether the driver path restores a process whose
 *               peer access is off at the checkpoint)
 *   quit
 * Failures answer "<WORD> FAIL <why>". Exit 0 only if no CUDA call failed.
 */
#include "app_common.cuh"

#include <vector>

#define MiB (1ULL << 20)
#define TARGET_BYTES (64 * MiB)

static const char *const usage = "[--size SIZE] [--seed N]";

struct buffer {
	uint64_t *p; /* on GPU 1 */
	size_t words;
	uint64_t seed;
};
static std::vector<buffer> g_bufs;
static buffer g_target;
static uint64_t g_next_seed;
static uint64_t *g_scratch;                /* on GPU 0, as large as the largest buffer */
static unsigned long long *g_bad[2];       /* a mismatch counter on each GPU */
static size_t g_size;
static bool g_can_peer; /* each GPU can access the other */

__global__ void k_fill(uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = mix64(seed * 1000003 + i);
}

__global__ void k_copy(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

__global__ void k_check(const uint64_t *p, size_t n, uint64_t seed, unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		if (p[i] != mix64(seed * 1000003 + i))
			atomicAdd(bad, 1ULL);
}

/* Runs k_check of p on GPU dev: the number of words that differ, or -1 after a CUDA error. */
static long long check_on(int dev, const uint64_t *p, size_t words, uint64_t seed)
{
	unsigned long long bad = 0;
	if (!CK(cudaSetDevice(dev)) || !CK(cudaMemset(g_bad[dev], 0, sizeof(bad))))
		return -1;
	k_check<<<1024, 256>>>(p, words, seed, g_bad[dev]);
	if (!CK_LAUNCH("k_check") || !CK(cudaDeviceSynchronize()) ||
	    !CK(cudaMemcpy(&bad, g_bad[dev], sizeof(bad), cudaMemcpyDeviceToHost)))
		return -1;
	return (long long)bad;
}

static bool alloc_on_1(size_t bytes, buffer *b)
{
	*b = buffer{ nullptr, bytes / 8, g_next_seed++ };
	if (!CK(cudaSetDevice(1)) || !CK(cudaMalloc(&b->p, bytes)))
		return false;
	k_fill<<<1024, 256>>>(b->p, b->words, b->seed);
	return CK_LAUNCH("k_fill") && CK(cudaDeviceSynchronize());
}

static bool alloc_set(void)
{
	static const size_t small[] = { 1000, 4096, 70000, 1 * MiB };
	buffer b;
	if (!alloc_on_1(g_size, &b))
		return false;
	g_bufs.push_back(b);
	for (size_t s : small) {
		if (!alloc_on_1(s, &b))
			return false;
		g_bufs.push_back(b);
	}
	return true;
}

static void peer_read(void)
{
	for (size_t i = 0; i < g_bufs.size(); i++) {
		const buffer &b = g_bufs[i];
		long long bad = check_on(0, b.p, b.words, b.seed);
		if (bad) {
			reply("PEERREAD FAIL buffer %zu (%zu bytes on GPU 1) read in place by GPU 0: %lld (-1: error %s)", i,
			      b.words * 8, bad, first_error().c_str());
			return;
		}
		if (!CK(cudaSetDevice(0)) || !CK(cudaMemset(g_scratch, 0, b.words * 8))) {
			reply("PEERREAD FAIL %s", first_error().c_str());
			return;
		}
		k_copy<<<1024, 256>>>(g_scratch, b.p, b.words);
		if (!CK_LAUNCH("k_copy") || !CK(cudaDeviceSynchronize()) || (bad = check_on(0, g_scratch, b.words, b.seed))) {
			reply("PEERREAD FAIL buffer %zu copied to GPU 0 by a kernel there: %lld words differ (-1: error %s)", i,
			      bad, first_error().c_str());
			return;
		}
	}
	reply("PEERREAD OK %zu", g_bufs.size());
}

static void peer_write(void)
{
	g_target.seed = g_next_seed++;
	if (!CK(cudaSetDevice(0))) {
		reply("PEERWRITE FAIL %s", first_error().c_str());
		return;
	}
	k_fill<<<1024, 256>>>(g_target.p, g_target.words, g_target.seed);
	long long bad = -1;
	if (!CK_LAUNCH("k_fill") || !CK(cudaDeviceSynchronize()) ||
	    (bad = check_on(1, g_target.p, g_target.words, g_target.seed))) {
		reply("PEERWRITE FAIL GPU 0 wrote GPU 1's target: %lld words differ (-1: error %s)", bad,
		      first_error().c_str());
		return;
	}
	reply("PEERWRITE OK");
}

static void peer_copy(void)
{
	for (size_t i = 0; i < g_bufs.size(); i++) {
		const buffer &b = g_bufs[i];
		long long bad = -1;
		if (!CK(cudaSetDevice(0)) || !CK(cudaMemset(g_scratch, 0, b.words * 8)) ||
		    !CK(cudaMemcpyPeer(g_scratch, 0, b.p, 1, b.words * 8)) || (bad = check_on(0, g_scratch, b.words, b.seed))) {
			reply("PEERCOPY FAIL buffer %zu: %lld words differ (-1: error %s)", i, bad, first_error().c_str());
			return;
		}
	}
	reply("PEERCOPY OK %zu", g_bufs.size());
}

/* Peer access of both GPUs on (enable) or off: the driver-path probe of t52. */
static bool set_peer(bool enable)
{
	for (int dev = 0; dev < 2; dev++) {
		if (!CK(cudaSetDevice(dev)))
			return false;
		if (enable ? !CK(cudaDeviceEnablePeerAccess(1 - dev, 0)) : !CK(cudaDeviceDisablePeerAccess(1 - dev)))
			return false;
	}
	return true;
}

static void peer_off(void)
{
	set_peer(false) ? reply("PEEROFF OK") : reply("PEEROFF FAIL %s", first_error().c_str());
}

static void peer_on(void)
{
	set_peer(true) ? reply("PEERON OK") : reply("PEERON FAIL %s", first_error().c_str());
}

static void verify(void)
{
	for (size_t i = 0; i <= g_bufs.size(); i++) {
		const buffer &b = i < g_bufs.size() ? g_bufs[i] : g_target;
		long long bad = check_on(1, b.p, b.words, b.seed);
		if (bad) {
			reply("VERIFY FAIL buffer %zu: %lld words differ (-1: error %s)", i, bad, first_error().c_str());
			return;
		}
	}
	reply("VERIFY OK %zu", g_bufs.size() + 1);
}

int main(int argc, char **argv)
{
	g_app_name = "peer";
	g_size = 256 * MiB;
	g_next_seed = 63;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size"))
			g_size = opt_size(argc, argv, &i, usage);
		else if (!strcmp(argv[i], "--seed"))
			g_next_seed = (uint64_t)opt_long(argc, argv, &i, usage, 0, 1L << 40);
		else
			die_usage(usage, "unknown argument '%s'", argv[i]);
	}
	if (g_size < MiB || g_size % 8)
		die_usage(usage, "--size must be at least 1M and a multiple of 8");
	int n = 0, can01 = 0, can10 = 0;
	if (!CK(cudaGetDeviceCount(&n)) || n < 2) {
		app_info("needs 2 GPUs, has %d", n);
		return 2;
	}
	if (!CK(cudaDeviceCanAccessPeer(&can01, 0, 1)) || !CK(cudaDeviceCanAccessPeer(&can10, 1, 0)))
		return 1;
	bool can = g_can_peer = can01 && can10;
	size_t scratch = g_size > MiB ? g_size : MiB;
	if (!CK(cudaSetDevice(0)) || !CK(cudaMalloc(&g_scratch, scratch)) || !CK(cudaMalloc(&g_bad[0], 8)) ||
	    !CK(cudaSetDevice(1)) || !CK(cudaMalloc(&g_bad[1], 8)) || !alloc_set() ||
	    !alloc_on_1(TARGET_BYTES, &g_target))
		return 1;
	if (can && (!CK(cudaSetDevice(0)) || !CK(cudaDeviceEnablePeerAccess(1, 0)) || !CK(cudaSetDevice(1)) ||
		    !CK(cudaDeviceEnablePeerAccess(0, 0))))
		return 1;
	reply("READY %d", (int)getpid());
	static const app_command commands[] = {
		{ "canpeer", [] { reply("CANPEER %d", g_can_peer ? 1 : 0); } },
		{ "alloc-new",
		  [] { alloc_set() ? reply("ALLOC OK %zu", g_bufs.size()) : reply("ALLOC FAIL %s", first_error().c_str()); } },
		{ "peer-read", peer_read },
		{ "peer-write", peer_write },
		{ "peer-copy", peer_copy },
		{ "verify", verify },
		{ "peer-off", peer_off },
		{ "peer-on", peer_on },
	};
	serve_commands(commands);
	return app_exit_status();
}
