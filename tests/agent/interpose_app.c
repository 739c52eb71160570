/*
 * interpose_app.c - the app side of the interposer's tests: it reaches the
 * fake driver (libfakecudadrv.so) the three ways real apps reach libcuda -
 * (a) linked symbols, (b) dlopen + dlsym, (c) cuGetProcAddress - and is run by
 * tests/cli/t4001-interpose.sh with and without LD_PRELOAD=libgpusnap.so.
 *
 *   interpose_app results   prints every call's result (identical with and
 *                           without the agent) and checks them
 *   interpose_app gate      gate and replacement tests (needs the agent)
 *   interpose_app stress [THREADS] [CYCLES]
 *                           threads hammer the driver while the gate closes
 *                           and opens CYCLES times (needs the agent)
 *   interpose_app bench [CALLS]
 *                           per-call cost, gated vs direct (needs the agent)
 *
 * GPUSNAP_LIBCUDA names the fake driver (the agent reads it too).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/intercept/interpose.h"
#include "../unit/test.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;

struct fake_big {
	long v[5];
};

/* (a): the fake driver's exports under real names, linked directly. */
CUresult cuCtxGetCurrent(void **ctx);
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuDeviceGetCount(int *n);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			unsigned shmem, void *stream, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			     unsigned shmem, void *stream, void **params, void **extra);
CUresult cuStreamSynchronize(void *stream);
CUresult cuTexRefSetMipmapLevelClamp(void *tex, float lo, float hi);
CUresult cuCtxSynchronize(void);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status);
long cuFakeCountValue(void); /* not a driver name: never interposed */

/* dlsym as binaries built against glibc < 2.34 reference it (manylinux wheels, old cudart). */
void *dlsym_glibc_2_2_5(void *handle, const char *name);
__asm__(".symver dlsym_glibc_2_2_5, dlsym@GLIBC_2.2.5");

typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			      void **, void **);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, int *);
typedef double (*mix_fn)(int, int, int, int, int, int, int, int, double, double, double, double, double, double,
			 double, double, double, double);

#define PER_THREAD 2

