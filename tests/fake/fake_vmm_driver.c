/*
 * fake_vmm_driver.c - libfakevmm.so, a stand-in for libcuda.so.1 that both
 * the agent (inside the app) and the gpusnap CLI load through GPUSNAP_LIBCUDA,
 * so the agent's fast path runs end to end without a GPU
 * (tests/agent/agent_app.c, tests/cli/t4002-agent-fake.sh).
 *
 * "Device memory" is host memory: a reservation is an mmap(PROT_NONE), a
 * physical allocation (cuMemCreate) a memfd, cuMemMap maps the memfd at the
 * reserved address and cuMemSetAccess makes it readable and writable. The
 * app's test code reads and writes its data through the device pointers, and
 * copies are memcpy. Asynchronous copies on a stream of cuStreamCreate are
 * deferred, as on a GPU: they happen, in stream order, only when something
 * waits for them (cuEventSynchronize/Query on an event recorded behind them,
 * cuStreamSynchronize, cuCtxSynchronize, a synchronous copy). So a caller
 * that reuses or reads a host buffer before waiting for its copy sees wrong
 * data, as it would with real DMA. Other work is done at once.
 *
 * The device queries and the checkpoint API (a state file per PID under
 * FAKE_CUDA_DIR, "<state> <gpus>") are fake_cuda.c's, included below. The
 * live physical bytes and allocations of each process are written to
 * FAKE_CUDA_DIR/<pid>.phys and <pid>.handles whenever they change, so a test
 * can see that suspend released them all and that nothing leaked. Handles are
 * checked and reference-counted as the driver does, so a handle passed
 * through untranslated or released twice is refused; the bytes registered with
 * cuMemHostRegister (pinned) go to <pid>.pinned, so a test can see that
 * nothing stays pinned.
 *
 * Devices: FAKE_CUDA_GPUS of them (default 1), each with its primary
 * context. Physical memory belongs to the device its properties name, and a
 * mapping keeps the access cuMemSetAccess gave each device (cuMemGetAccess
 * answers it); the host's protection of a mapping follows its own device's
 * access. cuPointerGetAttribute says a pointer's device, memory type, pool and
 * whether it is managed, so a test sees where an allocation was made.
 *
 * The driver's own allocations (cuMemAlloc, stream-ordered ones, managed
 * memory; what the agent hands to the driver) are host memory too, 512-byte
 * aligned as cudaMalloc's are, recorded with their kind, device and pool.
 * Memory pools: each device's default pool and current pool
 * (cuDeviceGetMemPool/SetMemPool, which takes only a pool of that device),
 * pools located on a device or on the host, with handle types and an access
 * list. Stream capture: a stream of cuStreamCreate can be captured
 * (cuStreamBeginCapture_v2 .. cuStreamEndCapture); host functions and
 * stream-ordered frees issued meanwhile become the graph's nodes, run when the
 * graph is launched (an allocation while capturing is made at once); outside
 * a capture a host function runs at once, after the stream's queued copies.
 *
 * Linked with -Bsymbolic: the addresses cuGetProcAddress hands out are this
 * library's own, as dlsym on it gives, even though the preloaded agent
 * exports the same names.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.c"
#include "core/fingerprint.h"

typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

#define FAKE_INVALID_VALUE 1
#define FAKE_OUT_OF_MEMORY 2
#define FAKE_INVALID_CONTEXT 201
#define FAKE_INVALID_HANDLE 400
#define FAKE_NOT_READY 600
#define FAKE_ILLEGAL_ADDRESS 700
#define FAKE_NOT_FOUND 500
#define FAKE_NOT_SUPPORTED 801
#define FAKE_INVALID_DEVICE 101
#define FAKE_GRANULARITY (2ULL << 20)
#define FAKE_MAX_DEVICES 8
#define FAKE_ALLOC_ALIGN 512 /* what cudaMalloc gives */
#define FAKE_TOTAL_MEM (80ULL << 30)

/*
 * One physical allocation: a memfd of `size` bytes. The handle is its address,
 * checked against the list of live ones (a handle the driver never gave, e.g. an
 * untranslated virtual one, is refused). As in the driver, the memory lives until
 * every reference is released (cuMemCreate, cuMemRetainAllocationHandle) and
 * every mapping unmapped.
 */
struct fake_phys {
	int fd;
	size_t size;
	int refs, maps;
	unsigned char prop[32]; /* CUmemAllocationProp */
	struct fake_phys *next;
};
struct fake_map {
	CUdeviceptr va;
	size_t size;
	struct fake_phys *ph;
	int access[FAKE_MAX_DEVICES]; /* CUmemAccess_flags per device: 0 none, 1 read, 3 read and write */
	struct fake_map *next;
};

static int64_t live_phys_bytes, live_phys_handles;
static struct fake_phys *phys_list;
static struct fake_map *map_list;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t phys_file_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Contexts: each device's primary context (active while retained) and those
 * of cuCtxCreate. A destroyed context stays allocated (so its handle is never
 * reused) but is dead: making it current fails, its streams are dead (copies
 * on them fail), and its kernels are dropped.
 */
struct fake_ctx {
	int dev;
	bool primary, alive;
	int refs;            /* primary: retains */
	int sticky;          /* an error its work hit (a kernel whose memory went away): every later sync returns it */
	size_t stack;        /* CU_LIMIT_STACK_SIZE as set; stack_set false: the default, 1024 */
	bool stack_set;
	struct fake_ctx *next;
};
static struct fake_ctx primary_ctx[FAKE_MAX_DEVICES]; /* device i's primary context */
static struct fake_ctx *created_ctxs;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct fake_ctx *current_ctx;

static void write_number(const char *dir, const char *suffix, long long v)
{
	char path[512], tmp[520];
	snprintf(path, sizeof(path), "%s/%d.%s", dir, (int)getpid(), suffix);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (f) {
		fprintf(f, "%lld\n", v);
		if (fclose(f) == 0)
			rename(tmp, path);
	}
}

/*
 * FAKE_CUDA_DIR/<pid>.phys = live physical bytes of this process, <pid>.handles =
 * live physical allocations (written under a lock, so in order).
 */
static void publish_phys(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return;
	pthread_mutex_lock(&phys_file_lock);
	write_number(dir, "phys", (long long)__atomic_load_n(&live_phys_bytes, __ATOMIC_RELAXED));
	write_number(dir, "handles", (long long)__atomic_load_n(&live_phys_handles, __ATOMIC_RELAXED));
	pthread_mutex_unlock(&phys_file_lock);
}

/* vmm_lock held */
static struct fake_phys *find_phys(CUmemGenericAllocationHandle h)
{
	for (struct fake_phys *p = phys_list; p; p = p->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)p == h)
			return p;
	return NULL;
}

/* Frees ph once nothing holds it. vmm_lock held; returns true if it was freed. */
static bool phys_maybe_free(struct fake_phys *ph)
{
	if (ph->refs > 0 || ph->maps > 0)
		return false;
	for (struct fake_phys **pp = &phys_list; *pp; pp = &(*pp)->next)
		if (*pp == ph) {
			*pp = ph->next;
			break;
		}
	close(ph->fd);
	__atomic_sub_fetch(&live_phys_bytes, (int64_t)ph->size, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&live_phys_handles, 1, __ATOMIC_RELAXED);
	free(ph);
	return true;
}

/* contexts */
static bool ctx_alive(const struct fake_ctx *c)
{
	pthread_mutex_lock(&ctx_lock);
	bool alive = c && c->alive;
	pthread_mutex_unlock(&ctx_lock);
	return alive;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	if (!ctx)
		return FAKE_INVALID_VALUE;
	*ctx = current_ctx;
	return 0;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (ctx && !ctx_alive(ctx))
		return FAKE_INVALID_CONTEXT;
	current_ctx = ctx;
	return 0;
}
EXPORT CUresult cuCtxGetDevice(int *dev)
{
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	*dev = current_ctx->dev;
	return 0;
}
EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned *version)
{
	if (!ctx_alive(ctx))
		return FAKE_INVALID_CONTEXT;
	*version = 12000;
	return 0;
}
/*
 * Limits: only the stack size (bytes per GPU thread; a GPU sizes the
 * context's local memory from it). FAKE_CUDA_DIR/<pid>.stack = the sum over
 * the live contexts, written whenever it changes, so a test sees what the contexts
 * hold while the process is suspended and after.
 */
