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
#include <time.h>
#include <unistd.h>

#include "fake_cuda.c"

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
#define FAKE_GRANULARITY (2ULL << 20)
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
	struct fake_map *next;
};

static int64_t live_phys_bytes, live_phys_handles;
static struct fake_phys *phys_list;
static struct fake_map *map_list;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t phys_file_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Contexts: the one device's primary context (active while retained) and
 * those of cuCtxCreate. A destroyed context stays allocated (so its handle is
 * never reused) but is dead: making it current fails, its streams are dead
 * (copies on them fail), and its kernels are dropped.
 */
struct fake_ctx {
	bool primary, alive;
	int refs;            /* primary: retains */
	int sticky;          /* an error its work hit (a kernel whose memory went away): every later sync returns it */
	struct fake_ctx *next;
};
static struct fake_ctx primary_ctx = { .primary = true };
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
	*dev = 0;
	return 0;
}
EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned *version)
{
	if (!ctx_alive(ctx))
		return FAKE_INVALID_CONTEXT;
	*version = 12000;
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, int dev)
{
	if (dev != 0)
		return 101;
	pthread_mutex_lock(&ctx_lock);
	primary_ctx.refs++;
	primary_ctx.alive = true;
	pthread_mutex_unlock(&ctx_lock);
	*ctx = &primary_ctx;
	return 0;
}
static void ctx_died(struct fake_ctx *c);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	if (dev != 0)
		return 101;
	pthread_mutex_lock(&ctx_lock);
	bool died = primary_ctx.refs > 0 && --primary_ctx.refs == 0;
	if (died)
		primary_ctx.alive = false;
	pthread_mutex_unlock(&ctx_lock);
	if (died)
		ctx_died(&primary_ctx);
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
	if (dev != 0)
		return 101;
	*flags = 0;
	*active = ctx_alive(&primary_ctx);
	return 0;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, int dev)
{
	(void)flags;
	if (dev != 0)
		return 101;
	struct fake_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return FAKE_OUT_OF_MEMORY;
	c->alive = true;
	pthread_mutex_lock(&ctx_lock);
	c->next = created_ctxs;
	created_ctxs = c;
	pthread_mutex_unlock(&ctx_lock);
	current_ctx = c;
	*pctx = c;
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
static void flush_all(void);
static CUresult ctx_wait_kernels(struct fake_ctx *c, bool block);
/* Waits for every copy of every stream, and for the kernels of the current context. */
EXPORT CUresult cuCtxSynchronize(void)
{
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
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
struct fake_stream {
	struct fake_stream *next; /* every live stream, for cuCtxSynchronize */
	struct fake_ctx *ctx;     /* made in it */
	bool dead;                /* its context is gone */
	struct fake_copy *q;      /* queued copies, oldest first */
	size_t nq, capq;
	uint64_t issued, done;
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
	if (k)
		memmove(s->q, s->q + k, (s->nq - k) * sizeof(*s->q));
	s->nq -= k;
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
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	bool dead = s && s->dead;
	if (s && !dead)
		flush_locked(s, s->issued);
	pthread_mutex_unlock(&stream_lock);
	return dead ? FAKE_INVALID_HANDLE : 0;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { (void)s; *status = 0; return 0; }
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
 * function handle says what the kernel does (there are no modules).
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
enum { FAKE_KERNEL_TIMED = 1, FAKE_KERNEL_HANG = 2, FAKE_KERNEL_COLLECTIVE = 3 };
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

static CUresult ctx_wait_kernels(struct fake_ctx *c, bool block)
{
	int sticky = 0;
	while (reap_kernels(c, NULL, &sticky) && block)
		usleep(1000);
	return sticky;
}

/* A context died: its streams with it, its kernels dropped. */
static void ctx_died(struct fake_ctx *c)
{
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
	if (kind < FAKE_KERNEL_TIMED || kind > FAKE_KERNEL_COLLECTIVE)
		return FAKE_INVALID_VALUE;
	if (!ctx_alive(current_ctx))
		return FAKE_INVALID_CONTEXT;
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
	pthread_mutex_lock(&stream_lock);
	struct fake_stream *s = find_stream_locked(h);
	bool dead = s && s->dead;
	if (s && !dead)
		flush_locked(s, s->issued);
	pthread_mutex_unlock(&stream_lock);
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

/* plain allocations: only reached when the agent passes one through */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	if (!p || !n)
		return FAKE_INVALID_VALUE;
	void *m = aligned_alloc(256, (n + 255) / 256 * 256);
	if (!m)
		return FAKE_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return cuMemAlloc_v2(p, n); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return cuMemFree_v2(p); }
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

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long flags)
{
	if (!h || !size || size % FAKE_GRANULARITY || !prop || flags)
		return FAKE_INVALID_VALUE;
	struct fake_phys *ph = calloc(1, sizeof(*ph));
	if (!ph)
		return FAKE_OUT_OF_MEMORY;
	ph->fd = memfd_create("fake-vram", MFD_CLOEXEC);
	if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size)) {
		if (ph->fd >= 0)
			close(ph->fd);
		free(ph);
		return FAKE_OUT_OF_MEMORY;
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

/* Honours the access asked for device 0 (the fake's one device): none, read, or read and write. */
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count)
{
	if (!desc || !count)
		return FAKE_INVALID_VALUE;
	const int *d = desc; /* CUmemAccessDesc: location type, location id, flags */
	int prot = -1;
	for (size_t i = 0; i < count; i++)
		if (d[3 * i] == 1 && d[3 * i + 1] == 0)
			prot = d[3 * i + 2] == 3 ? PROT_READ | PROT_WRITE : d[3 * i + 2] == 1 ? PROT_READ : PROT_NONE;
	if (prot < 0)
		return 0;
	return mprotect((void *)(uintptr_t)p, size, prot) ? FAKE_INVALID_VALUE : 0;
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

/* POSIX file descriptors only (type 1): a dup of the memfd. */
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags)
{
	if (!out || type != 1 || flags)
		return FAKE_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	struct fake_phys *ph = find_phys(h);
	int fd = ph && ph->refs > 0 ? dup(ph->fd) : -1;
	pthread_mutex_unlock(&vmm_lock);
	if (fd < 0)
		return FAKE_INVALID_VALUE;
	*(int *)out = fd;
	return 0;
}

/*
 * Like the driver: a name without version suffix resolves to its newest
 * variant at the version asked for (all _v2 here exist since before CUDA 12).
 */
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
