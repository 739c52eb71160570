/*
 * peer_app.c - the app of tests/cli/t4014-agent-peer.sh: peer access,
 * pointer attributes and dma-buf exports of the agent's memory, on the
 * host-memory fake driver with two devices (FAKE_CUDA_GPUS=2).
 *
 * It allocates on device 1 (blocks small enough to share a slab, and one
 * large allocation with a mapping of its own) and reads them with a kernel of
 * device 0 (the fake's cuFakeKernelCopy, which copies through device 0's
 * view of memory, as a kernel reading a peer's memory does). Commands, one
 * per stdin line, each answered by one line "<NAME> OK ..." or
 * "<NAME> FAIL <why>":
 *   alloc        allocates the "old" set on device 1 (3 small blocks, 1 large) -> ALLOC
 *   alloc-new    allocates the "new" set the same way -> ALLOC
 *   enable       device 0's context enables peer access to device 1's -> ENABLE
 *   disable      and disables it -> DISABLE
 *   read-all     a device-0 kernel reads every block of device 1; each must
 *                read back its bytes -> READ OK <n>
 *   read-denied  the same kernel must fault on every block -> DENIED OK <n>
 *   attrs        pointer attributes of every block answer for the block:
 *                RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID (unique, stable
 *                since the block was made), DEVICE_ORDINAL, MEMORY_TYPE,
 *                DEVICE_POINTER, CONTEXT; the same through
 *                cuPointerGetAttributes; cuMemGetAddressRange agrees;
 *                IS_GPU_DIRECT_RDMA_CAPABLE is $PEER_APP_RDMA (default 1) -> ATTRS
 *   export       exports the large "old" block as a dma-buf -> EXPORT OK <fd>
 *   verify       every block holds its bytes (host view) -> VERIFY OK <n>
 *   quit
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_app_common.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define ILLEGAL_ADDRESS 700
#define ATTR_CONTEXT 1
#define ATTR_MEMORY_TYPE 2
#define ATTR_DEVICE_POINTER 3
#define ATTR_BUFFER_ID 7
#define ATTR_DEVICE_ORDINAL 9
#define ATTR_RANGE_START_ADDR 11
#define ATTR_RANGE_SIZE 12
#define ATTR_IS_GPU_DIRECT_RDMA_CAPABLE 15
#define MEMORYTYPE_DEVICE 2
#define MAX_BLOCKS 16
#define LARGE_BYTES (4u << 20)

static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_ctx_set)(void *);
static CUresult (*p_retain)(void **, int);
static CUresult (*p_enable)(void *, unsigned);
static CUresult (*p_disable)(void *);
static CUresult (*p_kernel_copy)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*p_attr)(void *, int, CUdeviceptr);
static CUresult (*p_attrs)(unsigned, int *, void **, CUdeviceptr);
static CUresult (*p_range)(CUdeviceptr *, size_t *, CUdeviceptr);
static CUresult (*p_dmabuf)(void *, CUdeviceptr, size_t, int, unsigned long long);

static void *ctx[2];
static CUdeviceptr scratch; /* device 0's buffer the kernel copies into */

struct block {
	CUdeviceptr p;
	size_t size;
	unsigned char seed;
	unsigned long long buffer_id; /* as first seen by attrs; 0 before */
};
static struct block blocks[MAX_BLOCKS];
static int nblocks;
static CUdeviceptr large_old;

static unsigned char byte_of(const struct block *b, size_t i) { return (unsigned char)(b->seed + i * 7); }

/* Allocates size bytes on device 1 (device 0 current again after) and fills them. */
static int alloc_on_1(size_t size, CUdeviceptr *out)
{
	if (nblocks == MAX_BLOCKS)
		return -1;
	CUdeviceptr p = 0;
	CUresult r = p_ctx_set(ctx[1]);
	if (!r)
		r = p_alloc(&p, size);
	p_ctx_set(ctx[0]);
	if (r)
		return -1;
	struct block *b = &blocks[nblocks];
	*b = (struct block){ p, size, (unsigned char)(nblocks * 31 + 5), 0 };
	for (size_t i = 0; i < size; i++)
		((unsigned char *)(uintptr_t)p)[i] = byte_of(b, i);
	nblocks++;
	if (out)
		*out = p;
	return 0;
}

