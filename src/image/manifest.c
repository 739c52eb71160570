/*
 * manifest.c - encoding, decoding and validating the manifest; names and
 * headers of data files (see manifest.h, format.h, docs/FORMAT.md).
 *
 * Decoding treats the bytes as hostile: every offset, length and count is
 * checked against the manifest's real size before it is used, counts are
 * derived from section lengths (never trusted on their own), and memory is
 * allocated only after those checks, in proportion to the file.
 */
#include "image/manifest.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/printable.h"
#include "common/util.h"
#include "image/crc32c.h"

/* ------------------------------------------------------------ data files */

void gs_fmt_data_file_name(uint32_t index, char name[GS_FMT_DATA_NAME_MAX])
{
	snprintf(name, GS_FMT_DATA_NAME_MAX, GS_FMT_DATA_NAME_PREFIX "%0*" PRIu32 GS_FMT_DATA_NAME_SUFFIX,
		 GS_FMT_DATA_NAME_DIGITS, index);
}

bool gs_fmt_data_file_name_parse(const char *name, uint32_t *index)
{
	const size_t plen = strlen(GS_FMT_DATA_NAME_PREFIX);
	if (strncmp(name, GS_FMT_DATA_NAME_PREFIX, plen) != 0)
		return false;
	const char *p = name + plen;
	uint64_t v = 0;
	size_t digits = 0;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > UINT32_MAX)
			return false;
		p++;
		digits++;
	}
	if (digits < GS_FMT_DATA_NAME_DIGITS || strcmp(p, GS_FMT_DATA_NAME_SUFFIX) != 0)
		return false;
	/* Exactly the generated form: no extra leading zeros, nothing else. */
	char expect[GS_FMT_DATA_NAME_MAX];
	gs_fmt_data_file_name((uint32_t)v, expect);
	if (strcmp(expect, name) != 0)
		return false;
	*index = (uint32_t)v;
	return true;
}

void gs_fmt_data_header_build(void *block, uint32_t version, const uint8_t image_id[16], uint32_t file_index)
{
	struct gs_fmt_data_header h;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, GS_FMT_DATA_MAGIC, GS_FMT_MAGIC_LEN);
	h.version = version;
	h.header_size = sizeof(h);
	memcpy(h.image_id, image_id, 16);
	h.file_index = file_index;
	h.data_start = GS_FMT_ALIGN;
	h.crc32c = gs_crc32c(0, &h, offsetof(struct gs_fmt_data_header, crc32c));
	memset(block, 0, GS_FMT_ALIGN);
	memcpy(block, &h, sizeof(h));
}

int gs_fmt_data_header_check(const void *block, size_t len, uint32_t version, const uint8_t image_id[16],
			     uint32_t file_index, const char *name, struct gs_err *err)
{
	struct gs_fmt_data_header h;
	if (len < sizeof(h))
		return gs_fail(err, GS_E_IMAGE, "data file '%s' is truncated: no header", name);
	memcpy(&h, block, sizeof(h));
	if (memcmp(h.magic, GS_FMT_DATA_MAGIC, GS_FMT_MAGIC_LEN) != 0)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' has a bad magic: not a gpusnap data file", name);
	if (h.version != version)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' is of format version %" PRIu32 ", its manifest of version %"
			       PRIu32, name, h.version, version);
	uint32_t crc = gs_crc32c(0, &h, offsetof(struct gs_fmt_data_header, crc32c));
	if (crc != h.crc32c)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' has a corrupt header (checksum 0x%08" PRIx32
			       ", computed 0x%08" PRIx32 ")", name, h.crc32c, crc);
	if (h.header_size < sizeof(h) || h.header_size > GS_FMT_ALIGN || h.data_start != GS_FMT_ALIGN || h.flags)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' has an unsupported header layout", name);
	if (memcmp(h.image_id, image_id, 16) != 0)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' belongs to another image", name);
	if (h.file_index != file_index)
		return gs_fail(err, GS_E_IMAGE, "data file '%s' says it is file %" PRIu32, name, h.file_index);
	return 0;
}

/* --------------------------------------------------------------- encode */

struct heap_writer {
	unsigned char *base;
	uint64_t len;
};

static uint64_t str_cost(const char *s)
{
	return (s ? strlen(s) : 0) + 1;
}

static struct gs_fmt_ref put_string(struct heap_writer *h, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	struct gs_fmt_ref r = { .offset = h->len, .length = n };
	if (n)
		memcpy(h->base + h->len, s, n);
	h->base[h->len + n] = '\0';
	h->len += n + 1;
	return r;
}

static struct gs_fmt_ref put_blob(struct heap_writer *h, const void *p, size_t n)
{
	struct gs_fmt_ref r = { 0, 0 };
	if (!n || !p)
		return r;
	r.offset = h->len;
	r.length = n;
	memcpy(h->base + h->len, p, n);
	h->len += n;
	return r;
}

/* Section order in the file; the heap goes last so records are written before the strings they point to. */
static const uint32_t encode_order[] = {
	GS_SEC_INFO, GS_SEC_DATA_FILES, GS_SEC_GPUS, GS_SEC_ALLOCATIONS, GS_SEC_CHUNKS, GS_SEC_METADATA, GS_SEC_PARENT,
	GS_SEC_STORE, GS_SEC_HEAP,
};

/* a * b + *total, failing past GS_FMT_MANIFEST_MAX (so nothing below can overflow). */
static int add_bytes(uint64_t *total, uint64_t count, uint64_t size)
{
	if (size && count > GS_FMT_MANIFEST_MAX / size)
		return -1;
	*total += count * size;
	return *total > GS_FMT_MANIFEST_MAX ? -1 : 0;
}

