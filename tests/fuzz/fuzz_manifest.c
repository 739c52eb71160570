/*
 * fuzz_manifest.c - libFuzzer harness for the manifest decoder and its
 * validation (src/image/manifest.c), in memory, with no file system.
 *
 * Input: one flags byte, then the bytes of a manifest.img. Flag bit 0 asks
 * the harness to repair the framing (size in the header, trailer magic and
 * CRC) after mutation, so the fuzzer reaches the section parser instead of
 * stopping at the checksum nearly every time; without it the framing checks
 * themselves are fuzzed.
 *
 * Properties checked on every manifest the decoder accepts: the chunk index
 * it built is consistent (each allocation exactly covered by its own chunks,
 * none of them outside its data file), and encoding it again gives bytes the
 * decoder accepts with the same content.
 */
#include <string.h>

#include "fuzz.h"
#include "image/format.h"
#include "image/manifest.h"

#define FLAG_FIX_FRAMING 0x1u

/* Upper bound of the bytes encode would write for strings and blobs (they may be shared in a hostile heap). */
static uint64_t heap_cost(const struct gs_manifest *m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		n += strlen(m->files[i].name) + 1;
	for (size_t i = 0; i < m->ngpus; i++)
		n += strlen(m->gpus[i].name) + 1;
	for (size_t i = 0; i < m->nallocs; i++)
		n += m->allocs[i].blob_len;
	for (size_t i = 0; i < m->nmeta; i++)
		n += strlen(m->meta[i].key) + strlen(m->meta[i].value) + 2;
	return n;
}

static void check_index(const struct gs_manifest *m)
{
	FUZZ_ASSERT(m->alloc_chunk_start[m->nallocs] == m->nchunks);
	for (size_t i = 0; i < m->nallocs; i++) {
		const struct gs_image_allocation *a = &m->allocs[i];
		size_t first = m->alloc_chunk_start[i], end = m->alloc_chunk_start[i + 1];
		FUZZ_ASSERT(first <= end && end <= m->nchunks);
		uint64_t covered = 0;
		for (size_t c = first; c < end; c++) {
			const struct gs_image_chunk *ch = &m->chunks[c];
			FUZZ_ASSERT(ch->alloc_id == a->id && ch->offset == covered && ch->length > 0);
			if (ch->flags & GS_CHUNK_F_PARENT) {
				/* its bytes are in the parent (file_offset: the parent's chunk index) */
				FUZZ_ASSERT(m->has_parent && ch->file_index == 0 && ch->stored_length == 0);
				FUZZ_ASSERT(ch->fp_lo || ch->fp_hi);
			} else if (ch->flags & GS_CHUNK_F_STORED) {
				/* its bytes are the store's object named by length, crc32c and fingerprint */
				FUZZ_ASSERT(m->has_store && ch->flags == GS_CHUNK_F_STORED && ch->file_index == 0 &&
					    ch->file_offset == 0 && ch->stored_length == 0 && ch->codec == 0);
				FUZZ_ASSERT((ch->fp_lo || ch->fp_hi) && ch->length <= GS_FMT_CHUNK_DATA_MAX);
			} else if (!(ch->flags & GS_CHUNK_F_ZERO)) {
				FUZZ_ASSERT(ch->file_index < m->nfiles);
				FUZZ_ASSERT(ch->file_offset >= GS_FMT_ALIGN && ch->file_offset % GS_FMT_ALIGN == 0);
				FUZZ_ASSERT(ch->stored_length > 0 && ch->stored_length <= ch->length);
				FUZZ_ASSERT(ch->file_offset + ch->stored_length <= m->files[ch->file_index].size);
			}
			covered += ch->length;
		}
		FUZZ_ASSERT((a->flags & GS_ALLOC_F_NO_DATA) ? end == first : covered == a->size);
	}
}

