/*
 * counter.cu - NVIDIA's counter example kind: a counter that lives in GPU
 * memory, incremented by a kernel every --interval-ms (100 ms). Each tick reads
 * it back, appends "<value>\n" to --out (opened, appended and closed each time,
 * so the file survives the process being dumped and restored by CRIU) and
 * prints "TICK <value>" on stdout. After a suspend/resume (or a restore) it
 * must go on from where it was, never from 0. --hold keeps extra device memory
 * (default 256M) so the process's VRAM is easy to see in nvidia-smi.
 *
 * Commands: value -> "VALUE <n>" (the last value read from the GPU; answered
 * from host memory, so it also works while the process is suspended), status,
 * verify, ping, quit. --no-stdin: no commands, run until SIGTERM/SIGINT.
 */
#include "app_common.cuh"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <thread>

__global__ void counter_kernel(unsigned long long *counter)
{
	*counter += 1;
}

static std::atomic<bool> g_stop{false};
static std::atomic<unsigned long long> g_value{0};
static std::atomic<unsigned long long> g_ticks{0};

struct counter_opts {
	int device;
	const char *out_path;
	long interval_ms;
	bool quiet;
};

static void append_value(const char *path, unsigned long long v)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		app_error("cannot open '%s': %s", path, strerror(errno));
		return;
	}
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu\n", v);
	if (write(fd, buf, (size_t)n) != n)
		app_error("cannot append to '%s': %s", path, strerror(errno));
	if (close(fd))
		app_error("cannot close '%s': %s", path, strerror(errno));
}

static void tick_loop(const struct counter_opts *o, unsigned long long *dev_counter)
{
	unsigned long long launches = 0;
	/* The current device is per thread. */
	if (!CK(cudaSetDevice(o->device)))
		return;
	while (!g_stop.load()) {
		counter_kernel<<<1, 1>>>(dev_counter);
		if (!CK_LAUNCH("counter_kernel"))
			return;
		launches++;
		unsigned long long v = 0;
		if (!CK(cudaMemcpy(&v, dev_counter, sizeof(v), cudaMemcpyDeviceToHost)))
			return;
		if (v != launches) {
			app_error("counter is %llu after %llu increments", v, launches);
			return;
		}
		g_value = v;
		g_ticks++;
		if (o->out_path)
			append_value(o->out_path, v);
		if (!o->quiet)
			reply("TICK %llu", v);
		std::this_thread::sleep_for(std::chrono::milliseconds(o->interval_ms));
	}
}

static const char *const counter_usage =
	"[--out PATH] [--interval-ms N] [--hold BYTES] [--device N] [--quiet] [--no-stdin]\n"
	"  commands on stdin: value, status, verify, ping, quit";

int main(int argc, char **argv)
{
	g_app_name = "counter";
	struct counter_opts o = {0, NULL, 100, false};
	unsigned long long hold = 256ULL << 20;
	long device = 0;
	bool no_stdin = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out"))
			o.out_path = opt_value(argc, argv, &i, counter_usage);
		else if (!strcmp(argv[i], "--interval-ms"))
			o.interval_ms = opt_long(argc, argv, &i, counter_usage, 1, 3600000);
		else if (!strcmp(argv[i], "--hold"))
			hold = opt_size(argc, argv, &i, counter_usage);
		else if (!strcmp(argv[i], "--device"))
			device = opt_long(argc, argv, &i, counter_usage, 0, 1024);
		else if (!strcmp(argv[i], "--quiet"))
			o.quiet = true;
		else if (!strcmp(argv[i], "--no-stdin"))
			no_stdin = true;
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: counter %s\n", counter_usage);
			return 0;
		} else
			die_usage(counter_usage, "unknown argument '%s'", argv[i]);
	}

	o.device = (int)device;
	unsigned long long *dev_counter = NULL;
	void *dev_hold = NULL;
	if (!CK(cudaSetDevice((int)device)) || !CK(cudaMalloc((void **)&dev_counter, sizeof(*dev_counter))) ||
	    !CK(cudaMemset(dev_counter, 0, sizeof(*dev_counter))))
		return 1;
	if (hold && (!CK(cudaMalloc(&dev_hold, hold)) || !CK(cudaMemset(dev_hold, 0x5a, hold))))
		return 1;
	if (!CK(cudaDeviceSynchronize()))
		return 1;

	/* With --no-stdin the main thread waits for a signal; block them before the tick thread exists. */
	sigset_t stop_signals;
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	if (no_stdin)
		pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

	std::thread ticker(tick_loop, &o, dev_counter);
	reply("READY %d", (int)getpid());

	if (no_stdin) {
		int sig = 0;
		sigwait(&stop_signals, &sig);
		app_info("signal %d: stopping", sig);
	} else {
		char line[4096];
		while (read_command(line, sizeof(line))) {
			if (!strcmp(line, "value")) {
				reply("VALUE %llu", g_value.load());
			} else if (!strcmp(line, "status")) {
				reply("STATUS value=%llu ticks=%llu errors=%llu", g_value.load(), g_ticks.load(), g_errors.load());
			} else if (!strcmp(line, "verify")) {
				if (g_errors)
					reply("VERIFY FAIL %s", first_error().c_str());
				else
					reply("VERIFY OK %llu", g_value.load());
			} else if (!strcmp(line, "ping")) {
				reply("PONG");
			} else if (!strcmp(line, "quit")) {
				break;
			} else if (line[0]) {
				reply("ERROR unknown command '%s'", line);
			}
		}
	}
	g_stop = true;
	ticker.join();
	CK(cudaFree(dev_counter));
	if (dev_hold)
		CK(cudaFree(dev_hold));
	int status = app_exit_status();
	if (!no_stdin)
		reply("BYE %d", status);
	return status;
}