int gs_manifest_encode(const struct gs_manifest *m, void **bufp, size_t *lenp, struct gs_err *err)
{
	uint64_t heap = 0;
	int over = 0;
	over |= add_bytes(&heap, 1, str_cost(m->info.gpusnap_version) + str_cost(m->info.hostname) +
				    str_cost(m->info.source_comm) + str_cost(m->info.how));
	for (size_t i = 0; i < m->nfiles && !over; i++)
		over |= add_bytes(&heap, 1, str_cost(m->files[i].name));
	for (size_t i = 0; i < m->ngpus && !over; i++)
		over |= add_bytes(&heap, 1, str_cost(m->gpus[i].name));
	for (size_t i = 0; i < m->nallocs && !over; i++)
		over |= add_bytes(&heap, 1, m->allocs[i].blob ? m->allocs[i].blob_len : 0);
	for (size_t i = 0; i < m->nmeta && !over; i++)
		over |= add_bytes(&heap, 1, str_cost(m->meta[i].key) + str_cost(m->meta[i].value));
	if (m->has_parent)
		over |= add_bytes(&heap, 1, str_cost(m->parent.path));
	if (m->has_store)
		over |= add_bytes(&heap, 1, str_cost(m->store.path));
	/* the parent section only in an incremental image, the store's in a stored one (version 2); the others always */
	uint32_t order[GS_ARRAY_SIZE(encode_order)];
	size_t nsections = 0;
	for (size_t i = 0; i < GS_ARRAY_SIZE(encode_order); i++)
		if ((encode_order[i] != GS_SEC_PARENT || m->has_parent) && (encode_order[i] != GS_SEC_STORE || m->has_store))
			order[nsections++] = encode_order[i];

	uint64_t length[GS_SEC_TYPE_MAX + 1] = { 0 };
	uint32_t entry[GS_SEC_TYPE_MAX + 1] = { 0 };
	entry[GS_SEC_INFO] = sizeof(struct gs_fmt_info);
	entry[GS_SEC_DATA_FILES] = sizeof(struct gs_fmt_data_file);
	entry[GS_SEC_GPUS] = sizeof(struct gs_fmt_gpu);
	entry[GS_SEC_ALLOCATIONS] = sizeof(struct gs_fmt_allocation);
	/* the lowest version that holds the image (format.h); the chunk record is the same 80 bytes in both */
	const uint32_t version = m->info.format_version >= GS_FMT_VERSION_COMPRESS ? m->info.format_version : 1;
	const size_t chunk_size = sizeof(struct gs_fmt_chunk);
	entry[GS_SEC_CHUNKS] = (uint32_t)chunk_size;
	entry[GS_SEC_METADATA] = sizeof(struct gs_fmt_metadata);
	over |= add_bytes(&length[GS_SEC_INFO], 1, sizeof(struct gs_fmt_info));
	over |= add_bytes(&length[GS_SEC_DATA_FILES], m->nfiles, sizeof(struct gs_fmt_data_file));
	over |= add_bytes(&length[GS_SEC_GPUS], m->ngpus, sizeof(struct gs_fmt_gpu));
	over |= add_bytes(&length[GS_SEC_ALLOCATIONS], m->nallocs, sizeof(struct gs_fmt_allocation));
	over |= add_bytes(&length[GS_SEC_CHUNKS], m->nchunks, chunk_size);
	over |= add_bytes(&length[GS_SEC_METADATA], m->nmeta, sizeof(struct gs_fmt_metadata));
	entry[GS_SEC_PARENT] = sizeof(struct gs_fmt_parent);
	length[GS_SEC_PARENT] = m->has_parent ? sizeof(struct gs_fmt_parent) : 0;
	entry[GS_SEC_STORE] = sizeof(struct gs_fmt_store);
	length[GS_SEC_STORE] = m->has_store ? sizeof(struct gs_fmt_store) : 0;
	length[GS_SEC_HEAP] = heap;

	uint64_t offset[GS_SEC_TYPE_MAX + 1] = { 0 };
	uint64_t total = sizeof(struct gs_fmt_manifest_header) + nsections * sizeof(struct gs_fmt_section);
	for (size_t i = 0; i < nsections && !over; i++) {
		uint32_t t = order[i];
		total = gs_round_up(total, GS_FMT_SECTION_ALIGN);
		offset[t] = total;
		over |= add_bytes(&total, 1, length[t]);
	}
	over |= add_bytes(&total, 1, sizeof(struct gs_fmt_manifest_trailer));
	if (over)
		return gs_fail(err, GS_E_FAILURE, "the manifest would be larger than the %llu MiB a reader accepts",
			       GS_FMT_MANIFEST_MAX / GS_MiB);

	unsigned char *buf = calloc(1, total);
	if (!buf)
		return gs_fail(err, GS_E_NO_SPACE, "out of memory for a %" PRIu64 "-byte manifest", total);

	struct gs_fmt_manifest_header h = { 0 };
	memcpy(h.magic, GS_FMT_MANIFEST_MAGIC, GS_FMT_MAGIC_LEN);
	h.version = version;
	h.header_size = sizeof(h);
	h.manifest_size = total;
	h.section_table_offset = sizeof(h);
	h.section_count = (uint32_t)nsections;
	h.section_entry_size = sizeof(struct gs_fmt_section);
	memcpy(h.image_id, m->info.image_id, 16);
	memcpy(buf, &h, sizeof(h));
	for (size_t i = 0; i < nsections; i++) {
		uint32_t t = order[i];
		struct gs_fmt_section s = { .type = t, .offset = offset[t], .length = length[t], .entry_size = entry[t] };
		memcpy(buf + sizeof(h) + i * sizeof(s), &s, sizeof(s));
	}

	struct heap_writer hw = { .base = buf + offset[GS_SEC_HEAP], .len = 0 };
	struct gs_fmt_info info = {
		.created_ns = m->info.created_ns,
		.flags = m->info.cpu_state ? GS_INFO_F_CPU_STATE : 0,
		.source_pid = m->info.source_pid,
		.checksum_algo = m->info.checksum_algo,
		.payload_align = GS_FMT_ALIGN,
	};
	info.gpusnap_version = put_string(&hw, m->info.gpusnap_version);
	info.hostname = put_string(&hw, m->info.hostname);
	info.source_comm = put_string(&hw, m->info.source_comm);
	info.how = put_string(&hw, m->info.how);
	memcpy(buf + offset[GS_SEC_INFO], &info, sizeof(info));

	unsigned char *p = buf + offset[GS_SEC_DATA_FILES];
	for (size_t i = 0; i < m->nfiles; i++, p += sizeof(struct gs_fmt_data_file)) {
		struct gs_fmt_data_file r = { .index = m->files[i].index, .size = m->files[i].size };
		r.name = put_string(&hw, m->files[i].name);
		memcpy(p, &r, sizeof(r));
	}
	p = buf + offset[GS_SEC_GPUS];
	for (size_t i = 0; i < m->ngpus; i++, p += sizeof(struct gs_fmt_gpu)) {
		const struct gs_image_gpu *g = &m->gpus[i];
		struct gs_fmt_gpu r = { .index = g->index, .cc_major = g->cc_major, .cc_minor = g->cc_minor,
					.total_memory = g->total_memory };
		memcpy(r.uuid, g->uuid, 16);
		r.name = put_string(&hw, g->name);
		memcpy(p, &r, sizeof(r));
	}
	p = buf + offset[GS_SEC_ALLOCATIONS];
	for (size_t i = 0; i < m->nallocs; i++, p += sizeof(struct gs_fmt_allocation)) {
		const struct gs_image_allocation *a = &m->allocs[i];
		struct gs_fmt_allocation r = { .id = a->id, .va = a->va, .size = a->size, .gpu_index = a->gpu_index,
					       .kind = a->kind, .flags = a->flags };
		r.blob = put_blob(&hw, a->blob, a->blob_len);
		memcpy(p, &r, sizeof(r));
	}
	p = buf + offset[GS_SEC_CHUNKS];
	for (size_t i = 0; i < m->nchunks; i++, p += chunk_size) {
		const struct gs_image_chunk *c = &m->chunks[i];
		struct gs_fmt_chunk r = { .alloc_id = c->alloc_id, .offset = c->offset, .length = c->length,
					  .file_offset = c->file_offset, .file_index = c->file_index,
					  .flags = c->flags, .crc32c = c->crc32c };
		if (c->flags & GS_CHUNK_F_COMPRESSED) {
			r.stored_length = c->stored_length;
			r.stored_crc32c = c->stored_crc32c;
			r.codec = c->codec;
			r.transform = c->transform;
		} else if (!(c->flags & (GS_CHUNK_F_ZERO | GS_CHUNK_F_PARENT | GS_CHUNK_F_ELSEWHERE | GS_CHUNK_F_STORED))) {
			r.stored_length = c->length;
			r.stored_crc32c = c->crc32c;
		}
		if (!(c->flags & GS_CHUNK_F_ZERO)) {
			r.fp_lo = c->fp_lo;
			r.fp_hi = c->fp_hi;
		}
		memcpy(p, &r, chunk_size);
	}
	p = buf + offset[GS_SEC_METADATA];
	for (size_t i = 0; i < m->nmeta; i++, p += sizeof(struct gs_fmt_metadata)) {
		struct gs_fmt_metadata r;
		r.key = put_string(&hw, m->meta[i].key);
		r.value = put_string(&hw, m->meta[i].value);
		memcpy(p, &r, sizeof(r));
	}
	if (m->has_parent) {
		struct gs_fmt_parent r = { .manifest_crc32c = m->parent.manifest_crc32c };
		memcpy(r.image_id, m->parent.image_id, 16);
		r.path = put_string(&hw, m->parent.path);
		memcpy(buf + offset[GS_SEC_PARENT], &r, sizeof(r));
	}
	if (m->has_store) {
		struct gs_fmt_store r = { .flags = 0 };
		memcpy(r.store_id, m->store.store_id, 16);
		r.path = put_string(&hw, m->store.path);
		memcpy(buf + offset[GS_SEC_STORE], &r, sizeof(r));
	}

	struct gs_fmt_manifest_trailer tr = { 0 };
	memcpy(tr.magic, GS_FMT_TRAILER_MAGIC, GS_FMT_MAGIC_LEN);
	memcpy(buf + total - sizeof(tr), &tr, sizeof(tr));
	tr.crc32c = gs_crc32c(0, buf, total - sizeof(tr.crc32c));
	memcpy(buf + total - sizeof(tr.crc32c), &tr.crc32c, sizeof(tr.crc32c));
	*bufp = buf;
	*lenp = total;
	return 0;
}

