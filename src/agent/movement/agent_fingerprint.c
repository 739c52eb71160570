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
#include "agent/movement/gpu_kernel.h"
#include "agent/movement/fingerprint_ptx.h"
#include "common/util.h"
#include "image/image.h"

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
	/* entry n: the table itself, whose bytes the host knows: the kernel's self-check */
	size_t table_bytes = (n + 1) * sizeof(struct fp_chunk), sums_bytes = (n + 1) * 2 * sizeof(uint64_t);
	struct fp_chunk *table = malloc(table_bytes);
	uint64_t *sums = malloc(sums_bytes);
	struct gs_gpu_kernel k = { 0 };
	CUdeviceptr buf = 0;
	uint64_t done = 0;
	const char *what;
	CUresult r;
	GS_GPU_STEP("allocating its table", table && sums ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
	for (size_t i = 0; i < n; i++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[idx[i]];
		table[i] = (struct fp_chunk){ .va = c->va, .bytes = c->size };
	}
	unsigned slices = gs_fingerprint_slices(n + 1);
	if ((r = gs_gpu_kernel_load(cu, d->ctx, gs_fingerprint_ptx, "gs_fingerprint", &k, &what)) != CUDA_SUCCESS)
		goto out;
	GS_GPU_STEP("cuMemAlloc", cu->cuMemAlloc(&buf, table_bytes + sums_bytes));
	table[n] = (struct fp_chunk){ .va = buf, .bytes = table_bytes };
	GS_GPU_STEP("copying its table", cu->cuMemcpyHtoDAsync(buf, table, table_bytes, stream));
	memset(sums, 0, sums_bytes);
	GS_GPU_STEP("clearing its sums", cu->cuMemcpyHtoDAsync(buf + table_bytes, sums, sums_bytes, stream));
	CUdeviceptr chunks = buf, out = buf + table_bytes;
	GS_GPU_STEP("launching it",
		    gs_gpu_kernel_launch(cu, &k, (unsigned)(n + 1), slices, GS_FP_THREADS, stream, chunks, out));
	GS_GPU_STEP("copying its sums", cu->cuMemcpyDtoHAsync(sums, out, sums_bytes, stream));
	GS_GPU_STEP("waiting for it", cu->cuStreamSynchronize(stream));
	/* a kernel that computes anything but the CPU's function on known bytes is not trusted with the chunks */
	GS_GPU_STEP("its self-check (the CPU's fingerprint of its table differs)",
		    gs_fp_equal(gs_fp_final((struct gs_fp_sums){ sums[2 * n], sums[2 * n + 1] }, table_bytes),
				gs_fp_of(table, table_bytes)) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
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
	gs_gpu_kernel_unload(cu, &k);
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
