/*
 * pool_app.c - the app of tests/cli/t4011-agent-pools.sh: memory pools,
 * managed memory and CUDA graph capture under the agent, on the host-memory
 * fake driver with two devices (FAKE_CUDA_GPUS=2). Each command checks what
 * the driver's semantics say an allocation must be (where it lives, which pool
 * it came from, which devices may use it) through the driver's own queries
 * (cuPointerGetAttribute, cuMemGetAccess), and answers one line: "<NAME> OK"
 * or "<NAME> FAIL <why>". Commands, one per stdin line:
 *   host-pool     an allocation from a pool located in host memory comes from that pool (the driver's)
 *   device-pool   an allocation from a pool of device 1, made with device 0 current, lives on device 1
 *   pool-access   a pool's access list reaches its allocations: given before (device 1 reads and
 *                 writes), and given after the allocation (device 1 reads)
 *   check-access  the access of pool-access's allocations is still there (after a resume)
 *   set-pool      cuDeviceSetMemPool: cuMemAllocAsync takes the pool set (an IPC pool: the driver's;
 *                 a pool with an access list: the agent's, with that access)
 *   capture-alloc allocations during a stream capture, by pool and by cuMemAllocAsync, are the graph's
 *   capture-free  frees an allocation of 4 MiB inside a capture ("CAPFREE OK"); its memory stays until
 *   graph-launch  launches that graph twice ("GRAPH OK"); an allocation after it lets the agent free it
 *   managed       cuMemAllocManaged of 2 MiB; managed-free frees it
 *   capture-open  begins a global-mode capture on the app's stream and leaves it open -> "CAPOPEN OK";
 *                 capture-open-local the same in thread-local mode; capture-close ends it -> "CAPCLOSE OK"
 *   verify        the data of every allocation the agent made here -> "VERIFY OK n"
 *   quit
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUpool;

#define LOC_DEVICE 1
#define LOC_HOST 2
#define ACCESS_READ 1
#define ACCESS_RW 3
#define ATTR_MEMORY_TYPE 2
#define ATTR_DEVICE_ORDINAL 9
#define ATTR_MEMPOOL_HANDLE 17
#define MEMORYTYPE_HOST 1

struct location {
	int type, id;
};
struct access {
	struct location loc;
	int flags;
};
/* CUmemPoolProps (88 bytes): the head matters here */
struct pool_props {
	int alloc_type, handle_types;
	struct location loc;
	unsigned char rest[72];
};

static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_alloc_async)(CUdeviceptr *, size_t, CUstream);
static CUresult (*p_free_async)(CUdeviceptr, CUstream);
static CUresult (*p_alloc_from_pool)(CUdeviceptr *, size_t, CUpool, CUstream);
static CUresult (*p_alloc_managed)(CUdeviceptr *, size_t, unsigned);
static CUresult (*p_pool_create)(CUpool *, const struct pool_props *);
static CUresult (*p_pool_set_access)(CUpool, const struct access *, size_t);
static CUresult (*p_set_mem_pool)(int, CUpool);
static CUresult (*p_default_mem_pool)(CUpool *, int);
static CUresult (*p_get_access)(unsigned long long *, const struct location *, CUdeviceptr);
static CUresult (*p_pointer_attr)(void *, int, CUdeviceptr);
static CUresult (*p_stream_create)(CUstream *, unsigned);
static CUresult (*p_begin_capture)(CUstream, int);
static CUresult (*p_end_capture)(CUstream, void **);
static CUresult (*p_instantiate)(void **, void *, unsigned long long);
static CUresult (*p_launch)(void *, CUstream);
static CUresult (*p_graph_destroy)(void *);
static CUresult (*p_ctx_set)(void *);
static CUresult (*p_retain)(void **, int);

static void *ctx[2];
static CUstream stream;

/* The agent's allocations made here, checked by verify. */
struct block {
	CUdeviceptr p;
	size_t size;
	unsigned char seed;
};
static struct block blocks[32];
static int nblocks;
/* pool-access's allocations: given access before (rw_small, rw_big) and after (ro_small) */
static CUdeviceptr rw_small, rw_big, ro_small;
static CUdeviceptr captured_free, managed;
static void *graph;

