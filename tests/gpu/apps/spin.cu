/*
 * spin.cu - keeps the GPU busy with one kernel for --seconds (for the lock
 * timeout test): the driver's checkpoint lock waits for running work, so
 * `gpusnap suspend --timeout 1` during the spin must time out, leave the
 * process running, and the kernel must still finish ("DONE").
 *
 * The kernel spins on %globaltimer (nanoseconds) rather than clock64: the SM
 * clock rate moves with boost and power state, the global timer does not.
 *
 * Output: "READY <pid>", then "SPINNING <s>" when a spin starts (at once unless
 * --no-start) and "DONE <elapsed_s>" when it ends. Commands: spin <s>, status,
 * verify (the spin kernels all ran to the end and no error was seen), ping, quit.
 */
#include "app_common.cuh"

#include <chrono>
#include <thread>

__device__ static inline unsigned long long globaltimer_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void spin_kernel(unsigned long long ns, unsigned long long *finished)
{
	unsigned long long start = globaltimer_ns();
	while (globaltimer_ns() - start < ns) {
	}
	*finished += 1;
}

static int g_device;
static cudaStream_t g_stream;
static unsigned long long *g_dev_finished;
static std::atomic<bool> g_spinning{false};
static unsigned long long g_spins_started;
static std::thread g_waiter;

static void wait_spin(std::chrono::steady_clock::time_point t0)
{
	/* The current device is per thread: set it so this thread touches no other GPU. */
	bool ok = CK(cudaSetDevice(g_device)) && CK(cudaStreamSynchronize(g_stream));
	g_spinning = false; /* before the line: a test may send verify as soon as it reads DONE */
	if (ok)
		reply("DONE %.3f", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
	else
		reply("DONE FAIL %s", first_error().c_str());
}

static bool start_spin(double seconds)
{
	if (g_waiter.joinable())
		g_waiter.join();
	spin_kernel<<<1, 1, 0, g_stream>>>((unsigned long long)(seconds * 1e9), g_dev_finished);
	if (!CK_LAUNCH("spin_kernel"))
		return false;
	g_spins_started++;
	g_spinning = true;
	reply("SPINNING %g", seconds);
	g_waiter = std::thread(wait_spin, std::chrono::steady_clock::now());
	return true;
}

static bool parse_seconds(const char *s, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 86400)
		return false;
	*out = v;
	return true;
}

static const char *const spin_usage =
	"[--seconds S] [--no-start] [--device N]\n"
	"  commands on stdin: spin S, status, verify, ping, quit";

int main(int argc, char **argv)
{
	g_app_name = "spin";
	double seconds = 10;
	bool start = true;
	long device = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds")) {
			const char *v = opt_value(argc, argv, &i, spin_usage);
			if (!parse_seconds(v, &seconds))
				die_usage(spin_usage, "bad --seconds '%s'", v);
		} else if (!strcmp(argv[i], "--no-start"))
			start = false;
		else if (!strcmp(argv[i], "--device"))
			device = opt_long(argc, argv, &i, spin_usage, 0, 1024);
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: spin %s\n", spin_usage);
			return 0;
		} else
			die_usage(spin_usage, "unknown argument '%s'", argv[i]);
	}
	g_device = (int)device;
	if (!CK(cudaSetDevice(g_device)) || !CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) ||
	    !CK(cudaMalloc((void **)&g_dev_finished, sizeof(*g_dev_finished))) ||
	    !CK(cudaMemset(g_dev_finished, 0, sizeof(*g_dev_finished))) || !CK(cudaDeviceSynchronize()))
		return 1;
	reply("READY %d", (int)getpid());
	if (start && !start_spin(seconds))
		return 1;

	char line[4096];
	while (read_command(line, sizeof(line))) {
		double s;
		if (!strncmp(line, "spin ", 5) && parse_seconds(line + 5, &s)) {
			if (g_spinning)
				reply("ERROR already spinning");
			else if (!start_spin(s))
				reply("ERROR %s", first_error().c_str());
		} else if (!strcmp(line, "status")) {
			reply("STATUS %s spins=%llu errors=%llu", g_spinning ? "spinning" : "idle", g_spins_started,
			      g_errors.load());
		} else if (!strcmp(line, "verify")) {
			unsigned long long finished = 0;
			if (g_spinning)
				reply("VERIFY FAIL still spinning");
			else if (!CK(cudaMemcpy(&finished, g_dev_finished, sizeof(finished), cudaMemcpyDeviceToHost)))
				reply("VERIFY FAIL %s", first_error().c_str());
			else if (finished != g_spins_started) {
				app_error("%llu spin kernel(s) finished of %llu started", finished, g_spins_started);
				reply("VERIFY FAIL %llu spin kernel(s) finished of %llu started", finished, g_spins_started);
			} else if (g_errors)
				reply("VERIFY FAIL %s", first_error().c_str());
			else
				reply("VERIFY OK %llu", finished);
		} else if (!strcmp(line, "ping")) {
			reply("PONG");
		} else if (!strcmp(line, "quit")) {
			break;
		} else if (line[0]) {
			reply("ERROR unknown command '%s'", line);
		}
	}
	if (g_waiter.joinable())
		g_waiter.join();
	CK(cudaFree(g_dev_finished));
	CK(cudaStreamDestroy(g_stream));
	int status = app_exit_status();
	reply("BYE %d", status);
	return status;
}