/* The entry points as one path hands them out; fake-only ones are NULL on path (a). */
struct api {
	char path;
	CUresult (*init)(unsigned int);
	CUresult (*get_version)(int *);
	CUresult (*device_count)(int *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	launch_fn launch, launch_ptsz;
	CUresult (*stream_sync)(void *);
	CUresult (*stream_sync_ptsz)(void *);
	CUresult (*tex_clamp)(void *, float, float);
	CUresult (*ctx_sync)(void);
	int (*nop)(int);
	int (*count)(int);
	mix_fn mix;
	struct fake_big (*big)(int);
	int (*callback)(void (*)(void *), void *);
	int (*recurse)(int, int (*)(int));
};

static void *fake_handle;
static struct api apis[3];
static const struct gs_interpose_test_hooks *H;

static void die(const char *what)
{
	fprintf(stderr, "interpose_app: %s\n", what);
	exit(2);
}

static void *must_dlsym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (!p) {
		fprintf(stderr, "interpose_app: dlsym %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static void *must_gpa(gpa_v2_fn gpa, const char *name, int version, cuuint64_t flags)
{
	void *p = NULL;
	int status = -1;
	if (gpa(name, &p, version, flags, &status) || !p || status != 0) {
		fprintf(stderr, "interpose_app: cuGetProcAddress %s failed\n", name);
		exit(2);
	}
	return p;
}

static void load_apis(void)
{
	const char *path = getenv("GPUSNAP_LIBCUDA");
	if (!path)
		die("GPUSNAP_LIBCUDA must name libfakecudadrv.so");
	fake_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!fake_handle)
		die(dlerror());

	struct api *a = &apis[0];
	a->path = 'a';
	a->init = cuInit;
	a->get_version = cuDriverGetVersion;
	a->device_count = cuDeviceGetCount;
	a->mem_alloc = cuMemAlloc_v2;
	a->launch = cuLaunchKernel;
	a->launch_ptsz = cuLaunchKernel_ptsz;
	a->stream_sync = cuStreamSynchronize;
	a->tex_clamp = cuTexRefSetMipmapLevelClamp;
	a->ctx_sync = cuCtxSynchronize;

	struct api *b = &apis[1];
	void *h = fake_handle;
	b->path = 'b';
	b->init = must_dlsym(h, "cuInit");
	b->get_version = must_dlsym(h, "cuDriverGetVersion");
	b->device_count = must_dlsym(h, "cuDeviceGetCount");
	b->mem_alloc = must_dlsym(h, "cuMemAlloc_v2");
	b->launch = must_dlsym(h, "cuLaunchKernel");
	b->launch_ptsz = must_dlsym(h, "cuLaunchKernel_ptsz");
	b->stream_sync = must_dlsym(h, "cuStreamSynchronize");
	b->stream_sync_ptsz = must_dlsym(h, "cuStreamSynchronize_ptsz");
	b->tex_clamp = must_dlsym(h, "cuTexRefSetMipmapLevelClamp");
	b->ctx_sync = must_dlsym(h, "cuCtxSynchronize");
	b->nop = must_dlsym(h, "cuFakeNop");
	b->count = must_dlsym(h, "cuFakeCount");
	b->mix = (mix_fn)must_dlsym(h, "cuFakeMix");
	b->big = must_dlsym(h, "cuFakeBig");
	b->callback = must_dlsym(h, "cuFakeCallback");
	b->recurse = must_dlsym(h, "cuFakeRecurse");

	/* (c): how cudart does it: dlsym the entry, ask it for everything else. */
	gpa_v2_fn gpa = (gpa_v2_fn)must_dlsym(h, "cuGetProcAddress_v2");
	struct api *c = &apis[2];
	c->path = 'c';
	c->init = must_gpa(gpa, "cuInit", 12000, 0);
	c->get_version = must_gpa(gpa, "cuDriverGetVersion", 12000, 0);
	c->device_count = must_gpa(gpa, "cuDeviceGetCount", 12000, 0);
	c->mem_alloc = must_gpa(gpa, "cuMemAlloc", 12000, 0);
	c->launch = must_gpa(gpa, "cuLaunchKernel", 12000, 0);
	c->launch_ptsz = must_gpa(gpa, "cuLaunchKernel", 12000, PER_THREAD);
	c->stream_sync = must_gpa(gpa, "cuStreamSynchronize", 12000, 0);
	c->stream_sync_ptsz = must_gpa(gpa, "cuStreamSynchronize", 12000, PER_THREAD);
	c->tex_clamp = must_gpa(gpa, "cuTexRefSetMipmapLevelClamp", 12000, 0);
	c->ctx_sync = must_gpa(gpa, "cuCtxSynchronize", 12000, 0);
	c->nop = must_gpa(gpa, "cuFakeNop", 12000, 0);
	c->count = must_gpa(gpa, "cuFakeCount", 12000, 0);
	c->mix = (mix_fn)must_gpa(gpa, "cuFakeMix", 12000, 0);
	c->big = must_gpa(gpa, "cuFakeBig", 12000, 0);
	c->callback = must_gpa(gpa, "cuFakeCallback", 12000, 0);
	c->recurse = must_gpa(gpa, "cuFakeRecurse", 12000, 0);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	nanosleep(&ts, NULL);
}

/* ---- expected values: the fake's formulas, written again ---- */

static CUresult expected_launch(uint64_t salt, const uint64_t v[11])
{
	uint64_t h = salt;
	for (size_t i = 0; i < 11; i++)
		h = h * 1000003u ^ (v[i] + i);
	return (CUresult)(h % 1000000007u) + 1;
}

static double expected_mix(const int iv[8], const double dv[10])
{
	static const double wd[10] = { 0.5, 0.25, 0.125, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5 };
	double r = 0;
	for (int i = 0; i < 8; i++)
		r += (i + 1.0) * iv[i];
	for (int i = 0; i < 10; i++)
		r += dv[i] * wd[i];
	return r;
}

static struct api *recurse_api;
static int recurse_cb(int n) { return recurse_api->recurse(n, recurse_cb); }

/* Every call with its result; `out` gets "path name value" lines. */
static int check_results(FILE *out)
{
	int bad = 0;
#define EXPECT(cond, fmt, ...)                                                                    \
	do {                                                                                      \
		fprintf(out, "%c " fmt "\n", a->path, __VA_ARGS__);                               \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "path %c: unexpected: " fmt "\n", a->path, __VA_ARGS__);  \
			bad++;                                                                    \
		}                                                                                 \
	} while (0)
	for (int p = 0; p < 3; p++) {
		struct api *a = &apis[p];
		int v = 0, n = 0;
		CUdeviceptr d = 0;
		EXPECT(a->init(0) == 0, "init %d", a->init(0));
		EXPECT(a->get_version(&v) == 0 && v == 13000, "version %d", v);
		EXPECT(a->device_count(&n) == 0 && n == 1, "device_count %d", n);
		EXPECT(a->mem_alloc(&d, 4096) == 0 && d == 0x7000000000ULL + 4096, "mem_alloc %#llx", d);
		for (int k = 0; k < 3; k++) {
			uint64_t args[11] = { 0xdeadbeef00ULL + (uint64_t)k, 1u + k, 2, 3, 128, 1, 1, 49152u + k,
					      0x5000 + (uint64_t)k, 0x6000, 0x7000ULL << k };
			CUresult r = a->launch((void *)(uintptr_t)args[0], (unsigned)args[1], (unsigned)args[2],
					       (unsigned)args[3], (unsigned)args[4], (unsigned)args[5],
					       (unsigned)args[6], (unsigned)args[7], (void *)(uintptr_t)args[8],
					       (void **)(uintptr_t)args[9], (void **)(uintptr_t)args[10]);
			EXPECT(r == expected_launch(17, args), "launch[%d] %d", k, r);
			r = a->launch_ptsz((void *)(uintptr_t)args[0], (unsigned)args[1], (unsigned)args[2],
					   (unsigned)args[3], (unsigned)args[4], (unsigned)args[5], (unsigned)args[6],
					   (unsigned)args[7], (void *)(uintptr_t)args[8], (void **)(uintptr_t)args[9],
					   (void **)(uintptr_t)args[10]);
			EXPECT(r == expected_launch(29, args), "launch_ptsz[%d] %d", k, r);
		}
		EXPECT(a->stream_sync((void *)1) == 0, "stream_sync %d", 0);
		CUresult t = a->tex_clamp(NULL, 1.5f, 0.25f);
		EXPECT(t == 1502, "tex_clamp %d", t);
		EXPECT(a->ctx_sync() == 0, "ctx_sync %d", 0);
		if (!a->nop)
			continue;
		EXPECT(a->nop(41) == 41, "nop %d", a->nop(41));
		int iv[8] = { 1, -2, 3, -4, 5, -6, 7, 1 << 20 };
		double dv[10] = { 0.5, 1.25, -2.5, 3.75, 1e10, -1e-3, 6.0, 7.5, 8.25, -9.0 };
		double m = a->mix(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], iv[6], iv[7], dv[0], dv[1], dv[2], dv[3],
				  dv[4], dv[5], dv[6], dv[7], dv[8], dv[9]);
		EXPECT(m == expected_mix(iv, dv), "mix %.6f", m);
		struct fake_big big = a->big(9);
		EXPECT(big.v[0] == 9 && big.v[4] == 49, "big %ld %ld %ld %ld %ld", big.v[0], big.v[1], big.v[2],
		       big.v[3], big.v[4]);
		recurse_api = a;
		int sum = a->recurse(100, recurse_cb);
		EXPECT(sum == 5050, "recurse %d", sum);
	}
