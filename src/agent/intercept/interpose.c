/*
 * interpose.c - handing the app gated driver entry points (see interpose.h).
 *
 * Three ways lead the app to the driver, and each ends in hand_out(), which
 * turns a real driver function into what the app gets:
 *  (a) exported symbols: gate_x86_64.S defines every name of
 *      driver_exports.txt; the first call resolves it here (gs_export_resolve);
 *  (b) dlsym/dlvsym: gate_x86_64.S sends "cu..." names here (gs_dlsym_cu);
 *      a result that lies in the driver library is handed out;
 *  (c) cuGetProcAddress(_v2): handed out as our own functions, which call the
 *      real one and hand out whatever pointer it returns.
 * hand_out() gives our cuGetProcAddress for the driver's, the agent's
 * replacement when one is registered for that address, the real function for
 * the pure queries of ungated_names[], and otherwise the gated stub of the
 * function (a trampoline, below). cuGetExportTable is handed out
 * gated like any function, but the private tables it returns are passed
 * through untouched: calls through them are not gated.
 *
 * Which library is "the driver": GPUSNAP_LIBCUDA (a path, for tests) or
 * libcuda.so.1; a dlsym result is recognized as the driver's by the file it
 * lies in (dladdr): a name starting with "libcuda.so" or the override's name.
 *
 * Locking: nothing here calls into the dynamic linker (dlopen, dlsym, dladdr)
 * while holding one of our locks: a library constructor that runs under the
 * loader's lock may call our dlsym, which takes our locks.
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/interpose.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/intercept/dl_bootstrap.h"
#include "agent/intercept/gate.h"
#include "common/log.h"
#include "common/util.h"
#include "common/settings.h"
#include "cuda/driver.h"

/* the assembly (gate_x86_64.S) */
extern void *gs_export_slots[];
extern const char gs_exports_begin[], gs_exports_end[];
void gs_export_missing(void);
void gs_gate_common(void);

static const char *const export_names[] = {
#define GS_DRIVER_EXPORT(name) #name,
#include "driver_exports.inc"
#undef GS_DRIVER_EXPORT
};
#define NEXPORTS GS_ARRAY_SIZE(export_names)

static void *_Atomic export_real[NEXPORTS]; /* the real function behind a resolved export */
static _Atomic size_t exports_bound, ungated_count;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static char driver_path[PATH_MAX] = "libcuda.so.1";
static const char *driver_override_name; /* basename of GPUSNAP_LIBCUDA, if set */
static uintptr_t self_lo, self_hi;       /* our own library's mapping */
static void *libc_handle;

/* The driver library, once seen. Written before drv_ready is set, read-only after. */
static _Atomic int drv_ready;
static void *drv_handle;
static uintptr_t drv_lo, drv_hi;
static void *_Atomic real_gpa_v1, *_Atomic real_gpa_v2;
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

struct replacement {
	char *name;        /* never freed: resolve_registry reads it unlocked */
	void *replacement;
	void *real;        /* valid when resolved */
	void **real_out;
	bool resolved;
};
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct replacement *reps;
static size_t nreps, reps_cap;

typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, void *);

void *gs_real_dlsym(void *handle, const char *name)
{
	if (!__atomic_load_n(&gs_real_dlsym_fn, __ATOMIC_ACQUIRE) && !gs_dl_bootstrap())
		return NULL;
	return ((void *(*)(void *, const char *))gs_real_dlsym_fn)(handle, name);
}

void *gs_real_dlvsym(void *handle, const char *name, const char *version)
{
	if (!__atomic_load_n(&gs_real_dlvsym_fn, __ATOMIC_ACQUIRE) && !gs_dl_bootstrap())
		return NULL;
	return ((void *(*)(void *, const char *, const char *))gs_real_dlvsym_fn)(handle, name, version);
}

struct range_query {
	uintptr_t addr, lo, hi;
	int found;
};

