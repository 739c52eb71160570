/*
 * ptrattr.cu - pointer attributes of cudaMalloc memory, for
 * tests/gpu/t65-pointer-attrs.sh, which runs it alone and under the agent
 * (where small blocks share a slab and large ones are rounded-up mappings).
 * At start it allocates, on GPU 0, blocks of 1, 1000, 4096, 70000 bytes,
 * 1 MiB and 3 MiB + 5 bytes with cudaMalloc and fills them. Commands:
 *   attrs   for every block, asked about a pointer inside it, what a
 *           cudaMalloc allocation answers: RANGE_START_ADDR is the block,
 *           RANGE_SIZE covers it and no other block, cuMemGetAddressRange
 *           agrees, BUFFER_ID differs from every other block's and from the
 *           first answer never (across suspend and resume too), DEVICE_ORDINAL
 *           0, MEMORY_TYPE device, CONTEXT the current one, DEVICE_POINTER the
 *           pointer; the same through cuPointerGetAttributes and
 *           cudaPointerGetAttributes -> "ATTRS OK <n> rdma=<r>" (r: 1 when
 *           IS_GPU_DIRECT_RDMA_CAPABLE was true for every block) or
 *           "ATTRS FAIL <what>"
 *   verify  every block holds its bytes -> "VERIFY OK <n>"
 *   quit
 */
#include "app_common.cuh"

#include <vector>

struct block {
	void *p;
	size_t size;
	uint64_t seed;
	unsigned long long buffer_id; /* first answer; 0 before */
};
static std::vector<block> g_blocks;

static bool fill(block &b)
{
	std::vector<unsigned char> h(b.size);
	for (size_t i = 0; i < b.size; i++)
		h[i] = (unsigned char)mix64(b.seed * 1000003 + i);
	return CK(cudaMemcpy(b.p, h.data(), b.size, cudaMemcpyHostToDevice));
}

static void verify(void)
{
	for (const block &b : g_blocks) {
		std::vector<unsigned char> h(b.size);
		if (!CK(cudaMemcpy(h.data(), b.p, b.size, cudaMemcpyDeviceToHost))) {
			reply("VERIFY FAIL copy of %zu bytes failed", b.size);
			return;
		}
		for (size_t i = 0; i < b.size; i++)
			if (h[i] != (unsigned char)mix64(b.seed * 1000003 + i)) {
				reply("VERIFY FAIL block of %zu bytes, byte %zu", b.size, i);
				return;
			}
	}
	reply("VERIFY OK %zu", g_blocks.size());
}

/* The attributes of one pointer as cuPointerGetAttribute gives them one by one. */
struct answer {
	CUdeviceptr start, dptr;
	size_t size;
	unsigned long long id;
	int device;
	unsigned type;
	CUcontext ctx;
	unsigned long long rdma; /* a boolean: the driver may write fewer bytes than 8 */
};

static bool ask_each(CUdeviceptr in, answer *a)
{
	*a = answer{};
	return CKD(cuPointerGetAttribute(&a->start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in)) &&
	       CKD(cuPointerGetAttribute(&a->size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, in)) &&
	       CKD(cuPointerGetAttribute(&a->id, CU_POINTER_ATTRIBUTE_BUFFER_ID, in)) &&
	       CKD(cuPointerGetAttribute(&a->device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, in)) &&
	       CKD(cuPointerGetAttribute(&a->type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, in)) &&
	       CKD(cuPointerGetAttribute(&a->ctx, CU_POINTER_ATTRIBUTE_CONTEXT, in)) &&
	       CKD(cuPointerGetAttribute(&a->dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, in)) &&
	       CKD(cuPointerGetAttribute(&a->rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, in));
}

static bool ask_all(CUdeviceptr in, answer *a)
{
	*a = answer{};
	CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
					CU_POINTER_ATTRIBUTE_BUFFER_ID,	       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
					CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_CONTEXT,
					CU_POINTER_ATTRIBUTE_DEVICE_POINTER };
	void *data[] = { &a->start, &a->size, &a->id, &a->device, &a->type, &a->ctx, &a->dptr };
	return CKD(cuPointerGetAttributes(7, attrs, data, in));
}