#undef EXPECT
	return bad;
}

/* ---- calls made from another thread, to see whether they block ---- */

struct job {
	pthread_t thread;
	int (*fn)(struct job *);
	struct api *api;
	long arg;
	_Atomic int done;
	int result;
	double started_at, finished_at;
};

static void *job_main(void *p)
{
	struct job *j = p;
	j->started_at = now();
	j->result = j->fn(j);
	j->finished_at = now();
	atomic_store(&j->done, 1);
	return NULL;
}

static void job_start(struct job *j, int (*fn)(struct job *), struct api *api, long arg)
{
	memset(j, 0, sizeof(*j));
	j->fn = fn;
	j->api = api;
	j->arg = arg;
	if (pthread_create(&j->thread, NULL, job_main, j))
		die("pthread_create");
}

static void job_join(struct job *j) { pthread_join(j->thread, NULL); }

static int job_version(struct job *j)
{
	int v = 0;
	return j->api->get_version(&v) == 0 && v == 13000;
}

/* One call to get a slot (the assembly fast path from then on), then wait for `go`, then call. */
static _Atomic int warm_ready, warm_go;
static int job_version_warm(struct job *j)
{
	int ok = job_version(j);
	atomic_store(&warm_ready, 1);
	while (!atomic_load(&warm_go))
		sleep_s(0.001);
	return ok && job_version(j);
}

static int job_sync(struct job *j) { return j->api->stream_sync((void *)(uintptr_t)j->arg) == 0; }

static int wait_inside(int n, double timeout)
{
	double end = now() + timeout;
	while (H->gate_inside_count() != n && now() < end)
		sleep_s(0.001);
	return H->gate_inside_count() == n;
}

static void test_close_blocks_new_calls(void)
{
	for (int k = 0; k < 6; k++) {
		int p = k % 3, warm = k >= 3;
		struct job j;
		atomic_store(&warm_ready, 0);
		atomic_store(&warm_go, 0);
		if (warm) {
			job_start(&j, job_version_warm, &apis[p], 0);
			while (!atomic_load(&warm_ready))
				sleep_s(0.001);
		}
		struct gs_err err = { 0 };
		CHECK_INT(H->gate_close(1.0, &err), 0);
		if (warm)
			atomic_store(&warm_go, 1);
		else
			job_start(&j, job_version, &apis[p], 0);
		double until = now() + 5.0;
		while (H->gate_waiting_count() != 1 && now() < until)
			sleep_s(0.001);
		CHECK_INT(H->gate_waiting_count(), 1);
		sleep_s(0.05);
		CHECK(!atomic_load(&j.done));
		double opened = now();
		H->gate_open();
		job_join(&j);
		CHECK(j.result);
		CHECK(j.finished_at >= opened);
	}
}

static void test_close_waits_for_calls_in_flight(void)
{
	for (int p = 0; p < 3; p++) {
		struct job j;
		job_start(&j, job_sync, &apis[p], 400);
		CHECK(wait_inside(1, 2.0));
		struct gs_err err = { 0 };
		int rc = H->gate_close(5.0, &err);
		double closed_at = now();
		CHECK_INT(rc, 0);
		CHECK(closed_at >= j.started_at + 0.4); /* not before the 400 ms call returned */
		CHECK_INT(H->gate_inside_count(), 0);
		H->gate_open();
		job_join(&j);
		CHECK(j.result);
	}
}