/* --------------------------------------------------------------- decode */

struct heap_reader {
	const char *base;
	uint64_t len;
};

/* A NUL-terminated string of at most max bytes inside the heap, with no NUL before its end. */
static const char *get_string(const struct heap_reader *h, struct gs_fmt_ref r, uint64_t max)
{
	if (r.length > max || r.offset >= h->len || r.length >= h->len - r.offset)
		return NULL;
	const char *s = h->base + r.offset;
	if (s[r.length] != '\0' || memchr(s, '\0', r.length))
		return NULL;
	return s;
}

static bool get_blob(const struct heap_reader *h, struct gs_fmt_ref r, const void **blob, size_t *len)
{
	if (r.length > GS_FMT_BLOB_MAX || r.offset > h->len || r.length > h->len - r.offset)
		return false;
	*blob = r.length ? h->base + r.offset : NULL;
	*len = r.length;
	return true;
}

static const char *section_name(uint32_t type)
{
	switch (type) {
	case GS_SEC_INFO: return "info";
	case GS_SEC_HEAP: return "heap";
	case GS_SEC_DATA_FILES: return "data files";
	case GS_SEC_GPUS: return "gpus";
	case GS_SEC_ALLOCATIONS: return "allocations";
	case GS_SEC_CHUNKS: return "chunks";
	case GS_SEC_METADATA: return "metadata";
	case GS_SEC_PARENT: return "parent";
	case GS_SEC_STORE: return "store";
	default: return "unknown";
	}
}

/* Record count of a section, after checking its entry size; records start at *rec. */
static int records(const unsigned char *buf, const struct gs_fmt_section *s, size_t min_entry, size_t *count,
		   const unsigned char **rec, struct gs_err *err)
{
	if (s->entry_size < min_entry)
		return gs_fail(err, GS_E_IMAGE, "manifest section '%s' has %" PRIu32 "-byte records, expected at least %zu",
			       section_name(s->type), s->entry_size, min_entry);
	if (s->length % s->entry_size)
		return gs_fail(err, GS_E_IMAGE, "manifest section '%s' is %" PRIu64 " bytes, not a whole number of %"
			       PRIu32 "-byte records", section_name(s->type), s->length, s->entry_size);
	*count = s->length / s->entry_size;
	*rec = buf + s->offset;
	return 0;
}

