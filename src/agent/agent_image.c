/*
 * agent_image.c - the agent's part of `gpusnap dump` and `gpusnap restore`
 * (see agent_image.h). The streamed path (gs_agent_image_dump_running,
 * gs_agent_image_restore): the data goes between the GPU and the image's
 * data files through the pinned ring of agent_ring.c, with no staging copy.
 * The older path: the data held in a staging pool while suspended goes into
 * the image, and back from there into a fresh staging pool before a resume.
 *
 * The image lives in a temporary directory that the gpusnap command created
 * and holds locked (image.h: gs_image_tmp_create); the agent writes and seals
 * it, the command publishes it once CRIU succeeded. One allocation record per
 * released region (id = its index in the held regions, which keep their
 * order), one chunk per copy-plan chunk, so a restore matches the image to
 * the held regions and plan one to one. Several threads write (or read)
 * chunks at once; the writer and reader are thread-safe.
 *
 * Every CUDA call of the agent for a dump (the staging pool's unregistering
 * included) ends before the DUMP reply: the command takes the driver's lock
 * next, after which any CUDA call of the process blocks.
 */
#define LOG_PREFIX "agent: "
#include "agent/agent_image.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_mover.h"
#include "agent/agent_ring.h"
#include "agent/gate.h"
#include "common/first_err.h"
#include "common/log.h"
#include "common/util.h"
#include "core/copy_plan.h"
#include "core/staging.h"
#include "image/image.h"

#define IO_THREADS 8

/* Opaque per-allocation bytes: what the agent needs beyond va and size to re-create a region. */
struct region_blob {
	uint64_t reserved; /* bytes of address space reserved (>= size) */
	uint32_t is_slab;  /* a sub-allocator slab, not an allocation of the app */
	uint32_t version;  /* 1 */
};

struct io_job {
	struct gs_agent_held *h;
	struct gs_image_writer *w; /* save */
	struct gs_image *img;      /* load */
	atomic_size_t next;
	struct gs_first_err fail;
};

static void *save_worker(void *arg)
{
	struct io_job *j = arg;
	for (;;) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->h->plan.nchunks || gs_first_err_any(&j->fail))
			return NULL;
		const struct gs_copy_chunk *c = &j->h->plan.chunks[k];
		const struct held_region *r = &j->h->regions[c->region];
		struct gs_err e = { 0 };
		/* a zero chunk is not in the pool (a reserved pool may hold an older cycle's bytes there) */
		int rc = j->h->zero_chunks && j->h->zero_chunks[k]
				 ? gs_image_write_zero_chunk(j->w, c->region, c->va - r->va, c->size, &e)
				 : gs_image_write_chunk(j->w, c->region, c->va - r->va,
							gs_staging_ptr(j->h->pool, c->staging_offset), c->size, &e);
		if (rc)
			gs_first_err_set(&j->fail, &e);
	}
}

static void *load_worker(void *arg)
{
	struct io_job *j = arg;
	uint64_t seg_size = gs_staging_segment_size(j->h->pool);
	for (;;) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->h->plan.nchunks || gs_first_err_any(&j->fail))
			return NULL;
		const struct gs_copy_chunk *c = &j->h->plan.chunks[k];
		struct gs_err e = { 0 };
		/* segments fill in order on the pool's workers: reading overlaps with populating what comes later */
		if (gs_staging_wait(j->h->pool, (uint32_t)(c->staging_offset / seg_size), -1, &e) ||
		    gs_image_read_chunk(j->img, k, gs_staging_ptr(j->h->pool, c->staging_offset), &e))
			gs_first_err_set(&j->fail, &e);
	}
}

/* Runs fn on n threads (this one included) over the plan's chunks; the first failure is returned. */
static int run_io(struct io_job *j, void *(*fn)(void *), struct gs_err *err)
{
	size_t n = j->h->plan.nchunks < IO_THREADS ? j->h->plan.nchunks : IO_THREADS;
	pthread_t t[IO_THREADS];
	size_t started = 0;
	for (size_t i = 1; i < n; i++) {
		if (pthread_create(&t[started], NULL, fn, j) != 0)
			break; /* fewer threads: the ones running take every chunk */
		started++;
	}
	fn(j);
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return gs_first_err_take(&j->fail, err);
}

