/*
 * agent_image.c - the agent's side of the GPU image (see agent_image.h): how
 * its regions are described in an image, the check that an image is this
 * process's, and the copy ring a restore gets ready while the driver still
 * holds the process. The transfers themselves are the engine's
 * (agent_ring.h) and their order the lifecycle's (agent_lifecycle.c).
 *
 * One allocation record per released region (id = its index in the held
 * regions, which keep their order), one chunk per copy-plan chunk, so a
 * restore matches the image to the held regions and plan one to one.
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_image.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/memory/memkind.h"
#include "agent/movement/agent_ring.h"
#include "common/log.h"
#include "common/util.h"
#include "core/copy_plan.h"
#include "image/store.h"

/* Opaque per-allocation bytes: what the agent needs beyond va and size to re-create a region. */
struct region_blob {
	uint64_t reserved; /* bytes of address space reserved (>= size) */
	uint32_t is_slab;  /* a sub-allocator slab, not an allocation of the app */
	uint32_t version;  /* 1 */
};

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
	return gs_memkind_save_image(w, err); /* memory shared with other processes: what a restore must find */
}

/* This process's name (/proc/self/comm), the source an agent image names; "" when unknown. */
static void self_comm(char *comm, size_t size)
{
	comm[0] = '\0';
	FILE *f = fopen("/proc/self/comm", "r");
	if (f) {
		if (fgets(comm, (int)size, f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
}

/*
 * A writer of an agent image into gpu_dir, naming this process as its
 * source, with the GPUs and h's regions described. On failure *w may be set:
 * the caller aborts it.
 */
int gs_agent_image_open_writer(struct gs_agent *a, struct gs_agent_held *h, const char *gpu_dir, const struct gs_dump_opts *o,
			       struct gs_image_writer **w, struct gs_err *err)
{
	return gs_agent_image_open_writer_named(a, h, gpu_dir, NULL, o, w, err);
}

int gs_agent_image_open_writer_named(struct gs_agent *a, struct gs_agent_held *h, const char *gpu_dir,
				     const char *name, const struct gs_dump_opts *o, struct gs_image_writer **w,
				     struct gs_err *err)
{
	char comm[64];
	self_comm(comm, sizeof(comm));
	struct gs_image_writer_opts wo = { .source_pid = (int32_t)getpid(),
					   .source_comm = comm,
					   .how = "agent",
					   .no_direct_io = o->cached,
					   .no_data_sync = o->cached,
					   .parallel_data_files = gs_ring_image_threads(true),
					   .target = name,
					   .compress_codec = o->compress_codec,
					   .compress_level = o->compress_level };
	int rc = gs_image_writer_open_in(gpu_dir, &wo, w, err);
	return rc ? rc : describe(a, h, *w, err);
}

/* An open-addressing table of the parent's chunks by (device address, length): index + 1, 0 empty. */
struct parent_table {
	uint64_t *slots;
	size_t mask;
};

static uint64_t key_hash(uint64_t va, uint64_t len)
{
	uint64_t x = va * 0x9E3779B97F4A7C15ULL ^ len;
	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ULL;
	return x ^ (x >> 29);
}

int gs_agent_image_parent(struct gs_image_writer *w, const struct gs_agent_held *h, const struct gs_dump_opts *o,
			  const uint8_t *zero, const struct gs_fp *fp, struct gs_ring_parent_ref **refs, struct gs_msg *reply,
			  struct gs_err *err)
{
	*refs = NULL;
	if (!o->parent)
		return 0;
	struct gs_image *p;
	int rc = gs_image_open(o->parent, &p, err);
	if (rc) {
		gs_err_wrap(err, "the parent image");
		return rc;
	}
	const struct gs_image_info *pi = gs_image_get_info(p);
	char comm[64];
	self_comm(comm, sizeof(comm));
	struct parent_table t = { 0 };
	size_t n = h ? h->plan.nchunks : 0, np = gs_image_chunk_count(p), cap = 16;
	uint64_t same = 0, bytes = 0;
	if (strcmp(pi->how, "agent") || pi->source_pid != (int32_t)getpid() || strcmp(pi->source_comm, comm)) {
		rc = gs_fail(err, GS_E_IMAGE, "the parent image '%s' is not an agent image of this process (%d, %s): it is of "
			     "process %d (%s), taken by '%s'", o->parent, (int)getpid(), comm, (int)pi->source_pid,
			     pi->source_comm, pi->how);
		goto out;
	}
	struct gs_image_parent rec = { .manifest_crc32c = gs_image_manifest_crc32c(p),
				       .path = o->parent_rec ? o->parent_rec : o->parent };
	memcpy(rec.image_id, pi->image_id, 16);
	if ((rc = gs_image_writer_set_parent(w, &rec, err)))
		goto out;
	while (cap < np * 2)
		cap *= 2;
	*refs = calloc(n ? n : 1, sizeof(**refs));
	t.slots = calloc(cap, sizeof(*t.slots));
	t.mask = cap - 1;
	if (!*refs || !t.slots) {
		rc = gs_fail(err, GS_E_AGENT, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < np; i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(p, i);
		ptrdiff_t ai = gs_image_find_allocation(p, c->alloc_id);
		if ((c->flags & GS_CHUNK_F_ZERO) || (!c->fp_lo && !c->fp_hi) || ai < 0)
			continue;
		uint64_t va = gs_image_allocation_at(p, (size_t)ai)->va + c->offset;
		size_t s = key_hash(va, c->length) & t.mask;
		while (t.slots[s])
			s = (s + 1) & t.mask;
		t.slots[s] = i + 1;
	}
	for (size_t k = 0; k < n; k++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[k];
		if ((zero && zero[k]) || !fp || gs_fp_none(fp[k]))
			continue;
		for (size_t s = key_hash(c->va, c->size) & t.mask; t.slots[s]; s = (s + 1) & t.mask) {
			const struct gs_image_chunk *q = gs_image_chunk_at(p, t.slots[s] - 1);
			uint64_t qva = gs_image_allocation_at(p, (size_t)gs_image_find_allocation(p, q->alloc_id))->va + q->offset;
			if (qva == c->va && q->length == c->size && q->fp_lo == fp[k].lo && q->fp_hi == fp[k].hi) {
				(*refs)[k] = (struct gs_ring_parent_ref){ .index1 = t.slots[s], .crc32c = q->crc32c };
				same++;
				bytes += c->size;
				break;
			}
		}
	}
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "parent_chunks", same);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "parent_bytes", bytes);
	pr_info("incremental dump against '%s': %llu of %zu chunks (%llu bytes) unchanged, left there", o->parent,
		(unsigned long long)same, n, (unsigned long long)bytes);
out:
	free(t.slots);
	if (rc) {
		free(*refs);
		*refs = NULL;
	}
	gs_image_close(p);
	return rc;
}

int gs_agent_image_store(struct gs_image_writer *w, const struct gs_agent_held *h, const struct gs_dump_opts *o,
			 const uint8_t *zero, const struct gs_fp *fp, struct gs_store **store, uint64_t **refs,
			 struct gs_msg *reply, struct gs_err *err)
{
	*store = NULL;
	*refs = NULL;
	if (!o->store)
		return 0;
	if (!o->store_ref)
		return gs_fail(err, GS_E_USAGE, "a dump into a chunk store without its ref");
	int rc = gs_store_open(o->store, false, store, err);
	if (rc || (rc = gs_store_ref_attach(*store, o->store_ref, err)) ||
	    (rc = gs_image_writer_set_store(w, *store, o->store_rec, err)))
		return rc;
	size_t n = h ? h->plan.nchunks : 0, found = 0;
	uint64_t same = 0, bytes = 0;
	*refs = calloc(n ? n : 1, sizeof(**refs));
	char (*names)[GS_STORE_OBJECT_NAME_MAX] = calloc(n ? n : 1, sizeof(*names));
	size_t *which = calloc(n ? n : 1, sizeof(*which));
	bool *present = calloc(n ? n : 1, sizeof(*present));
	if (!*refs || !names || !which || !present) {
		rc = gs_fail(err, GS_E_AGENT, "out of memory");
		goto out;
	}
	/* found by fingerprint and length: the CRC is in the object's name */
	for (size_t k = 0; k < n; k++) {
		const struct gs_copy_chunk *c = &h->plan.chunks[k];
		uint32_t crc;
		if ((zero && zero[k]) || !fp || gs_fp_none(fp[k]) || !gs_store_find(*store, fp[k].lo, fp[k].hi, c->size, &crc))
			continue;
		gs_store_object_name(fp[k].lo, fp[k].hi, crc, c->size, names[found]);
		(*refs)[k] = (uint64_t)crc + 1;
		which[found++] = k;
	}
	/* listed in the ref before they count as there: a gc from here on keeps them */
	if (found && (rc = gs_store_claim(*store, found, names, present, err)))
		goto out;
	for (size_t i = 0; i < found; i++) {
		size_t k = which[i];
		if (!present[i]) { /* a gc took it between the find and the claim: copied after all */
			(*refs)[k] = 0;
			continue;
		}
		same++;
		bytes += h->plan.chunks[k].size;
	}
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "store_chunks", same);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "store_bytes", bytes);
	pr_info("dump into the chunk store '%s': %llu of %zu chunks (%llu bytes) there already, not copied", o->store,
		(unsigned long long)same, n, (unsigned long long)bytes);
out:
	free(names);
	free(which);
	free(present);
	if (rc) {
		free(*refs);
		*refs = NULL;
	}
	return rc;
}