static void fill_keep(CUdeviceptr p, size_t size)
{
	struct block *b = &blocks[nblocks++ % 32];
	b->p = p;
	b->size = size;
	b->seed = (unsigned char)(nblocks * 37);
	for (size_t i = 0; i < size; i++)
		((unsigned char *)(uintptr_t)p)[i] = (unsigned char)(b->seed + i * 13);
}

static CUpool make_pool(int loc_type, int loc_id, int handle_types)
{
	struct pool_props pp;
	memset(&pp, 0, sizeof(pp));
	pp.alloc_type = 1;
	pp.handle_types = handle_types;
	pp.loc.type = loc_type;
	pp.loc.id = loc_id;
	CUpool pool = NULL;
	return p_pool_create(&pool, &pp) ? NULL : pool;
}

static unsigned long long access_of(CUdeviceptr p, int dev)
{
	struct location loc = { LOC_DEVICE, dev };
	unsigned long long f = 99;
	return p_get_access(&f, &loc, p) ? 99 : f;
}

static CUpool pool_of(CUdeviceptr p)
{
	CUpool pool = (CUpool)1;
	return p_pointer_attr(&pool, ATTR_MEMPOOL_HANDLE, p) ? (CUpool)1 : pool;
}

static void host_pool(void)
{
	CUpool pool = make_pool(LOC_HOST, 0, 0);
	CUdeviceptr p = 0;
	unsigned type = 0;
	if (!pool || p_alloc_from_pool(&p, 64 << 10, pool, NULL)) {
		printf("HOSTPOOL FAIL no pool or allocation\n");
		return;
	}
	if (pool_of(p) != pool || p_pointer_attr(&type, ATTR_MEMORY_TYPE, p) || type != MEMORYTYPE_HOST)
		printf("HOSTPOOL FAIL the allocation is not host memory of the pool (pool %p, want %p; memory type %u)\n",
		       pool_of(p), pool, type);
	else
		printf("HOSTPOOL OK\n");
}

static void device_pool(void)
{
	CUpool pool = make_pool(LOC_DEVICE, 1, 0);
	CUdeviceptr p = 0;
	int dev = -1;
	if (!pool || p_alloc_from_pool(&p, 1 << 20, pool, NULL) || p_pointer_attr(&dev, ATTR_DEVICE_ORDINAL, p)) {
		printf("DEVPOOL FAIL no pool, allocation or device\n");
		return;
	}
	if (dev != 1) {
		printf("DEVPOOL FAIL the allocation is on device %d, its pool on device 1\n", dev);
		return;
	}
	fill_keep(p, 1 << 20);
	printf("DEVPOOL OK\n");
}

static void check_access(void)
{
	unsigned long long a = access_of(rw_small, 1), b = access_of(rw_big, 1), c = access_of(ro_small, 1);
	unsigned long long own = access_of(rw_small, 0);
	if (a != ACCESS_RW || b != ACCESS_RW || (c != ACCESS_READ && c != ACCESS_RW) || own != ACCESS_RW)
		printf("ACCESS FAIL device 1's access: %llu and %llu (want 3), %llu (want 1 or 3); device 0's %llu\n", a,
		       b, c, own);
	else
		printf("ACCESS OK\n");
}

static void pool_access(void)
{
	CUpool rw = make_pool(LOC_DEVICE, 0, 0), ro = make_pool(LOC_DEVICE, 0, 0);
	struct access give_rw = { { LOC_DEVICE, 1 }, ACCESS_RW }, give_ro = { { LOC_DEVICE, 1 }, ACCESS_READ };
	if (!rw || !ro || p_pool_set_access(rw, &give_rw, 1) || p_alloc_from_pool(&rw_small, 4096, rw, stream) ||
	    p_alloc_from_pool(&rw_big, 3 << 20, rw, stream) || p_alloc_from_pool(&ro_small, 4096, ro, stream) ||
	    p_pool_set_access(ro, &give_ro, 1)) {
		printf("ACCESS FAIL pools, access lists or allocations failed\n");
		return;
	}
	fill_keep(rw_small, 4096);
	fill_keep(rw_big, 3 << 20);
	fill_keep(ro_small, 4096);
	check_access();
}

