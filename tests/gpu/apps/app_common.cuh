/*
 * app_common.cuh - what every GPU test app shares: checked CUDA calls, size
 * parsing, the mixer behind the data patterns, and the line protocol on
 * stdin/stdout.
 *
 * Protocol: the app prints "READY <pid>" once set up, then reads one command
 * per line from stdin and answers with one line on stdout (flushed at once,
 * written under a lock so lines from several threads never interleave).
 * Diagnostics go to stderr. End of stdin means "quit". An app exits 0 only if
 * it never saw an error, so a test can trust its exit status.
 */
#ifndef GPUSNAP_TEST_APP_COMMON_CUH
#define GPUSNAP_TEST_APP_COMMON_CUH

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unistd.h>

/* The apps' patterns: a 64-bit mixer (splitmix64's finalizer), so every word of every allocation differs. */
__host__ __device__ static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static const char *g_app_name = "app";
/* Every error ever seen; quit and end of input exit non-zero when it is not 0. */
static std::atomic<unsigned long long> g_errors{0};
static std::mutex g_out_lock;
static std::mutex g_first_error_lock;
static std::string g_first_error;

/* One line on stdout, flushed: the test reads replies line by line through a FIFO. */
static inline void __attribute__((format(printf, 1, 2))) reply(const char *fmt, ...)
{
	std::lock_guard<std::mutex> guard(g_out_lock);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Records an error (counted, first one kept for reports) and prints it on stderr. */
static inline void __attribute__((format(printf, 1, 2))) app_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	g_errors++;
	{
		std::lock_guard<std::mutex> guard(g_first_error_lock);
		if (g_first_error.empty())
			g_first_error = msg;
	}
	std::lock_guard<std::mutex> guard(g_out_lock);
	fprintf(stderr, "%s[%d]: error: %s\n", g_app_name, (int)getpid(), msg);
	fflush(stderr);
}

static inline std::string first_error(void)
{
	std::lock_guard<std::mutex> guard(g_first_error_lock);
	return g_first_error.empty() ? std::string("none") : g_first_error;
}

static inline void __attribute__((format(printf, 1, 2))) app_info(const char *fmt, ...)
{
	std::lock_guard<std::mutex> guard(g_out_lock);
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s[%d]: ", g_app_name, (int)getpid());
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

static inline bool check_rt(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return true;
	app_error("%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorName(e), cudaGetErrorString(e));
	return false;
}

static inline bool check_drv(CUresult r, const char *call, const char *file, int line)
{
	if (r == CUDA_SUCCESS)
		return true;
	const char *name = NULL, *str = NULL;
	cuGetErrorName(r, &name);
	cuGetErrorString(r, &str);
	app_error("%s failed at %s:%d: %s (%s)", call, file, line, name ? name : "?", str ? str : "?");
	return false;
}

/* CK(call) / CKD(call): true when the runtime / driver call succeeded; a failure is recorded and printed. */
#define CK(call) check_rt((call), #call, __FILE__, __LINE__)
#define CKD(call) check_drv((call), #call, __FILE__, __LINE__)
/* After a kernel launch: the launch error, if any. */
#define CK_LAUNCH(what) check_rt(cudaGetLastError(), "launch of " what, __FILE__, __LINE__)

/* Parses "4096", "64K", "512M", "8G", "1T" (binary units). Returns false on junk or overflow. */
static inline bool parse_size(const char *s, unsigned long long *out)
{
	if (!s || !*s)
		return false;
	errno = 0;
	char *end = NULL;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: return false;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end != '\0')
		return false;
	if (shift && v > (~0ULL >> shift))
		return false;
	*out = v << shift;
	return true;
}

static inline void die_usage(const char *usage, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static inline void die_usage(const char *usage, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", g_app_name);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: %s %s\n", g_app_name, usage);
	exit(2);
}

/* Reads the value of option argv[*i] ("--size 8G"), advancing *i. */
static inline const char *opt_value(int argc, char **argv, int *i, const char *usage)
{
	if (*i + 1 >= argc)
		die_usage(usage, "option '%s' needs a value", argv[*i]);
	return argv[++*i];
}

static inline unsigned long long opt_size(int argc, char **argv, int *i, const char *usage)
{
	const char *opt = argv[*i];
	const char *v = opt_value(argc, argv, i, usage);
	unsigned long long n;
	if (!parse_size(v, &n))
		die_usage(usage, "bad size '%s' for %s", v, opt);
	return n;
}

static inline long opt_long(int argc, char **argv, int *i, const char *usage, long min, long max)
{
	const char *opt = argv[*i];
	const char *v = opt_value(argc, argv, i, usage);
	char *end = NULL;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < min || n > max)
		die_usage(usage, "bad value '%s' for %s (want %ld..%ld)", v, opt, min, max);
	return n;
}

/*
 * Reads the next command line from stdin into buf (newline stripped).
 * Returns false at end of input (treated as quit by the apps).
 */
static inline bool read_command(char *buf, size_t len)
{
	if (!fgets(buf, (int)len, stdin))
		return false;
	size_t n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return true;
}

/* One command of an app's stdin protocol: the line that names it, and what it does (it replies). */
struct app_command {
	const char *name;
	void (*run)(void);
};

/* Reads commands until "quit" or the end of stdin, runs each one named in cmds, answers "UNKNOWN <line>" to the rest. */
template <size_t N> static inline void serve_commands(const app_command (&cmds)[N])
{
	char line[256];
	while (read_command(line, sizeof(line)) && strcmp(line, "quit")) {
		size_t i = 0;
		while (i < N && strcmp(line, cmds[i].name))
			i++;
		if (i < N)
			cmds[i].run();
		else
			reply("UNKNOWN %s", line);
	}
}

/* Exit status of an app: 0 only if no error was ever seen. */
static inline int app_exit_status(void)
{
	unsigned long long e = g_errors.load();
	if (e)
		app_info("exiting with status 1: %llu error(s), first: %s", e, first_error().c_str());
	return e ? 1 : 0;
}

#endif