#define FAKE_DEFAULT_STACK 1024
static size_t ctx_stack(const struct fake_ctx *c) { return c->stack_set ? c->stack : FAKE_DEFAULT_STACK; }
static void publish_stack(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return;
	long long sum = 0;
	pthread_mutex_lock(&ctx_lock);
	for (int d = 0; d < FAKE_MAX_DEVICES; d++)
		if (primary_ctx[d].alive)
			sum += (long long)ctx_stack(&primary_ctx[d]);
	for (struct fake_ctx *c = created_ctxs; c; c = c->next)
		if (c->alive)
			sum += (long long)ctx_stack(c);
	pthread_mutex_unlock(&ctx_lock);
	write_number(dir, "stack", sum);
}
EXPORT CUresult cuCtxGetLimit(size_t *value, int limit)
{
	if (!value || limit != 0)
		return FAKE_INVALID_VALUE;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	*value = ctx_stack(current_ctx);
	return 0;
}
EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
	if (limit != 0)
		return FAKE_INVALID_VALUE;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	current_ctx->stack = value;
	current_ctx->stack_set = true;
	publish_stack();
	return 0;
}
static bool device_ok(int dev) { return dev >= 0 && dev < ngpus() && dev < FAKE_MAX_DEVICES; }
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, int dev)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	struct fake_ctx *c = &primary_ctx[dev];
	c->dev = dev;
	c->primary = true;
	c->refs++;
	c->alive = true;
	pthread_mutex_unlock(&ctx_lock);
	*ctx = c;
	publish_stack();
	return 0;
}
static void ctx_died(struct fake_ctx *c);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	struct fake_ctx *c = &primary_ctx[dev];
	pthread_mutex_lock(&ctx_lock);
	bool died = c->refs > 0 && --c->refs == 0;
	if (died)
		c->alive = false;
	pthread_mutex_unlock(&ctx_lock);
	if (died)
		ctx_died(c);
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	*flags = 0;
	*active = ctx_alive(&primary_ctx[dev]);
	return 0;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, int dev)
{
	(void)flags;
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	struct fake_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return FAKE_OUT_OF_MEMORY;
	c->dev = dev;
	c->alive = true;
	pthread_mutex_lock(&ctx_lock);
	c->next = created_ctxs;
	created_ctxs = c;
	pthread_mutex_unlock(&ctx_lock);
	current_ctx = c;
	*pctx = c;
	publish_stack();
	return 0;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	struct fake_ctx *c = ctx;
	pthread_mutex_lock(&ctx_lock);
	bool ok = c && !c->primary && c->alive;
	if (ok)
		c->alive = false;
	pthread_mutex_unlock(&ctx_lock);
	if (!ok)
		return FAKE_INVALID_CONTEXT;
	ctx_died(c);
	if (current_ctx == c)
		current_ctx = NULL;
	return 0;
}
/*
 * A capture in global mode (cuStreamBeginCapture_v2 mode 0), as the driver
 * keeps it: while it is open, another thread's call that could touch it
 * (cuCtxSynchronize, cuMemAlloc, cuMemHostRegister, cuModuleLoadData)
 * fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
 * capture, whose cuStreamEndCapture then fails with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. One at a time is enough here.
 */
#define FAKE_CAPTURE_UNSUPPORTED 900
#define FAKE_CAPTURE_INVALIDATED 901
static struct {
	pthread_mutex_t lock;
	void *stream; /* the stream being captured in global mode; NULL: none */
	pid_t tid;    /* the thread that began it */
	bool invalidated;
} global_capture = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* 0, or FAKE_CAPTURE_UNSUPPORTED (the capture invalidated) when another thread's global capture is open. */
static CUresult capture_forbids(void)
{
	pthread_mutex_lock(&global_capture.lock);
	bool forbidden = global_capture.stream && global_capture.tid != (pid_t)syscall(SYS_gettid);
	if (forbidden)
		global_capture.invalidated = true;
	pthread_mutex_unlock(&global_capture.lock);
	return forbidden ? FAKE_CAPTURE_UNSUPPORTED : 0;
}

static void flush_all(void);
static CUresult ctx_wait_kernels(struct fake_ctx *c, bool block);
/* Waits for every copy of every stream, and for the kernels of the current context. */
EXPORT CUresult cuCtxSynchronize(void)
{
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	CUresult forbidden = capture_forbids();
	if (forbidden)
		return forbidden;
	flush_all();
	return ctx_wait_kernels(current_ctx, true);
}

/*
 * Streams and events. A stream queues its asynchronous copies; `issued`
 * counts copies queued so far and `done` those performed. An event records a
 * stream and its `issued` count; waiting for it performs the stream's copies
 * up to there. One lock serializes all of it (a test driver, not a fast one).
 */
struct fake_copy {
	void *dst;
	const void *src;
	size_t n;
};
struct fake_graph;
struct fake_stream {
	struct fake_stream *next; /* every live stream, for cuCtxSynchronize */
	struct fake_copy *q;      /* queued copies, oldest first */
	size_t nq, capq;
	uint64_t issued, done;
	CUcontext ctx;             /* current when it was created */
	bool dead;                 /* its context is gone */
	struct fake_graph *capture; /* being captured into this graph */
};
struct fake_event {
	struct fake_stream *s; /* NULL: recorded on a stream without deferred work */
	uint64_t seq;
};
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_stream *streams;

static struct fake_stream *find_stream_locked(CUstream h)
{
	for (struct fake_stream *s = streams; s; s = s->next)
		if ((void *)s == (void *)h)
			return s;
	return NULL;
}

/* Performs s's queued copies up to number `upto`. */
static void flush_locked(struct fake_stream *s, uint64_t upto)
{
	size_t k = 0;
	while (s->done < upto && k < s->nq) {
		if (s->q[k].src)
			memcpy(s->q[k].dst, s->q[k].src, s->q[k].n);
		else
			memset(s->q[k].dst, 0, s->q[k].n); /* a memset */
		s->done++;
		k++;
	}
	if (k) /* s->q is NULL on a stream that never queued a copy */
		memmove(s->q, s->q + k, (s->nq - k) * sizeof(*s->q));
	s->nq -= k;
}

/*
 * Performs every copy queued on stream h, as waiting for it does: returns the
 * stream (NULL: not one of ours); *dead when its context is gone, and then
 * nothing is performed.
 */
static struct fake_stream *flush_stream(CUstream h, bool *dead)
{
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	*dead = s && s->dead;
	if (s && !*dead)
		flush_locked(s, s->issued);
	pthread_mutex_unlock(&stream_lock);
	return s;
}

static void flush_all(void)
{
	pthread_mutex_lock(&stream_lock);
	for (struct fake_stream *s = streams; s; s = s->next)
		flush_locked(s, s->issued);
	pthread_mutex_unlock(&stream_lock);
}

/* A copy on stream h: queued on one of ours, done at once on any other (the default stream, the app's). */
static CUresult copy_async(void *dst, const void *src, size_t n, CUstream h)
{
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	if (s && s->dead) {
		pthread_mutex_unlock(&stream_lock);
		return FAKE_INVALID_HANDLE;
	}
	if (s && s->nq == s->capq) {
		size_t cap = s->capq ? s->capq * 2 : 16;
		struct fake_copy *q = realloc(s->q, cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&stream_lock);
			return FAKE_OUT_OF_MEMORY;
		}
		s->q = q;
		s->capq = cap;
	}
	if (s) {
		s->q[s->nq++] = (struct fake_copy){ dst, src, n };
		s->issued++;
	} else if (src) {
		memcpy(dst, src, n);
	} else {
		memset(dst, 0, n);
	}
	pthread_mutex_unlock(&stream_lock);
	return 0;
}