/* The one record of section s (named name), its first size bytes copied to out. */
static int one_record(const unsigned char *buf, const struct gs_fmt_section *s, const char *name, void *out,
		      size_t size, struct gs_err *err)
{
	const unsigned char *rec = NULL;
	size_t n = 0;
	int rc = records(buf, s, size, &n, &rec, err);
	if (rc)
		return rc;
	if (n != 1)
		return gs_fail(err, GS_E_IMAGE, "manifest section '%s' holds %zu records, expected 1", name, n);
	memcpy(out, rec, size);
	return 0;
}

/* calloc of n records of size sz (n already bounded by the manifest's size); NULL-safe for n == 0. */
static int alloc_array(void **out, size_t n, size_t sz, struct gs_err *err)
{
	*out = NULL;
	if (!n)
		return 0;
	*out = calloc(n, sz);
	if (!*out)
		return gs_fail(err, GS_E_NO_SPACE, "out of memory reading the manifest (%zu records)", n);
	return 0;
}

static int parse(unsigned char *buf, size_t len, struct gs_manifest *m, struct gs_err *err)
{
	struct gs_fmt_manifest_header h;
	struct gs_fmt_manifest_trailer tr;
	if (len >= GS_FMT_MAGIC_LEN && memcmp(buf, GS_FMT_MANIFEST_MAGIC, GS_FMT_MAGIC_LEN) != 0)
		return gs_fail(err, GS_E_IMAGE, "manifest has a bad magic: not a gpusnap image");
	if (len < sizeof(h) + sizeof(tr))
		return gs_fail(err, GS_E_IMAGE, "manifest is truncated: %zu bytes", len);
	memcpy(&h, buf, sizeof(h));
	/*
	 * The framing (magic, version, manifest_size, trailer with its CRC) is the
	 * same in every version, so a flipped bit in the version field of this
	 * version's manifest shows as a checksum mismatch, not as a newer version.
	 */
	const uint64_t body_end = len - sizeof(tr); /* sections end before the trailer */
	memcpy(&tr, buf + body_end, sizeof(tr));
	const bool framed = h.manifest_size == len && memcmp(tr.magic, GS_FMT_TRAILER_MAGIC, GS_FMT_MAGIC_LEN) == 0;
	const uint32_t crc = gs_crc32c(0, buf, len - sizeof(tr.crc32c));
	if ((h.version < GS_FMT_VERSION_MIN || h.version > GS_FMT_VERSION) && !(framed && crc != tr.crc32c))
		return gs_fail(err, GS_E_IMAGE, "image format version %" PRIu32 " is not supported (this gpusnap reads "
			       "versions %u to %u)", h.version, GS_FMT_VERSION_MIN, GS_FMT_VERSION);
	if (h.manifest_size != len) {
		if (len < h.manifest_size)
			return gs_fail(err, GS_E_IMAGE, "manifest is truncated: %zu of %" PRIu64 " bytes", len, h.manifest_size);
		return gs_fail(err, GS_E_IMAGE, "manifest is %zu bytes but its header says %" PRIu64, len, h.manifest_size);
	}
	if (!framed)
		return gs_fail(err, GS_E_IMAGE, "manifest has no valid trailer (truncated or overwritten)");
	if (crc != tr.crc32c)
		return gs_fail(err, GS_E_IMAGE, "manifest checksum mismatch (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")",
			       tr.crc32c, crc);
	if (h.header_size < sizeof(h) || h.header_size > body_end)
		return gs_fail(err, GS_E_IMAGE, "manifest header size %" PRIu32 " is invalid", h.header_size);
	if (h.flags)
		return gs_fail(err, GS_E_IMAGE, "manifest has unknown flags 0x%" PRIx32, h.flags);
	if (h.section_count > GS_FMT_SECTIONS_MAX || h.section_entry_size < sizeof(struct gs_fmt_section) ||
	    h.section_table_offset % GS_FMT_SECTION_ALIGN || h.section_table_offset < h.header_size ||
	    h.section_table_offset > body_end ||
	    (uint64_t)h.section_count * h.section_entry_size > body_end - h.section_table_offset)
		return gs_fail(err, GS_E_IMAGE, "manifest section table is invalid (%" PRIu32 " entries of %" PRIu32
			       " bytes at %" PRIu64 ")", h.section_count, h.section_entry_size, h.section_table_offset);

	struct gs_fmt_section sec[GS_SEC_TYPE_MAX + 1];
	bool have[GS_SEC_TYPE_MAX + 1] = { false };
	/* the section types this version has: version 1's seven, version 2 the parent and store sections too */
	const uint32_t type_max = h.version >= GS_FMT_VERSION_PARENT ? GS_SEC_STORE : GS_SEC_METADATA;
	for (uint32_t i = 0; i < h.section_count; i++) {
		struct gs_fmt_section s;
		memcpy(&s, buf + h.section_table_offset + (uint64_t)i * h.section_entry_size, sizeof(s));
		if (s.offset % GS_FMT_SECTION_ALIGN || s.offset < h.header_size || s.offset > body_end ||
		    s.length > body_end - s.offset)
			return gs_fail(err, GS_E_IMAGE, "manifest section %" PRIu32 " (type %" PRIu32 ") lies outside the manifest"
				       " (offset %" PRIu64 ", length %" PRIu64 ", manifest %zu bytes)",
				       i, s.type, s.offset, s.length, len);
		if (s.flags & ~GS_SEC_F_OPTIONAL)
			return gs_fail(err, GS_E_IMAGE, "manifest section %" PRIu32 " has unknown flags 0x%" PRIx32, i, s.flags);
		if (s.type < GS_SEC_INFO || s.type > type_max) {
			if (s.flags & GS_SEC_F_OPTIONAL)
				continue;
			return gs_fail(err, GS_E_IMAGE, "manifest has a required section of unknown type %" PRIu32
				       " (written by a newer gpusnap?)", s.type);
		}
		if (have[s.type])
			return gs_fail(err, GS_E_IMAGE, "manifest section '%s' appears twice", section_name(s.type));
		have[s.type] = true;
		sec[s.type] = s;
	}
	for (uint32_t t = GS_SEC_INFO; t <= GS_SEC_METADATA; t++) /* the parent and store sections are not always there */
		if (!have[t])
			return gs_fail(err, GS_E_IMAGE, "manifest section '%s' is missing", section_name(t));

	struct heap_reader heap = { .base = (const char *)buf + sec[GS_SEC_HEAP].offset, .len = sec[GS_SEC_HEAP].length };
	const unsigned char *rec;
	size_t n;
	int rc;

	/* info */
	struct gs_fmt_info info;
	if ((rc = one_record(buf, &sec[GS_SEC_INFO], "info", &info, sizeof(info), err)))
		return rc;
	if (info.flags & ~GS_INFO_F_KNOWN)
		return gs_fail(err, GS_E_IMAGE, "manifest info has unknown flags 0x%" PRIx32, info.flags);
	if (info.payload_align != GS_FMT_ALIGN)
		return gs_fail(err, GS_E_IMAGE, "manifest says payloads are aligned to %" PRIu32 " bytes, expected %u",
			       info.payload_align, GS_FMT_ALIGN);
	m->info.format_version = h.version;
	memcpy(m->info.image_id, h.image_id, 16);
	m->info.created_ns = info.created_ns;
	m->info.source_pid = info.source_pid;
	m->info.cpu_state = info.flags & GS_INFO_F_CPU_STATE;
	m->info.checksum_algo = info.checksum_algo;
	m->info.gpusnap_version = get_string(&heap, info.gpusnap_version, GS_FMT_STRING_MAX);
	m->info.hostname = get_string(&heap, info.hostname, GS_FMT_STRING_MAX);
	m->info.source_comm = get_string(&heap, info.source_comm, GS_FMT_STRING_MAX);
	m->info.how = get_string(&heap, info.how, GS_FMT_STRING_MAX);
	if (!m->info.gpusnap_version || !m->info.hostname || !m->info.source_comm || !m->info.how)
		return gs_fail(err, GS_E_IMAGE, "manifest info has a string outside the heap or not NUL-terminated");

	/* data files */
	if ((rc = records(buf, &sec[GS_SEC_DATA_FILES], sizeof(struct gs_fmt_data_file), &n, &rec, err)))
		return rc;
	if (n > GS_FMT_DATA_FILES_MAX)
		return gs_fail(err, GS_E_IMAGE, "manifest lists %zu data files, more than the %u allowed", n,
			       GS_FMT_DATA_FILES_MAX);
	if ((rc = alloc_array((void **)&m->files, n, sizeof(*m->files), err)))
		return rc;
	m->nfiles = n;
	for (size_t i = 0; i < n; i++, rec += sec[GS_SEC_DATA_FILES].entry_size) {
		struct gs_fmt_data_file r;
		memcpy(&r, rec, sizeof(r));
		if (r.flags)
			return gs_fail(err, GS_E_IMAGE, "data file record %zu has unknown flags 0x%" PRIx32, i, r.flags);
		m->files[i].index = r.index;
		m->files[i].size = r.size;
		m->files[i].name = get_string(&heap, r.name, GS_FMT_DATA_NAME_MAX - 1);
		if (!m->files[i].name)
			return gs_fail(err, GS_E_IMAGE, "data file record %zu has an invalid name (out of bounds, too long"
				       " or holding a NUL)", i);
	}

	/* gpus */
	if ((rc = records(buf, &sec[GS_SEC_GPUS], sizeof(struct gs_fmt_gpu), &n, &rec, err)))
		return rc;
	if ((rc = alloc_array((void **)&m->gpus, n, sizeof(*m->gpus), err)))
		return rc;
	m->ngpus = n;
	for (size_t i = 0; i < n; i++, rec += sec[GS_SEC_GPUS].entry_size) {
		struct gs_fmt_gpu r;
		memcpy(&r, rec, sizeof(r));
		struct gs_image_gpu *g = &m->gpus[i];
		g->index = r.index;
		g->cc_major = r.cc_major;
		g->cc_minor = r.cc_minor;
		g->total_memory = r.total_memory;
		memcpy(g->uuid, r.uuid, 16);
		g->name = get_string(&heap, r.name, GS_FMT_STRING_MAX);
		if (!g->name)
			return gs_fail(err, GS_E_IMAGE, "gpu record %zu has an invalid name", i);
	}

	/* allocations */
	if ((rc = records(buf, &sec[GS_SEC_ALLOCATIONS], sizeof(struct gs_fmt_allocation), &n, &rec, err)))
		return rc;
	if ((rc = alloc_array((void **)&m->allocs, n, sizeof(*m->allocs), err)))
		return rc;
	m->nallocs = n;
	for (size_t i = 0; i < n; i++, rec += sec[GS_SEC_ALLOCATIONS].entry_size) {
		struct gs_fmt_allocation r;
		memcpy(&r, rec, sizeof(r));
		struct gs_image_allocation *a = &m->allocs[i];
		a->id = r.id;
		a->va = r.va;
		a->size = r.size;
		a->gpu_index = r.gpu_index;
		a->kind = r.kind;
		a->flags = r.flags;
		if (!get_blob(&heap, r.blob, &a->blob, &a->blob_len))
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " has an invalid blob (offset %" PRIu64
				       ", %" PRIu64 " bytes, limit %u)", r.id, r.blob.offset, r.blob.length, GS_FMT_BLOB_MAX);
	}

	/* chunks */
	const bool v2 = h.version >= GS_FMT_VERSION_COMPRESS;
	if ((rc = records(buf, &sec[GS_SEC_CHUNKS], v2 ? GS_FMT_CHUNK_STORED_SIZE : GS_FMT_CHUNK_V1_SIZE, &n, &rec, err)))
		return rc;
	/* the fields the records hold (format.h): stored_* from 64 bytes on, the fingerprint from 80 */
	const uint32_t entry = sec[GS_SEC_CHUNKS].entry_size;
	const size_t chunk_size = entry < sizeof(struct gs_fmt_chunk) ? entry : sizeof(struct gs_fmt_chunk);
	const bool stored_fields = entry >= GS_FMT_CHUNK_STORED_SIZE;
	if ((rc = alloc_array((void **)&m->chunks, n, sizeof(*m->chunks), err)))
		return rc;
	m->nchunks = n;
	for (size_t i = 0; i < n; i++, rec += sec[GS_SEC_CHUNKS].entry_size) {
		struct gs_fmt_chunk r = { 0 };
		memcpy(&r, rec, chunk_size); /* fields past entry_size stay 0 */
		struct gs_image_chunk *c = &m->chunks[i];
		*c = (struct gs_image_chunk){ .alloc_id = r.alloc_id, .offset = r.offset, .length = r.length,
					      .file_offset = r.file_offset, .file_index = r.file_index,
					      .flags = r.flags, .crc32c = r.crc32c };
		if (!v2 && (r.flags & ~GS_CHUNK_F_KNOWN_V1))
			return gs_fail(err, GS_E_IMAGE, "chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ") has flags 0x%"
				       PRIx32 ", unknown in format version %" PRIu32, i, r.alloc_id, r.offset, r.flags, h.version);
		if ((r.flags & GS_CHUNK_F_ZERO) && (r.fp_lo || r.fp_hi))
			return gs_fail(err, GS_E_IMAGE, "chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ") is ZERO but has a "
				       "fingerprint", i, r.alloc_id, r.offset);
		c->fp_lo = r.fp_lo;
		c->fp_hi = r.fp_hi;
		if (r.flags & (GS_CHUNK_F_COMPRESSED | GS_CHUNK_F_PARENT | GS_CHUNK_F_STORED)) { /* as recorded: validate checks them */
			c->stored_length = r.stored_length;
			c->stored_crc32c = r.stored_crc32c;
			c->codec = r.codec;
			c->transform = r.transform;
			continue;
		}
		if (r.flags & (GS_CHUNK_F_ZERO | GS_CHUNK_F_ELSEWHERE))
			continue;
		if (stored_fields) { /* checked against length and crc32c by validate */
			c->stored_length = r.stored_length;
			c->stored_crc32c = r.stored_crc32c;
			c->codec = r.codec;
			c->transform = r.transform;
		} else {
			c->stored_length = c->length;
			c->stored_crc32c = c->crc32c;
		}
	}

	/* metadata */
	if ((rc = records(buf, &sec[GS_SEC_METADATA], sizeof(struct gs_fmt_metadata), &n, &rec, err)))
		return rc;
	if (n > GS_FMT_META_COUNT_MAX)
		return gs_fail(err, GS_E_IMAGE, "manifest holds %zu metadata entries, more than the %u allowed", n,
			       GS_FMT_META_COUNT_MAX);
	if ((rc = alloc_array((void **)&m->meta, n, sizeof(*m->meta), err)))
		return rc;
	m->nmeta = n;
	for (size_t i = 0; i < n; i++, rec += sec[GS_SEC_METADATA].entry_size) {
		struct gs_fmt_metadata r;
		memcpy(&r, rec, sizeof(r));
		m->meta[i].key = get_string(&heap, r.key, GS_FMT_STRING_MAX);
		m->meta[i].value = get_string(&heap, r.value, GS_FMT_META_VALUE_MAX);
		if (!m->meta[i].key || !m->meta[i].value)
			return gs_fail(err, GS_E_IMAGE, "metadata entry %zu has an invalid key or value", i);
	}

	/* parent (an incremental image) */
	if (have[GS_SEC_PARENT]) {
		struct gs_fmt_parent r;
		if ((rc = one_record(buf, &sec[GS_SEC_PARENT], "parent", &r, sizeof(r), err)))
			return rc;
		if (r.flags)
			return gs_fail(err, GS_E_IMAGE, "manifest parent record has unknown flags 0x%" PRIx32, r.flags);
		m->has_parent = true;
		memcpy(m->parent.image_id, r.image_id, 16);
		m->parent.manifest_crc32c = r.manifest_crc32c;
		m->parent.path = get_string(&heap, r.path, GS_FMT_STRING_MAX);
		if (!m->parent.path || !*m->parent.path)
			return gs_fail(err, GS_E_IMAGE, "manifest parent record has an invalid path");
	}

	/* store (an image whose chunks are in a chunk store) */
	if (have[GS_SEC_STORE]) {
		struct gs_fmt_store r;
		if ((rc = one_record(buf, &sec[GS_SEC_STORE], "store", &r, sizeof(r), err)))
			return rc;
		if (r.flags)
			return gs_fail(err, GS_E_IMAGE, "manifest store record has unknown flags 0x%" PRIx32, r.flags);
		m->has_store = true;
		memcpy(m->store.store_id, r.store_id, 16);
		m->store.path = get_string(&heap, r.path, GS_FMT_STRING_MAX);
		if (!m->store.path || !*m->store.path)
			return gs_fail(err, GS_E_IMAGE, "manifest store record has an invalid path");
	}
	return 0;
}