/* Seals *w (consumed, set to NULL whatever the outcome), with its statistics taken before. */
int gs_agent_image_seal(struct gs_image_writer **w, struct gs_image_writer_stats *st, struct gs_err *err)
{
	gs_image_writer_stats(*w, st);
	int rc = gs_image_writer_seal(*w, err);
	*w = NULL;
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

/* Opens the agent image at gpu_dir and checks that it is h's (same regions, same chunks). */
int gs_agent_image_open_matching(const struct gs_agent_held *h, const char *gpu_dir, struct gs_image **img, struct gs_err *err)
{
	/* a split suspend's spill holds only its part (the rest in the pool): opened as the partial image it is */
	int rc = h && h->pool && h->spilled ? gs_image_open_partial(gpu_dir, img, err) : gs_image_open(gpu_dir, img, err);
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
struct gs_ring *gs_agent_image_take_prepared(const struct gs_agent_held *h)
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

int gs_agent_image_prepare(struct gs_agent *a, const struct gs_agent_held *h, struct gs_msg *reply, struct gs_err *err)
{
	int rc = 0;
	gs_ring_destroy(gs_agent_image_take_prepared(NULL)); /* an earlier one, unused */
	if (h && h->plan.nchunks) {
		prep.a = a;
		prep.h = h;
		prep.err = (struct gs_err){ 0 };
		prep.running = gs_thread_start(&prep.thread, prepare_main, NULL) == 0;
		if (!prep.running)
			rc = gs_fail(err, GS_E_AGENT, "cannot start a thread to get the copy ring ready");
	}
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "preparing", prep.running);
	return rc;
}