static void attrs(void)
{
	CUcontext cur = nullptr;
	if (!CKD(cuCtxGetCurrent(&cur))) {
		reply("ATTRS FAIL no current context");
		return;
	}
	int rdma = 1;
	std::vector<answer> got(g_blocks.size());
	for (size_t i = 0; i < g_blocks.size(); i++) {
		block &b = g_blocks[i];
		CUdeviceptr p = (CUdeviceptr)(uintptr_t)b.p, in = p + b.size / 2;
		answer &a = got[i], all;
		if (!ask_each(in, &a) || !ask_all(in, &all)) {
			reply("ATTRS FAIL block of %zu bytes: %s", b.size, first_error().c_str());
			return;
		}
		if (a.start != p || a.size < b.size) {
			reply("ATTRS FAIL block %#llx of %zu bytes: range %#llx + %zu", (unsigned long long)p, b.size,
			      (unsigned long long)a.start, a.size);
			return;
		}
		if (a.device != 0 || a.type != CU_MEMORYTYPE_DEVICE || a.ctx != cur || a.dptr != in) {
			reply("ATTRS FAIL block of %zu bytes: device %d, memory type %u, context %p (current %p), pointer %#llx",
			      b.size, a.device, a.type, (void *)a.ctx, (void *)cur, (unsigned long long)a.dptr);
			return;
		}
		if (all.start != a.start || all.size != a.size || all.id != a.id || all.device != a.device ||
		    all.type != a.type || all.ctx != a.ctx || all.dptr != a.dptr) {
			reply("ATTRS FAIL block of %zu bytes: cuPointerGetAttributes says range %#llx + %zu id %#llx", b.size,
			      (unsigned long long)all.start, all.size, all.id);
			return;
		}
		CUdeviceptr base = 0;
		size_t rsize = 0;
		if (!CKD(cuMemGetAddressRange(&base, &rsize, in)) || base != a.start || rsize != a.size) {
			reply("ATTRS FAIL block of %zu bytes: cuMemGetAddressRange says %#llx + %zu", b.size,
			      (unsigned long long)base, rsize);
			return;
		}
		cudaPointerAttributes rt = {};
		if (!CK(cudaPointerGetAttributes(&rt, (void *)(uintptr_t)in)) || rt.type != cudaMemoryTypeDevice ||
		    rt.device != 0 || rt.devicePointer != (void *)(uintptr_t)in) {
			reply("ATTRS FAIL block of %zu bytes: cudaPointerGetAttributes says type %d device %d pointer %p",
			      b.size, (int)rt.type, rt.device, rt.devicePointer);
			return;
		}
		if (b.buffer_id && a.id != b.buffer_id) {
			reply("ATTRS FAIL block of %zu bytes: buffer id %#llx, first %#llx", b.size, a.id, b.buffer_id);
			return;
		}
		b.buffer_id = a.id;
		rdma &= a.rdma != 0;
	}
	for (size_t i = 0; i < got.size(); i++)
		for (size_t j = 0; j < got.size(); j++) {
			if (i == j)
				continue;
			if (got[i].id == got[j].id) {
				reply("ATTRS FAIL blocks of %zu and %zu bytes share buffer id %#llx", g_blocks[i].size,
				      g_blocks[j].size, got[i].id);
				return;
			}
			if (got[i].start < got[j].start && got[i].start + got[i].size > got[j].start) {
				reply("ATTRS FAIL the range of the block of %zu bytes (%#llx + %zu) covers the block of %zu bytes",
				      g_blocks[i].size, (unsigned long long)got[i].start, got[i].size, g_blocks[j].size);
				return;
			}
		}
	reply("ATTRS OK %zu rdma=%d", g_blocks.size(), rdma);
}

int main(void)
{
	g_app_name = "ptrattr";
	if (!CK(cudaSetDevice(0)) || !CK(cudaFree(0)))
		return 1;
	static const size_t sizes[] = { 1, 1000, 4096, 70000, 1 << 20, (3 << 20) + 5 };
	uint64_t seed = 65;
	for (size_t size : sizes) {
		block b = { nullptr, size, seed++, 0 };
		if (!CK(cudaMalloc(&b.p, size)) || !fill(b))
			return 1;
		g_blocks.push_back(b);
	}
	reply("READY %d", (int)getpid());
	char line[256];
	while (read_command(line, sizeof(line))) {
		if (!strcmp(line, "attrs"))
			attrs();
		else if (!strcmp(line, "verify"))
			verify();
		else if (!strcmp(line, "quit"))
			break;
		else
			reply("UNKNOWN %s", line);
	}
	return app_exit_status();
}