static void alloc_set(CUdeviceptr *large)
{
	static const size_t small[] = { 1000, 4096, 70000 };
	for (size_t i = 0; i < 3; i++)
		if (alloc_on_1(small[i], NULL)) {
			printf("ALLOC FAIL small block %zu\n", i);
			return;
		}
	if (alloc_on_1(LARGE_BYTES, large)) {
		printf("ALLOC FAIL large block\n");
		return;
	}
	printf("ALLOC OK %d\n", nblocks);
}

static void cmd_alloc(void) { alloc_set(&large_old); }
static void cmd_alloc_new(void) { alloc_set(NULL); }

static void cmd_enable(void)
{
	CUresult r = p_enable(ctx[1], 0);
	if (r)
		printf("ENABLE FAIL error %d\n", r);
	else
		printf("ENABLE OK\n");
}

static void cmd_disable(void)
{
	CUresult r = p_disable(ctx[1]);
	if (r)
		printf("DISABLE FAIL error %d\n", r);
	else
		printf("DISABLE OK\n");
}

static void cmd_read_all(void)
{
	for (int i = 0; i < nblocks; i++) {
		struct block *b = &blocks[i];
		memset((void *)(uintptr_t)scratch, 0, b->size);
		CUresult r = p_kernel_copy(scratch, b->p, b->size);
		if (r) {
			printf("READ FAIL block %d (%#llx, %zu bytes): the kernel on device 0 got error %d\n", i, b->p,
			       b->size, r);
			return;
		}
		for (size_t k = 0; k < b->size; k++)
			if (((unsigned char *)(uintptr_t)scratch)[k] != byte_of(b, k)) {
				printf("READ FAIL block %d byte %zu\n", i, k);
				return;
			}
	}
	printf("READ OK %d\n", nblocks);
}

static void cmd_read_denied(void)
{
	for (int i = 0; i < nblocks; i++) {
		CUresult r = p_kernel_copy(scratch, blocks[i].p, blocks[i].size);
		if (r != ILLEGAL_ADDRESS) {
			printf("DENIED FAIL block %d (%#llx): the kernel on device 0 got %d, not an illegal address\n", i,
			       blocks[i].p, r);
			return;
		}
	}
	printf("DENIED OK %d\n", nblocks);
}

/* One block's attributes, one by one and all at once. */
static int check_attrs(struct block *b, int i, unsigned want_rdma)
{
	/* a pointer inside the block answers for the whole block */
	CUdeviceptr in = b->p + b->size / 2, start = 0, dptr = 0;
	size_t size = 0;
	unsigned long long id = 0;
	unsigned type = 0, rdma = 9;
	int dev = -1;
	void *c = NULL;
	if (p_attr(&start, ATTR_RANGE_START_ADDR, in) || p_attr(&size, ATTR_RANGE_SIZE, in) ||
	    p_attr(&id, ATTR_BUFFER_ID, in) || p_attr(&dev, ATTR_DEVICE_ORDINAL, in) ||
	    p_attr(&type, ATTR_MEMORY_TYPE, in) || p_attr(&dptr, ATTR_DEVICE_POINTER, in) ||
	    p_attr(&c, ATTR_CONTEXT, in) || p_attr(&rdma, ATTR_IS_GPU_DIRECT_RDMA_CAPABLE, in)) {
		printf("ATTRS FAIL block %d: cuPointerGetAttribute failed\n", i);
		return -1;
	}
	if (start != b->p || size != b->size) {
		printf("ATTRS FAIL block %d: range %#llx+%zu, the block is %#llx+%zu\n", i, start, size, b->p, b->size);
		return -1;
	}
	if (dev != 1 || type != MEMORYTYPE_DEVICE || dptr != in || c != ctx[1] || rdma != want_rdma) {
		printf("ATTRS FAIL block %d: device %d type %u pointer %#llx context %p (want %p) rdma %u (want %u)\n", i,
		       dev, type, dptr, c, ctx[1], rdma, want_rdma);
		return -1;
	}
	if (!id || (b->buffer_id && id != b->buffer_id)) {
		printf("ATTRS FAIL block %d: buffer id %#llx, before %#llx\n", i, id, b->buffer_id);
		return -1;
	}
	b->buffer_id = id;
	CUdeviceptr start2 = 0;
	size_t size2 = 0;
	unsigned long long id2 = 0;
	int attrs[] = { ATTR_RANGE_START_ADDR, ATTR_RANGE_SIZE, ATTR_BUFFER_ID };
	void *data[] = { &start2, &size2, &id2 };
	if (p_attrs(3, attrs, data, in) || start2 != start || size2 != size || id2 != id) {
		printf("ATTRS FAIL block %d: cuPointerGetAttributes says %#llx+%zu id %#llx\n", i, start2, size2, id2);
		return -1;
	}
	CUdeviceptr base = 0;
	size_t rsize = 0;
	if (p_range(&base, &rsize, in) || base != start || rsize != size) {
		printf("ATTRS FAIL block %d: cuMemGetAddressRange says %#llx+%zu\n", i, base, rsize);
		return -1;
	}
	return 0;
}