static void set_pool(void)
{
	CUpool ipc = make_pool(LOC_DEVICE, 0, 1 /* POSIX file descriptor */), peer = make_pool(LOC_DEVICE, 0, 0), dflt;
	struct access give_rw = { { LOC_DEVICE, 1 }, ACCESS_RW };
	CUdeviceptr a = 0, b = 0;
	if (!ipc || !peer || p_pool_set_access(peer, &give_rw, 1) || p_default_mem_pool(&dflt, 0) ||
	    p_set_mem_pool(0, ipc) || p_alloc_async(&a, 64 << 10, NULL) || p_set_mem_pool(0, peer) ||
	    p_alloc_async(&b, 8192, stream) || p_set_mem_pool(0, dflt)) {
		printf("SETPOOL FAIL pools or allocations failed\n");
		return;
	}
	if (pool_of(a) != ipc)
		printf("SETPOOL FAIL cuMemAllocAsync did not take the IPC pool set for device 0 (%p, want %p)\n", pool_of(a),
		       ipc);
	else if (access_of(b, 1) != ACCESS_RW)
		printf("SETPOOL FAIL cuMemAllocAsync from the pool set has device 1's access %llu, the pool gives 3\n",
		       access_of(b, 1));
	else {
		fill_keep(b, 8192);
		printf("SETPOOL OK\n");
	}
}

static void capture_alloc(void)
{
	CUpool pool = make_pool(LOC_DEVICE, 0, 0);
	CUdeviceptr a = 0, b = 0;
	void *g = NULL;
	if (!pool || p_begin_capture(stream, 0)) {
		printf("CAPALLOC FAIL no pool or capture\n");
		return;
	}
	CUresult ra = p_alloc_from_pool(&a, 1 << 20, pool, stream), rb = p_alloc_async(&b, 1 << 20, stream);
	CUresult re = p_end_capture(stream, &g);
	CUpool dflt = NULL;
	p_default_mem_pool(&dflt, 0);
	if (ra || rb || re)
		printf("CAPALLOC FAIL allocations in the capture: %d %d, end %d\n", ra, rb, re);
	else if (pool_of(a) != pool || pool_of(b) != dflt)
		printf("CAPALLOC FAIL allocations in a capture are not the graph's (pools %p %p, want %p %p)\n", pool_of(a),
		       pool_of(b), pool, dflt);
	else
		printf("CAPALLOC OK\n");
	if (g)
		p_graph_destroy(g);
}

static void capture_free(void)
{
	void *g = NULL;
	if (p_alloc(&captured_free, 4 << 20) || p_begin_capture(stream, 0)) {
		printf("CAPFREE FAIL no allocation or capture\n");
		return;
	}
	CUresult rf = p_free_async(captured_free, stream), re = p_end_capture(stream, &g);
	if (rf || re || p_instantiate(&graph, g, 0))
		printf("CAPFREE FAIL free %d, end of capture %d\n", rf, re);
	else
		printf("CAPFREE OK\n");
}

/* A capture left open (mode 0: global, 1: thread-local) until capture-close: a suspend must not break it. */
static void capture_open_mode(int mode)
{
	CUresult r = p_begin_capture(stream, mode);
	if (r)
		printf("CAPOPEN FAIL %d\n", r);
	else
		printf("CAPOPEN OK\n");
}
static void capture_open(void) { capture_open_mode(0); }
static void capture_open_local(void) { capture_open_mode(1); }

static void capture_close(void)
{
	void *g = NULL;
	CUresult r = p_end_capture(stream, &g);
	if (g)
		p_graph_destroy(g);
	if (r)
		printf("CAPCLOSE FAIL %d\n", r);
	else
		printf("CAPCLOSE OK\n");
}

static void graph_launch(void)
{
	CUdeviceptr p = 0;
	CUresult r1 = p_launch(graph, stream), r2 = p_launch(graph, stream);
	/* the next allocation call finds the graph's free done */
	CUresult ra = p_alloc(&p, 256), rf = ra ? 0 : p_free(p);
	if (r1 || r2 || ra || rf)
		printf("GRAPH FAIL launches %d %d, allocation %d, free %d\n", r1, r2, ra, rf);
	else
		printf("GRAPH OK\n");
}