static int range_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	struct range_query *q = data;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (q->addr >= lo && q->addr < hi) {
		q->lo = lo;
		q->hi = hi;
		q->found = 1;
		return 1;
	}
	return 0;
}

/* The mapped range of the loaded object that contains addr. */
static int object_range(const void *addr, uintptr_t *lo, uintptr_t *hi)
{
	struct range_query q = { .addr = (uintptr_t)addr };
	dl_iterate_phdr(range_cb, &q);
	if (!q.found)
		return -1;
	*lo = q.lo;
	*hi = q.hi;
	return 0;
}

static void lock_for_fork(void)
{
	pthread_mutex_lock(&drv_lock);
	pthread_mutex_lock(&reg_lock);
}

static void unlock_after_fork(void)
{
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_unlock(&drv_lock);
}

static void init_once_fn(void)
{
	gs_dl_bootstrap();
	gs_cuda_dlsym = gs_real_dlsym; /* the agent's driver table is never wrapped */
	const char *p = gs_setting_str(GS_S_LIBCUDA);
	if (p && *p && strlen(p) < sizeof(driver_path)) {
		strcpy(driver_path, p);
		const char *slash = strrchr(driver_path, '/');
		driver_override_name = slash ? slash + 1 : driver_path;
	}
	if (object_range((const void *)init_once_fn, &self_lo, &self_hi))
		pr_warn("cannot find the agent's own mapping");
	libc_handle = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
	gs_gate_init();
}

void gs_interpose_init(void)
{
	pthread_once(&init_once, init_once_fn);
}

/* Runs before the agent's other constructors (default priority) in this library. */
__attribute__((constructor(101))) static void interpose_constructor(void)
{
	gs_interpose_init();
}

/*
 * The trampolines: the per-function entry stubs that hand_out() gives the app,
 * each leading into the gate (gs_gate_common) with the real function in %r11.
 *
 * Stubs live in blocks of BLOCK_SIZE bytes of code followed by BLOCK_SIZE
 * bytes of data. Stub i is the same 16 bytes in every slot:
 *
 *     mov  BLOCK_SIZE-7(%rip), %r11     # data[i].target (the real function)
 *     jmp  *BLOCK_SIZE-5(%rip)          # data[i].gate   (gs_gate_common)
 *
 * so a block's code is written once, before it is made executable, and a new
 * stub is only two words of data. Nothing is ever writable and executable at
 * once, and no page is flipped between the two while another thread may run
 * it. Blocks are added as needed and never freed (the app may keep a pointer
 * for ever). x86-64 only, like the gate itself.
 */
#define BLOCK_SIZE (64 * 1024)
#define STUB_SIZE 16
#define STUBS_PER_BLOCK (BLOCK_SIZE / STUB_SIZE)

struct stub_data {
	void *_Atomic target;
	void *gate;
};

struct block {
	unsigned char *code; /* BLOCK_SIZE of stubs, then BLOCK_SIZE of struct stub_data */
	unsigned used;
};

struct map_entry {
	void *target; /* key: the real function the stub was made for */
	unsigned char *stub;
};

static pthread_mutex_t tramp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static struct block *blocks;
static size_t nblocks, blocks_cap;
static struct map_entry *map; /* open addressing, power-of-two size */
static size_t map_cap, map_count;
static int exec_refused;

static void tramp_lock_for_fork(void) { pthread_mutex_lock(&tramp_lock); }
static void tramp_unlock_after_fork(void) { pthread_mutex_unlock(&tramp_lock); }
static void tramp_register_atfork(void)
{
	pthread_atfork(tramp_lock_for_fork, tramp_unlock_after_fork, tramp_unlock_after_fork);
}

