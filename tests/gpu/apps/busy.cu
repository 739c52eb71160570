/*
 * busy.cu - a process whose threads never stop using the GPU: each of --threads
 * host threads owns a stream and a device buffer, launches a kernel that adds 1
 * to every element, and every --check-every launches copies the buffer back
 * (cudaMemcpyAsync D2H + sync) and checks that every element equals the number
 * of increments; now and then it also writes a new value from the host (H2D).
 *
 * It must survive suspend/resume at any moment: the driver's lock simply blocks
 * its CUDA calls until resume. Any CUDA error or wrong value is counted, and
 * the thread that saw it stops (a sticky error would only repeat).
 *
 * Commands: status -> "STATUS iterations=<n> errors=<e>"; verify -> waits (up to
 * 10 s) until every thread has advanced since the last verify, then "VERIFY OK
 * <iterations>" if no error was seen, else "VERIFY FAIL <detail>"; quit.
 */
#include "app_common.cuh"

#include <chrono>
#include <thread>
#include <vector>

__global__ void increment_kernel(uint32_t *buf, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		buf[i] += 1;
}

struct worker {
	int id;
	int device;
	size_t elems;
	unsigned check_every;
	cudaStream_t stream;
	uint32_t *dev_buf;
	uint32_t *host_buf; /* pinned */
	std::atomic<unsigned long long> iterations{0};
	std::atomic<bool> alive{false};
	unsigned long long at_last_verify;
	std::thread thread;
};

static std::atomic<bool> g_stop{false};

/* Copies the buffer back and checks every element; returns false (error recorded) on a mismatch. */
static bool check_buffer(struct worker *w, uint32_t expected)
{
	if (!CK(cudaMemcpyAsync(w->host_buf, w->dev_buf, w->elems * sizeof(uint32_t), cudaMemcpyDeviceToHost, w->stream)) ||
	    !CK(cudaStreamSynchronize(w->stream)))
		return false;
	for (size_t i = 0; i < w->elems; i++) {
		if (w->host_buf[i] != expected) {
			app_error("thread %d: element %zu is %u, expected %u after %llu iterations", w->id, i, w->host_buf[i],
				  expected, w->iterations.load());
			return false;
		}
	}
	return true;
}

static void worker_loop(struct worker *w)
{
	uint32_t expected = 0;
	/* The current device is per thread: without this a worker would use device 0. */
	if (!CK(cudaSetDevice(w->device)))
		return;
	unsigned grid = (unsigned)((w->elems + 255) / 256);
	if (grid > 1024)
		grid = 1024;
	w->alive = true;
	while (!g_stop.load(std::memory_order_relaxed)) {
		increment_kernel<<<grid, 256, 0, w->stream>>>(w->dev_buf, w->elems);
		if (!CK_LAUNCH("increment_kernel"))
			break;
		expected++;
		unsigned long long it = ++w->iterations;
		if (it % w->check_every)
			continue;
		if (!check_buffer(w, expected))
			break;
		if (it % (4ULL * w->check_every) == 0) {
			/* H2D: a new value from the host, checked on the next round trip. */
			expected += 1000;
			for (size_t i = 0; i < w->elems; i++)
				w->host_buf[i] = expected;
			if (!CK(cudaMemcpyAsync(w->dev_buf, w->host_buf, w->elems * sizeof(uint32_t), cudaMemcpyHostToDevice,
						w->stream)) ||
			    !CK(cudaStreamSynchronize(w->stream)))
				break;
		}
	}
	if (g_stop.load())
		CK(cudaStreamSynchronize(w->stream));
	else
		app_info("thread %d stopped by an error after %llu iterations", w->id, w->iterations.load());
	w->alive = false;
}

static unsigned long long total_iterations(std::vector<struct worker *> &ws)
{
	unsigned long long n = 0;
	for (auto *w : ws)
		n += w->iterations.load();
	return n;
}

static const char *const busy_usage =
	"[--threads N] [--elems N] [--check-every N] [--device N]\n"
	"  commands on stdin: status, verify, ping, quit";