static void test_close_timeout_reopens(void)
{
	struct job slow, quick;
	job_start(&slow, job_sync, &apis[2], 1500);
	CHECK(wait_inside(1, 2.0));
	struct gs_err err = { 0 };
	double t0 = now();
	CHECK_INT(H->gate_close(0.2, &err), GS_E_TIMEOUT);
	CHECK(now() - t0 < 1.2);
	CHECK_CONTAINS(err.msg, "1 app thread still inside the CUDA driver");
	job_start(&quick, job_version, &apis[1], 0);
	job_join(&quick);
	CHECK(quick.result);
	CHECK(!atomic_load(&slow.done)); /* the quick call was not held up by a closed gate */
	job_join(&slow);
	CHECK(slow.result);
}

static int agent_thread_calls(struct job *j)
{
	(void)j;
	struct gs_err err = { 0 };
	if (H->gate_exempt_current_thread(&err))
		return 0;
	if (H->gate_close(1.0, &err))
		return 0;
	int ok = 1;
	/* exempt: not blocked, and not counted while inside */
	for (int p = 0; p < 3; p++) {
		int v = 0;
		ok &= apis[p].get_version(&v) == 0 && v == 13000;
	}
	H->gate_open();
	return ok;
}

static void test_agent_threads_pass(void)
{
	struct job j;
	job_start(&j, agent_thread_calls, NULL, 0);
	job_join(&j);
	CHECK(j.result);
	/* The closing thread itself passes even when not exempt. */
	struct gs_err err = { 0 };
	CHECK_INT(H->gate_close(1.0, &err), 0);
	int v = 0;
	CHECK_INT(apis[1].get_version(&v), 0);
	CHECK_INT(apis[0].get_version(&v), 0);
	H->gate_open();
	CHECK_INT(H->gate_close(1.0, &err), 0);
	CHECK_INT(H->gate_close(1.0, &err), GS_E_STATE);
	H->gate_open();
}

static _Atomic int nested_release;
static _Atomic int nested_result;
static void nested_cb(void *arg)
{
	struct api *a = arg;
	while (!atomic_load(&nested_release))
		sleep_s(0.001);
	atomic_store(&nested_result, a->count(100));
}

static int job_nested(struct job *j) { return j->api->callback(nested_cb, j->api) == 7; }

struct closer {
	pthread_t thread;
	double timeout;
	int rc;
	struct gs_err err;
};

static void *closer_main(void *p)
{
	struct closer *c = p;
	c->rc = H->gate_close(c->timeout, &c->err);
	return NULL;
}

/* A call the driver makes back into the app, which calls the driver again, passes a closed gate. */
static void test_nested_call_passes_closed_gate(void)
{
	for (int p = 1; p < 3; p++) {
		atomic_store(&nested_release, 0);
		atomic_store(&nested_result, 0);
		struct job j;
		job_start(&j, job_nested, &apis[p], 0);
		CHECK(wait_inside(1, 2.0));
		struct closer c = { .timeout = 5.0 };
		pthread_create(&c.thread, NULL, closer_main, &c);
		sleep_s(0.1); /* the closer now waits for the job to leave */
		atomic_store(&nested_release, 1);
		pthread_join(c.thread, NULL);
		CHECK_INT(c.rc, 0);
		CHECK_INT(atomic_load(&nested_result), 101);
		H->gate_open();
		job_join(&j);
		CHECK(j.result);
	}
}

static void test_deep_nesting(void)
{
	for (int p = 1; p < 3; p++) {
		recurse_api = &apis[p];
		CHECK_INT(apis[p].recurse(1000, recurse_cb), 500500);
		CHECK_INT(H->gate_inside_count(), 0);
		struct gs_err err = { 0 };
		CHECK_INT(H->gate_close(1.0, &err), 0); /* nothing left counted inside */
		H->gate_open();
	}
}

static void exit_from_callback(void *arg)
{
	(void)arg;
	pthread_exit(NULL);
}

static int job_exit_inside(struct job *j) { return j->api->callback(exit_from_callback, NULL); }

/* A thread that exits inside a call (from a callback) is not left counted as inside. */
static void test_thread_exit_inside_call(void)
{
	for (int p = 1; p < 3; p++) {
		struct job j;
		job_start(&j, job_exit_inside, &apis[p], 0);
		job_join(&j);
		CHECK(!atomic_load(&j.done));
		CHECK_INT(H->gate_inside_count(), 0);
		struct gs_err err = { 0 };
		CHECK_INT(H->gate_close(1.0, &err), 0);
		H->gate_open();
	}
}

static void test_thread_slots_recycled(void)
{
	struct job j;
	job_start(&j, job_version, &apis[0], 0);
	job_join(&j);
	int before = H->gate_thread_count();
	for (int i = 0; i < 300; i++) {
		job_start(&j, job_version, &apis[i % 3], 0);
		job_join(&j);
		CHECK(j.result);
	}
	CHECK(H->gate_thread_count() <= before);
}

