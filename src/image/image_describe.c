/*
 * image_describe.c - what `gpusnap inspect` shows of an image, as text and
 * as JSON (see image.h). Reads only the manifest; never touches payloads.
 */
#include "image/image.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/printable.h"
#include "common/util.h"
#include "image/codec.h"
#include "image/manifest.h"

const char *gs_image_alloc_kind_name(uint32_t kind)
{
	switch (kind) {
	case GS_ALLOC_KIND_UNKNOWN: return "unknown";
	case GS_ALLOC_KIND_DEVICE: return "device";
	case GS_ALLOC_KIND_APP_VMM: return "app-vmm";
	case GS_ALLOC_KIND_POOL: return "pool";
	default: return "other";
	}
}

const char *gs_image_format_uuid(const uint8_t u[16], char *buf, size_t n)
{
	snprintf(buf, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
		 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	return buf;
}

void gs_image_totals(const struct gs_image *img, struct gs_image_totals *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < gs_image_allocation_count(img); i++)
		t->alloc_bytes += gs_image_allocation_at(img, i)->size;
	t->chunks = gs_image_chunk_count(img);
	for (size_t i = 0; i < t->chunks; i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		if (c->flags & GS_CHUNK_F_ZERO) {
			t->zero_chunks++;
			t->zero_bytes += c->length;
		} else if (c->flags & GS_CHUNK_F_PARENT) {
			t->parent_chunks++;
			t->parent_bytes += c->length;
		} else if (c->flags & GS_CHUNK_F_STORED) {
			t->store_chunks++;
			t->store_bytes += c->length;
			t->fingerprinted++;
		} else {
			t->stored_bytes += c->stored_length;
			t->data_bytes += c->length;
			t->compressed_chunks += (c->flags & GS_CHUNK_F_COMPRESSED) != 0;
			t->fingerprinted += (c->fp_lo || c->fp_hi) != 0;
		}
	}
	for (size_t i = 0; i < gs_image_data_file_count(img); i++)
		t->data_file_bytes += gs_image_data_file_at(img, i)->size;
}

/* The codec of the image's compressed chunks: "none", a codec's name, or "mixed" (a writer uses one, a reader takes any). */
static const char *image_codec(const struct gs_image *img)
{
	unsigned codec = GS_CODEC_NONE;
	for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		if (!(c->flags & GS_CHUNK_F_COMPRESSED))
			continue;
		if (codec != GS_CODEC_NONE && codec != c->codec)
			return "mixed";
		codec = c->codec;
	}
	return gs_codec_name(codec);
}

/* Uncompressed bytes per stored byte of the stored chunks; 1 where nothing is stored. */
static double ratio(const struct gs_image_totals *t)
{
	return t->stored_bytes ? (double)t->data_bytes / (double)t->stored_bytes : 1.0;
}

static const char *checksum_name(uint32_t algo)
{
	return algo == GS_CSUM_CRC32C ? "crc32c" : "unknown";
}

static const char *format_time(int64_t ns, char *buf, size_t n)
{
	time_t secs = (time_t)(ns / 1000000000LL);
	struct tm tm;
	if (!gmtime_r(&secs, &tm) || !strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, n, "?");
	return buf;
}

static void hex(const uint8_t *p, size_t len, char *buf)
{
	for (size_t i = 0; i < len; i++)
		sprintf(buf + 2 * i, "%02x", p[i]);
	buf[2 * len] = '\0';
}