static size_t hash_ptr(const void *p, size_t cap)
{
	return (size_t)(((uint64_t)(uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & (cap - 1);
}

static struct map_entry *map_find(const void *target)
{
	if (!map_cap)
		return NULL;
	for (size_t i = hash_ptr(target, map_cap);; i = (i + 1) & (map_cap - 1)) {
		if (map[i].target == target)
			return &map[i];
		if (!map[i].target)
			return NULL;
	}
}

static int map_insert(void *target, unsigned char *stub)
{
	if ((map_count + 1) * 2 > map_cap) {
		size_t cap = map_cap ? map_cap * 2 : 1024;
		struct map_entry *m = calloc(cap, sizeof(*m));
		if (!m)
			return -1;
		for (size_t j = 0; j < map_cap; j++) {
			if (!map[j].target)
				continue;
			size_t i = hash_ptr(map[j].target, cap);
			while (m[i].target)
				i = (i + 1) & (cap - 1);
			m[i] = map[j];
		}
		free(map);
		map = m;
		map_cap = cap;
	}
	size_t i = hash_ptr(target, map_cap);
	while (map[i].target)
		i = (i + 1) & (map_cap - 1);
	map[i].target = target;
	map[i].stub = stub;
	map_count++;
	return 0;
}

static struct stub_data *stub_data(unsigned char *stub)
{
	return (struct stub_data *)(void *)(stub + BLOCK_SIZE);
}

static struct block *new_block(void)
{
	if (exec_refused)
		return NULL;
	if (nblocks == blocks_cap) {
		size_t cap = blocks_cap ? blocks_cap * 2 : 4;
		struct block *b = realloc(blocks, cap * sizeof(*b));
		if (!b)
			return NULL;
		blocks = b;
		blocks_cap = cap;
	}
	unsigned char *code = mmap(NULL, 2 * BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		pr_perror("cannot map a block of CUDA gate stubs");
		return NULL;
	}
	static const unsigned char stub[STUB_SIZE] = {
		0x4c, 0x8b, 0x1d, 0, 0, 0, 0, /* mov disp32(%rip), %r11 */
		0xff, 0x25, 0, 0, 0, 0,       /* jmp *disp32(%rip) */
		0xcc, 0xcc, 0xcc,             /* int3: never reached */
	};
	int32_t load_disp = BLOCK_SIZE - 7, jump_disp = BLOCK_SIZE + 8 - 13;
	for (unsigned i = 0; i < STUBS_PER_BLOCK; i++) {
		unsigned char *s = code + (size_t)i * STUB_SIZE;
		memcpy(s, stub, STUB_SIZE);
		memcpy(s + 3, &load_disp, 4);
		memcpy(s + 9, &jump_disp, 4);
	}
	if (mprotect(code, BLOCK_SIZE, PROT_READ | PROT_EXEC)) {
		pr_perror("cannot make CUDA gate stubs executable; driver entry points stay ungated");
		exec_refused = 1;
		munmap(code, 2 * BLOCK_SIZE);
		return NULL;
	}
	blocks[nblocks].code = code;
	blocks[nblocks].used = 0;
	return &blocks[nblocks++];
}

void *gs_tramp_for(void *target)
{
	if (!target)
		return NULL;
	pthread_once(&atfork_once, tramp_register_atfork);
	pthread_mutex_lock(&tramp_lock);
	struct map_entry *e = map_find(target);
	if (e) {
		pthread_mutex_unlock(&tramp_lock);
		return e->stub;
	}
	struct block *b = nblocks ? &blocks[nblocks - 1] : NULL;
	if (!b || b->used == STUBS_PER_BLOCK)
		b = new_block();
	unsigned char *stub = NULL;
	if (b) {
		stub = b->code + (size_t)b->used * STUB_SIZE;
		struct stub_data *d = stub_data(stub);
		d->gate = (void *)gs_gate_common;
		atomic_store_explicit(&d->target, target, memory_order_release);
		if (map_insert(target, stub))
			stub = NULL;
		else
			b->used++;
	}
	pthread_mutex_unlock(&tramp_lock);
	return stub;
}

bool gs_tramp_retarget(void *target, void *new_target)
{
	pthread_mutex_lock(&tramp_lock);
	struct map_entry *e = map_find(target);
	if (e)
		atomic_store_explicit(&stub_data(e->stub)->target, new_target, memory_order_release);
	pthread_mutex_unlock(&tramp_lock);
	return e != NULL;
}

bool gs_tramp_owns(const void *p)
{
	bool owns = false;
	pthread_mutex_lock(&tramp_lock);
	for (size_t i = 0; i < nblocks && !owns; i++) {
		uintptr_t off = (uintptr_t)p - (uintptr_t)blocks[i].code;
		owns = off < (uintptr_t)blocks[i].used * STUB_SIZE && off % STUB_SIZE == 0;
	}
	pthread_mutex_unlock(&tramp_lock);
	return owns;
}

size_t gs_tramp_count(void)
{
	pthread_mutex_lock(&tramp_lock);
	size_t n = map_count;
	pthread_mutex_unlock(&tramp_lock);
	return n;
}

static bool is_driver_file(const char *path)
{
	if (!path)
		return false;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	return !strncmp(base, "libcuda.so", 10) || (driver_override_name && !strcmp(base, driver_override_name));
}

static bool in_exports(const void *p)
{
	return (const char *)p >= gs_exports_begin && (const char *)p < gs_exports_end;
}

static bool owned_by_us(const void *p)
{
	return ((uintptr_t)p >= self_lo && (uintptr_t)p < self_hi) || gs_tramp_owns(p);
}

static void *replacement_for(const void *real)
{
	void *r = NULL;
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < nreps && !r; i++)
		if (reps[i].resolved && reps[i].real == real)
			r = reps[i].replacement;
	pthread_mutex_unlock(&reg_lock);
	return r;
}

static CUresult interposed_cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
					      void *status);
static CUresult interposed_cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags);