EXPORT CUresult cuStreamCreate(CUstream *h, unsigned flags)
{
	(void)flags;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	struct fake_stream *s = calloc(1, sizeof(*s));
	if (!h || !s) {
		free(s);
		return h ? FAKE_OUT_OF_MEMORY : FAKE_INVALID_VALUE;
	}
	s->ctx = current_ctx;
	pthread_mutex_lock(&stream_lock);
	s->next = streams;
	streams = s;
	pthread_mutex_unlock(&stream_lock);
	*h = s;
	return 0;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream h)
{
	pthread_mutex_lock(&stream_lock);
	for (struct fake_stream **p = &streams; *p; p = &(*p)->next)
		if ((void *)*p == (void *)h) {
			struct fake_stream *s = *p;
			flush_locked(s, s->issued);
			*p = s->next;
			free(s->q);
			free(s);
			break;
		}
	pthread_mutex_unlock(&stream_lock);
	return 0;
}
EXPORT CUresult cuStreamSynchronize(CUstream h)
{
	bool dead;
	flush_stream(h, &dead);
	return dead ? FAKE_INVALID_HANDLE : 0;
}
EXPORT CUresult cuStreamIsCapturing(CUstream h, int *status)
{
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	*status = s && s->capture ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
	pthread_mutex_unlock(&stream_lock);
	return 0;
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	(void)flags;
	if (!e)
		return FAKE_INVALID_VALUE;
	*e = calloc(1, sizeof(struct fake_event));
	return *e ? 0 : FAKE_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { free(e); return 0; }
EXPORT CUresult cuEventRecord(CUevent e, CUstream h)
{
	struct fake_event *ev = e;
	if (!ev)
		return FAKE_INVALID_VALUE;
	pthread_mutex_lock(&stream_lock);
	ev->s = find_stream_locked(h);
	ev->seq = ev->s ? ev->s->issued : 0;
	pthread_mutex_unlock(&stream_lock);
	return 0;
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
	struct fake_event *ev = e;
	if (!ev)
		return FAKE_INVALID_VALUE;
	pthread_mutex_lock(&stream_lock);
	if (ev->s)
		flush_locked(ev->s, ev->seq);
	pthread_mutex_unlock(&stream_lock);
	return 0;
}
/* Done once asked: the work behind it is performed now. */
EXPORT CUresult cuEventQuery(CUevent e) { return cuEventSynchronize(e); }

/*
 * Kernels, for the tests of a suspend waiting for GPU work: cuLaunchKernel's
 * function handle says what the kernel does (modules only for the one below).
 *   FAKE_KERNEL_TIMED (1): runs gridDimX milliseconds;
 *   FAKE_KERNEL_HANG (2): runs until FAKE_CUDA_DIR/<pid>.kernel-done exists;
 *   FAKE_KERNEL_COLLECTIVE (3): step gridDimX of a collective: it creates
 *     FAKE_CUDA_DIR/coll/<step>.<pid> and runs until FAKE_COLL_SIZE (default 2)
 *     processes have created theirs (as an all-reduce waits for every rank).
 * When it ends it sets its kernelParams {CUdeviceptr *dst, size_t *n,
 * unsigned char *value} bytes to value (dst NULL: none). Like copies, a
 * kernel ends only when something looks: cuCtxSynchronize in its context
 * (which blocks until it has), cuStreamSynchronize or cuStreamQuery of its
 * stream. If the memory it writes is unmapped while it runs, it faults
 * instead: its context's later synchronizes return CUDA_ERROR_ILLEGAL_ADDRESS,
 * as on a GPU.
 */
enum {
	FAKE_KERNEL_TIMED = 1,
	FAKE_KERNEL_HANG = 2,
	FAKE_KERNEL_COLLECTIVE = 3,
	FAKE_KERNEL_ZERO_SCAN = 4,
	FAKE_KERNEL_FINGERPRINT = 5,
};

/*
 * The agent's own kernel (src/agent/movement/agent_zero_scan.c): cuModuleLoadData
 * takes PTX that defines the entry gs_zero_scan (anything else:
 * CUDA_ERROR_INVALID_IMAGE; FAKE_CUDA_NO_MODULES=1: CUDA_ERROR_NOT_SUPPORTED,
 * a driver that refuses), cuModuleGetFunction hands out
 * FAKE_KERNEL_ZERO_SCAN, and its launch runs at once, after the stream's
 * queued copies, as the PTX does: block b reads chunk b's {va, bytes} from
 * its first parameter and writes 1 to the u32 flags[b] of its second when
 * those bytes are all zero, else 0. Loaded modules are counted in
 * FAKE_CUDA_DIR/<pid>.modules, so a test sees the agent unloads its own.
 * The same for the entry gs_fingerprint (src/agent/movement/agent_fingerprint.c,
 * FAKE_KERNEL_FINGERPRINT): its launch adds, for each chunk b of the {va,
 * bytes} table of its first parameter, the chunk's two word sums
 * (src/core/fingerprint.c, the C twin of the PTX) into the u64 sums[2b] and
 * sums[2b + 1] of its second. FAKE_CUDA_FP_FLIP=1 flips bit 0 of every A sum,
 * as a kernel computing something else would: the tests see the agent
 * compare. FAKE_CUDA_NO_FP_MODULE=1 refuses that module alone.
 */
#define FAKE_INVALID_IMAGE 200
static int live_modules;
static void publish_modules(int delta)
{
	int n = __atomic_add_fetch(&live_modules, delta, __ATOMIC_RELAXED);
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (dir)
		write_number(dir, "modules", n);
}
EXPORT CUresult cuModuleLoadData(void **mod, const void *image)
{
	const char *no = getenv("FAKE_CUDA_NO_MODULES");
	if (no && !strcmp(no, "1"))
		return FAKE_NOT_SUPPORTED;
	const char *no_fp = getenv("FAKE_CUDA_NO_FP_MODULE");
	bool fp = image && strstr((const char *)image, ".entry gs_fingerprint(");
	if (fp && no_fp && !strcmp(no_fp, "1"))
		return FAKE_NOT_SUPPORTED;
	if (!mod || !image || (!fp && !strstr((const char *)image, ".entry gs_zero_scan(")))
		return FAKE_INVALID_IMAGE;
	CUresult forbidden = capture_forbids();
	if (forbidden)
		return forbidden;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	*mod = (void *)(uintptr_t)(fp ? 0x5cab : 0x5ca9);
	publish_modules(1);
	return 0;
}
EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name)
{
	if (mod == (void *)(uintptr_t)0x5cab && fn && name && !strcmp(name, "gs_fingerprint")) {
		*fn = (void *)(uintptr_t)FAKE_KERNEL_FINGERPRINT;
		return 0;
	}
	if (mod != (void *)(uintptr_t)0x5ca9 || !fn || !name || strcmp(name, "gs_zero_scan"))
		return FAKE_NOT_FOUND;
	*fn = (void *)(uintptr_t)FAKE_KERNEL_ZERO_SCAN;
	return 0;
}
EXPORT CUresult cuModuleUnload(void *mod)
{
	if (mod != (void *)(uintptr_t)0x5ca9 && mod != (void *)(uintptr_t)0x5cab)
		return FAKE_INVALID_HANDLE;
	publish_modules(-1);
	return 0;
}
static bool all_zero_bytes(const unsigned char *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}
static CUresult run_zero_scan(unsigned blocks, CUstream h, void **params)
{
	bool dead;
	flush_stream(h, &dead); /* the table's copy queued before it */
	if (dead || !params || !params[0] || !params[1])
		return FAKE_INVALID_VALUE;
	const uint64_t *table = (const uint64_t *)(uintptr_t)*(CUdeviceptr *)params[0];
	uint32_t *flags = (uint32_t *)(uintptr_t)*(CUdeviceptr *)params[1];
	for (unsigned b = 0; b < blocks; b++)
		flags[b] = all_zero_bytes((const unsigned char *)(uintptr_t)table[2 * b], table[2 * b + 1]);
	return 0;
}
static CUresult run_fingerprint(unsigned blocks, CUstream h, void **params)
{
	bool dead;
	flush_stream(h, &dead); /* the table's and the sums' copies queued before it */
	if (dead || !params || !params[0] || !params[1])
		return FAKE_INVALID_VALUE;
	const uint64_t *table = (const uint64_t *)(uintptr_t)*(CUdeviceptr *)params[0];
	uint64_t *sums = (uint64_t *)(uintptr_t)*(CUdeviceptr *)params[1];
	const char *flip = getenv("FAKE_CUDA_FP_FLIP");
	for (unsigned b = 0; b < blocks; b++) {
		struct gs_fp_sums s = { 0, 0 };
		gs_fp_add(&s, (const void *)(uintptr_t)table[2 * b], table[2 * b + 1], 0);
		sums[2 * b] += s.a ^ (flip && !strcmp(flip, "1"));
		sums[2 * b + 1] += s.b;
	}
	return 0;
}
struct fake_kernel {
	struct fake_ctx *ctx;
	struct fake_stream *stream;
	int kind;
	double until;
	unsigned step;
	unsigned char *dst;
	size_t n;
	unsigned char value;
	bool faulted;
	struct fake_kernel *next;
};
static struct fake_kernel *kernels;
static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;

static double fake_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool kernel_ended(const struct fake_kernel *k)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	char path[4096];
	switch (k->kind) {
	case FAKE_KERNEL_TIMED:
		return fake_now() >= k->until;
	case FAKE_KERNEL_HANG:
		snprintf(path, sizeof(path), "%s/%d.kernel-done", dir ? dir : ".", (int)getpid());
		return access(path, F_OK) == 0;
	default: {
		const char *g = getenv("FAKE_COLL_SIZE");
		int want = g && atoi(g) > 0 ? atoi(g) : 2, have = 0;
		snprintf(path, sizeof(path), "%s/coll", dir ? dir : ".");
		DIR *d = opendir(path);
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "%u.", k->step);
		for (struct dirent *e; d && (e = readdir(d));)
			have += !strncmp(e->d_name, prefix, strlen(prefix));
		if (d)
			closedir(d);
		return have >= want;
	}
	}
}

/*
 * Ends the kernels of ctx (stream: only those of that stream) that are done.
 * Returns how many are still running; *sticky gets the context's error.
 */
static int reap_kernels(struct fake_ctx *ctx, struct fake_stream *stream, int *sticky)
{
	int running = 0;
	pthread_mutex_lock(&kernel_lock);
	for (struct fake_kernel **pp = &kernels; *pp;) {
		struct fake_kernel *k = *pp;
		if (k->ctx != ctx || (stream && k->stream != stream)) {
			pp = &k->next;
			continue;
		}
		if (!kernel_ended(k)) {
			running++;
			pp = &k->next;
			continue;
		}
		if (k->faulted)
			ctx->sticky = FAKE_ILLEGAL_ADDRESS;
		else if (k->dst)
			memset(k->dst, k->value, k->n);
		*pp = k->next;
		free(k);
	}
	*sticky = ctx->sticky;
	pthread_mutex_unlock(&kernel_lock);
	return running;
}

/*
 * FAKE_CUDA_DIR/<pid>.kernel-waiting: made when a thread starts to wait inside
 * the driver for a kernel that still runs, so a test knows it is in there
 * (rather than guessing how long getting there takes).
 */