int main(int argc, char **argv)
{
	g_app_name = "busy";
	long nthreads = 4, elems = 1 << 20, check_every = 16, device = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads"))
			nthreads = opt_long(argc, argv, &i, busy_usage, 1, 256);
		else if (!strcmp(argv[i], "--elems"))
			elems = opt_long(argc, argv, &i, busy_usage, 1, 1L << 30);
		else if (!strcmp(argv[i], "--check-every"))
			check_every = opt_long(argc, argv, &i, busy_usage, 1, 1L << 20);
		else if (!strcmp(argv[i], "--device"))
			device = opt_long(argc, argv, &i, busy_usage, 0, 1024);
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: busy %s\n", busy_usage);
			return 0;
		} else
			die_usage(busy_usage, "unknown argument '%s'", argv[i]);
	}
	if (!CK(cudaSetDevice((int)device)) || !CK(cudaFree(0)))
		return 1;

	std::vector<struct worker *> workers;
	for (long t = 0; t < nthreads; t++) {
		struct worker *w = new worker();
		w->id = (int)t;
		w->device = (int)device;
		w->elems = (size_t)elems;
		w->check_every = (unsigned)check_every;
		w->at_last_verify = 0;
		size_t bytes = w->elems * sizeof(uint32_t);
		if (!CK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) ||
		    !CK(cudaMalloc((void **)&w->dev_buf, bytes)) || !CK(cudaMallocHost((void **)&w->host_buf, bytes)) ||
		    !CK(cudaMemsetAsync(w->dev_buf, 0, bytes, w->stream)) || !CK(cudaStreamSynchronize(w->stream)))
			return 1;
		workers.push_back(w);
	}
	for (auto *w : workers)
		w->thread = std::thread(worker_loop, w);
	app_info("%ld thread(s), %ld elements each, check every %ld launches", nthreads, elems, check_every);
	reply("READY %d", (int)getpid());

	char line[4096];
	while (read_command(line, sizeof(line))) {
		if (!strcmp(line, "status")) {
			reply("STATUS iterations=%llu errors=%llu", total_iterations(workers), g_errors.load());
		} else if (!strcmp(line, "verify")) {
			/* Every thread must have advanced since the last verify; they may need a moment after a resume. */
			auto t0 = std::chrono::steady_clock::now();
			bool advanced = false;
			while (!advanced && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10) && !g_errors) {
				advanced = true;
				for (auto *w : workers)
					if (w->iterations.load() <= w->at_last_verify)
						advanced = false;
				if (!advanced)
					std::this_thread::sleep_for(std::chrono::milliseconds(10));
			}
			std::string stuck;
			for (auto *w : workers) {
				unsigned long long now = w->iterations.load();
				if (now <= w->at_last_verify)
					stuck += (stuck.empty() ? "" : ",") + std::to_string(w->id);
				w->at_last_verify = now;
			}
			if (g_errors)
				reply("VERIFY FAIL %llu error(s), first: %s", g_errors.load(), first_error().c_str());
			else if (!stuck.empty())
				reply("VERIFY FAIL thread(s) %s made no progress in 10 s", stuck.c_str());
			else
				reply("VERIFY OK %llu", total_iterations(workers));
		} else if (!strcmp(line, "ping")) {
			reply("PONG");
		} else if (!strcmp(line, "quit")) {
			break;
		} else if (line[0]) {
			reply("ERROR unknown command '%s'", line);
		}
	}
	g_stop = true;
	for (auto *w : workers)
		w->thread.join();
	unsigned long long iters = total_iterations(workers);
	for (auto *w : workers) {
		CK(cudaFree(w->dev_buf));
		CK(cudaFreeHost(w->host_buf));
		CK(cudaStreamDestroy(w->stream));
		delete w;
	}
	app_info("stopped after %llu iterations", iters);
	int status = app_exit_status();
	reply("BYE %d", status);
	return status;
}