/* The app's own VMM handles are marked as such (the agent re-creates them with the app's properties). */
static uint32_t region_kind(const struct held_region *r)
{
	return r->app_handle ? GS_ALLOC_KIND_APP_VMM : GS_ALLOC_KIND_DEVICE;
}

static int describe(struct gs_agent *a, struct gs_agent_held *h, struct gs_image_writer *w, struct gs_err *err)
{
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++) {
		if (!a->devices[i].used)
			continue;
		CUdevice dev;
		CUuuid uuid;
		char name[256] = "";
		int major = 0, minor = 0;
		size_t total = 0;
		CUresult r = a->cu.cuDeviceGet(&dev, a->devices[i].ordinal);
		if (r == CUDA_SUCCESS)
			r = a->cu.cuDeviceGetUuid(&uuid, dev);
		if (r != CUDA_SUCCESS)
			return gs_fail(err, GS_E_AGENT, "cannot query GPU %d (error %d)", a->devices[i].ordinal, r);
		a->cu.cuDeviceGetName(name, (int)sizeof(name), dev);
		a->cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		a->cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
		a->cu.cuDeviceTotalMem(&total, dev);
		struct gs_image_gpu g = { .index = (uint32_t)a->devices[i].ordinal, .name = name, .cc_major = (uint32_t)major,
					  .cc_minor = (uint32_t)minor, .total_memory = total };
		memcpy(g.uuid, uuid.bytes, 16);
		int rc = gs_image_writer_add_gpu(w, &g, err);
		if (rc)
			return rc;
	}
	for (size_t i = 0; h && i < h->nregions; i++) {
		const struct held_region *r = &h->regions[i];
		struct region_blob b = { .reserved = r->reserved, .is_slab = r->is_slab, .version = 1 };
		struct gs_image_allocation al = { .id = i, .va = r->va, .size = r->size, .gpu_index = (uint32_t)r->device,
						  .kind = region_kind(r), .blob = &b, .blob_len = sizeof(b) };
		int rc = gs_image_writer_add_allocation(w, &al, err);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * A writer of an agent image into gpu_dir, naming this process as its
 * source, with the GPUs and h's regions described. On failure *w may be set:
 * the caller aborts it.
 */
static int open_writer(struct gs_agent *a, struct gs_agent_held *h, const char *gpu_dir, struct gs_image_writer **w,
		       struct gs_err *err)
{
	char comm[64] = "";
	FILE *f = fopen("/proc/self/comm", "r");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	struct gs_image_writer_opts wo = { .source_pid = (int32_t)getpid(), .source_comm = comm, .how = "agent" };
	int rc = gs_image_writer_open_in(gpu_dir, &wo, w, err);
	return rc ? rc : describe(a, h, *w, err);
}

/* Seals *w (consumed, set to NULL whatever the outcome), with its statistics taken before. */
static int seal_writer(struct gs_image_writer **w, struct gs_image_writer_stats *st, struct gs_err *err)
{
	gs_image_writer_stats(*w, st);
	int rc = gs_image_writer_seal(*w, err);
	*w = NULL;
	return rc;
}

int gs_agent_image_save(struct gs_agent *a, const char *gpu_dir, bool drop_staging, struct gs_msg *reply,
			struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_agent_held *h = a->held;
	struct gs_image_writer *w = NULL;
	double t0 = gs_now();
	if (a->state != GS_AGENT_SUSPENDED && a->state != GS_AGENT_DATA_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended: suspend it before writing its image");
		goto out;
	}
	if (h && !h->pool && h->plan.nchunks) {
		rc = gs_fail(err, GS_E_STATE, "the process's GPU data is no longer in memory (already written to an image)");
		goto out;
	}
	if ((rc = open_writer(a, h, gpu_dir, &w, err)))
		goto out;
	if (h && h->plan.nchunks) {
		struct io_job j = { .h = h, .w = w };
		gs_first_err_init(&j.fail);
		rc = run_io(&j, save_worker, err);
		gs_first_err_destroy(&j.fail);
		if (rc)
			goto out;
	}
	struct gs_image_writer_stats st;
	if ((rc = seal_writer(&w, &st, err)))
		goto out;
	double t_write = gs_now();
	if (drop_staging && h)
		gs_mover_drop_pool(h); /* unregisters and unmaps: its CUDA calls end here, before the driver's lock */
	double t_drop = gs_now();
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_write", t_write - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "drop_staging", t_drop - t_write);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", st.payload_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_zero_bytes", st.zero_bytes);
	pr_info("wrote %llu bytes of GPU data into '%s' in %.2f s", (unsigned long long)st.payload_bytes, gpu_dir,
		t_write - t0);
out:
	if (w)
		gs_image_writer_abort(w);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/* The image must hold exactly the held regions and the plan's chunks, in the same order. */
static int check_match(const struct gs_agent_held *h, const struct gs_image *img, const char *dir, struct gs_err *err)
{
	size_t nregions = h ? h->nregions : 0, nchunks = h ? h->plan.nchunks : 0;
	if (gs_image_allocation_count(img) != nregions || gs_image_chunk_count(img) != nchunks)
		return gs_fail(err, GS_E_IMAGE, "'%s' holds %zu allocations in %zu chunks, the process %zu in %zu: not this "
			       "process's image", dir, gs_image_allocation_count(img), gs_image_chunk_count(img), nregions,
			       nchunks);
	for (size_t i = 0; i < nregions; i++) {
		const struct gs_image_allocation *al = gs_image_allocation_at(img, i);
		const struct held_region *r = &h->regions[i];
		if (al->id != i || al->va != r->va || al->size != r->size || al->gpu_index != (uint32_t)r->device ||
		    al->kind != region_kind(r))
			return gs_fail(err, GS_E_IMAGE, "allocation %zu of '%s' (%#llx, %llu bytes) is not the process's (%#llx, "
				       "%llu bytes)", i, dir, (unsigned long long)al->va, (unsigned long long)al->size,
				       (unsigned long long)r->va, (unsigned long long)r->size);
	}
	for (size_t k = 0; k < nchunks; k++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, k);
		const struct gs_copy_chunk *p = &h->plan.chunks[k];
		if (c->alloc_id != p->region || c->offset != p->va - h->regions[p->region].va || c->length != p->size)
			return gs_fail(err, GS_E_IMAGE, "chunk %zu of '%s' does not match the process's copy plan", k, dir);
	}
	return 0;
}

int gs_agent_image_load(struct gs_agent *a, const char *gpu_dir, struct gs_msg *reply, struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_image *img = NULL;
	struct gs_agent_held *h = a->held;
	bool made_pool = false;
	double t0 = gs_now();
	if (a->state != GS_AGENT_SUSPENDED && a->state != GS_AGENT_DATA_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended: there is nothing to load an image into");
		goto out;
	}
	if ((rc = gs_image_open(gpu_dir, &img, err)))
		goto out;
	if (strcmp(gs_image_get_info(img)->how, "agent")) {
		rc = gs_fail(err, GS_E_IMAGE, "'%s' was not written by the gpusnap agent", gpu_dir);
		goto out;
	}
	if ((rc = check_match(h, img, gpu_dir, err)) || !h || !h->plan.nchunks)
		goto out;
	if (!h->pool) {
		if ((rc = gs_mover_make_pool(a, h->plan.staging_bytes, &h->pool, err)))
			goto out;
		h->pool_is_reserve = false;
		made_pool = true;
	}
	/* through the page cache: restore usually follows a checksum pass (or a dump) that left the data there */
	gs_image_set_direct_io(img, false);
	/* every chunk comes into the pool from the image, zeros included: nothing is set by memset any more */
	free(h->zero_chunks);
	h->zero_chunks = NULL;
	h->zero_bytes = 0;
	struct io_job j = { .h = h, .img = img };
	gs_first_err_init(&j.fail);
	rc = run_io(&j, load_worker, err);
	gs_first_err_destroy(&j.fail);
	if (rc) {
		if (made_pool)
			gs_mover_drop_pool(h);
		goto out;
	}
	struct gs_image_totals tot;
	gs_image_totals(img, &tot);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_read", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", tot.stored_bytes);
out:
	gs_image_close(img);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/* Opens the agent image at gpu_dir and checks that it is h's (same regions, same chunks). */
static int open_matching(const struct gs_agent_held *h, const char *gpu_dir, struct gs_image **img, struct gs_err *err)
{
	int rc = gs_image_open(gpu_dir, img, err);
	if (!rc && strcmp(gs_image_get_info(*img)->how, "agent"))
		rc = gs_fail(err, GS_E_IMAGE, "'%s' was not written by the gpusnap agent", gpu_dir);
	if (!rc)
		rc = check_match(h, *img, gpu_dir, err);
	if (rc) {
		gs_image_close(*img);
		*img = NULL;
	}
	return rc;
}

/*
 * The ring a restore will use, got ready by PREPARE while the driver restores
 * the process: a thread (owned here, joined by the restore or the next
 * PREPARE) maps and faults in the buffers, which needs no CUDA call; the
 * restore only pins them. Protected by a->lock, except the thread's result,
 * which it hands over by being joined.
 */
static struct {
	pthread_t thread;
	bool running;
	struct gs_agent *a;
	const struct gs_agent_held *h;
	struct gs_ring *ring;
	struct gs_err err;
} prep;

static void *prepare_main(void *arg)
{
	(void)arg;
	if (gs_ring_prepare(prep.a, prep.h, &prep.ring, &prep.err))
		prep.ring = NULL;
	return NULL;
}

/* Joins a running preparation; returns its ring if it was made for h (else frees it). a->lock held. */
static struct gs_ring *take_prepared(const struct gs_agent_held *h)
{
	if (prep.running) {
		pthread_join(prep.thread, NULL);
		prep.running = false;
		if (prep.err.code)
			pr_warn("the copy ring could not be made ready in advance (the restore makes its own): %s", prep.err.msg);
	}
	struct gs_ring *r = prep.ring;
	prep.ring = NULL;
	if (r && prep.h != h) {
		gs_ring_destroy(r);
		r = NULL;
	}
	return r;
}

int gs_agent_image_prepare(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_agent_held *h = a->held;
	gs_ring_destroy(take_prepared(NULL)); /* an earlier one, unused */
	if (a->state != GS_AGENT_SUSPENDED || !h || h->pool || !h->plan.nchunks)
		goto out; /* nothing to get ready: the restore will say what is wrong, if anything is */
	prep.a = a;
	prep.h = h;
	prep.err = (struct gs_err){ 0 };
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the app's signal handlers never run on our threads */
	prep.running = pthread_create(&prep.thread, NULL, prepare_main, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!prep.running)
		rc = gs_fail(err, GS_E_AGENT, "cannot start a thread to get the copy ring ready");
out:
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "preparing", prep.running);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/* After a failed release that re-created the regions: their data comes back from the image just sealed. */
static int refill_from_image(struct gs_agent *a, const struct gs_agent_held *h, const char *gpu_dir, struct gs_err *err)
{
	struct gs_image *img = NULL;
	struct gs_ring_stats st;
	int rc = open_matching(h, gpu_dir, &img, err);
	if (!rc) {
		gs_image_set_direct_io(img, false);
		rc = gs_ring_from_image(a, h, img, NULL, &st, err);
	}
	gs_image_close(img);
	return rc;
}

int gs_agent_image_dump_running(struct gs_agent *a, const char *gpu_dir, double timeout_s, struct gs_msg *reply,
				struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_agent_held *h = NULL;
	struct gs_image_writer *w = NULL;
	bool gate_closed = false;
	if (a->state != GS_AGENT_RUNNING) {
		rc = gs_fail(err, GS_E_STATE, "the process is not running: a streamed dump starts from a running process");
		goto out;
	}
	gs_mover_join_background(a);
	double t0 = gs_now();
	if ((rc = gs_mover_quiesce(a, timeout_s, err)))
		goto out;
	gate_closed = true;
	double t_quiesce = gs_now();
	/* an app that never allocated has nothing of ours to move: its image lists no allocations */
	if (a->cuda_ready && (rc = gs_mover_plan(a, GS_MOVER_IMAGE_CHUNK_BYTES, &h, err)))
		goto out;
	double t_plan = gs_now();
	if ((rc = open_writer(a, h, gpu_dir, &w, err)))
		goto out;
	struct gs_ring_stats rs = { 0 };
	if (h && h->plan.nchunks && (rc = gs_ring_to_image(a, h, w, &rs, err)))
		goto out;
	struct gs_image_writer_stats st;
	if ((rc = seal_writer(&w, &st, err)))
		goto out;
	double t_write = gs_now();
	if (h && (rc = gs_mover_release(a, h, err))) {
		/* the release put back what it had released, without data (there is no staging copy): refill it */
		struct gs_err e2 = { 0 };
		if (refill_from_image(a, h, gpu_dir, &e2)) {
			pr_err("could not refill GPU memory from '%s' after a failed release: %s", gpu_dir, e2.msg);
			gs_err_wrap(err, "the app's GPU data could not be put back (%s)", e2.msg);
		}
		goto out;
	}
	/* unused by this dump, and CRIU would carry it: unpinned and freed before the reply */
	gs_mover_drop_reserve(a);
	double t_release = gs_now();
	if (h)
		h->keep_context = false;
	a->held = h; /* pool NULL: the data is in the image */
	h = NULL;
	a->state = GS_AGENT_SUSPENDED;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "quiesce", t_quiesce - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "plan", t_plan - t_quiesce);
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_write", t_write - t_plan);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "release", t_release - t_write);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", a->held ? a->held->bytes : 0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "regions", a->held ? a->held->nregions : 0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", st.payload_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_zero_bytes", st.zero_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "io_threads", rs.threads);
	pr_info("streamed %llu bytes of GPU data into '%s' in %.2f s (ring of %llu bytes, %u threads)",
		(unsigned long long)st.payload_bytes, gpu_dir, t_write - t_plan, (unsigned long long)rs.ring_bytes,
		rs.threads);
