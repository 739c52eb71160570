/*
 * agent_fingerprint.c - chunk fingerprints on the GPU by a kernel of the
 * agent's own (see agent_fingerprint.h; the definition is FORMAT.md 4.8.2,
 * the CPU's twin src/core/fingerprint.c).
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_fingerprint.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "image/image.h"

#define FP_THREADS 256       /* per block */
#define FP_BLOCKS_WANTED 2048 /* blocks of a pass, over all chunks: enough to fill a GPU's SMs several times */
#define FP_SLICES_MAX 64     /* blocks per chunk */

/*
 * gs_fingerprint(chunks, sums): block (x, y) takes chunk x's {va, bytes}
 * from chunks (two u64 each; va 16-aligned, bytes > 0, the exact length);
 * thread t of it walks words w = y * ntid + t, stepping by nctaid.y * ntid,
 * over the chunk's ceil(bytes / 16) words, the last one masked to its
 * length; per word, with x, y its two little-endian u64 halves and
 * k = (w + 1) * G: p = mixA(x ^ k), q = mixB(y ^ rotl(k, 32)), A += p + q,
 * B += p ^ rotl(q, 23); then it adds A and B atomically into sums[2x] and
 * sums[2x + 1] (u64). The constants are FORMAT.md 4.8.2's, as signed
 * decimals: G -7046029254386353131, M1 -4658895280553007687,
 * M2 -7723592293110705685, M3 -49064778989728563, M4 -4265267296055464877.
 */
static const char fingerprint_ptx[] =
	".version 7.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry gs_fingerprint(.param .u64 p_chunks, .param .u64 p_sums)\n"
	"{\n"
	"	.reg .pred %p<4>;\n"
	"	.reg .b32 %r<8>;\n"
	"	.reg .b64 %rd<40>;\n"
	"	ld.param.u64 %rd1, [p_chunks];\n"
	"	ld.param.u64 %rd2, [p_sums];\n"
	"	cvta.to.global.u64 %rd1, %rd1;\n"
	"	cvta.to.global.u64 %rd2, %rd2;\n"
	/* this block's chunk: va %rd5, bytes %rd6, words %rd7, bytes in the last word %rd8 (0: whole) */
	"	mov.u32 %r1, %ctaid.x;\n"
	"	mul.wide.u32 %rd3, %r1, 16;\n"
	"	add.u64 %rd4, %rd1, %rd3;\n"
	"	ld.global.u64 %rd5, [%rd4];\n"
	"	ld.global.u64 %rd6, [%rd4+8];\n"
	"	cvta.to.global.u64 %rd5, %rd5;\n"
	"	add.u64 %rd7, %rd6, 15;\n"
	"	shr.u64 %rd7, %rd7, 4;\n"
	"	and.b64 %rd8, %rd6, 15;\n"
	/* first word w = ctaid.y * ntid + tid (%rd9), step nctaid.y * ntid (%rd10) */
	"	mov.u32 %r2, %tid.x;\n"
	"	mov.u32 %r3, %ntid.x;\n"
	"	mov.u32 %r4, %ctaid.y;\n"
	"	mov.u32 %r5, %nctaid.y;\n"
	"	mad.lo.u32 %r6, %r4, %r3, %r2;\n"
	"	cvt.u64.u32 %rd9, %r6;\n"
	"	mul.wide.u32 %rd10, %r5, %r3;\n"
	"	mov.u64 %rd11, 0;\n" /* A */
	"	mov.u64 %rd12, 0;\n" /* B */
	"WORD:\n"
	"	setp.ge.u64 %p1, %rd9, %rd7;\n"
	"	@%p1 bra SUM;\n"
	"	shl.b64 %rd13, %rd9, 4;\n"
	"	add.u64 %rd13, %rd5, %rd13;\n"
	"	ld.global.nc.v2.u64 {%rd14, %rd15}, [%rd13];\n"
	/* the last word of a chunk whose length is not a multiple of 16: only its length's bytes count */
	"	add.u64 %rd16, %rd9, 1;\n"
	"	setp.ne.u64 %p2, %rd16, %rd7;\n"
	"	setp.eq.u64 %p3, %rd8, 0;\n"
	"	or.pred %p2, %p2, %p3;\n"
	"	@%p2 bra MIX;\n"
	"	setp.gt.u64 %p3, %rd8, 8;\n"
	"	@%p3 bra HIGH;\n"
	/* 1..8 bytes: x keeps the low 8 * n bits (n = 8: all), y is 0 */
	"	mov.u64 %rd15, 0;\n"
	"	setp.eq.u64 %p3, %rd8, 8;\n"
	"	@%p3 bra MIX;\n"
	"	cvt.u32.u64 %r7, %rd8;\n"
	"	shl.b32 %r7, %r7, 3;\n"
	"	mov.u64 %rd17, 1;\n"
	"	shl.b64 %rd17, %rd17, %r7;\n"
	"	sub.u64 %rd17, %rd17, 1;\n"
	"	and.b64 %rd14, %rd14, %rd17;\n"
	"	bra MIX;\n"
	"HIGH:\n" /* 9..15 bytes: y keeps the low 8 * (n - 8) bits */
	"	cvt.u32.u64 %r7, %rd8;\n"
	"	sub.u32 %r7, %r7, 8;\n"
	"	shl.b32 %r7, %r7, 3;\n"
	"	mov.u64 %rd17, 1;\n"
	"	shl.b64 %rd17, %rd17, %r7;\n"
	"	sub.u64 %rd17, %rd17, 1;\n"
	"	and.b64 %rd15, %rd15, %rd17;\n"
	"MIX:\n"
	/* k = (w + 1) * G; kr = rotl(k, 32) */
	"	mul.lo.s64 %rd18, %rd16, -7046029254386353131;\n"
	"	shl.b64 %rd19, %rd18, 32;\n"
	"	shr.u64 %rd20, %rd18, 32;\n"
	"	or.b64 %rd19, %rd19, %rd20;\n"
	/* p = mixA(x ^ k) */
	"	xor.b64 %rd21, %rd14, %rd18;\n"
	"	shr.u64 %rd22, %rd21, 30;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	"	mul.lo.s64 %rd21, %rd21, -4658895280553007687;\n"
	"	shr.u64 %rd22, %rd21, 27;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	"	mul.lo.s64 %rd21, %rd21, -7723592293110705685;\n"
	"	shr.u64 %rd22, %rd21, 31;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	/* q = mixB(y ^ kr) */
	"	xor.b64 %rd23, %rd15, %rd19;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	"	mul.lo.s64 %rd23, %rd23, -49064778989728563;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	"	mul.lo.s64 %rd23, %rd23, -4265267296055464877;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	/* A += p + q; B += p ^ rotl(q, 23) */
	"	add.u64 %rd11, %rd11, %rd21;\n"
	"	add.u64 %rd11, %rd11, %rd23;\n"
	"	shl.b64 %rd25, %rd23, 23;\n"
	"	shr.u64 %rd26, %rd23, 41;\n"
	"	or.b64 %rd25, %rd25, %rd26;\n"
	"	xor.b64 %rd25, %rd25, %rd21;\n"
	"	add.u64 %rd12, %rd12, %rd25;\n"
	"	add.u64 %rd9, %rd9, %rd10;\n"
	"	bra WORD;\n"
	"SUM:\n"
	"	add.u64 %rd28, %rd2, %rd3;\n"
	"	atom.global.add.u64 %rd29, [%rd28], %rd11;\n"
	"	atom.global.add.u64 %rd30, [%rd28+8], %rd12;\n"
	"	ret;\n"
	"}\n";

