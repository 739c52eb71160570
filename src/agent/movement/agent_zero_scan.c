/*
 * agent_zero_scan.c - a suspend's all-zero chunks found on the GPU by a
 * kernel of the agent's own (see agent_zero_scan.h).
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_zero_scan.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "agent/movement/gpu_kernel.h"
#include "common/util.h"
#include "common/settings.h"

#define SCAN_THREADS 256 /* per block; one block per chunk */

/*
 * gs_zero_scan(chunks, flags): block b reads chunk b's (va, bytes) from
 * chunks (two u64 each; bytes a multiple of 16), its threads OR the chunk's
 * 16-byte words in a strided loop, bar.red.or tells them whether any saw a
 * non-zero word, and thread 0 writes flags[b] (u32): 1 when none did.
 */
static const char zero_scan_ptx[] =
	".version 7.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry gs_zero_scan(.param .u64 p_chunks, .param .u64 p_flags)\n"
	"{\n"
	"	.reg .pred %p<4>;\n"
	"	.reg .b32 %r<6>;\n"
	"	.reg .b64 %rd<16>;\n"
	"	ld.param.u64 %rd1, [p_chunks];\n"
	"	ld.param.u64 %rd2, [p_flags];\n"
	"	cvta.to.global.u64 %rd1, %rd1;\n"
	"	cvta.to.global.u64 %rd2, %rd2;\n"
	"	mov.u32 %r1, %ctaid.x;\n"
	"	mul.wide.u32 %rd3, %r1, 16;\n"
	"	add.u64 %rd4, %rd1, %rd3;\n"
	"	ld.global.u64 %rd5, [%rd4];\n"
	"	ld.global.u64 %rd6, [%rd4+8];\n"
	"	cvta.to.global.u64 %rd5, %rd5;\n"
	"	mov.u32 %r2, %tid.x;\n"
	"	mov.u32 %r3, %ntid.x;\n"
	"	mul.wide.u32 %rd7, %r2, 16;\n"
	"	mul.wide.u32 %rd8, %r3, 16;\n"
	"	mov.u64 %rd9, 0;\n"
	"SCAN:\n"
	"	setp.ge.u64 %p1, %rd7, %rd6;\n"
	"	@%p1 bra DONE;\n"
	"	add.u64 %rd10, %rd5, %rd7;\n"
	"	ld.global.nc.v2.u64 {%rd11, %rd12}, [%rd10];\n"
	"	or.b64 %rd9, %rd9, %rd11;\n"
	"	or.b64 %rd9, %rd9, %rd12;\n"
	"	add.u64 %rd7, %rd7, %rd8;\n"
	"	bra SCAN;\n"
	"DONE:\n"
	"	setp.ne.u64 %p2, %rd9, 0;\n"
	"	bar.red.or.pred %p3, 0, %p2;\n"
	"	setp.ne.u32 %p1, %r2, 0;\n"
	"	@%p1 bra END;\n"
	"	selp.u32 %r4, 0, 1, %p3;\n"
	"	mul.wide.u32 %rd13, %r1, 4;\n"
	"	add.u64 %rd14, %rd2, %rd13;\n"
	"	st.global.u32 [%rd14], %r4;\n"
	"END:\n"
	"	ret;\n"
	"}\n";

struct scan_chunk {
	uint64_t va, bytes;
};

static bool scan_enabled(void)
{
	return gs_setting_bool(GS_S_GPU_ZERO_SCAN);
}

/* A GPU's scan could not run: said once per process, per cause. */
static void scan_failed(const char *what, int device, CUresult r)
{
	static atomic_int said;
	if (!atomic_exchange(&said, 1))
		pr_warn("all-zero chunks are found on the host instead of on GPU %d: %s failed (error %d)", device, what, r);
	else
		pr_debug("GPU %d: %s failed (error %d)", device, what, r);
}

/*
 * Scans the n chunks idx[] of h's plan, all on device d; marks the zero ones
 * only once the whole scan has succeeded. Returns their bytes.
 */