out:
	if (w)
		gs_image_writer_abort(w);
	if (rc && gate_closed)
		gs_gate_open();
	if (h)
		gs_mover_free_held(a, h);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_agent_image_restore(struct gs_agent *a, const char *gpu_dir, struct gs_msg *reply, struct gs_err *err)
{
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_image *img = NULL;
	struct gs_ring *ring = NULL;
	struct gs_agent_held *h = a->held;
	if (a->state != GS_AGENT_SUSPENDED && a->state != GS_AGENT_DATA_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended: there is nothing to restore an image into");
		goto out;
	}
	if (h && h->pool) {
		/* the data is still in staging memory (suspended, then saved): read into it as before */
		pthread_mutex_unlock(&a->lock);
		return gs_agent_image_load(a, gpu_dir, reply, err);
	}
	double t0 = gs_now();
	if ((rc = open_matching(h, gpu_dir, &img, err)) || !h || !h->plan.nchunks)
		goto out;
	double t_open = gs_now();
	if ((rc = gs_mover_recreate(a, h, err)))
		goto out; /* all or nothing: nothing is mapped, the process stays suspended */
	double t_map = gs_now();
	/* the buffers PREPARE mapped while the driver restored the process, if it did */
	ring = take_prepared(h);
	double t_prep = gs_now();
	/* through the page cache: restore usually follows a checksum pass (or a dump) that left the data there */
	gs_image_set_direct_io(img, false);
	struct gs_ring_stats rs;
	if ((rc = gs_ring_from_image(a, h, img, ring, &rs, err))) {
		/* back to "data in the image": the memory is released again, so a retry starts over */
		struct gs_err e2 = { 0 };
		if (gs_mover_release(a, h, &e2))
			pr_warn("GPU memory stays mapped after a failed restore: %s", e2.msg);
		goto out;
	}
	double t_read = gs_now();
	/* the data is on the GPU: nothing is left for gs_mover_resume to copy, it only opens the gate */
	gs_copy_plan_free(&h->plan);
	struct gs_image_totals tot;
	gs_image_totals(img, &tot);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_open", t_open - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "recreate", t_map - t_open);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "prepare_wait", t_prep - t_map);
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_prepared", ring != NULL);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_read", t_read - t_map);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", tot.stored_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "io_threads", rs.threads);
	pr_info("restored %llu bytes of GPU data from '%s' in %.2f s (ring of %llu bytes, %u threads)",
		(unsigned long long)tot.stored_bytes, gpu_dir, t_read - t_map, (unsigned long long)rs.ring_bytes,
		rs.threads);
out:
	gs_ring_destroy(ring);
	gs_image_close(img);
	pthread_mutex_unlock(&a->lock);
	return rc;
}