/*
 * Entry points the app gets ungated: queries that neither touch device memory
 * nor queue work nor change what a suspend moves, so a thread inside one
 * while the agent moves data is harmless. They are the bulk of a framework's
 * driver calls: cudart asks for the current context before most runtime
 * calls, PyTorch's allocator polls events and capture state; gating them
 * cost about 1% of a step (docs/benchmarks.md, "Steady-state overhead").
 * Matched on the name before any version suffix (_v2, _ptsz).
 * cuDriverGetVersion and cuDeviceGetCount stay gated: rarely called, and the
 * interposer's tests use them as ordinary gated calls.
 */
static const char *const ungated_names[] = {
	"cuCtxGetApiVersion", "cuCtxGetCacheConfig", "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxGetFlags",
	"cuCtxGetId", "cuCtxGetLimit", "cuCtxGetSharedMemConfig", "cuCtxGetStreamPriorityRange",
	"cuDeviceCanAccessPeer", "cuDeviceComputeCapability", "cuDeviceGet", "cuDeviceGetAttribute",
	"cuDeviceGetName", "cuDeviceGetP2PAttribute", "cuDeviceGetPCIBusId", "cuDeviceGetProperties",
	"cuDeviceGetUuid", "cuDevicePrimaryCtxGetState", "cuDeviceTotalMem", "cuEventQuery", "cuFuncGetAttribute",
	"cuGetErrorName", "cuGetErrorString", "cuStreamGetCaptureInfo", "cuStreamGetCtx", "cuStreamGetDevice",
	"cuStreamGetFlags", "cuStreamGetId", "cuStreamGetPriority", "cuStreamIsCapturing", "cuStreamQuery",
	"cuThreadExchangeStreamCaptureMode",
};

/* Whether the app gets `name` (a driver entry point, any version suffix) ungated. */
static bool is_ungated_name(const char *name)
{
	if (!name)
		return false;
	size_t base = strcspn(name, "_");
	for (size_t i = 0; i < sizeof(ungated_names) / sizeof(ungated_names[0]); i++)
		if (strlen(ungated_names[i]) == base && !strncmp(name, ungated_names[i], base))
			return true;
	return false;
}