void gs_image_describe_json(const struct gs_image *img, struct gs_json *j)
{
	const struct gs_image_info *in = gs_image_get_info(img);
	struct gs_image_totals t;
	gs_image_totals(img, &t);
	char buf[64];

	gs_json_object_begin(j);
	gs_json_kv_string(j, "path", gs_image_path(img));
	gs_json_kv_uint(j, "format_version", in->format_version);
	gs_json_kv_string(j, "gpusnap_version", in->gpusnap_version);
	hex(in->image_id, 16, buf);
	gs_json_kv_string(j, "image_id", buf);
	gs_json_kv_string(j, "created", format_time(in->created_ns, buf, sizeof(buf)));
	gs_json_kv_int(j, "created_unix", in->created_ns / 1000000000LL);
	gs_json_kv_string(j, "hostname", in->hostname);
	gs_json_kv_string(j, "how", in->how);
	gs_json_key(j, "process");
	gs_json_object_begin(j);
	gs_json_kv_int(j, "pid", in->source_pid);
	gs_json_kv_string(j, "comm", in->source_comm);
	gs_json_object_end(j);
	gs_json_kv_bool(j, "cpu_state", in->cpu_state);
	gs_json_key(j, "cpu_files");
	if (in->cpu_state) {
		size_t nfiles;
		uint64_t bytes;
		gs_json_object_begin(j);
		gs_json_kv_bool(j, "checksummed", gs_image_cpu_files(img, &nfiles, &bytes));
		gs_json_kv_uint(j, "count", nfiles);
		gs_json_kv_uint(j, "bytes", bytes);
		gs_json_object_end(j);
	} else {
		gs_json_null(j);
	}

	gs_json_key(j, "gpus");
	gs_json_array_begin(j);
	for (size_t i = 0; i < gs_image_gpu_count(img); i++) {
		const struct gs_image_gpu *g = gs_image_gpu_at(img, i);
		gs_json_object_begin(j);
		gs_json_kv_uint(j, "index", g->index);
		gs_json_kv_string(j, "uuid", gs_image_format_uuid(g->uuid, buf, sizeof(buf)));
		gs_json_kv_string(j, "name", g->name);
		snprintf(buf, sizeof(buf), "%" PRIu32 ".%" PRIu32, g->cc_major, g->cc_minor);
		gs_json_kv_string(j, "compute_capability", buf);
		gs_json_kv_uint(j, "total_memory", g->total_memory);
		gs_json_object_end(j);
	}
	gs_json_array_end(j);

	gs_json_key(j, "allocations");
	gs_json_object_begin(j);
	gs_json_kv_uint(j, "count", gs_image_allocation_count(img));
	gs_json_kv_uint(j, "total_bytes", t.alloc_bytes);
	gs_json_key(j, "list");
	gs_json_array_begin(j);
	for (size_t i = 0; i < gs_image_allocation_count(img); i++) {
		const struct gs_image_allocation *a = gs_image_allocation_at(img, i);
		size_t first, count;
		gs_image_allocation_chunks(img, i, &first, &count);
		gs_json_object_begin(j);
		gs_json_kv_uint(j, "id", a->id);
		gs_json_kv_uint(j, "gpu", a->gpu_index);
		snprintf(buf, sizeof(buf), "0x%" PRIx64, a->va);
		gs_json_kv_string(j, "va", buf);
		gs_json_kv_uint(j, "size", a->size);
		gs_json_kv_string(j, "kind", gs_image_alloc_kind_name(a->kind));
		gs_json_kv_uint(j, "kind_value", a->kind);
		gs_json_kv_bool(j, "has_data", !(a->flags & GS_ALLOC_F_NO_DATA));
		gs_json_kv_uint(j, "chunks", count);
		gs_json_kv_uint(j, "blob_bytes", a->blob_len);
		gs_json_object_end(j);
	}
	gs_json_array_end(j);
	gs_json_object_end(j);

	gs_json_key(j, "chunks");
	gs_json_object_begin(j);
	gs_json_kv_uint(j, "count", t.chunks);
	gs_json_kv_uint(j, "zero", t.zero_chunks);
	gs_json_kv_uint(j, "zero_bytes", t.zero_bytes);
	gs_json_kv_uint(j, "stored_bytes", t.stored_bytes);
	gs_json_kv_string(j, "checksum", checksum_name(in->checksum_algo));
	gs_json_kv_uint(j, "data_bytes", t.data_bytes);
	gs_json_kv_uint(j, "compressed", t.compressed_chunks);
	gs_json_kv_string(j, "codec", image_codec(img));
	gs_json_kv_double(j, "ratio", ratio(&t));
	gs_json_kv_uint(j, "fingerprinted", t.fingerprinted);
	gs_json_object_end(j);

	/* an incremental image: where its unchanged chunks are */
	gs_json_key(j, "parent");
	const struct gs_image *p = gs_image_parent(img);
	if (p) {
		size_t depth = 0;
		for (const struct gs_image *q = p; q; q = gs_image_parent(q))
			depth++;
		gs_json_object_begin(j);
		gs_json_kv_string(j, "path", gs_image_path(p));
		gs_json_kv_uint(j, "chunks", t.parent_chunks);
		gs_json_kv_uint(j, "bytes", t.parent_bytes);
		gs_json_kv_uint(j, "chain", depth);
		gs_json_object_end(j);
	} else {
		gs_json_null(j);
	}

	/* an image whose chunks are in a chunk store (dump --store) */
	gs_json_key(j, "store");
	if (gs_image_store_path(img)) {
		gs_json_object_begin(j);
		gs_json_kv_string(j, "path", gs_image_store_path(img));
		gs_json_kv_uint(j, "chunks", t.store_chunks);
		gs_json_kv_uint(j, "bytes", t.store_bytes);
		gs_json_object_end(j);
	} else {
		gs_json_null(j);
	}

	gs_json_key(j, "data_files");
	gs_json_array_begin(j);
	for (size_t i = 0; i < gs_image_data_file_count(img); i++) {
		const struct gs_image_data_file *f = gs_image_data_file_at(img, i);
		gs_json_object_begin(j);
		gs_json_kv_string(j, "name", f->name);
		gs_json_kv_uint(j, "size", f->size);
		gs_json_object_end(j);
	}
	gs_json_array_end(j);

	gs_json_key(j, "metadata");
	gs_json_object_begin(j);
	for (size_t i = 0; i < gs_image_metadata_count(img); i++)
		gs_json_kv_string(j, gs_image_metadata_at(img, i)->key, gs_image_metadata_at(img, i)->value);
	gs_json_object_end(j);
	gs_json_object_end(j);
}