static void say_waiting(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/%d.kernel-waiting", dir ? dir : ".", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

static CUresult ctx_wait_kernels(struct fake_ctx *c, bool block)
{
	int sticky = 0;
	bool said = false;
	while (reap_kernels(c, NULL, &sticky) && block) {
		if (!said)
			say_waiting();
		said = true;
		usleep(1000);
	}
	return sticky;
}

/* A context died: its streams with it, its kernels dropped. */
static void ctx_died(struct fake_ctx *c)
{
	publish_stack();
	pthread_mutex_lock(&stream_lock);
	for (struct fake_stream *s = streams; s; s = s->next)
		if (s->ctx == c)
			s->dead = true;
	pthread_mutex_unlock(&stream_lock);
	pthread_mutex_lock(&kernel_lock);
	for (struct fake_kernel **pp = &kernels; *pp;) {
		struct fake_kernel *k = *pp;
		if (k->ctx == c) {
			*pp = k->next;
			free(k);
		} else {
			pp = &k->next;
		}
	}
	pthread_mutex_unlock(&kernel_lock);
}

/* [p, p + size) is being unmapped: a running kernel that writes there faults. */
static void kernels_lose_memory(CUdeviceptr p, size_t size)
{
	pthread_mutex_lock(&kernel_lock);
	for (struct fake_kernel *k = kernels; k; k = k->next)
		if (k->dst && (CUdeviceptr)(uintptr_t)k->dst < p + size && p < (CUdeviceptr)(uintptr_t)k->dst + k->n)
			k->faulted = true;
	pthread_mutex_unlock(&kernel_lock);
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			       unsigned shmem, CUstream h, void **params, void **extra)
{
	(void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)extra;
	int kind = (int)(uintptr_t)f;
	if (kind < FAKE_KERNEL_TIMED || kind > FAKE_KERNEL_FINGERPRINT)
		return FAKE_INVALID_VALUE;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	if (kind == FAKE_KERNEL_ZERO_SCAN)
		return run_zero_scan(gx, h, params);
	if (kind == FAKE_KERNEL_FINGERPRINT)
		return run_fingerprint(gx, h, params);
	struct fake_kernel *k = calloc(1, sizeof(*k));
	if (!k)
		return FAKE_OUT_OF_MEMORY;
	k->ctx = current_ctx;
	pthread_mutex_lock(&stream_lock);
	k->stream = find_stream_locked(h);
	pthread_mutex_unlock(&stream_lock);
	k->kind = kind;
	k->until = fake_now() + gx / 1000.0;
	k->step = gx;
	if (params && params[0]) {
		k->dst = (unsigned char *)(uintptr_t)*(CUdeviceptr *)params[0];
		k->n = *(size_t *)params[1];
		k->value = *(unsigned char *)params[2];
	}
	if (kind == FAKE_KERNEL_COLLECTIVE) {
		const char *dir = getenv("FAKE_CUDA_DIR");
		char path[4096];
		snprintf(path, sizeof(path), "%s/coll", dir ? dir : ".");
		mkdir(path, 0700);
		snprintf(path, sizeof(path), "%s/coll/%u.%d", dir ? dir : ".", gx, (int)getpid());
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
	}
	pthread_mutex_lock(&kernel_lock);
	k->next = kernels;
	kernels = k;
	pthread_mutex_unlock(&kernel_lock);
	return 0;
}

/* Copies are performed; kernels that ended are finished. NOT_READY while one of the stream's runs. */
EXPORT CUresult cuStreamQuery(CUstream h)
{
	bool dead;
	struct fake_stream *s = flush_stream(h, &dead);
	if (dead)
		return FAKE_INVALID_HANDLE;
	if (!s || !ctx_alive(s->ctx))
		return 0;
	int sticky = 0;
	return reap_kernels(s->ctx, s, &sticky) ? FAKE_NOT_READY : sticky;
}


/* copies */
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(dst, (const void *)(uintptr_t)src, n, s);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy_async((void *)(uintptr_t)dst, src, n, s);
}
/* a memset is a copy of zeros: queued the same way (src NULL) */
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
	if (v)
		return 1; /* only zeros are ever set by the agent */
	return copy_async((void *)(uintptr_t)dst, NULL, n, s);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	flush_all(); /* the legacy default stream waits for the other streams */
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

/* pinned host memory: only counted, FAKE_CUDA_DIR/<pid>.pinned = bytes registered now */
struct fake_pin {
	void *p;
	size_t n;
};
static struct fake_pin *pins;
static size_t npins, cap_pins;
static int64_t pinned_bytes;
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;

static void publish_pinned_locked(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return;
	char path[512], tmp[520];
	snprintf(path, sizeof(path), "%s/%d.pinned", dir, (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (f) {
		fprintf(f, "%lld\n", (long long)pinned_bytes);
		if (fclose(f) == 0)
			rename(tmp, path);
	}
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	(void)flags;
	if (!p || !n)
		return FAKE_INVALID_VALUE;
	CUresult forbidden = capture_forbids();
	if (forbidden)
		return forbidden;
	pthread_mutex_lock(&pin_lock);
	if (npins == cap_pins) {
		size_t cap = cap_pins ? cap_pins * 2 : 64;
		struct fake_pin *np = realloc(pins, cap * sizeof(*np));
		if (!np) {
			pthread_mutex_unlock(&pin_lock);
			return FAKE_OUT_OF_MEMORY;
		}
		pins = np;
		cap_pins = cap;
	}
	pins[npins++] = (struct fake_pin){ p, n };
	pinned_bytes += (int64_t)n;
	publish_pinned_locked();
	pthread_mutex_unlock(&pin_lock);
	return 0;
}
EXPORT CUresult cuMemHostUnregister(void *p)
{
	CUresult r = FAKE_INVALID_VALUE; /* like the driver: not registered */
	pthread_mutex_lock(&pin_lock);
	for (size_t i = 0; i < npins; i++)
		if (pins[i].p == p) {
			pinned_bytes -= (int64_t)pins[i].n;
			pins[i] = pins[--npins];
			publish_pinned_locked();
			r = 0;
			break;
		}
	pthread_mutex_unlock(&pin_lock);
	return r;
}

/* the driver's own allocations (cuMemAlloc, stream-ordered, managed): see the end of this file */
/* Only the agent's answer (from its registry) is of interest; the fake knows no ranges. */
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	(void)base;
	(void)size;
	(void)p;
	return FAKE_INVALID_VALUE;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	*total = FAKE_TOTAL_MEM;
	*free_bytes = FAKE_TOTAL_MEM - (size_t)__atomic_load_n(&live_phys_bytes, __ATOMIC_RELAXED);
	return 0;
}

/* virtual memory management */
EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option)
{
	(void)prop;
	(void)option;
	*g = FAKE_GRANULARITY;
	return 0;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
	(void)addr;
	(void)flags;
	if (!p || !size || size % FAKE_GRANULARITY)
		return FAKE_INVALID_VALUE;
	if (align < FAKE_GRANULARITY)
		align = FAKE_GRANULARITY;
	char *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return FAKE_OUT_OF_MEMORY;
	uintptr_t start = ((uintptr_t)m + align - 1) / align * align;
	if (start > (uintptr_t)m)
		munmap(m, start - (uintptr_t)m);
	size_t tail = (uintptr_t)m + size + align - (start + size);
	if (tail)
		munmap((void *)(start + size), tail);
	*p = start;
	return 0;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	return munmap((void *)(uintptr_t)p, size) ? FAKE_INVALID_VALUE : 0;
}

static bool fake_prop_rdma_refused(const void *prop);
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long flags)
{
	if (!h || !size || size % FAKE_GRANULARITY || !prop || flags)
		return FAKE_INVALID_VALUE;
	const int *p = prop; /* CUmemAllocationProp: type, handle types, location type, location id */
	if (p[2] != 1 || p[3] < 0 || p[3] >= ngpus() || p[3] >= FAKE_MAX_DEVICES)
		return p[2] != 1 ? FAKE_INVALID_VALUE : FAKE_INVALID_DEVICE;
	if (fake_prop_rdma_refused(prop))
		return FAKE_NOT_SUPPORTED;
	struct fake_phys *ph = calloc(1, sizeof(*ph));
	if (!ph)
		return FAKE_OUT_OF_MEMORY;
	char name[32];
	snprintf(name, sizeof(name), "fake-vram-d%d", p[3]); /* the device, for an importer (share block below) */
	ph->fd = memfd_create(name, MFD_CLOEXEC);
	if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size)) {
		if (ph->fd >= 0)
			close(ph->fd);
		free(ph);
		return FAKE_OUT_OF_MEMORY;
	}
	/* FAKE_VMM_DIRTY_FRESH=1: fresh memory holds stale bytes, as a real GPU's does (a memfd reads zero) */
	const char *dirty = getenv("FAKE_VMM_DIRTY_FRESH");
	if (dirty && !strcmp(dirty, "1")) {
		void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, ph->fd, 0);
		if (m != MAP_FAILED) {
			memset(m, 0xa5, size);
			munmap(m, size);
		}
	}
	ph->size = size;
	ph->refs = 1;
	memcpy(ph->prop, prop, sizeof(ph->prop));
	pthread_mutex_lock(&vmm_lock);
	ph->next = phys_list;
	phys_list = ph;
	__atomic_add_fetch(&live_phys_bytes, (int64_t)size, __ATOMIC_RELAXED);
	__atomic_add_fetch(&live_phys_handles, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&vmm_lock);
	*h = (CUmemGenericAllocationHandle)(uintptr_t)ph;
	publish_phys();
	return 0;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&vmm_lock);
	struct fake_phys *ph = find_phys(h);
	if (!ph || ph->refs <= 0) {
		pthread_mutex_unlock(&vmm_lock);
		return FAKE_INVALID_VALUE;
	}
	ph->refs--;
	bool freed = phys_maybe_free(ph);
	pthread_mutex_unlock(&vmm_lock);
	if (freed)
		publish_phys();
	return 0;
}