/* In a forked child the parent's other threads do not exist: none counts as inside, the gate is open. */
static void test_fork(void)
{
	struct job slow;
	job_start(&slow, job_sync, &apis[1], 600);
	CHECK(wait_inside(1, 2.0));
	pid_t pid = fork();
	if (pid == 0) {
		alarm(10); /* a hang fails the test instead of stalling it */
		struct gs_err err = { 0 };
		int ok = H->gate_inside_count() == 0 && H->gate_close(0.5, &err) == 0;
		struct job j;
		job_start(&j, job_version, &apis[2], 0); /* blocks: closed */
		sleep_s(0.1);
		ok = ok && !atomic_load(&j.done);
		H->gate_open();
		job_join(&j);
		_exit(ok && j.result ? 0 : 1);
	}
	CHECK(pid > 0);
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	job_join(&slow);
	CHECK(slow.result);

	/* closed in the parent at fork time: open in the child */
	struct gs_err err = { 0 };
	CHECK_INT(H->gate_close(1.0, &err), 0);
	pid = fork();
	if (pid == 0) {
		alarm(10);
		struct job j;
		job_start(&j, job_version, &apis[0], 0);
		job_join(&j);
		_exit(j.result ? 0 : 1);
	}
	H->gate_open();
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- replacements ---- */

static CUresult (*real_mem_alloc)(CUdeviceptr *, size_t);
static launch_fn real_launch_ptsz;
static _Atomic int replacement_calls;

static CUresult my_mem_alloc(CUdeviceptr *p, size_t n)
{
	int t = H->gate_enter_c();
	atomic_fetch_add(&replacement_calls, 1);
	CUresult r = real_mem_alloc(p, n);
	*p += 7;
	H->gate_exit_c(t);
	return r;
}

static CUresult my_launch_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			       unsigned shmem, void *stream, void **params, void **extra)
{
	return real_launch_ptsz(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) + 1000;
}

static CUdeviceptr alloc_with(CUresult (*fn)(CUdeviceptr *, size_t))
{
	CUdeviceptr d = 0;
	return fn(&d, 100) == 0 ? d : 0;
}

static int launch_with(launch_fn fn)
{
	return fn((void *)1, 2, 3, 4, 5, 6, 7, 8, (void *)9, (void **)10, (void **)11);
}

static int job_replaced_alloc(struct job *j)
{
	return alloc_with((CUresult(*)(CUdeviceptr *, size_t))(uintptr_t)j->arg) == 0x7000000000ULL + 107;
}

static void test_replacements(void)
{
	gpa_v2_fn gpa = (gpa_v2_fn)must_dlsym(fake_handle, "cuGetProcAddress_v2");
	/* Handed out before registration: apis[*].mem_alloc, the export (already bound). */
	CUresult (*early)(CUdeviceptr *, size_t) = must_dlsym(fake_handle, "cuMemAlloc_v2");
	CHECK_INT(alloc_with(early), 0x7000000000ULL + 100);
	CUdeviceptr plain = alloc_with(apis[1].mem_alloc);
	CHECK_INT(plain, 0x7000000000ULL + 100);

	struct gs_err err = { 0 };
	CHECK_INT(H->replace("cuMemAlloc_v2", (void *)my_mem_alloc, (void **)&real_mem_alloc, &err), 0);
	CHECK_INT(H->replace("cuLaunchKernel_ptsz", (void *)my_launch_ptsz, (void **)&real_launch_ptsz, &err), 0);
	CHECK_INT(H->replace("cuGetProcAddress_v2", (void *)my_mem_alloc, NULL, &err), GS_E_STATE);
	CHECK(real_mem_alloc != NULL && !H->is_gated((void *)real_mem_alloc));
	CHECK(real_launch_ptsz != NULL && !H->is_gated((void *)real_launch_ptsz));
	CHECK_INT(alloc_with(real_mem_alloc), 0x7000000000ULL + 100);

	CUdeviceptr want = 0x7000000000ULL + 107;
	/* (a) the export, bound before registration */
	CHECK_INT(alloc_with(cuMemAlloc_v2), want);
	/* (b) dlsym now, and a pointer from before */
	void *by_dlsym = must_dlsym(fake_handle, "cuMemAlloc_v2");
	CHECK(by_dlsym == (void *)my_mem_alloc);
	CHECK_INT(alloc_with(early), want);
	CHECK_INT(alloc_with(apis[1].mem_alloc), want);
	/* (c) cuGetProcAddress picks _v2 from 3020 on; before that the legacy one, not replaced */
	void *by_gpa = must_gpa(gpa, "cuMemAlloc", 12000, 0);
	CHECK(by_gpa == (void *)my_mem_alloc);
	CHECK_INT(alloc_with(apis[2].mem_alloc), want);
	void *legacy = must_gpa(gpa, "cuMemAlloc", 3000, 0);
	CHECK(legacy != (void *)my_mem_alloc && H->is_gated(legacy));
	unsigned int small = 0;
	CHECK_INT(((CUresult(*)(unsigned int *, unsigned int))legacy)(&small, 5), 0);
	CHECK_INT(small, 0x10005);

	/* per-thread variant: only the _ptsz pointer is replaced */
	int base = launch_with(real_launch_ptsz);
	void *pt = must_gpa(gpa, "cuLaunchKernel", 12000, PER_THREAD);
	void *legacy_stream = must_gpa(gpa, "cuLaunchKernel", 12000, 0);
	CHECK(pt == (void *)my_launch_ptsz);
	CHECK_INT(launch_with((launch_fn)pt), base + 1000);
	CHECK_INT(launch_with((launch_fn)legacy_stream), launch_with(apis[1].launch));
	CHECK_INT(launch_with(cuLaunchKernel_ptsz), base + 1000);
	CHECK_INT(launch_with((launch_fn)must_dlsym(fake_handle, "cuLaunchKernel_ptsz")), base + 1000);
	CHECK_INT(launch_with(apis[2].launch_ptsz), base + 1000);

	/* the replacement gates itself */
	CHECK_INT(H->gate_close(1.0, &err), 0);
	struct job j;
	job_start(&j, job_replaced_alloc, NULL, (long)(uintptr_t)by_gpa);
	sleep_s(0.15);
	CHECK(!atomic_load(&j.done));
	H->gate_open();
	job_join(&j);
	CHECK(j.result);
	CHECK_INT(atomic_load(&replacement_calls), 5); /* export, early, dlsym, gpa, job */
}