struct fp_chunk {
	uint64_t va, bytes;
};

/* A GPU's pass could not run: said once per process, then in the debug log. */
static void pass_failed(const char *what, int device, CUresult r)
{
	static atomic_int said;
	if (!atomic_exchange(&said, 1))
		pr_warn("chunk fingerprints are computed on the host instead of on GPU %d: %s failed (error %d)", device, what,
			r);
	else
		pr_debug("GPU %d: fingerprint pass: %s failed (error %d)", device, what, r);
}

/* The n chunks idx[] of h's plan, all on device d; fp[] set only once the whole pass succeeded. */
static uint64_t pass_device(struct gs_agent *a, struct gs_agent_device *d, const struct gs_agent_held *h,
			    const size_t *idx, size_t n, struct gs_fp *fp)
{
	struct gs_cuda *cu = &a->cu;
	CUstream stream = d->lanes[0];
	size_t table_bytes = n * sizeof(struct fp_chunk), sums_bytes = n * 2 * sizeof(uint64_t);
	struct fp_chunk *table = malloc(table_bytes);
	uint64_t *sums = malloc(sums_bytes);
	CUmodule mod = NULL;
	CUfunction fn = NULL;
	CUdeviceptr buf = 0;
	uint64_t done = 0;
	const char *what;
	CUresult r;
#define STEP(name, call)                   \
	do {                               \
		what = name;               \
		if ((r = (call)) != CUDA_SUCCESS) \
			goto out;          \
	} while (0)
	STEP("allocating its table", table && sums ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
	for (size_t i = 0; i < n; i++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[idx[i]];
		table[i] = (struct fp_chunk){ .va = c->va, .bytes = c->size };
	}
	unsigned slices = (unsigned)((FP_BLOCKS_WANTED + n - 1) / n);
	if (slices > FP_SLICES_MAX)
		slices = FP_SLICES_MAX;
	if (slices < 1)
		slices = 1;
	STEP("making the context current", cu->cuCtxSetCurrent(d->ctx));
	STEP("loading its kernel", cu->cuModuleLoadData(&mod, fingerprint_ptx));
	STEP("finding its kernel", cu->cuModuleGetFunction(&fn, mod, "gs_fingerprint"));
	STEP("cuMemAlloc", cu->cuMemAlloc(&buf, table_bytes + sums_bytes));
	STEP("copying its table", cu->cuMemcpyHtoDAsync(buf, table, table_bytes, stream));
	memset(sums, 0, sums_bytes);
	STEP("clearing its sums", cu->cuMemcpyHtoDAsync(buf + table_bytes, sums, sums_bytes, stream));
	CUdeviceptr chunks = buf, out = buf + table_bytes;
	void *args[] = { &chunks, &out };
	STEP("launching it", cu->cuLaunchKernel(fn, (unsigned)n, slices, 1, FP_THREADS, 1, 1, 0, stream, args, NULL));
	STEP("copying its sums", cu->cuMemcpyDtoHAsync(sums, out, sums_bytes, stream));
	STEP("waiting for it", cu->cuStreamSynchronize(stream));
#undef STEP
	for (size_t i = 0; i < n; i++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[idx[i]];
		fp[idx[i]] = gs_fp_final((struct gs_fp_sums){ sums[2 * i], sums[2 * i + 1] }, c->size);
		done += c->size;
	}
out:
	if (r != CUDA_SUCCESS)
		pass_failed(what, d->ordinal, r);
	if (buf)
		cu->cuMemFree(buf);
	if (mod)
		cu->cuModuleUnload(mod);
	free(table);
	free(sums);
	return done;
}

uint64_t gs_fingerprint_gpu(struct gs_agent *a, const struct gs_agent_held *h, const uint8_t *skip, struct gs_fp *fp,
			    struct gs_msg *reply)
{
	double t0 = gs_now();
	uint64_t done = 0;
	size_t *idx = h && h->plan.nchunks && fp && a->cu.cuLaunchKernel ? malloc(h->plan.nchunks * sizeof(*idx)) : NULL;
	for (int dev = 0; idx && dev < GS_AGENT_MAX_DEVICES; dev++) {
		struct gs_agent_device *d = &a->devices[dev];
		if (!d->used || !d->ctx || !d->lanes_ready)
			continue;
		size_t n = 0;
		for (size_t k = 0; k < h->plan.nchunks; k++) {
			const struct held_region *r = &h->regions[h->plan.chunks[k].region];
			if (r->device == dev && !r->released && !(skip && skip[k]) && h->plan.chunks[k].size)
				idx[n++] = k;
		}
		if (n && n <= 0x7fffffff)
			done += pass_device(a, d, h, idx, n, fp);
	}
	free(idx);
	if (reply)
		gs_msg_add_named_f64(reply, GS_F_TIMING, "fingerprint", gs_now() - t0);
	return done;
}

int gs_fingerprint_verify(struct gs_agent *a, const struct gs_agent_held *h, struct gs_image *img, struct gs_msg *reply,
			  struct gs_err *err)
{
	double t0 = gs_now();
	size_t n = h ? h->plan.nchunks : 0, want = 0;
	uint8_t *skip = calloc(n ? n : 1, 1);
	struct gs_fp *fp = calloc(n ? n : 1, sizeof(*fp));
	if (!skip || !fp) {
		free(skip);
		free(fp);
		return gs_fail(err, GS_E_AGENT, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, k);
		skip[k] = !c || (c->flags & GS_CHUNK_F_ZERO) || (!c->fp_lo && !c->fp_hi);
		want += !skip[k];
	}
	int rc = 0;
	uint64_t bytes = 0;
	if (!want && gs_image_chunk_count(img) > 0) {
		size_t zero = 0;
		for (size_t k = 0; k < n; k++)
			zero += (gs_image_chunk_at(img, k)->flags & GS_CHUNK_F_ZERO) != 0;
		if (zero < n)
			rc = gs_fail(err, GS_E_IMAGE, "image '%s' records no chunk fingerprints (written before them): "
				     "--verify-gpu cannot check it", gs_image_path(img));
	}
	if (!rc && want)
		bytes = gs_fingerprint_gpu(a, h, skip, fp, NULL);
	for (size_t k = 0; k < n && !rc; k++) {
		if (skip[k])
			continue;
		const struct gs_image_chunk *c = gs_image_chunk_at(img, k);
		const struct held_region *r = &h->regions[h->plan.chunks[k].region];
		if (gs_fp_none(fp[k]))
			rc = gs_fail(err, GS_E_AGENT, "--verify-gpu: chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ") could "
				     "not be fingerprinted on GPU %d (its kernel did not run: the agent's log says why)", k,
				     c->alloc_id, c->offset, r->device);
		else if (fp[k].lo != c->fp_lo || fp[k].hi != c->fp_hi)
			rc = gs_fail(err, GS_E_IMAGE, "--verify-gpu: chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %"
				     PRIu64 " bytes) on GPU %d after loading has fingerprint %016" PRIx64 "%016" PRIx64
				     ", the image '%s' says %016" PRIx64 "%016" PRIx64, k, c->alloc_id, c->offset, c->length,
				     r->device, fp[k].hi, fp[k].lo, gs_image_path(img), c->fp_hi, c->fp_lo);
	}
	free(skip);
	free(fp);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "verify_gpu", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "verify_gpu_chunks", rc ? 0 : want);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "verify_gpu_bytes", rc ? 0 : bytes);
	if (!rc)
		pr_info("--verify-gpu: %zu chunks (%llu bytes) match the image's fingerprints on the GPU", want,
			(unsigned long long)bytes);
	return rc;
}