/* Mapped without access, like the driver: cuMemSetAccess grants it. */
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
{
	if (flags || !size || size % FAKE_GRANULARITY || offset % FAKE_GRANULARITY)
		return FAKE_INVALID_VALUE;
	if (offset)
		return FAKE_NOT_SUPPORTED; /* as driver 580 answers: the offset "currently must be zero" */
	struct fake_map *fm = malloc(sizeof(*fm));
	if (!fm)
		return FAKE_OUT_OF_MEMORY;
	pthread_mutex_lock(&vmm_lock);
	struct fake_phys *ph = find_phys(h);
	CUresult r = 0;
	for (struct fake_map *m = map_list; m && !r; m = m->next)
		if (p < m->va + m->size && m->va < p + size)
			r = FAKE_INVALID_VALUE; /* already mapped */
	if (!r && (!ph || ph->refs <= 0 || offset + size > ph->size))
		r = FAKE_INVALID_VALUE;
	if (!r && mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) == MAP_FAILED)
		r = FAKE_INVALID_VALUE;
	if (!r) {
		*fm = (struct fake_map){ .va = p, .size = size, .ph = ph, .next = map_list };
		map_list = fm;
		ph->maps++;
	} else {
		free(fm);
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* Unmaps the whole mappings inside [p, p+size); one cut in two is refused, as by the driver. */
/*
 * For tests of a failed release: while FAKE_CUDA_DIR/<pid>.fail_unmap holds a
 * number N, each cuMemUnmap counts it down and the one that finds 1 fails
 * (and removes the file) without unmapping anything.
 */
static bool unmap_should_fail(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return false;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%d.fail_unmap", dir, (int)getpid());
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	long n = 0;
	int got = fscanf(f, "%ld", &n);
	fclose(f);
	if (got != 1 || n <= 1) {
		unlink(path);
		return got == 1;
	}
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%ld\n", n - 1);
		fclose(f);
	}
	return false;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	if (unmap_should_fail())
		return FAKE_INVALID_VALUE;
	kernels_lose_memory(p, size);
	pthread_mutex_lock(&vmm_lock);
	int found = 0, partial = 0;
	for (struct fake_map *m = map_list; m; m = m->next)
		if (p < m->va + m->size && m->va < p + size) {
			found++;
			partial |= m->va < p || m->va + m->size > p + size;
		}
	if (!found || partial) {
		pthread_mutex_unlock(&vmm_lock);
		return FAKE_INVALID_VALUE;
	}
	bool freed = false;
	for (struct fake_map **pp = &map_list; *pp;) {
		struct fake_map *m = *pp;
		if (m->va >= p && m->va + m->size <= p + size) {
			*pp = m->next;
			mmap((void *)(uintptr_t)m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
			     -1, 0);
			m->ph->maps--;
			freed |= phys_maybe_free(m->ph);
			free(m);
		} else {
			pp = &m->next;
		}
	}
	pthread_mutex_unlock(&vmm_lock);
	if (freed)
		publish_phys();
	return 0;
}

/*
 * Records each device's access on the mappings in [p, p+size); the host's
 * protection of a mapping follows its own device's access (none, read, or
 * read and write), so a read-only mapping faults on a write.
 */
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count)
{
	if (!desc || !count)
		return FAKE_INVALID_VALUE;
	const int *d = desc; /* CUmemAccessDesc: location type, location id, flags */
	for (size_t i = 0; i < count; i++)
		if (d[3 * i] != 1 || d[3 * i + 1] < 0 || d[3 * i + 1] >= ngpus() || d[3 * i + 1] >= FAKE_MAX_DEVICES)
			return FAKE_INVALID_DEVICE;
	CUresult r = 0;
	pthread_mutex_lock(&vmm_lock);
	for (struct fake_map *m = map_list; m; m = m->next) {
		if (!(p < m->va + m->size && m->va < p + size))
			continue;
		for (size_t i = 0; i < count; i++)
			m->access[d[3 * i + 1]] = d[3 * i + 2];
		const int *prop = (const int *)m->ph->prop;
		int own = m->access[prop[3]];
		int prot = own == 3 ? PROT_READ | PROT_WRITE : own == 1 ? PROT_READ : PROT_NONE;
		if (mprotect((void *)(uintptr_t)m->va, m->size, prot))
			r = FAKE_INVALID_VALUE;
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* The access device location->id has to the mapping at p. */
EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const void *location, CUdeviceptr p)
{
	const int *loc = location;
	if (!flags || !loc || loc[0] != 1 || loc[1] < 0 || loc[1] >= FAKE_MAX_DEVICES)
		return FAKE_INVALID_VALUE;
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	for (struct fake_map *m = map_list; m && r; m = m->next)
		if (p >= m->va && p < m->va + m->size) {
			*flags = (unsigned long long)m->access[loc[1]];
			r = 0;
		}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	for (struct fake_map *m = map_list; m && r; m = m->next)
		if (a >= m->va && a < m->va + m->size && h) {
			m->ph->refs++;
			*h = (CUmemGenericAllocationHandle)(uintptr_t)m->ph;
			r = 0;
		}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(void *prop, CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&vmm_lock);
	struct fake_phys *ph = find_phys(h);
	if (ph && ph->refs > 0 && prop)
		memcpy(prop, ph->prop, sizeof(ph->prop));
	pthread_mutex_unlock(&vmm_lock);
	return ph && ph->refs > 0 && prop ? 0 : FAKE_INVALID_VALUE;
}

/* A new open file of the memfd (as the driver's export is a file of its own each time, not a dup). */
static int reopen_memfd(int fd)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDWR);
}

/* POSIX file descriptors only (type 1): a new open file of the memfd. */
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags)
{
	if (!out || type != 1 || flags)
		return FAKE_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	struct fake_phys *ph = find_phys(h);
	int fd = ph && ph->refs > 0 ? reopen_memfd(ph->fd) : -1;
	pthread_mutex_unlock(&vmm_lock);
	if (fd < 0)
		return FAKE_INVALID_VALUE;
	*(int *)out = fd;
	return 0;
}

/*
 * ---- memory shared between processes (cuMemImportFromShareableHandle) ----
 *
 * An exported handle is a dup of its memfd (above), so it can travel to
 * another process over a Unix socket as the driver's file descriptor does.
 * Importing it makes a physical allocation of this process on the same
 * memfd (its own descriptor): both processes' mappings are the same pages,
 * and the memory lives while any handle, mapping or descriptor of any
 * process holds it, as with the driver. The device and size come from the
 * memfd (its name "fake-vram-d<N>", its length); the properties are those of
 * a plain pinned device allocation with POSIX file descriptors allowed.
 * Imported bytes count in this process's <pid>.phys too, so a test sees an
 * importer let go. An allocation that is not a fake memfd is refused.
 */
static int memfd_device(int fd)
{
	char link[64], target[256];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return -1;
	target[n] = '\0';
	int dev = -1;
	return sscanf(target, "/memfd:fake-vram-d%d", &dev) == 1 ? dev : -1;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type)
{
	if (!h || type != 1)
		return FAKE_INVALID_VALUE;
	int fd = (int)(intptr_t)os_handle;
	struct stat st;
	int dev = memfd_device(fd);
	if (dev < 0 || fstat(fd, &st) || st.st_size <= 0 || (size_t)st.st_size % FAKE_GRANULARITY)
		return FAKE_INVALID_VALUE;
	struct fake_phys *ph = calloc(1, sizeof(*ph));
	if (!ph)
		return FAKE_OUT_OF_MEMORY;
	ph->fd = reopen_memfd(fd); /* the driver's own reference, not the caller's descriptor */
	if (ph->fd < 0 || fcntl(ph->fd, F_SETFD, FD_CLOEXEC)) {
		if (ph->fd >= 0)
			close(ph->fd);
		free(ph);
		return FAKE_OUT_OF_MEMORY;
	}
	int prop[8] = { 1, 1, 1, dev }; /* pinned, POSIX fd, on device dev */
	memcpy(ph->prop, prop, sizeof(ph->prop));
	ph->size = (size_t)st.st_size;
	ph->refs = 1;
	pthread_mutex_lock(&vmm_lock);
	ph->next = phys_list;
	phys_list = ph;
	__atomic_add_fetch(&live_phys_bytes, (int64_t)ph->size, __ATOMIC_RELAXED);
	__atomic_add_fetch(&live_phys_handles, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&vmm_lock);
	*h = (CUmemGenericAllocationHandle)(uintptr_t)ph;
	publish_phys();
	return 0;
}

/* ---- the driver's own allocations, memory pools, stream capture and graphs ---- */

enum fake_alloc_kind { FAKE_DEVICE_ALLOC, FAKE_MANAGED_ALLOC, FAKE_POOL_ALLOC };
struct fake_pool;
struct fake_alloc {
	CUdeviceptr p;
	size_t size;
	enum fake_alloc_kind kind;
	int device;             /* -1: host memory */
	struct fake_pool *pool; /* FAKE_POOL_ALLOC */
	struct fake_alloc *next;
};
/* CUmemPoolProps' head: allocation type, handle types, location type (1 device, 2 host, 3 host NUMA), id */
struct fake_pool {
	int alloc_type, handle_types, loc_type, loc_id;
	int access[FAKE_MAX_DEVICES];
	struct fake_pool *next;
};
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc *allocs;
static struct fake_pool *pools; /* created ones */
static struct fake_pool default_pools[FAKE_MAX_DEVICES];
static struct fake_pool *current_pools[FAKE_MAX_DEVICES];

static int current_device(void)
{
	return current_ctx ? current_ctx->dev : -1;
}

/* alloc_lock held */
static struct fake_pool *device_default_pool(int dev)
{
	struct fake_pool *p = &default_pools[dev];
	p->loc_type = 1;
	p->loc_id = dev;
	p->access[dev] = 3;
	return p;
}

/* alloc_lock held */
static bool pool_known(struct fake_pool *pool)
{
	for (int i = 0; i < FAKE_MAX_DEVICES; i++)
		if (pool == &default_pools[i])
			return i < ngpus();
	for (struct fake_pool *p = pools; p; p = p->next)
		if (p == pool)
			return true;
	return false;
}