/* ---- what dlsym answers ---- */

static void test_dlsym_answers(void)
{
	/* Our export of a name the driver lacks must look absent, with an error. */
	dlerror();
	CHECK(dlsym(RTLD_DEFAULT, "cuVDPAUGetDevice") == NULL);
	CHECK(dlerror() != NULL);
	void *ours = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	CHECK(ours != NULL && H->is_gated(ours));
	/* Not found stays not found, with the real error text. */
	CHECK(dlsym(fake_handle, "cuNoSuchFunction") == NULL);
	const char *e = dlerror();
	CHECK_CONTAINS(e, "cuNoSuchFunction");
	CHECK(dlsym(fake_handle, "no_such_function") == NULL);
	e = dlerror();
	CHECK_CONTAINS(e, "no_such_function");
	/* Other names pass through with their meaning, RTLD_NEXT included. */
	CHECK(dlsym(RTLD_NEXT, "malloc") == dlsym(RTLD_DEFAULT, "malloc"));
	CHECK(dlsym(RTLD_DEFAULT, "malloc") != NULL);
	CHECK(dlvsym(RTLD_DEFAULT, "malloc", "GLIBC_2.2.5") != NULL);
	/* the pre-2.34 symbol version of dlsym is interposed as well */
	void *old = dlsym_glibc_2_2_5(fake_handle, "cuFakeNop");
	CHECK(old != NULL && H->is_gated(old));
	/* dlvsym on a driver name is gated too */
	int (*nop)(int) = dlvsym(fake_handle, "cuFakeNop", "FAKE_1.0");
	CHECK(nop != NULL && H->is_gated((void *)nop));
	CHECK_INT(nop ? nop(5) : 0, 5);
	/* cuGetProcAddress reached by linking, and the legacy one by dlsym, hand out gated pointers */
	void *viaexport = NULL;
	int status = -1;
	CHECK_INT(cuGetProcAddress_v2("cuFakeNop", &viaexport, 12000, 0, &status), 0);
	CHECK(viaexport && H->is_gated(viaexport) && status == 0);
	CHECK_INT(viaexport ? ((int (*)(int))viaexport)(3) : 0, 3);
	CHECK_INT(cuGetProcAddress_v2("cuNoSuchThing", &viaexport, 12000, 0, &status), 500);
	CHECK(viaexport == NULL && status == 1);
	CUresult (*gpa_v1)(const char *, void **, int, cuuint64_t) = must_dlsym(fake_handle, "cuGetProcAddress");
	void *viav1 = NULL;
	CHECK_INT(gpa_v1("cuDriverGetVersion", &viav1, 11030, 0), 0);
	CHECK(viav1 && H->is_gated(viav1));
	/* asking cuGetProcAddress for itself gives the interposed one again */
	void *self = NULL;
	CHECK_INT(cuGetProcAddress_v2("cuGetProcAddress", &self, 12000, 0, &status), 0);
	CHECK(self == must_dlsym(fake_handle, "cuGetProcAddress_v2"));
	/* cuGetExportTable is gated, its table is the driver's own */
	CUresult (*get_table)(const void **, const void *) = must_dlsym(fake_handle, "cuGetExportTable");
	const void *table = NULL;
	CHECK(H->is_gated((void *)get_table));
	CHECK_INT(get_table(&table, NULL), 0);
	CHECK(table && ((const void *const *)table)[0] == (const void *)0x1);
	/* a pointer the driver took through its GOT is our export already */
	CHECK(H->is_gated((void *)apis[2].ctx_sync));
	/* an export the driver lacks returns CUDA_ERROR_NOT_FOUND when called */
	CUresult (*missing)(void *, void *) = H->export_address("cuVDPAUGetDevice");
	CHECK(missing != NULL);
	CHECK_INT(missing ? missing(NULL, NULL) : 0, 500);
	/* non-driver symbols of the driver library are not touched */
	CHECK(dlsym(fake_handle, "cuFakeCountValue") != NULL);
	/* every path's pointers are gated */
	for (int p = 0; p < 3; p++)
		CHECK(H->is_gated((void *)apis[p].get_version));
	struct gs_interpose_stats st;
	H->get_stats(&st);
	CHECK(st.driver_seen);
	CHECK(st.stubs >= 15);
	CHECK_INT(st.ungated, 0);
}