static uint64_t scan_device(struct gs_agent *a, struct gs_agent_device *d, const struct gs_agent_held *h,
			    const size_t *idx, size_t n, uint8_t *zero)
{
	struct gs_cuda *cu = &a->cu;
	CUstream stream = d->lanes[0];
	size_t table_bytes = n * sizeof(struct scan_chunk), flags_bytes = n * sizeof(uint32_t);
	struct scan_chunk *table = malloc(table_bytes);
	uint32_t *flags = malloc(flags_bytes);
	struct gs_gpu_kernel k = { 0 };
	CUdeviceptr buf = 0;
	uint64_t found = 0;
	const char *what;
	CUresult r;
	GS_GPU_STEP("allocating its table", table && flags ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
	for (size_t i = 0; i < n; i++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[idx[i]];
		table[i] = (struct scan_chunk){ .va = c->va, .bytes = (c->size + 15) & ~(uint64_t)15 };
	}
	if ((r = gs_gpu_kernel_load(cu, d->ctx, zero_scan_ptx, "gs_zero_scan", &k, &what)) != CUDA_SUCCESS)
		goto out;
	GS_GPU_STEP("cuMemAlloc", cu->cuMemAlloc(&buf, table_bytes + flags_bytes));
	GS_GPU_STEP("copying its table", cu->cuMemcpyHtoDAsync(buf, table, table_bytes, stream));
	CUdeviceptr chunks = buf, out = buf + table_bytes;
	GS_GPU_STEP("launching it", gs_gpu_kernel_launch(cu, &k, (unsigned)n, 1, SCAN_THREADS, stream, chunks, out));
	GS_GPU_STEP("copying its flags", cu->cuMemcpyDtoHAsync(flags, out, flags_bytes, stream));
	GS_GPU_STEP("waiting for it", cu->cuStreamSynchronize(stream));
	/* marked only once the whole scan has succeeded */
	for (size_t i = 0; i < n; i++)
		if (flags[i] == 1) {
			zero[idx[i]] = 1;
			found += h->plan.chunks[idx[i]].size;
		}
out:
	if (r != CUDA_SUCCESS)
		scan_failed(what, d->ordinal, r);
	if (buf)
		cu->cuMemFree(buf);
	gs_gpu_kernel_unload(cu, &k);
	free(table);
	free(flags);
	return found;
}

/* The scan over every GPU of h's plan; the bytes found. */
static uint64_t scan_all(struct gs_agent *a, const struct gs_agent_held *h, uint8_t *zero)
{
	if (!zero || !h->plan.nchunks || !a->cu.cuLaunchKernel || !scan_enabled())
		return 0;
	size_t *idx = malloc(h->plan.nchunks * sizeof(*idx));
	if (!idx)
		return 0;
	uint64_t found = 0;
	for (int dev = 0; dev < GS_AGENT_MAX_DEVICES; dev++) {
		struct gs_agent_device *d = &a->devices[dev];
		if (!d->used || !d->ctx || !d->lanes_ready)
			continue;
		size_t n = 0;
		for (size_t k = 0; k < h->plan.nchunks; k++) {
			const struct held_region *r = &h->regions[h->plan.chunks[k].region];
			/*
			 * The agent's memory, mapped in whole granules with its device's access; an app's
			 * handle through the mapping agent_app_vmm.h chose for its copy (one its device reads
			 * and writes, covering the handle in whole granules).
			 */
			if (r->device == dev && !r->released && !zero[k])
				idx[n++] = k;
		}
		if (n && n <= 0x7fffffff)
			found += scan_device(a, d, h, idx, n, zero);
	}
	free(idx);
	return found;
}

uint64_t gs_zero_scan(struct gs_agent *a, const struct gs_agent_held *h, uint8_t *zero, struct gs_msg *reply)
{
	double t0 = gs_now();
	uint64_t found = scan_all(a, h, zero);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "zero_scan", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "gpu_zero_bytes", found);
	return found;
}