static CUresult fake_alloc(CUdeviceptr *p, size_t n, enum fake_alloc_kind kind, int device, struct fake_pool *pool)
{
	if (!p || !n)
		return FAKE_INVALID_VALUE;
	struct fake_alloc *a = malloc(sizeof(*a));
	void *m = aligned_alloc(FAKE_ALLOC_ALIGN, (n + FAKE_ALLOC_ALIGN - 1) / FAKE_ALLOC_ALIGN * FAKE_ALLOC_ALIGN);
	if (!a || !m) {
		free(a);
		free(m);
		return FAKE_OUT_OF_MEMORY;
	}
	*a = (struct fake_alloc){ (CUdeviceptr)(uintptr_t)m, n, kind, device, pool, NULL };
	pthread_mutex_lock(&alloc_lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&alloc_lock);
	*p = a->p;
	return 0;
}

/* Frees the driver allocation at p; INVALID_VALUE if there is none (twice, or not the driver's). */
static CUresult fake_free(CUdeviceptr p)
{
	struct fake_alloc *found = NULL;
	pthread_mutex_lock(&alloc_lock);
	for (struct fake_alloc **pp = &allocs; *pp; pp = &(*pp)->next)
		if ((*pp)->p == p) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&alloc_lock);
	if (!found)
		return FAKE_INVALID_VALUE;
	free((void *)(uintptr_t)found->p);
	free(found);
	return 0;
}

/* The driver allocation containing p, copied into *out. */
static bool fake_alloc_find(CUdeviceptr p, struct fake_alloc *out)
{
	bool found = false;
	pthread_mutex_lock(&alloc_lock);
	for (struct fake_alloc *a = allocs; a && !found; a = a->next)
		if (p >= a->p && p < a->p + a->size) {
			*out = *a;
			found = true;
		}
	pthread_mutex_unlock(&alloc_lock);
	return found;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	CUresult forbidden = capture_forbids();
	if (forbidden)
		return forbidden;
	int dev = current_device();
	return dev < 0 ? FAKE_INVALID_CONTEXT : fake_alloc(p, n, FAKE_DEVICE_ALLOC, dev, NULL);
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags)
{
	(void)flags;
	int dev = current_device();
	return dev < 0 ? FAKE_INVALID_CONTEXT : fake_alloc(p, n, FAKE_MANAGED_ALLOC, dev, NULL);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return fake_free(p); }

EXPORT CUresult cuMemPoolCreate(void **pool, const void *props)
{
	const int *pr = props;
	if (!pool || !pr || pr[0] != 1)
		return FAKE_INVALID_VALUE;
	if (pr[2] == 1 && (pr[3] < 0 || pr[3] >= ngpus() || pr[3] >= FAKE_MAX_DEVICES))
		return FAKE_INVALID_DEVICE;
	if (pr[2] != 1 && pr[2] != 2 && pr[2] != 3)
		return FAKE_INVALID_VALUE;
	struct fake_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return FAKE_OUT_OF_MEMORY;
	p->alloc_type = pr[0];
	p->handle_types = pr[1];
	p->loc_type = pr[2];
	p->loc_id = pr[3];
	if (p->loc_type == 1)
		p->access[p->loc_id] = 3;
	pthread_mutex_lock(&alloc_lock);
	p->next = pools;
	pools = p;
	pthread_mutex_unlock(&alloc_lock);
	*pool = p;
	return 0;
}
EXPORT CUresult cuMemPoolDestroy(void *pool)
{
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&alloc_lock);
	for (struct fake_pool **pp = &pools; *pp; pp = &(*pp)->next)
		if (*pp == pool) {
			*pp = (*pp)->next;
			r = 0; /* kept in memory: allocations may still point at it */
			break;
		}
	for (int i = 0; i < FAKE_MAX_DEVICES; i++)
		if (current_pools[i] == pool)
			current_pools[i] = NULL;
	pthread_mutex_unlock(&alloc_lock);
	return r;
}
EXPORT CUresult cuDeviceGetDefaultMemPool(void **pool, int dev)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	pthread_mutex_lock(&alloc_lock);
	*pool = device_default_pool(dev);
	pthread_mutex_unlock(&alloc_lock);
	return 0;
}
EXPORT CUresult cuDeviceGetMemPool(void **pool, int dev)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	pthread_mutex_lock(&alloc_lock);
	*pool = current_pools[dev] ? current_pools[dev] : device_default_pool(dev);
	pthread_mutex_unlock(&alloc_lock);
	return 0;
}
/* Only a pool located on that device, as the driver requires. */
EXPORT CUresult cuDeviceSetMemPool(int dev, void *pool)
{
	if (!device_ok(dev))
		return FAKE_INVALID_DEVICE;
	struct fake_pool *p = pool;
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&alloc_lock);
	if (pool_known(p) && p->loc_type == 1 && p->loc_id == dev) {
		current_pools[dev] = p;
		r = 0;
	}
	pthread_mutex_unlock(&alloc_lock);
	return r;
}
EXPORT CUresult cuMemPoolSetAccess(void *pool, const void *desc, size_t count)
{
	const int *d = desc;
	struct fake_pool *p = pool;
	CUresult r = 0;
	pthread_mutex_lock(&alloc_lock);
	if (!pool_known(p) || !d)
		r = FAKE_INVALID_VALUE;
	for (size_t i = 0; !r && i < count; i++)
		if (d[3 * i] != 1 || d[3 * i + 1] < 0 || d[3 * i + 1] >= ngpus() || d[3 * i + 1] >= FAKE_MAX_DEVICES)
			r = FAKE_INVALID_DEVICE;
		else if (p->loc_type == 1 && d[3 * i + 1] == p->loc_id && d[3 * i + 2] != 3)
			r = FAKE_INVALID_VALUE; /* the pool's own device keeps its access */
	for (size_t i = 0; !r && i < count; i++)
		p->access[d[3 * i + 1]] = d[3 * i + 2];
	pthread_mutex_unlock(&alloc_lock);
	return r;
}
EXPORT CUresult cuMemPoolGetAccess(int *flags, void *pool, const void *location)
{
	const int *loc = location;
	struct fake_pool *p = pool;
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&alloc_lock);
	if (pool_known(p) && flags && loc && loc[0] == 1 && loc[1] >= 0 && loc[1] < FAKE_MAX_DEVICES) {
		*flags = p->access[loc[1]];
		r = 0;
	}
	pthread_mutex_unlock(&alloc_lock);
	return r;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t n, void *pool, CUstream s)
{
	(void)s; /* the memory is there at once: fine for any stream order */
	struct fake_pool *p = pool;
	pthread_mutex_lock(&alloc_lock);
	bool ok = pool_known(p);
	pthread_mutex_unlock(&alloc_lock);
	if (!ok)
		return FAKE_INVALID_VALUE;
	return fake_alloc(ptr, n, FAKE_POOL_ALLOC, p->loc_type == 1 ? p->loc_id : -1, p);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t n, CUstream s)
{
	void *pool;
	int dev = current_device();
	if (dev < 0)
		return FAKE_INVALID_CONTEXT;
	cuDeviceGetMemPool(&pool, dev);
	return cuMemAllocFromPoolAsync(ptr, n, pool, s);
}

/* A graph: host functions and frees, run in order by cuGraphLaunch. */
struct fake_node {
	void (*fn)(void *); /* a host function, or NULL: a free of p */
	void *data;
	CUdeviceptr p;
};
struct fake_graph {
	struct fake_node *nodes;
	size_t n, cap;
};

/* Appends a node to the graph stream h is being captured into; false if it is not being captured. */
static bool capture_node(CUstream h, struct fake_node node, CUresult *r)
{
	bool captured = false;
	*r = 0;
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	if (s && s->capture) {
		captured = true;
		struct fake_graph *g = s->capture;
		if (g->n == g->cap) {
			size_t cap = g->cap ? g->cap * 2 : 8;
			struct fake_node *nn = realloc(g->nodes, cap * sizeof(*nn));
			if (nn) {
				g->nodes = nn;
				g->cap = cap;
			}
		}
		if (g->n < g->cap)
			g->nodes[g->n++] = node;
		else
			*r = FAKE_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&stream_lock);
	return captured;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	CUresult r;
	if (capture_node(s, (struct fake_node){ NULL, NULL, p }, &r))
		return r;
	return fake_free(p);
}

EXPORT CUresult cuLaunchHostFunc(CUstream h, void (*fn)(void *), void *data)
{
	CUresult r;
	if (!fn)
		return FAKE_INVALID_VALUE;
	if (capture_node(h, (struct fake_node){ fn, data, 0 }, &r))
		return r;
	cuStreamSynchronize(h); /* after the stream's earlier work */
	fn(data);
	return 0;
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream h, int mode)
{
	CUresult r = FAKE_INVALID_VALUE; /* only a stream of cuStreamCreate, as the legacy stream cannot be captured */
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	if (s && !s->capture && (s->capture = calloc(1, sizeof(*s->capture))))
		r = 0;
	pthread_mutex_unlock(&stream_lock);
	if (!r && mode == 0) {
		pthread_mutex_lock(&global_capture.lock);
		if (!global_capture.stream) {
			global_capture.stream = h;
			global_capture.tid = (pid_t)syscall(SYS_gettid);
			global_capture.invalidated = false;
		}
		pthread_mutex_unlock(&global_capture.lock);
	}
	return r;
}
EXPORT CUresult cuGraphDestroy(void *graph);
EXPORT CUresult cuStreamEndCapture(CUstream h, void **graph)
{
	CUresult r = FAKE_INVALID_VALUE;
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	if (s && s->capture && graph) {
		*graph = s->capture;
		s->capture = NULL;
		r = 0;
	}
	pthread_mutex_unlock(&stream_lock);
	pthread_mutex_lock(&global_capture.lock);
	if (global_capture.stream == h) {
		if (global_capture.invalidated && !r) {
			cuGraphDestroy(*graph); /* the capture ends, without a graph */
			*graph = NULL;
			r = FAKE_CAPTURE_INVALIDATED;
		}
		global_capture.stream = NULL;
	}
	pthread_mutex_unlock(&global_capture.lock);
	return r;
}
EXPORT CUresult cuStreamGetCtx(CUstream h, CUcontext *ctx)
{
	if (!ctx)
		return FAKE_INVALID_VALUE;
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	*ctx = s ? s->ctx : current_ctx; /* the default streams belong to the current context */
	pthread_mutex_unlock(&stream_lock);
	return 0;
}
/* An executable graph is its graph here. */
EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
	(void)flags;
	if (!exec || !graph)
		return FAKE_INVALID_VALUE;
	*exec = graph;
	return 0;
}
/* Runs the nodes in order; a free whose memory is already gone (a second launch) is skipped, as an error would be. */
EXPORT CUresult cuGraphLaunch(void *exec, CUstream s)
{
	struct fake_graph *g = exec;
	if (!g)
		return FAKE_INVALID_VALUE;
	cuStreamSynchronize(s);
	for (size_t i = 0; i < g->n; i++) {
		if (g->nodes[i].fn)
			g->nodes[i].fn(g->nodes[i].data);
		else
			fake_free(g->nodes[i].p);
	}
	return 0;
}
EXPORT CUresult cuGraphExecDestroy(void *exec) { (void)exec; return 0; }
EXPORT CUresult cuGraphDestroy(void *graph)
{
	struct fake_graph *g = graph;
	if (g)
		free(g->nodes);
	free(g);
	return 0;
}

