/*
 * share.cu - two processes that share GPU memory as NCCL does with cuMem,
 * for tests/gpu/t66-share-fd.sh (the CPU twin is tests/agent/share_app.c).
 *
 * The parent (rank 0) starts rank 1 by fork+exec of itself, before any CUDA
 * call, with a socketpair between them. On GPU --device (default 0) each
 * rank then makes a buffer of --size bytes (default 1G, rounded to the
 * granularity) with cuMemCreate (POSIX file descriptor handle type), maps
 * it read-write and fills it; exports it with cuMemExportToShareableHandle,
 * sends the descriptor to the other rank (SCM_RIGHTS) and closes its own;
 * imports the other's with cuMemImportFromShareableHandle, maps it at an
 * address of its own with read-write access, and closes the descriptor it
 * received. Every 8-byte word of a buffer holds mix64(key ^ index * C);
 * buffer r's key starts at seed + r and changes with each ring.
 *
 * The parent prints "READY <pid> <rank 1 pid>", then answers on stdout:
 *   verify  both ranks check both buffers (own and imported) on the GPU
 *           -> "VERIFY OK 4" / "VERIFY FAIL <what>"
 *   ring    each rank fills the other's buffer through its import with a new
 *           key, then both verify -> "RING OK" / "RING FAIL <what>"
 *   quit    both exit (0 only if no CUDA error was ever seen in either),
 *           "BYE <status>"
 * Rank 1 talks only to the parent (lines over the socket), never on stdout.
 */
#include "../../common/fd_passing.h"
#include "app_common.cuh"

#include <sys/socket.h>
#include <sys/wait.h>

static const char *const usage = "[--size BYTES] [--device N] [--seed S]";

__host__ __device__ static inline uint64_t word(uint64_t key, size_t index)
{
	return mix64(key ^ ((uint64_t)index * 0x9e3779b97f4a7c15ULL));
}

__global__ void fill_kernel(uint64_t *p, size_t nwords, uint64_t key)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
		p[i] = word(key, i);
}

__global__ void verify_kernel(const uint64_t *p, size_t nwords, uint64_t key, unsigned long long *bad,
			      unsigned long long *first)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
		if (p[i] != word(key, i)) {
			atomicAdd(bad, 1ULL);
			atomicMin(first, (unsigned long long)i * 8);
		}
}

static struct {
	int rank, device, sm_count, sock;
	uint64_t seed;
	size_t size;
	CUdeviceptr own, peer;
	CUmemGenericAllocationHandle own_h, peer_h;
	unsigned long long *result;
} g;

static bool fill(CUdeviceptr va, uint64_t key)
{
	fill_kernel<<<g.sm_count * 4, 256>>>((uint64_t *)va, g.size / 8, key);
	return CK_LAUNCH("fill_kernel") && CK(cudaDeviceSynchronize());
}

/* "" if va holds key's pattern, else what differs. */
static std::string check(CUdeviceptr va, uint64_t key, const char *what)
{
	unsigned long long init[2] = {0, ~0ULL}, got[2];
	char buf[256];
	if (!CK(cudaMemcpy(g.result, init, sizeof(init), cudaMemcpyHostToDevice)))
		return "a CUDA error";
	verify_kernel<<<g.sm_count * 4, 256>>>((const uint64_t *)va, g.size / 8, key, g.result, g.result + 1);
	if (!CK_LAUNCH("verify_kernel") || !CK(cudaMemcpy(got, g.result, sizeof(got), cudaMemcpyDeviceToHost)))
		return "a CUDA error: " + first_error();
	if (!got[0])
		return "";
	snprintf(buf, sizeof(buf), "rank %d %s: %llu words differ, the first at byte %llu", g.rank, what, got[0], got[1]);
	return buf;
}

static bool send_fd(int fd)
{
	return test_send_fd(g.sock, fd) == 0;
}

static int recv_fd(void)
{
	return test_recv_fd(g.sock);
}

static bool send_line(const std::string &s)
{
	std::string l = s + "\n";
	return write(g.sock, l.data(), l.size()) == (ssize_t)l.size();
}

static bool read_line(std::string &out)
{
	out.clear();
	char ch;
	while (read(g.sock, &ch, 1) == 1) {
		if (ch == '\n')
			return true;
		out += ch;
	}
	return false;
}

static bool set_access(CUdeviceptr va)
{
	CUmemAccessDesc d;
	memset(&d, 0, sizeof(d));
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = g.device;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return CKD(cuMemSetAccess(va, g.size, &d, 1));
}