/* What the app gets for the real driver function `real`, found under `name` (NULL: unknown). */
static void *hand_out(void *real, const char *name)
{
	if (!real || owned_by_us(real))
		return real;
	if (real == atomic_load(&real_gpa_v2))
		return (void *)interposed_cuGetProcAddress_v2;
	if (real == atomic_load(&real_gpa_v1))
		return (void *)interposed_cuGetProcAddress;
	void *rep = replacement_for(real);
	if (rep)
		return rep;
	if (is_ungated_name(name))
		return real;
	void *stub = gs_tramp_for(real);
	if (stub)
		return stub;
	if (atomic_fetch_add(&ungated_count, 1) == 0)
		pr_err("cannot make gated entry points; the app's driver calls are not quiesced by suspend");
	return real;
}

/* Points exports and stubs made for `real` at `replacement` (late registration). */
static void redirect_existing(void *real, void *replacement)
{
	gs_tramp_retarget(real, replacement);
	for (size_t i = 0; i < NEXPORTS; i++)
		if (atomic_load(&export_real[i]) == real)
			__atomic_store_n(&gs_export_slots[i], replacement, __ATOMIC_RELEASE);
}

/* Resolves registered replacements against the driver `h`: fills real and *real_out. */
static void resolve_registry(void *h)
{
	for (;;) {
		pthread_mutex_lock(&reg_lock);
		size_t i = 0;
		while (i < nreps && reps[i].resolved)
			i++;
		const char *name = i < nreps ? reps[i].name : NULL;
		pthread_mutex_unlock(&reg_lock);
		if (!name)
			return;
		void *real = gs_real_dlsym(h, name);
		pthread_mutex_lock(&reg_lock);
		struct replacement *e = &reps[i];
		void *rep = e->replacement;
		if (!e->resolved) {
			e->real = real;
			e->resolved = true;
			if (e->real_out)
				*e->real_out = real;
		}
		pthread_mutex_unlock(&reg_lock);
		if (real)
			redirect_existing(real, rep);
		else
			pr_debug("replacement for '%s' registered, but the driver lacks it", name);
	}
}

/*
 * Identifies the driver library: `path` (a loaded file dladdr named) or the
 * configured one; loads the configured one if `load`. Returns 0 once known.
 */
static int driver_attach(const char *path, bool load)
{
	if (atomic_load(&drv_ready))
		return 0;
	gs_interpose_init();
	if (!path)
		path = driver_path;
	void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	if (!h && load)
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		dlerror(); /* not the app's error to see */
		return -1;
	}
	struct link_map *lm = NULL;
	uintptr_t lo = 0, hi = 0;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm || object_range(lm->l_ld, &lo, &hi)) {
		dlerror();
		pr_err("cannot find where the CUDA driver '%s' is mapped", path);
		return -1;
	}
	void *v1 = gs_real_dlsym(h, "cuGetProcAddress");
	void *v2 = gs_real_dlsym(h, "cuGetProcAddress_v2");
	dlerror();
	resolve_registry(h); /* before any pointer is handed out */

	pthread_mutex_lock(&drv_lock);
	if (!atomic_load(&drv_ready)) {
		drv_handle = h;
		drv_lo = lo;
		drv_hi = hi;
		atomic_store(&real_gpa_v1, v1);
		atomic_store(&real_gpa_v2, v2);
		gs_gate_set_driver_range(lo, hi);
		atomic_store(&drv_ready, 1);
		pr_debug("CUDA driver '%s' at %#lx-%#lx", path, (unsigned long)lo, (unsigned long)hi);
	}
	pthread_mutex_unlock(&drv_lock);
	/* Entries registered while we were resolving: drv_ready is set, so the registrant or this pass sees them. */
	resolve_registry(drv_handle);
	return 0;
}