static CUresult fake_pointer_attribute_more(void *data, int attribute, CUdeviceptr p);
/* CUpointer_attribute: MEMORY_TYPE 2, IS_MANAGED 8, DEVICE_ORDINAL 9, MEMPOOL_HANDLE 17; the rest at the end. */
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p)
{
	struct fake_alloc a;
	int device = -1, type = 0, managed = 0;
	void *pool = NULL;
	if (fake_alloc_find(p, &a)) {
		device = a.device;
		type = a.kind == FAKE_MANAGED_ALLOC ? 4 : a.device < 0 ? 1 : 2; /* UNIFIED, HOST, DEVICE */
		managed = a.kind == FAKE_MANAGED_ALLOC;
		pool = a.pool;
	} else {
		pthread_mutex_lock(&vmm_lock);
		for (struct fake_map *m = map_list; m; m = m->next)
			if (p >= m->va && p < m->va + m->size) {
				device = ((const int *)m->ph->prop)[3];
				type = 2;
			}
		pthread_mutex_unlock(&vmm_lock);
	}
	if (!data || !type)
		return FAKE_INVALID_VALUE;
	switch (attribute) {
	case 2: *(unsigned *)data = (unsigned)type; return 0;
	case 8: *(unsigned *)data = (unsigned)managed; return 0;
	case 9: *(int *)data = device; return 0;
	case 17: *(void **)data = pool; return 0;
	default: return fake_pointer_attribute_more(data, attribute, p);
	}
}

/*
 * Like the driver: a name without version suffix resolves to its newest
 * variant at the version asked for (all _v2 here exist since before CUDA 12).
 */