static void cmd_attrs(void)
{
	const char *e = getenv("PEER_APP_RDMA");
	unsigned want_rdma = e ? (unsigned)atoi(e) : 1;
	for (int i = 0; i < nblocks; i++)
		if (check_attrs(&blocks[i], i, want_rdma))
			return;
	for (int i = 0; i < nblocks; i++)
		for (int j = 0; j < i; j++)
			if (blocks[i].buffer_id == blocks[j].buffer_id) {
				printf("ATTRS FAIL blocks %d and %d share buffer id %#llx\n", j, i, blocks[i].buffer_id);
				return;
			}
	printf("ATTRS OK %d\n", nblocks);
}

static void cmd_export(void)
{
	int fd = -1;
	CUresult r = large_old ? p_dmabuf(&fd, large_old, LARGE_BYTES, 1 /* DMA_BUF_FD */, 0) : -1;
	if (r || fd < 0)
		printf("EXPORT FAIL error %d\n", r);
	else
		printf("EXPORT OK %d\n", fd); /* kept open, as a NIC's registration would keep it */
}

static void verify(void)
{
	for (int i = 0; i < nblocks; i++)
		for (size_t k = 0; k < blocks[i].size; k++)
			if (((unsigned char *)(uintptr_t)blocks[i].p)[k] != byte_of(&blocks[i], k)) {
				printf("VERIFY FAIL block %d byte %zu\n", i, k);
				return;
			}
	printf("VERIFY OK %d\n", nblocks);
}

int main(void)
{
	fake_app_open_driver("peer_app");
	fake_app_gpa("cuMemAlloc", &p_alloc);
	*(void **)&p_ctx_set = fake_app_need("cuCtxSetCurrent");
	*(void **)&p_retain = fake_app_need("cuDevicePrimaryCtxRetain");
	*(void **)&p_enable = fake_app_need("cuCtxEnablePeerAccess");
	*(void **)&p_disable = fake_app_need("cuCtxDisablePeerAccess");
	*(void **)&p_kernel_copy = fake_app_need("cuFakeKernelCopy");
	*(void **)&p_attr = fake_app_need("cuPointerGetAttribute");
	*(void **)&p_attrs = fake_app_need("cuPointerGetAttributes");
	*(void **)&p_range = fake_app_need("cuMemGetAddressRange_v2");
	*(void **)&p_dmabuf = fake_app_need("cuMemGetHandleForAddressRange");
	if (fake_app_make_context())
		return 1;
	if (p_retain(&ctx[0], 0) || p_retain(&ctx[1], 1) || p_ctx_set(ctx[0]) || p_alloc(&scratch, LARGE_BYTES)) {
		fprintf(stderr, "peer_app: cannot use devices 0 and 1 (FAKE_CUDA_GPUS=2?)\n");
		return 1;
	}
	static const struct fake_app_command commands[] = {
		{ "alloc", cmd_alloc },		  { "alloc-new", cmd_alloc_new },     { "enable", cmd_enable },
		{ "disable", cmd_disable },	  { "read-all", cmd_read_all },	      { "read-denied", cmd_read_denied },
		{ "attrs", cmd_attrs },		  { "export", cmd_export },	      { NULL, NULL },
	};
	return fake_app_serve("peer_app", 0, verify, commands);
}