int gs_manifest_decode(void *buf, size_t len, struct gs_manifest *m, struct gs_err *err)
{
	memset(m, 0, sizeof(*m));
	int rc = parse(buf, len, m, err);
	m->raw = buf;
	m->raw_len = len;
	if (!rc)
		rc = gs_manifest_validate(m, err);
	if (rc)
		gs_manifest_free(m);
	return rc;
}

void gs_manifest_free(struct gs_manifest *m)
{
	free(m->files);
	free(m->gpus);
	free(m->allocs);
	free(m->chunks);
	free(m->meta);
	free(m->alloc_chunk_start);
	free(m->raw);
	memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------- validate */

static bool str_ok(const char *s, size_t max)
{
	return !s || strnlen(s, max + 1) <= max;
}

static const struct gs_image_gpu *find_gpu(const struct gs_manifest *m, uint32_t index)
{
	size_t lo = 0, hi = m->ngpus;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->gpus[mid].index == index)
			return &m->gpus[mid];
		if (m->gpus[mid].index < index)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int validate_chunk(const struct gs_manifest *m, size_t ci, const struct gs_image_allocation *a,
			  uint64_t covered, struct gs_err *err)
{
	const struct gs_image_chunk *c = &m->chunks[ci];
#define CHUNK_FAIL(fmt, ...)                                                                                      \
	gs_fail(err, GS_E_IMAGE, "chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %" PRIu64 " bytes): " fmt, \
		ci, c->alloc_id, c->offset, c->length, ##__VA_ARGS__)
	if (a->flags & GS_ALLOC_F_NO_DATA)
		return CHUNK_FAIL("its allocation is marked as holding no data");
	if (c->length == 0)
		return CHUNK_FAIL("length is 0");
	if (c->offset < covered)
		return CHUNK_FAIL("overlaps the previous chunk, which ends at %" PRIu64, covered);
	if (c->offset > covered)
		return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 ": bytes %" PRIu64 "..%" PRIu64 " have no chunk"
			       " (missing chunk)", a->id, covered, c->offset);
	if (c->length > a->size - c->offset)
		return CHUNK_FAIL("extends past the allocation's %" PRIu64 " bytes", a->size);
	if (c->flags & ~GS_CHUNK_F_KNOWN)
		return CHUNK_FAIL("unknown flags 0x%" PRIx32, c->flags);
	if (c->flags & GS_CHUNK_F_ELSEWHERE) {
		if (c->flags != GS_CHUNK_F_ELSEWHERE)
			return CHUNK_FAIL("ELSEWHERE with other flags (0x%" PRIx32 ")", c->flags);
		if (c->file_index || c->file_offset || c->crc32c || c->fp_lo || c->fp_hi)
			return CHUNK_FAIL("an ELSEWHERE chunk with a file position, checksum or fingerprint");
		return 0;
	}
	if (c->flags & GS_CHUNK_F_ZERO) {
		if (c->flags & GS_CHUNK_F_COMPRESSED)
			return CHUNK_FAIL("both ZERO and COMPRESSED");
		if (c->flags & (GS_CHUNK_F_PARENT | GS_CHUNK_F_STORED))
			return CHUNK_FAIL("ZERO with other flags (0x%" PRIx32 ")", c->flags);
		if (c->file_index || c->file_offset || c->crc32c)
			return CHUNK_FAIL("a ZERO chunk with a file position or checksum");
		return 0;
	}
	if (c->flags & GS_CHUNK_F_STORED) {
		if (m->info.format_version < GS_FMT_VERSION_STORE || !m->has_store)
			return CHUNK_FAIL("is in a chunk store the image does not name");
		if (c->flags != GS_CHUNK_F_STORED)
			return CHUNK_FAIL("STORED with other flags (0x%" PRIx32 ")", c->flags);
		if (c->file_index || c->file_offset || c->stored_length || c->stored_crc32c || c->codec || c->transform)
			return CHUNK_FAIL("a STORED chunk with a payload in the image");
		if (!c->fp_lo && !c->fp_hi)
			return CHUNK_FAIL("a STORED chunk without a fingerprint");
		if (c->length > GS_FMT_CHUNK_DATA_MAX)
			return CHUNK_FAIL("longer than the %llu MiB a stored chunk may be", GS_FMT_CHUNK_DATA_MAX / GS_MiB);
		return 0;
	}
	if (c->flags & GS_CHUNK_F_PARENT) {
		if (m->info.format_version < GS_FMT_VERSION_PARENT || !m->has_parent)
			return CHUNK_FAIL("refers to a parent image the image does not name");
		if (c->flags & GS_CHUNK_F_COMPRESSED)
			return CHUNK_FAIL("both PARENT and COMPRESSED");
		if (c->file_index || c->stored_length || c->stored_crc32c || c->codec || c->transform)
			return CHUNK_FAIL("a PARENT chunk with a stored payload");
		if (!c->fp_lo && !c->fp_hi)
			return CHUNK_FAIL("a PARENT chunk without a fingerprint");
		if (c->length > GS_FMT_CHUNK_DATA_MAX)
			return CHUNK_FAIL("longer than the %llu MiB a stored chunk may be", GS_FMT_CHUNK_DATA_MAX / GS_MiB);
		return 0;
	}
	uint64_t stored = c->length;
	if (c->flags & GS_CHUNK_F_COMPRESSED) {
		if (m->info.format_version < GS_FMT_VERSION_COMPRESS)
			return CHUNK_FAIL("compressed in an image of format version %" PRIu32, m->info.format_version);
		if (c->codec == GS_CODEC_NONE || c->codec > GS_CODEC_MAX)
			return CHUNK_FAIL("compressed with unknown codec %u (written by a newer gpusnap?)", c->codec);
		if (c->transform > GS_XFORM_MAX)
			return CHUNK_FAIL("unknown transform %u before compression (written by a newer gpusnap?)",
					  c->transform);
		if (c->stored_length == 0 || c->stored_length >= c->length)
			return CHUNK_FAIL("compressed into %" PRIu64 " bytes: not between 1 and its length", c->stored_length);
		stored = c->stored_length;
	} else if (c->stored_length != c->length || c->stored_crc32c != c->crc32c || c->codec || c->transform) {
		return CHUNK_FAIL("is stored uncompressed but its record says otherwise (stored %" PRIu64 " bytes, codec %u)",
				  c->stored_length, c->codec);
	}
	if (c->length > GS_FMT_CHUNK_DATA_MAX)
		return CHUNK_FAIL("longer than the %llu MiB a stored chunk may be", GS_FMT_CHUNK_DATA_MAX / GS_MiB);
	if (c->file_index >= m->nfiles)
		return CHUNK_FAIL("data file %" PRIu32 " does not exist (the image has %zu)", c->file_index, m->nfiles);
	const struct gs_image_data_file *f = &m->files[c->file_index];
	if (c->file_offset % GS_FMT_ALIGN || c->file_offset < GS_FMT_ALIGN)
		return CHUNK_FAIL("payload offset %" PRIu64 " is not a multiple of %u past the header", c->file_offset,
				  GS_FMT_ALIGN);
	if (c->file_offset > f->size || stored > f->size - c->file_offset)
		return CHUNK_FAIL("payload at %" PRIu64 " lies past the end of '%s' (%" PRIu64 " bytes)", c->file_offset,
				  f->name, f->size);
	return 0;
#undef CHUNK_FAIL
}

int gs_manifest_validate(struct gs_manifest *m, struct gs_err *err)
{
	char shown[64];
	const struct gs_image_info *in = &m->info;
	if (in->checksum_algo != GS_CSUM_CRC32C)
		return gs_fail(err, GS_E_IMAGE, "unknown chunk checksum algorithm %" PRIu32, in->checksum_algo);
	if (!str_ok(in->gpusnap_version, GS_FMT_STRING_MAX) || !str_ok(in->hostname, GS_FMT_STRING_MAX) ||
	    !str_ok(in->source_comm, GS_FMT_STRING_MAX) || !str_ok(in->how, GS_FMT_STRING_MAX))
		return gs_fail(err, GS_E_IMAGE, "an info string is longer than %u bytes", GS_FMT_STRING_MAX);

	if (m->nfiles > GS_FMT_DATA_FILES_MAX)
		return gs_fail(err, GS_E_IMAGE, "%zu data files, more than the %u allowed", m->nfiles, GS_FMT_DATA_FILES_MAX);
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct gs_image_data_file *f = &m->files[i];
		uint32_t index;
		if (!f->name || !gs_fmt_data_file_name_parse(f->name, &index) || index != i || f->index != i)
			return gs_fail(err, GS_E_IMAGE, "data file %zu has an unsafe or unexpected name '%s' (expected"
				       " " GS_FMT_DATA_NAME_PREFIX "NNNN" GS_FMT_DATA_NAME_SUFFIX " matching its index)",
				       i, gs_printable(shown, sizeof(shown), f->name));
		if (f->size < GS_FMT_ALIGN || f->size % GS_FMT_ALIGN)
			return gs_fail(err, GS_E_IMAGE, "data file '%s' has size %" PRIu64 ", not a multiple of %u",
				       f->name, f->size, GS_FMT_ALIGN);
	}

	for (size_t i = 0; i < m->ngpus; i++) {
		if (i && m->gpus[i].index <= m->gpus[i - 1].index)
			return gs_fail(err, GS_E_IMAGE, "gpu %" PRIu32 " is listed twice or out of order", m->gpus[i].index);
		if (!str_ok(m->gpus[i].name, GS_FMT_STRING_MAX))
			return gs_fail(err, GS_E_IMAGE, "gpu %" PRIu32 " has a name longer than %u bytes", m->gpus[i].index,
				       GS_FMT_STRING_MAX);
	}

	for (size_t i = 0; i < m->nallocs; i++) {
		const struct gs_image_allocation *a = &m->allocs[i];
		if (i && a->id <= m->allocs[i - 1].id)
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " is listed twice or out of order", a->id);
		if (!find_gpu(m, a->gpu_index))
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " is on gpu %" PRIu32 ", which the image does"
				       " not list", a->id, a->gpu_index);
		if (a->flags & ~GS_ALLOC_F_KNOWN)
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " has unknown flags 0x%" PRIx32, a->id, a->flags);
		if (a->size > UINT64_MAX - a->va)
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " wraps around the address space", a->id);
		if (a->blob_len > GS_FMT_BLOB_MAX || (a->blob_len && !a->blob))
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 " has a blob of %zu bytes (limit %u)", a->id,
				       a->blob_len, GS_FMT_BLOB_MAX);
	}

	if (m->nmeta > GS_FMT_META_COUNT_MAX)
		return gs_fail(err, GS_E_IMAGE, "%zu metadata entries, more than the %u allowed", m->nmeta,
			       GS_FMT_META_COUNT_MAX);
	for (size_t i = 0; i < m->nmeta; i++) {
		const struct gs_image_kv *kv = &m->meta[i];
		if (!kv->key || !kv->key[0] || !str_ok(kv->key, GS_FMT_STRING_MAX) || !kv->value ||
		    !str_ok(kv->value, GS_FMT_META_VALUE_MAX))
			return gs_fail(err, GS_E_IMAGE, "metadata entry %zu has an empty or too long key or value", i);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m->meta[j].key, kv->key))
				return gs_fail(err, GS_E_IMAGE, "metadata key '%s' appears twice",
					       gs_printable(shown, sizeof(shown), kv->key));
	}

	for (size_t i = 1; i < m->nchunks; i++) {
		const struct gs_image_chunk *p = &m->chunks[i - 1], *c = &m->chunks[i];
		if (c->alloc_id < p->alloc_id || (c->alloc_id == p->alloc_id && c->offset <= p->offset))
			return gs_fail(err, GS_E_IMAGE, "chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ") is out of"
				       " order or a duplicate", i, c->alloc_id, c->offset);
	}
	free(m->alloc_chunk_start);
	m->alloc_chunk_start = malloc((m->nallocs + 1) * sizeof(size_t));
	if (!m->alloc_chunk_start)
		return gs_fail(err, GS_E_NO_SPACE, "out of memory indexing %zu allocations", m->nallocs);
	size_t c = 0;
	for (size_t i = 0; i < m->nallocs; i++) {
		const struct gs_image_allocation *a = &m->allocs[i];
		m->alloc_chunk_start[i] = c;
		if (c < m->nchunks && m->chunks[c].alloc_id < a->id)
			break; /* a chunk of an allocation that is not listed: reported below */
		uint64_t covered = 0;
		for (; c < m->nchunks && m->chunks[c].alloc_id == a->id; c++) {
			int rc = validate_chunk(m, c, a, covered, err);
			if (rc)
				return rc;
			covered += m->chunks[c].length;
		}
		if (!(a->flags & GS_ALLOC_F_NO_DATA) && covered != a->size)
			return gs_fail(err, GS_E_IMAGE, "allocation %" PRIu64 ": bytes %" PRIu64 "..%" PRIu64 " have no chunk"
				       " (missing chunk)", a->id, covered, a->size);
	}
	if (c < m->nchunks)
		return gs_fail(err, GS_E_IMAGE, "chunk %zu belongs to allocation %" PRIu64 ", which the image does not list",
			       c, m->chunks[c].alloc_id);
	m->alloc_chunk_start[m->nallocs] = m->nchunks;
	return 0;
}