/*
 * The agent's self-measurement exports (agent_probe.h): the call counter
 * grows by exactly one per gated call on this thread (no other thread of this
 * app calls the driver now) and not for a call that bypasses the gate; pure
 * queries (cuCtxGetCurrent) are handed out ungated; the gate's measured cost
 * is a plausible number.
 */
static void test_probe_exports(void)
{
	uint64_t (*calls)(void) = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "gpusnap_driver_calls");
	double (*cost)(unsigned long) = (double (*)(unsigned long))dlsym(RTLD_DEFAULT, "gpusnap_gate_cost_ns");
	CHECK(calls && cost);
	if (!calls || !cost)
		return;
	int v = 0;
	uint64_t before = calls();
	for (int i = 0; i < 1000; i++)
		CHECK_INT(apis[1].get_version(&v), 0); /* through dlsym: a gated stub */
	uint64_t after = calls();
	CHECK_INT(after - before, 1000);
	CUresult (*real_version)(int *) = (CUresult (*)(int *))H->real("cuDriverGetVersion");
	CHECK(real_version != NULL);
	if (real_version) {
		before = calls();
		CHECK_INT(real_version(&v), 0);
		CHECK_INT(calls() - before, 0);
	}
	/* pure queries are handed out ungated, by dlsym and cuGetProcAddress alike, and not counted */
	void *drv = dlopen(getenv("GPUSNAP_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	CUresult (*get_ctx_dlsym)(void **) = drv ? (CUresult (*)(void **))dlsym(drv, "cuCtxGetCurrent") : NULL;
	gpa_v2_fn gpa = drv ? (gpa_v2_fn)dlsym(drv, "cuGetProcAddress_v2") : NULL;
	CHECK(get_ctx_dlsym != NULL && gpa != NULL);
	if (get_ctx_dlsym && gpa) {
		CUresult (*get_ctx_gpa)(void **) = (CUresult (*)(void **))must_gpa(gpa, "cuCtxGetCurrent", 12000, 0);
		CHECK(!H->is_gated((void *)get_ctx_dlsym));
		CHECK(!H->is_gated((void *)get_ctx_gpa));
		CHECK(get_ctx_gpa == get_ctx_dlsym); /* both the driver's own function */
		void *ctx = (void *)1;
		before = calls();
		CHECK_INT(get_ctx_dlsym(&ctx), 0);
		CHECK_INT(get_ctx_gpa(&ctx), 0);
		CHECK_INT(cuCtxGetCurrent(&ctx), 0); /* linked: our export, which leads straight to the driver */
		CHECK(ctx == NULL);
		CHECK_INT(calls() - before, 0);
		/* an ordinary entry point stays gated */
		CHECK(H->is_gated(must_gpa(gpa, "cuFakeNop", 12000, 0)));
	}
	double ns = cost(200000);
	printf("gate cost measured by the agent: %.2f ns per call\n", ns);
	CHECK(ns > -50 && ns < 5000); /* noise may make it slightly negative on a loaded machine */
}

static int run_gate_tests(void)
{
	printf("fence: %s\n", H->gate_fence_name());
	RUN(test_dlsym_answers);
	RUN(test_close_blocks_new_calls);
	RUN(test_close_waits_for_calls_in_flight);
	RUN(test_close_timeout_reopens);
	RUN(test_agent_threads_pass);
	RUN(test_nested_call_passes_closed_gate);
	RUN(test_deep_nesting);
	RUN(test_thread_exit_inside_call);
	RUN(test_thread_slots_recycled);
	RUN(test_fork);
	RUN(test_replacements);
	RUN(test_probe_exports);
	return TEST_SUMMARY();
}

/* ---- stress ---- */

static _Atomic int stress_stop;

struct hammer {
	pthread_t thread;
	struct api *api;
	int use_export;
	long calls, wrong;
};

static void *hammer_main(void *p)
{
	struct hammer *h = p;
	int i = 0;
	while (!atomic_load_explicit(&stress_stop, memory_order_relaxed)) {
		if (h->use_export) {
			int n = 0;
			if (cuDeviceGetCount(&n) || n != 1)
				h->wrong++;
		} else if (h->api->count(i) != i + 1) {
			h->wrong++;
		}
		h->calls++;
		i++;
	}
	return NULL;
}

static int run_stress(int nthreads, int cycles)
{
	struct hammer *hs = calloc((size_t)nthreads, sizeof(*hs));
	long before = cuFakeCountValue();
	for (int i = 0; i < nthreads; i++) {
		hs[i].api = &apis[1 + i % 2];
		hs[i].use_export = i % 3 == 0;
		pthread_create(&hs[i].thread, NULL, hammer_main, &hs[i]);
	}
	sleep_s(0.05);
	int failures = 0, moved = 0;
	double t0 = now(), worst = 0, closing = 0;
	for (int c = 0; c < cycles; c++) {
		struct gs_err err = { 0 };
		double t = now();
		if (H->gate_close(10.0, &err)) {
			fprintf(stderr, "cycle %d: %s\n", c, err.msg);
			failures++;
			continue;
		}
		t = now() - t;
		closing += t;
		if (t > worst)
			worst = t;
		/*
		 * Closed: nobody is inside, so the driver's call counter stands still.
		 * (gate_inside_count may blink to 1 here: a thread that stored depth=1
		 * and is about to see the closed gate and back off.)
		 */
		long a = cuFakeCountValue();
		for (volatile int spin = 0; spin < 20000; spin++)
			;
		if (cuFakeCountValue() != a)
			moved++;
		H->gate_open();
		if (c % 8 == 0)
			sched_yield();
	}
	double elapsed = now() - t0;
	atomic_store(&stress_stop, 1);
	long calls = 0, wrong = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(hs[i].thread, NULL);
		calls += hs[i].calls;
		wrong += hs[i].wrong;
	}
	long counted = cuFakeCountValue() - before;
	printf("stress: %d threads, %d close/open cycles in %.2f s (close %.0f us on average, slowest %.1f ms), "
	       "%ld calls\n",
	       nthreads, cycles, elapsed, closing / cycles * 1e6, worst * 1e3, calls);
	int bad = 0;
	if (failures) {
		fprintf(stderr, "stress: %d closes failed\n", failures);
		bad = 1;
	}
	if (moved) {
		fprintf(stderr, "stress: the driver ran calls while the gate was closed (%d cycles)\n", moved);
		bad = 1;
	}
	if (wrong || counted != calls) {
		fprintf(stderr, "stress: %ld wrong results; driver counted %ld calls, threads made %ld\n", wrong,
			counted, calls);
		bad = 1;
	}
	free(hs);
	printf("%s\n", bad ? "stress: FAILED" : "stress: ok");
	return bad;
}