static bool in_driver(const void *p)
{
	if (!atomic_load(&drv_ready)) {
		Dl_info info;
		if (!dladdr(p, &info) || !is_driver_file(info.dli_fname) || driver_attach(info.dli_fname, false))
			return false;
	}
	return (uintptr_t)p >= drv_lo && (uintptr_t)p < drv_hi;
}

/* Function names of the driver API: cu followed by an upper-case letter (not cudbg*, cuda*). */
static bool is_driver_name(const char *name)
{
	return name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

/* Leaves dlerror() saying the name was not found, as the real lookup would have. */
static void *not_found(const char *name)
{
	if (libc_handle)
		gs_real_dlsym(libc_handle, name);
	return NULL;
}

static void *lookup_result(const char *name, void *res)
{
	if (!res || !is_driver_name(name))
		return res;
	if (in_exports(res)) {
		/*
		 * A global lookup found our own export. Answer what it would have
		 * answered without us: the name only exists if the driver has it.
		 */
		if (driver_attach(NULL, false) || !gs_real_dlsym(drv_handle, name)) {
			dlerror();
			return not_found(name);
		}
		return res;
	}
	if (!in_driver(res))
		return res;
	Dl_info info;
	const ElfW(Sym) *sym = NULL;
	if (dladdr1(res, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && ELF64_ST_TYPE(sym->st_info) == STT_OBJECT)
		return res; /* data, not an entry point */
	return hand_out(res, name);
}

/*
 * dlsym for "cu..." names. RTLD_NEXT and RTLD_DEFAULT are answered as seen
 * from this library, which is preloaded and so early in the search order: the
 * driver comes after us either way. (Non-"cu" names keep their exact meaning:
 * gate_x86_64.S passes them on by a tail jump.)
 */
void *gs_dlsym_cu(void *handle, const char *name)
{
	return lookup_result(name, gs_real_dlsym(handle, name));
}

void *gs_dlvsym_cu(void *handle, const char *name, const char *version)
{
	return lookup_result(name, gs_real_dlvsym(handle, name, version));
}

static CUresult interposed_cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
					      void *status)
{
	gpa_v2_fn real = (gpa_v2_fn)atomic_load(&real_gpa_v2);
	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	int token = gs_gate_enter_c();
	CUresult r = real(symbol, pfn, cuda_version, flags, status);
	gs_gate_exit_c(token);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hand_out(*pfn, symbol);
	return r;
}

static CUresult interposed_cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
	gpa_v1_fn real = (gpa_v1_fn)atomic_load(&real_gpa_v1);
	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	int token = gs_gate_enter_c();
	CUresult r = real(symbol, pfn, cuda_version, flags);
	gs_gate_exit_c(token);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hand_out(*pfn, symbol);
	return r;
}

void *gs_export_resolve(unsigned index)
{
	const char *name = export_names[index];
	void *target = (void *)gs_export_missing;
	if (driver_attach(NULL, true) == 0) {
		void *real = gs_real_dlsym(drv_handle, name);
		if (real) {
			atomic_store(&export_real[index], real);
			target = hand_out(real, name);
		} else {
			dlerror();
			pr_warn("the CUDA driver lacks '%s'; the app's calls to it return CUDA_ERROR_NOT_FOUND", name);
		}
	} else {
		pr_err("cannot load the CUDA driver '%s' for '%s'; calls return CUDA_ERROR_NOT_FOUND", driver_path, name);
	}
	__atomic_store_n(&gs_export_slots[index], target, __ATOMIC_RELEASE);
	atomic_fetch_add(&exports_bound, 1);
	return target;
}