/* Legacy CUDA IPC (memory shared between processes): a handle for cuMemAlloc memory only, as the driver gives. */
EXPORT CUresult cuIpcGetMemHandle(void *handle, CUdeviceptr p)
{
	struct fake_alloc a;
	if (!handle || !fake_alloc_find(p, &a) || a.kind != FAKE_DEVICE_ALLOC)
		return FAKE_INVALID_VALUE;
	memset(handle, 0, 64);
	memcpy(handle, &p, sizeof(p));
	return 0;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
	(void)flags;
	static const struct {
		const char *name;
		void *fn;
	} table[] = {
#define ENTRY(name, fn) { name, (void *)fn }
		ENTRY("cuInit", cuInit), ENTRY("cuDriverGetVersion", cuDriverGetVersion),
		ENTRY("cuGetErrorName", cuGetErrorName), ENTRY("cuGetErrorString", cuGetErrorString),
		ENTRY("cuGetProcAddress", cuGetProcAddress_v2), ENTRY("cuDeviceGetCount", cuDeviceGetCount),
		ENTRY("cuDeviceGet", cuDeviceGet), ENTRY("cuDeviceGetName", cuDeviceGetName),
		ENTRY("cuDeviceGetUuid", cuDeviceGetUuid_v2), ENTRY("cuDeviceTotalMem", cuDeviceTotalMem_v2),
		ENTRY("cuDeviceGetAttribute", cuDeviceGetAttribute), ENTRY("cuCtxGetCurrent", cuCtxGetCurrent),
		ENTRY("cuCtxSetCurrent", cuCtxSetCurrent), ENTRY("cuCtxGetDevice", cuCtxGetDevice),
		ENTRY("cuCtxSynchronize", cuCtxSynchronize), ENTRY("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
		ENTRY("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
		ENTRY("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState), ENTRY("cuCtxCreate", cuCtxCreate_v2),
		ENTRY("cuCtxDestroy", cuCtxDestroy_v2), ENTRY("cuCtxGetApiVersion", cuCtxGetApiVersion),
		ENTRY("cuCtxGetLimit", cuCtxGetLimit), ENTRY("cuCtxSetLimit", cuCtxSetLimit),
		ENTRY("cuModuleLoadData", cuModuleLoadData), ENTRY("cuModuleGetFunction", cuModuleGetFunction),
		ENTRY("cuModuleUnload", cuModuleUnload),
		ENTRY("cuLaunchKernel", cuLaunchKernel), ENTRY("cuStreamQuery", cuStreamQuery),
		ENTRY("cuStreamCreate", cuStreamCreate), ENTRY("cuStreamDestroy", cuStreamDestroy_v2),
		ENTRY("cuStreamSynchronize", cuStreamSynchronize), ENTRY("cuStreamIsCapturing", cuStreamIsCapturing),
		ENTRY("cuEventCreate", cuEventCreate), ENTRY("cuEventDestroy", cuEventDestroy_v2),
		ENTRY("cuEventRecord", cuEventRecord), ENTRY("cuEventQuery", cuEventQuery),
		ENTRY("cuEventSynchronize", cuEventSynchronize), ENTRY("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2),
		ENTRY("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2), ENTRY("cuMemsetD8Async", cuMemsetD8Async), ENTRY("cuMemcpyDtoH", cuMemcpyDtoH_v2),
		ENTRY("cuMemHostRegister", cuMemHostRegister_v2), ENTRY("cuMemHostUnregister", cuMemHostUnregister),
		ENTRY("cuMemAlloc", cuMemAlloc_v2), ENTRY("cuMemFree", cuMemFree_v2),
		ENTRY("cuMemAllocAsync", cuMemAllocAsync), ENTRY("cuMemFreeAsync", cuMemFreeAsync),
		ENTRY("cuMemGetAddressRange", cuMemGetAddressRange_v2), ENTRY("cuMemGetInfo", cuMemGetInfo_v2),
		ENTRY("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity),
		ENTRY("cuMemAddressReserve", cuMemAddressReserve), ENTRY("cuMemAddressFree", cuMemAddressFree),
		ENTRY("cuMemCreate", cuMemCreate), ENTRY("cuMemRelease", cuMemRelease), ENTRY("cuMemMap", cuMemMap),
		ENTRY("cuMemUnmap", cuMemUnmap), ENTRY("cuMemSetAccess", cuMemSetAccess),
		ENTRY("cuMemRetainAllocationHandle", cuMemRetainAllocationHandle),
		ENTRY("cuMemGetAllocationPropertiesFromHandle", cuMemGetAllocationPropertiesFromHandle),
		ENTRY("cuMemExportToShareableHandle", cuMemExportToShareableHandle),
		/* pools, managed memory, capture and graphs (the end of this file) */
		ENTRY("cuMemAllocManaged", cuMemAllocManaged), ENTRY("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync),
		ENTRY("cuMemPoolCreate", cuMemPoolCreate), ENTRY("cuMemPoolDestroy", cuMemPoolDestroy),
		ENTRY("cuMemPoolSetAccess", cuMemPoolSetAccess), ENTRY("cuMemPoolGetAccess", cuMemPoolGetAccess),
		ENTRY("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool), ENTRY("cuDeviceGetMemPool", cuDeviceGetMemPool),
		ENTRY("cuDeviceSetMemPool", cuDeviceSetMemPool), ENTRY("cuMemGetAccess", cuMemGetAccess),
		ENTRY("cuLaunchHostFunc", cuLaunchHostFunc), ENTRY("cuStreamBeginCapture", cuStreamBeginCapture_v2),
		ENTRY("cuStreamEndCapture", cuStreamEndCapture), ENTRY("cuStreamGetCtx", cuStreamGetCtx),
		ENTRY("cuGraphInstantiate", cuGraphInstantiateWithFlags), ENTRY("cuGraphLaunch", cuGraphLaunch),
		ENTRY("cuGraphExecDestroy", cuGraphExecDestroy), ENTRY("cuGraphDestroy", cuGraphDestroy),
		ENTRY("cuPointerGetAttribute", cuPointerGetAttribute),
		/* memory shared between processes */
		ENTRY("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle),
		ENTRY("cuIpcGetMemHandle", cuIpcGetMemHandle),
#ifndef FAKE_CUDA_OLD
		ENTRY("cuCheckpointProcessGetState", cuCheckpointProcessGetState),
		ENTRY("cuCheckpointProcessLock", cuCheckpointProcessLock),
		ENTRY("cuCheckpointProcessCheckpoint", cuCheckpointProcessCheckpoint),
		ENTRY("cuCheckpointProcessRestore", cuCheckpointProcessRestore),
		ENTRY("cuCheckpointProcessUnlock", cuCheckpointProcessUnlock),
#endif
#undef ENTRY
	};
	void *fn = NULL;
	/* the versioned names (12000 asks for the CUDA 12.0 ABI; every variant here is older) */
	for (size_t i = 0; symbol && version >= 3020 && i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(symbol, table[i].name))
			fn = table[i].fn;
	if (pfn)
		*pfn = fn;
	if (status)
		*status = fn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
	return fn ? 0 : FAKE_NOT_FOUND;
}

/*
 * ---- peer access, each device's view of memory, dma-buf, pointer ranges ----
 *
 * cuCtxEnablePeerAccess / cuCtxDisablePeerAccess per pair of contexts, as
 * the driver keeps them. They reach the driver's own allocations (cuMemAlloc)
 * and, as on a GPU, not mappings of cuMemMap, which only cuMemSetAccess
 * opens to a device. cuFakeKernelCopy(dst, src, n) is a kernel of the current
 * context: it copies through its device's view, so it fails with
 * CUDA_ERROR_ILLEGAL_ADDRESS (and copies nothing) when that device may not
 * read src or write dst: the driver's allocation of another device without
 * an enabled pair, a mapping whose access does not name it. The copy is done
 * at once (it is not queued behind the stream's copies).
 *
 * FAKE_CUDA_NO_RDMA=1: the devices lack GPUDirect RDMA on VMM memory
 * (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0, and
 * cuMemCreate refuses gpuDirectRDMACapable as the driver does there).
 * cuMemGetHandleForAddressRange (dma-buf) gives a dup of the memfd of the
 * mapping that holds the range. Pointer attributes: range start and size and
 * buffer id are the mapping's (or the driver allocation's), as the driver
 * answers for memory it mapped; cuPointerGetAttributes asks each.
 */
#define FAKE_PEER_ALREADY_ENABLED 704
#define FAKE_PEER_NOT_ENABLED 705
#define FAKE_ACCESS_READ 1
#define FAKE_ACCESS_WRITE 2 /* with READ: CU_MEM_ACCESS_FLAGS_PROT_READWRITE (3) */

struct fake_peer_pair {
	struct fake_ctx *from, *to;
	struct fake_peer_pair *next;
};
static struct fake_peer_pair *peer_pairs;
static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;

/* peer_lock held */
static struct fake_peer_pair **peer_pair_find(struct fake_ctx *from, struct fake_ctx *to)
{
	struct fake_peer_pair **pp = &peer_pairs;
	while (*pp && !((*pp)->from == from && (*pp)->to == to))
		pp = &(*pp)->next;
	return pp;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned flags)
{
	struct fake_ctx *to = peer_ctx;
	if (flags)
		return FAKE_INVALID_VALUE;
	if (!ctx_alive(current_ctx) || !ctx_alive(to))
		return FAKE_INVALID_CONTEXT;
	if (to->dev == current_ctx->dev)
		return FAKE_INVALID_DEVICE;
	pthread_mutex_lock(&peer_lock);
	CUresult r = 0;
	if (*peer_pair_find(current_ctx, to)) {
		r = FAKE_PEER_ALREADY_ENABLED;
	} else {
		struct fake_peer_pair *p = malloc(sizeof(*p));
		if (p) {
			*p = (struct fake_peer_pair){ current_ctx, to, peer_pairs };
			peer_pairs = p;
		} else {
			r = FAKE_OUT_OF_MEMORY;
		}
	}
	pthread_mutex_unlock(&peer_lock);
	return r;
}

EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer_ctx)
{
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	pthread_mutex_lock(&peer_lock);
	struct fake_peer_pair **pp = peer_pair_find(current_ctx, peer_ctx), *p = *pp;
	if (p)
		*pp = p->next;
	pthread_mutex_unlock(&peer_lock);
	free(p);
	return p ? 0 : FAKE_PEER_NOT_ENABLED;
}

/* A context of device from enabled access to a context of device to. */
static bool peer_enabled(int from, int to)
{
	bool on = false;
	pthread_mutex_lock(&peer_lock);
	for (struct fake_peer_pair *p = peer_pairs; p && !on; p = p->next)
		on = p->from->dev == from && p->to->dev == to;
	pthread_mutex_unlock(&peer_lock);
	return on;
}

/* Whether device dev may touch every byte of [p, p+n) the way `need` says (FAKE_ACCESS_READ, | WRITE). */
static bool device_may(int dev, CUdeviceptr p, size_t n, int need)
{
	struct fake_alloc a;
	if (fake_alloc_find(p, &a))
		return p + n <= a.p + a.size &&
		       (a.kind == FAKE_MANAGED_ALLOC || a.device < 0 || a.device == dev || peer_enabled(dev, a.device));
	bool ok = true;
	CUdeviceptr at = p;
	pthread_mutex_lock(&vmm_lock);
	while (ok && at < p + n) {
		struct fake_map *m = map_list;
		while (m && !(at >= m->va && at < m->va + m->size))
			m = m->next;
		ok = m && (m->access[dev] & need) == need;
		if (ok)
			at = m->va + m->size;
	}
	pthread_mutex_unlock(&vmm_lock);
	return ok;
}

EXPORT CUresult cuFakeKernelCopy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
	int dev = current_ctx->dev;
	if (!device_may(dev, src, n, FAKE_ACCESS_READ) || !device_may(dev, dst, n, FAKE_ACCESS_READ | FAKE_ACCESS_WRITE))
		return FAKE_ILLEGAL_ADDRESS;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return 0;
}

static bool fake_rdma(void)
{
	const char *v = getenv("FAKE_CUDA_NO_RDMA");
	return !(v && !strcmp(v, "1"));
}

/* CUmemAllocationProp's allocFlags.gpuDirectRDMACapable: byte 25 (after type, handle types, location, a pointer, compression) */
#define FAKE_PROP_RDMA_BYTE 25

/* cuMemCreate's check: the flag only where the device has the feature. */
static bool fake_prop_rdma_refused(const void *prop)
{
	return ((const unsigned char *)prop)[FAKE_PROP_RDMA_BYTE] && !fake_rdma();
}

/* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD (1) only: a dup of the memfd of the one mapping that holds the range. */
EXPORT CUresult cuMemGetHandleForAddressRange(void *out, CUdeviceptr p, size_t size, int type, unsigned long long flags)
{
	if (!out || type != 1 || flags || !size)
		return FAKE_INVALID_VALUE;
	int fd = -1;
	pthread_mutex_lock(&vmm_lock);
	for (struct fake_map *m = map_list; m; m = m->next)
		if (p >= m->va && p + size <= m->va + m->size)
			fd = dup(m->ph->fd);
	pthread_mutex_unlock(&vmm_lock);
	if (fd < 0)
		return FAKE_INVALID_VALUE;
	*(int *)out = fd;
	return 0;
}

/*
 * The attributes cuPointerGetAttribute's switch leaves to this block:
 * CONTEXT 1 (the driver allocation's device's primary context; NULL for a
 * mapping, which belongs to no context), DEVICE_POINTER 3, BUFFER_ID 7,
 * RANGE_START_ADDR 11, RANGE_SIZE 12, MAPPED 13, IS_GPU_DIRECT_RDMA_CAPABLE 15.
 */
static CUresult fake_pointer_attribute_more(void *data, int attribute, CUdeviceptr p)
{
	struct fake_alloc a;
	CUdeviceptr start = 0;
	size_t size = 0;
	unsigned long long id = 0;
	int rdma = 0, dev = -1;
	if (fake_alloc_find(p, &a)) {
		start = a.p;
		size = a.size;
		id = (unsigned long long)a.p; /* a driver allocation's address is its own while it lives */
		dev = a.device;
	} else {
		pthread_mutex_lock(&vmm_lock);
		for (struct fake_map *m = map_list; m; m = m->next)
			if (p >= m->va && p < m->va + m->size) {
				start = m->va;
				size = m->size;
				id = (unsigned long long)(uintptr_t)m->ph;
				rdma = m->ph->prop[FAKE_PROP_RDMA_BYTE];
			}
		pthread_mutex_unlock(&vmm_lock);
	}
	if (!size || !data)
		return FAKE_INVALID_VALUE;
	switch (attribute) {
	case 1: *(void **)data = dev >= 0 ? (void *)&primary_ctx[dev] : NULL; return 0;
	case 3: *(CUdeviceptr *)data = p; return 0;
	case 7: *(unsigned long long *)data = id; return 0;
	case 11: *(CUdeviceptr *)data = start; return 0;
	case 12: *(size_t *)data = size; return 0;
	case 13: *(unsigned *)data = 1; return 0;
	case 15: *(unsigned *)data = (unsigned)rdma; return 0;
	default: return FAKE_NOT_SUPPORTED;
	}
}

/* Each attribute as cuPointerGetAttribute answers it; for a pointer it does not know, zeros and success (the driver's rule). */
EXPORT CUresult cuPointerGetAttributes(unsigned n, int *attributes, void **data, CUdeviceptr p)
{
	if (!attributes || !data)
		return FAKE_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		if (!data[i])
			continue;
		int at = attributes[i];
		size_t width = at == 1 || at == 3 || at == 7 || at == 11 || at == 12 || at == 17 ? 8 : 4;
		if (cuPointerGetAttribute(data[i], at, p))
			memset(data[i], 0, width);
	}
	return 0;
}