/* ---- bench ---- */

static double per_call_ns(int (*fn)(int), long calls)
{
	int (*volatile f)(int) = fn;
	double t0 = now();
	unsigned acc = 0;
	for (long i = 0; i < calls; i++)
		acc += (unsigned)f((int)(i & 0xffff));
	double t = now() - t0;
	if (acc == 42)
		printf(" ");
	return t / (double)calls * 1e9;
}

static int (*bench_real_nop)(int);
static int gated_c_nop(int x)
{
	int t = H->gate_enter_c();
	int r = bench_real_nop(x);
	H->gate_exit_c(t);
	return r;
}

static double per_call_export_ns(CUresult (*fn)(int *), long calls)
{
	CUresult (*volatile f)(int *) = fn;
	int n;
	double t0 = now();
	for (long i = 0; i < calls; i++)
		f(&n);
	return (now() - t0) / (double)calls * 1e9;
}

static int run_bench(long calls)
{
	bench_real_nop = H->real("cuFakeNop");
	CUresult (*real_count)(int *) = H->real("cuDeviceGetCount");
	if (!bench_real_nop || !real_count)
		die("no real functions");
	/* warm up */
	per_call_ns(bench_real_nop, calls / 10);
	per_call_ns(apis[1].nop, calls / 10);
	double direct = per_call_ns(bench_real_nop, calls);
	double gated = per_call_ns(apis[1].nop, calls);
	double c_gated = per_call_ns(gated_c_nop, calls);
	double direct_e = per_call_export_ns(real_count, calls);
	double export_e = per_call_export_ns(cuDeviceGetCount, calls);
	printf("bench (%s fence, %ld calls each):\n", H->gate_fence_name(), calls);
	printf("  direct call of the real function   %6.2f ns\n", direct);
	printf("  through a gated stub (dlsym/gpa)   %6.2f ns  (+%.2f ns)\n", gated, gated - direct);
	printf("  replacement-style gs_gate_enter_c  %6.2f ns  (+%.2f ns)\n", c_gated, c_gated - direct);
	printf("  direct cuDeviceGetCount            %6.2f ns\n", direct_e);
	printf("  exported cuDeviceGetCount (gated)  %6.2f ns  (+%.2f ns)\n", export_e, export_e - direct_e);
	return 0;
}

static int need_agent(void)
{
	H = NULL;
	const struct gs_interpose_test_hooks *(*get)(void) =
		(const struct gs_interpose_test_hooks *(*)(void))dlsym(RTLD_DEFAULT, GPUSNAP_TEST_HOOKS_SYMBOL);
	if (get)
		H = get();
	if (!H) {
		printf("SKIP: libgpusnap.so is not preloaded\n");
		return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *mode = argc > 1 ? argv[1] : "results";
	load_apis();
	if (!strcmp(mode, "results"))
		return check_results(stdout) ? 1 : 0;
	if (!need_agent())
		return 77;
	if (!strcmp(mode, "gate"))
		return run_gate_tests();
	if (!strcmp(mode, "stress"))
		return run_stress(argc > 2 ? atoi(argv[2]) : 16, argc > 3 ? atoi(argv[3]) : 1000);
	if (!strcmp(mode, "bench"))
		return run_bench(argc > 2 ? atol(argv[2]) : 20000000L);
	fprintf(stderr, "usage: interpose_app results|gate|stress [THREADS] [CYCLES]|bench [CALLS]\n");
	return 2;
}