static void alloc_managed(void)
{
	CUresult r = p_alloc_managed(&managed, 2 << 20, 1 /* CU_MEM_ATTACH_GLOBAL */);
	printf(r ? "MANAGED FAIL %d\n" : "MANAGED OK\n", r);
}

static void free_managed(void)
{
	CUresult r = p_free(managed);
	printf(r ? "MANAGEDFREE FAIL %d\n" : "MANAGEDFREE OK\n", r);
}

static void verify(void)
{
	for (int i = 0; i < nblocks && i < 32; i++) {
		const unsigned char *p = (const unsigned char *)(uintptr_t)blocks[i].p;
		for (size_t k = 0; k < blocks[i].size; k++)
			if (p[k] != (unsigned char)(blocks[i].seed + k * 13)) {
				printf("VERIFY FAIL block %d (%#llx) byte %zu\n", i, blocks[i].p, k);
				return;
			}
	}
	printf("VERIFY OK %d\n", nblocks < 32 ? nblocks : 32);
}

int main(void)
{
	fake_app_open_driver("pool_app");
	fake_app_gpa("cuMemAlloc", &p_alloc);
	fake_app_gpa("cuMemFree", &p_free);
	fake_app_gpa("cuMemAllocAsync", &p_alloc_async);
	*(void **)&p_free_async = fake_app_need("cuMemFreeAsync");
	*(void **)&p_alloc_from_pool = fake_app_need("cuMemAllocFromPoolAsync");
	*(void **)&p_alloc_managed = fake_app_need("cuMemAllocManaged");
	*(void **)&p_pool_create = fake_app_need("cuMemPoolCreate");
	fake_app_gpa("cuMemPoolSetAccess", &p_pool_set_access);
	*(void **)&p_set_mem_pool = fake_app_need("cuDeviceSetMemPool");
	*(void **)&p_default_mem_pool = fake_app_need("cuDeviceGetDefaultMemPool");
	*(void **)&p_get_access = fake_app_need("cuMemGetAccess");
	*(void **)&p_pointer_attr = fake_app_need("cuPointerGetAttribute");
	*(void **)&p_stream_create = fake_app_need("cuStreamCreate");
	*(void **)&p_begin_capture = fake_app_need("cuStreamBeginCapture_v2");
	*(void **)&p_end_capture = fake_app_need("cuStreamEndCapture");
	*(void **)&p_instantiate = fake_app_need("cuGraphInstantiateWithFlags");
	*(void **)&p_launch = fake_app_need("cuGraphLaunch");
	*(void **)&p_graph_destroy = fake_app_need("cuGraphDestroy");
	*(void **)&p_ctx_set = fake_app_need("cuCtxSetCurrent");
	*(void **)&p_retain = fake_app_need("cuDevicePrimaryCtxRetain");
	if (fake_app_make_context())
		return 1;
	/* device 1 used once, so the agent has its context; then device 0 is current */
	CUdeviceptr one = 0;
	if (p_retain(&ctx[1], 1) || p_ctx_set(ctx[1]) || p_alloc(&one, 1 << 20) || p_retain(&ctx[0], 0) ||
	    p_ctx_set(ctx[0]) || p_stream_create(&stream, 0)) {
		fprintf(stderr, "pool_app: cannot use device 1 (FAKE_CUDA_GPUS=2?)\n");
		return 1;
	}
	fill_keep(one, 1 << 20);
	static const struct fake_app_command commands[] = {
		{ "host-pool", host_pool },	    { "device-pool", device_pool },   { "pool-access", pool_access },
		{ "check-access", check_access }, { "set-pool", set_pool },	      { "capture-alloc", capture_alloc },
		{ "capture-free", capture_free }, { "graph-launch", graph_launch }, { "managed", alloc_managed },
		{ "managed-free", free_managed }, { "capture-open", capture_open },
		{ "capture-open-local", capture_open_local }, { "capture-close", capture_close }, { NULL, NULL },
	};
	return fake_app_serve("pool_app", 0, verify, commands);
}