int gs_interpose_replace(const char *versioned_name, void *replacement, void **real_out, struct gs_err *err)
{
	gs_interpose_init();
	if (!versioned_name || !is_driver_name(versioned_name) || !replacement)
		return gs_fail(err, GS_E_FAILURE, "invalid replacement of driver entry point '%s'",
			       versioned_name ? versioned_name : "(null)");
	if (!strcmp(versioned_name, "cuGetProcAddress") || !strcmp(versioned_name, "cuGetProcAddress_v2"))
		return gs_fail(err, GS_E_STATE, "'%s' is owned by the interposer and cannot be replaced", versioned_name);
	char *name = strdup(versioned_name);
	if (!name)
		return gs_fail(err, GS_E_FAILURE, "out of memory registering a replacement for '%s'", versioned_name);
	if (real_out)
		*real_out = NULL;

	pthread_mutex_lock(&reg_lock);
	struct replacement *e = NULL;
	for (size_t i = 0; i < nreps && !e; i++)
		if (!strcmp(reps[i].name, name))
			e = &reps[i];
	void *redirect_real = NULL;
	if (e) {
		free(name);
		e->replacement = replacement;
		if (real_out) {
			e->real_out = real_out;
			if (e->resolved)
				*real_out = e->real;
		}
		redirect_real = e->resolved ? e->real : NULL;
	} else {
		if (nreps == reps_cap) {
			size_t cap = reps_cap ? reps_cap * 2 : 16;
			struct replacement *r = realloc(reps, cap * sizeof(*r));
			if (!r) {
				pthread_mutex_unlock(&reg_lock);
				free(name);
				return gs_fail(err, GS_E_FAILURE, "out of memory registering a replacement for '%s'",
					       versioned_name);
			}
			reps = r;
			reps_cap = cap;
		}
		reps[nreps++] = (struct replacement){ .name = name, .replacement = replacement, .real_out = real_out };
	}
	pthread_mutex_unlock(&reg_lock);

	if (redirect_real)
		redirect_existing(redirect_real, replacement);
	if (atomic_load(&drv_ready))
		resolve_registry(drv_handle);
	return 0;
}

void *gs_interpose_real(const char *versioned_name)
{
	if (driver_attach(NULL, true))
		return NULL;
	void *real = gs_real_dlsym(drv_handle, versioned_name);
	if (!real)
		dlerror();
	return real;
}

void gs_interpose_get_stats(struct gs_interpose_stats *st)
{
	st->stubs = gs_tramp_count();
	st->exports_bound = atomic_load(&exports_bound);
	st->ungated = atomic_load(&ungated_count);
	st->driver_seen = atomic_load(&drv_ready);
}

static void *test_export_address(const char *name)
{
	for (size_t i = 0; i < NEXPORTS; i++) {
		if (strcmp(export_names[i], name))
			continue;
		Dl_info info;
		if (!dladdr((const void *)gs_exports_begin, &info))
			return NULL;
		void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
		void *p = self ? gs_real_dlsym(self, name) : NULL;
		if (self)
			dlclose(self);
		return p;
	}
	return NULL;
}

static int test_is_gated(const void *fn)
{
	return in_exports(fn) || gs_tramp_owns(fn);
}

int gs_interpose_replace_all(const struct gs_interpose_hook *hooks, size_t n, struct gs_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (gs_interpose_replace(hooks[i].name, hooks[i].hook, hooks[i].real, err))
			return gs_err_wrap(err, "cannot install the replacement of %s", hooks[i].name);
	return 0;
}

const struct gs_interpose_test_hooks *gpusnap_interpose_test_hooks(void)
{
	static const struct gs_interpose_test_hooks hooks = {
		.gate_close = gs_gate_close,
		.gate_open = gs_gate_open,
		.gate_exempt_current_thread = gs_gate_exempt_current_thread,
		.gate_enter_c = gs_gate_enter_c,
		.gate_exit_c = gs_gate_exit_c,
		.gate_inside_count = gs_gate_inside_count,
		.gate_waiting_count = gs_gate_waiting_count,
		.gate_thread_count = gs_gate_thread_count,
		.gate_fence_name = gs_gate_fence_name,
		.replace = gs_interpose_replace,
		.real = gs_interpose_real,
		.export_address = test_export_address,
		.is_gated = test_is_gated,
		.get_stats = gs_interpose_get_stats,
	};
	return &hooks;
}