void gs_image_describe_text(const struct gs_image *img, FILE *out)
{
	const struct gs_image_info *in = gs_image_get_info(img);
	struct gs_image_totals t;
	gs_image_totals(img, &t);
	char a[256], b[256], c[64], d[64];

	fprintf(out, "image        %s\n", gs_printable(a, sizeof(a), gs_image_path(img)));
	fprintf(out, "format       version %" PRIu32 ", written by gpusnap %s\n", in->format_version,
		gs_printable(a, sizeof(a), in->gpusnap_version));
	fprintf(out, "taken        %s on %s, by %s\n", format_time(in->created_ns, c, sizeof(c)),
		*in->hostname ? gs_printable(a, sizeof(a), in->hostname) : "?",
		*in->how ? gs_printable(b, sizeof(b), in->how) : "?");
	fprintf(out, "process      %" PRId32 " (%s)\n", in->source_pid,
		gs_printable(a, sizeof(a), in->source_comm));
	size_t ncpu;
	uint64_t cpu_bytes;
	if (!in->cpu_state)
		fprintf(out, "cpu state    not present\n");
	else if (gs_image_cpu_files(img, &ncpu, &cpu_bytes))
		fprintf(out, "cpu state    present (" GS_FMT_CPU_DIR_NAME "/): %zu file%s, %s, checksummed\n", ncpu,
			ncpu == 1 ? "" : "s", gs_format_bytes(cpu_bytes, c, sizeof(c)));
	else
		fprintf(out, "cpu state    present (" GS_FMT_CPU_DIR_NAME "/), its files not checksummed (no %s: written by"
			" an older gpusnap, or never published)\n", GS_FMT_CPU_LIST_NAME);
	fprintf(out, "gpus         %zu\n", gs_image_gpu_count(img));
	for (size_t i = 0; i < gs_image_gpu_count(img); i++) {
		const struct gs_image_gpu *g = gs_image_gpu_at(img, i);
		char label[32];
		snprintf(label, sizeof(label), "gpu %" PRIu32, g->index);
		fprintf(out, "  %-11s%s, compute %" PRIu32 ".%" PRIu32 ", %s, %s\n", label,
			gs_printable(a, sizeof(a), g->name), g->cc_major, g->cc_minor,
			gs_format_bytes(g->total_memory, c, sizeof(c)), gs_image_format_uuid(g->uuid, b, sizeof(b)));
	}
	size_t kinds[4] = { 0 }, other = 0;
	for (size_t i = 0; i < gs_image_allocation_count(img); i++) {
		uint32_t k = gs_image_allocation_at(img, i)->kind;
		if (k < GS_ARRAY_SIZE(kinds))
			kinds[k]++;
		else
			other++;
	}
	fprintf(out, "allocations  %zu, %s", gs_image_allocation_count(img), gs_format_bytes(t.alloc_bytes, c, sizeof(c)));
	const char *sep = " (";
	for (uint32_t k = 0; k < GS_ARRAY_SIZE(kinds); k++)
		if (kinds[k]) {
			fprintf(out, "%s%s %zu", sep, gs_image_alloc_kind_name(k), kinds[k]);
			sep = ", ";
		}
	if (other)
		fprintf(out, "%sother %zu", sep, other);
	fprintf(out, "%s\n", strcmp(sep, ", ") ? "" : ")");
	fprintf(out, "chunks       %" PRIu64 ", %" PRIu64 " zero (%s not stored), checksum %s, %" PRIu64 " fingerprinted\n",
		t.chunks, t.zero_chunks, gs_format_bytes(t.zero_bytes, c, sizeof(c)), checksum_name(in->checksum_algo),
		t.fingerprinted);
	if (gs_image_parent(img)) {
		size_t depth = 0;
		for (const struct gs_image *q = gs_image_parent(img); q; q = gs_image_parent(q))
			depth++;
		fprintf(out, "parent       %s (%zu image%s up the chain): %" PRIu64 " chunks, %s not stored here\n",
			gs_printable(a, sizeof(a), gs_image_path(gs_image_parent(img))), depth, depth == 1 ? "" : "s",
			t.parent_chunks, gs_format_bytes(t.parent_bytes, c, sizeof(c)));
	}
	if (gs_image_store_path(img))
		fprintf(out, "store        %s: %" PRIu64 " chunks, %s not stored here\n",
			gs_printable(a, sizeof(a), gs_image_store_path(img)), t.store_chunks,
			gs_format_bytes(t.store_bytes, c, sizeof(c)));
	if (t.compressed_chunks)
		fprintf(out, "compression  %s, %" PRIu64 " of %" PRIu64 " stored chunks: %s in %s, ratio %.2f\n",
			image_codec(img), t.compressed_chunks, t.chunks - t.zero_chunks,
			gs_format_bytes(t.data_bytes, c, sizeof(c)), gs_format_bytes(t.stored_bytes, d, sizeof(d)), ratio(&t));
	else
		fprintf(out, "compression  none\n");
	fprintf(out, "data         %s stored in %zu file%s (%s on disk)\n", gs_format_bytes(t.stored_bytes, c, sizeof(c)),
		gs_image_data_file_count(img), gs_image_data_file_count(img) == 1 ? "" : "s",
		gs_format_bytes(t.data_file_bytes, d, sizeof(d)));
	for (size_t i = 0; i < gs_image_metadata_count(img); i++) {
		const struct gs_image_kv *kv = gs_image_metadata_at(img, i);
		fprintf(out, "%-12s %s = %s\n", i ? "" : "metadata", gs_printable(a, sizeof(a), kv->key),
			gs_printable(b, sizeof(b), kv->value));
	}
}
