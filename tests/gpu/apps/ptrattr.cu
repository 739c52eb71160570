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
 *           cudaPointerGetAttributes -> "ATTRS OK <n> range=R ids=I stable=S
 *           dev=D all=A addr=M rt=T rdma=G", each 1 when that property held
 *           for every block (range: start and size; ids: all differ;
 *           stable: as first answered; dev: device, type, context, pointer;
 *           all: cuPointerGetAttributes agrees; addr: cuMemGetAddressRange
 *           agrees; rt: cudaPointerGetAttributes; rdma: every block
 *           IS_GPU_DIRECT_RDMA_CAPABLE), the first block that broke one named
 *           on stderr; "ATTRS FAIL <what>" when a CUDA call failed
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

/* The attributes the agent answers, one by one (false after a failed call). IS_GPU_DIRECT_RDMA_CAPABLE: *rdma, 0 when not answered. */
static bool ask_each(CUdeviceptr in, answer *a)
{
	*a = answer{};
	if (cuPointerGetAttribute(&a->rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, in) != CUDA_SUCCESS)
		a->rdma = 0; /* an older driver: not claimed */
	return CKD(cuPointerGetAttribute(&a->start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in)) &&
	       CKD(cuPointerGetAttribute(&a->size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, in)) &&
	       CKD(cuPointerGetAttribute(&a->id, CU_POINTER_ATTRIBUTE_BUFFER_ID, in)) &&
	       CKD(cuPointerGetAttribute(&a->device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, in)) &&
	       CKD(cuPointerGetAttribute(&a->type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, in)) &&
	       CKD(cuPointerGetAttribute(&a->ctx, CU_POINTER_ATTRIBUTE_CONTEXT, in)) &&
	       CKD(cuPointerGetAttribute(&a->dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, in));
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

/*
 * One flag per property, 1 when it held for every block; the first block
 * where one did not is named on stderr. A failed CUDA call fails the command.
 */
static void attrs(void)
{
	CUcontext cur = nullptr;
	if (!CKD(cuCtxGetCurrent(&cur))) {
		reply("ATTRS FAIL no current context");
		return;
	}
	int range = 1, ids = 1, stable = 1, dev = 1, all = 1, addr = 1, rt_ok = 1, rdma = 1;
	std::vector<answer> got(g_blocks.size());
	for (size_t i = 0; i < g_blocks.size(); i++) {
		block &b = g_blocks[i];
		CUdeviceptr p = (CUdeviceptr)(uintptr_t)b.p, in = p + b.size / 2;
		answer &a = got[i], every;
		CUdeviceptr base = 0;
		size_t rsize = 0;
		cudaPointerAttributes rt = {};
		if (!ask_each(in, &a) || !ask_all(in, &every) || !CKD(cuMemGetAddressRange(&base, &rsize, in)) ||
		    !CK(cudaPointerGetAttributes(&rt, (void *)(uintptr_t)in))) {
			reply("ATTRS FAIL block of %zu bytes: %s", b.size, first_error().c_str());
			return;
		}
		if (range && (a.start != p || a.size < b.size)) {
			app_info("block %#llx of %zu bytes: range %#llx + %zu", (unsigned long long)p, b.size,
				 (unsigned long long)a.start, a.size);
			range = 0;
		}
		if (dev && (a.device != 0 || a.type != CU_MEMORYTYPE_DEVICE || a.ctx != cur || a.dptr != in)) {
			app_info("block of %zu bytes: device %d, memory type %u, context %p (current %p), pointer %#llx", b.size,
				 a.device, a.type, (void *)a.ctx, (void *)cur, (unsigned long long)a.dptr);
			dev = 0;
		}
		if (all && (every.start != a.start || every.size != a.size || every.id != a.id || every.device != a.device ||
			    every.type != a.type || every.ctx != a.ctx || every.dptr != a.dptr)) {
			app_info("block of %zu bytes: cuPointerGetAttributes says range %#llx + %zu id %#llx", b.size,
				 (unsigned long long)every.start, every.size, every.id);
			all = 0;
		}
		if (addr && (base != a.start || rsize != a.size)) {
			app_info("block of %zu bytes: cuMemGetAddressRange says %#llx + %zu", b.size, (unsigned long long)base,
				 rsize);
			addr = 0;
		}
		if (rt_ok && (rt.type != cudaMemoryTypeDevice || rt.device != 0 || rt.devicePointer != (void *)(uintptr_t)in)) {
			app_info("block of %zu bytes: cudaPointerGetAttributes says type %d device %d pointer %p", b.size,
				 (int)rt.type, rt.device, rt.devicePointer);
			rt_ok = 0;
		}
		if (stable && b.buffer_id && a.id != b.buffer_id) {
			app_info("block of %zu bytes: buffer id %#llx, first %#llx", b.size, a.id, b.buffer_id);
			stable = 0;
		}
		if (!b.buffer_id)
			b.buffer_id = a.id;
		rdma &= a.rdma != 0;
	}
	for (size_t i = 0; i < got.size(); i++)
		for (size_t j = 0; j < got.size(); j++) {
			if (i == j)
				continue;
			if (ids && got[i].id == got[j].id) {
				app_info("blocks of %zu and %zu bytes share buffer id %#llx", g_blocks[i].size, g_blocks[j].size,
					 got[i].id);
				ids = 0;
			}
			if (range && got[i].start < got[j].start && got[i].start + got[i].size > got[j].start) {
				app_info("the range of the block of %zu bytes (%#llx + %zu) covers the block of %zu bytes",
					 g_blocks[i].size, (unsigned long long)got[i].start, got[i].size, g_blocks[j].size);
				range = 0;
			}
		}
	reply("ATTRS OK %zu range=%d ids=%d stable=%d dev=%d all=%d addr=%d rt=%d rdma=%d", g_blocks.size(), range, ids,
	      stable, dev, all, addr, rt_ok, rdma);
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
	static const app_command commands[] = { { "attrs", attrs }, { "verify", verify } };
	serve_commands(commands);
	return app_exit_status();
}