static bool setup(void)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = g.device;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	size_t gran = 0;
	if (!CKD(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
		return false;
	g.size = (g.size + gran - 1) / gran * gran;
	int fd = -1;
	if (!CKD(cuMemAddressReserve(&g.own, g.size, 0, 0, 0)) || !CKD(cuMemCreate(&g.own_h, g.size, &prop, 0)) ||
	    !CKD(cuMemMap(g.own, g.size, 0, g.own_h, 0)) || !set_access(g.own) || !fill(g.own, g.seed + g.rank) ||
	    !CKD(cuMemExportToShareableHandle(&fd, g.own_h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)))
		return false;
	if (!send_fd(fd)) {
		app_error("cannot send the descriptor to the other rank");
		return false;
	}
	close(fd); /* as NCCL does: the importer holds the memory now */
	int got = recv_fd();
	if (got < 0) {
		app_error("no descriptor came from the other rank");
		return false;
	}
	bool ok = CKD(cuMemImportFromShareableHandle(&g.peer_h, (void *)(intptr_t)got,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) &&
		  CKD(cuMemAddressReserve(&g.peer, g.size, 0, 0, 0)) && CKD(cuMemMap(g.peer, g.size, 0, g.peer_h, 0)) &&
		  set_access(g.peer);
	close(got);
	return ok;
}

/* Rank 1: "verify KEY0 KEY1", "write KEY" (into rank 0's buffer), "quit"; answers "ok" or what failed. */
static int child_main(void)
{
	std::string line;
	while (read_line(line)) {
		unsigned long long k0, k1;
		std::string answer = "ok";
		if (sscanf(line.c_str(), "verify %llu %llu", &k0, &k1) == 2) {
			std::string why = check(g.own, k1, "own buffer");
			if (why.empty())
				why = check(g.peer, k0, "imported buffer");
			if (!why.empty())
				answer = why;
		} else if (sscanf(line.c_str(), "write %llu", &k0) == 1) {
			if (!fill(g.peer, k0))
				answer = "rank 1 cannot write: " + first_error();
		} else if (line == "quit") {
			break;
		} else {
			answer = "unknown command " + line;
		}
		if (!send_line(answer))
			break;
	}
	return app_exit_status();
}

static uint64_t key0, key1;

static std::string verify_both(void)
{
	std::string why = check(g.own, key0, "own buffer");
	if (why.empty())
		why = check(g.peer, key1, "imported buffer");
	if (!why.empty())
		return why;
	char buf[96];
	snprintf(buf, sizeof(buf), "verify %llu %llu", (unsigned long long)key0, (unsigned long long)key1);
	std::string answer;
	if (!send_line(buf) || !read_line(answer))
		return "rank 1 does not answer";
	return answer == "ok" ? "" : answer;
}

/* verify: both buffers, read through both ranks' mappings. */
static void verify_command(void)
{
	std::string why = verify_both();
	if (why.empty())
		reply("VERIFY OK 4");
	else
		reply("VERIFY FAIL %s", why.c_str());
}

/* ring: rank 0 writes rank 1's buffer through its import and has rank 1 write rank 0's through its own. */
static void ring_command(void)
{
	key0 += 100;
	key1 += 100;
	std::string answer;
	char buf[64];
	snprintf(buf, sizeof(buf), "write %llu", (unsigned long long)key0);
	if (!fill(g.peer, key1)) { /* into rank 1's buffer, through the import */
		reply("RING FAIL rank 0 cannot write: %s", first_error().c_str());
	} else if (!send_line(buf) || !read_line(answer) || answer != "ok") {
		reply("RING FAIL %s", answer.empty() ? "rank 1 does not answer" : answer.c_str());
	} else {
		std::string why = verify_both();
		if (why.empty())
			reply("RING OK");
		else
			reply("RING FAIL %s", why.c_str());
	}
}

int main(int argc, char **argv)
{
	g_app_name = "share";
	g.size = 1ULL << 30;
	g.seed = 66;
	int child_sock = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size"))
			g.size = opt_size(argc, argv, &i, usage);
		else if (!strcmp(argv[i], "--device"))
			g.device = (int)opt_long(argc, argv, &i, usage, 0, 63);
		else if (!strcmp(argv[i], "--seed"))
			g.seed = (uint64_t)opt_long(argc, argv, &i, usage, 0, 1L << 40);
		else if (!strcmp(argv[i], "--child"))
			child_sock = (int)opt_long(argc, argv, &i, usage, 0, 1 << 20);
		else
			die_usage(usage, "unknown option '%s'", argv[i]);
	}
	if (!g.size)
		die_usage(usage, "--size must not be 0");
	pid_t child = 0;
	if (child_sock >= 0) {
		g.rank = 1;
		g.sock = child_sock;
		g_app_name = "share rank 1";
	} else {
		/* rank 1 first, before any CUDA call of this process */
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
			app_error("no socketpair: %s", strerror(errno));
			return 1;
		}
		child = fork();
		if (child < 0) {
			app_error("cannot fork: %s", strerror(errno));
			return 1;
		}
		if (child == 0) {
			close(sv[0]);
			char sock[16], size[32], dev[16], seed[32];
			snprintf(sock, sizeof(sock), "%d", sv[1]);
			snprintf(size, sizeof(size), "%zu", g.size);
			snprintf(dev, sizeof(dev), "%d", g.device);
			snprintf(seed, sizeof(seed), "%llu", (unsigned long long)g.seed);
			execl("/proc/self/exe", argv[0], "--child", sock, "--size", size, "--device", dev, "--seed", seed,
			      (char *)NULL);
			_exit(127);
		}
		close(sv[1]);
		g.sock = sv[0];
	}
	if (!CK(cudaSetDevice(g.device)) || !CK(cudaFree(0)) ||
	    !CK(cudaDeviceGetAttribute(&g.sm_count, cudaDevAttrMultiProcessorCount, g.device)) ||
	    !CK(cudaMalloc(&g.result, 2 * sizeof(unsigned long long))) || !setup()) {
		app_info("setup of rank %d failed: %s", g.rank, first_error().c_str());
		return 1;
	}
	if (g.rank == 1)
		return child_main();
	key0 = g.seed;
	key1 = g.seed + 1;
	app_info("two ranks share %zu bytes each way", g.size);
	reply("READY %d %d", (int)getpid(), (int)child);

	static const app_command commands[] = { { "verify", verify_command }, { "ring", ring_command } };
	serve_commands(commands);
	send_line("quit");
	int st = 0;
	waitpid(child, &st, 0);
	int rc = app_exit_status();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		app_info("rank 1 exited with status %d", st);
		rc = rc ? rc : 1;
	}
	reply("BYE %d", rc); /* a restored rank 0 is no child of the test's: it learns the status here */
	return rc;
}