static int same_str(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

/* Encode, decode again, compare. */
static void check_round_trip(const struct gs_manifest *m)
{
	if (heap_cost(m) > (4u << 20))
		return; /* a heap whose records all point at one long string: valid, but slow to re-encode */
	void *buf;
	size_t len;
	struct gs_err err = { 0 };
	FUZZ_ASSERT(gs_manifest_encode(m, &buf, &len, &err) == 0);
	struct gs_manifest d;
	int rc = gs_manifest_decode(buf, len, &d, &err);
	if (rc)
		fprintf(stderr, "fuzz: re-encoded manifest refused: %s\n", err.msg);
	FUZZ_ASSERT(rc == 0);
	FUZZ_ASSERT(!memcmp(d.info.image_id, m->info.image_id, 16) && d.info.created_ns == m->info.created_ns &&
		    d.info.source_pid == m->info.source_pid && d.info.cpu_state == m->info.cpu_state &&
		    same_str(d.info.hostname, m->info.hostname) && same_str(d.info.how, m->info.how) &&
		    same_str(d.info.source_comm, m->info.source_comm) &&
		    same_str(d.info.gpusnap_version, m->info.gpusnap_version));
	FUZZ_ASSERT(d.nfiles == m->nfiles && d.ngpus == m->ngpus && d.nallocs == m->nallocs &&
		    d.nchunks == m->nchunks && d.nmeta == m->nmeta);
	for (size_t i = 0; i < d.nfiles; i++)
		FUZZ_ASSERT(d.files[i].size == m->files[i].size && same_str(d.files[i].name, m->files[i].name));
	for (size_t i = 0; i < d.ngpus; i++)
		FUZZ_ASSERT(d.gpus[i].index == m->gpus[i].index && same_str(d.gpus[i].name, m->gpus[i].name) &&
			    !memcmp(d.gpus[i].uuid, m->gpus[i].uuid, 16));
	for (size_t i = 0; i < d.nallocs; i++) {
		const struct gs_image_allocation *x = &d.allocs[i], *y = &m->allocs[i];
		FUZZ_ASSERT(x->id == y->id && x->va == y->va && x->size == y->size && x->kind == y->kind &&
			    x->flags == y->flags && x->gpu_index == y->gpu_index && x->blob_len == y->blob_len);
		FUZZ_ASSERT(!x->blob_len || !memcmp(x->blob, y->blob, x->blob_len));
	}
	for (size_t i = 0; i < d.nchunks; i++) {
		const struct gs_image_chunk *x = &d.chunks[i], *y = &m->chunks[i];
		FUZZ_ASSERT(x->alloc_id == y->alloc_id && x->offset == y->offset && x->length == y->length &&
			    x->file_offset == y->file_offset && x->file_index == y->file_index && x->flags == y->flags &&
			    x->crc32c == y->crc32c && x->stored_length == y->stored_length &&
			    x->stored_crc32c == y->stored_crc32c && x->codec == y->codec && x->transform == y->transform &&
			    x->fp_lo == y->fp_lo && x->fp_hi == y->fp_hi);
	}
	for (size_t i = 0; i < d.nmeta; i++)
		FUZZ_ASSERT(same_str(d.meta[i].key, m->meta[i].key) && same_str(d.meta[i].value, m->meta[i].value));
	FUZZ_ASSERT(d.has_parent == m->has_parent);
	FUZZ_ASSERT(!d.has_parent || (!memcmp(d.parent.image_id, m->parent.image_id, 16) &&
				      d.parent.manifest_crc32c == m->parent.manifest_crc32c &&
				      same_str(d.parent.path, m->parent.path)));
	FUZZ_ASSERT(d.has_store == m->has_store);
	FUZZ_ASSERT(!d.has_store || (!memcmp(d.store.store_id, m->store.store_id, 16) &&
				     same_str(d.store.path, m->store.path)));
	gs_manifest_free(&d);
}

void fuzz_one(uint8_t flags, const uint8_t *rest, size_t len)
{
	uint8_t *buf = fuzz_copy(rest, len);
	if (flags & FLAG_FIX_FRAMING)
		fuzz_fix_manifest_framing(buf, len);
	struct gs_manifest m;
	struct gs_err err = { 0 };
	if (gs_manifest_decode(buf, len, &m, &err) == 0) { /* owns buf from here */
		check_index(&m);
		check_round_trip(&m);
		gs_manifest_free(&m);
	} else {
		FUZZ_ASSERT(err.code == GS_E_IMAGE || err.code == GS_E_NO_SPACE);
		FUZZ_ASSERT(err.msg[0] != '\0');
	}
}
