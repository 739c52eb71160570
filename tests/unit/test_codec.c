/*
 * test_codec.c - compressed chunks (image/codec.h, format version 2): the
 * --compress syntax, the byte-plane split, the choice per chunk, round trips
 * through lz4 and zstd, images written compressed and read back, damage
 * found before decompression, unknown codecs refused, and version 1 images
 * (written without compression) still version 1.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "image/codec.h"
#include "image/manifest.h"
#include "image_test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* bf16-like data: values around 1.0 with random mantissas (the high byte, sign and exponent, varies little) */
static void fill_bf16(uint8_t *p, size_t len)
{
	for (size_t i = 0; i + 1 < len; i += 2) {
		uint64_t r = next_rand();
		p[i] = (uint8_t)r;                        /* mantissa bits: noise */
		p[i + 1] = (uint8_t)(0x3f + ((r >> 8) & 1)); /* sign 0, exponent near 127 */
	}
}

static void fill_random(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)next_rand();
}

static void fill_text(uint8_t *p, size_t len)
{
	static const char t[] = "the quick brown fox jumps over the lazy dog; ";
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)t[(i + i / 997) % (sizeof(t) - 1)];
}

static void test_parse(void)
{
	struct gs_compress c;
	struct gs_err err = { 0 };
	CHECK_INT(gs_compress_parse("lz4", &c, &err), 0);
	CHECK_INT(c.codec, GS_CODEC_LZ4);
	CHECK_INT(gs_compress_level(&c), 1);
	CHECK_INT(gs_compress_parse("zstd", &c, &err), 0);
	CHECK_INT(c.codec, GS_CODEC_ZSTD);
	CHECK_INT(gs_compress_level(&c), GS_ZSTD_LEVEL_DEFAULT);
	CHECK_INT(gs_compress_parse("zstd:19", &c, &err), 0);
	CHECK_INT(c.level, 19);
	CHECK_INT(gs_compress_parse("lz4:12", &c, &err), 0);
	CHECK_INT(c.level, 12);
	CHECK_INT(gs_compress_parse("none", &c, &err), 0);
	CHECK_INT(c.codec, GS_CODEC_NONE);
	const char *bad[] = { "", "gzip", "lz4:", "lz4:0", "lz4:13", "zstd:23", "zstd:-1", "zstd:3x", "lz4:1:2",
			      "LZ4", "none:1", "zstd:99999999999999999999" };
	for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
		gs_err_clear(&err);
		CHECK_INT(gs_compress_parse(bad[i], &c, &err), GS_E_USAGE);
		CHECK(strlen(err.msg) > 0 && !strchr(err.msg, '\n'));
	}
	CHECK_STR(gs_codec_name(GS_CODEC_ZSTD), "zstd");
	CHECK_STR(gs_codec_name(77), "unknown");
}

static void test_split(void)
{
	for (size_t len = 1; len < 40; len++) {
		uint8_t in[64], mid[64], out[64];
		fill_random(in, len);
		gs_split2(in, mid, len);
		if (len >= 4) {
			CHECK_INT(mid[0], in[0]);
			CHECK_INT(mid[1], in[2]);
			CHECK_INT(mid[len / 2], in[1]);
		}
		if (len & 1)
			CHECK_INT(mid[len - 1], in[len - 1]);
		gs_unsplit2(mid, out, len);
		CHECK(memcmp(in, out, len) == 0);
	}
	/* the FORMAT.md example */
	const uint8_t ex[5] = { 0xA0, 0xB0, 0xA1, 0xB1, 0xC0 }, want[5] = { 0xA0, 0xA1, 0xB0, 0xB1, 0xC0 };
	uint8_t got[5];
	gs_split2(ex, got, 5);
	CHECK(memcmp(got, want, 5) == 0);
}

/* Compresses and decompresses len bytes of p with c; returns the transform chosen, -1 if stored raw. */
static int roundtrip(const struct gs_compress *c, const uint8_t *p, size_t len, size_t *stored)
{
	const void *out;
	size_t out_len = 0;
	uint8_t xf = 0xff;
	if (gs_chunk_compress(c, p, len, &out, &out_len, &xf) != 1)
		return -1;
	CHECK(out_len < len);
	CHECK((uintptr_t)out % GS_FMT_ALIGN == 0);
	*stored = out_len;
	void *copy = malloc(out_len), *back = malloc(len);
	memcpy(copy, out, out_len);
	const char *why;
	CHECK_INT(gs_chunk_decompress(c->codec, xf, copy, out_len, back, len, &why), 0);
	CHECK(memcmp(back, p, len) == 0);
	/* a damaged stream or a wrong length is refused, never overruns */
	if (out_len > 8) {
		((uint8_t *)copy)[out_len / 2] ^= 0x55;
		((uint8_t *)copy)[out_len - 1] ^= 0x55;
		int rc = gs_chunk_decompress(c->codec, xf, copy, out_len, back, len, &why);
		CHECK(rc == -1 || memcmp(back, p, len) != 0); /* the chunk checksum catches what a codec lets through */
		((uint8_t *)copy)[out_len / 2] ^= 0x55;
		((uint8_t *)copy)[out_len - 1] ^= 0x55;
	}
	CHECK_INT(gs_chunk_decompress(c->codec, xf, copy, out_len - 1, back, len, &why), -1);
	CHECK(gs_chunk_decompress(c->codec, xf, copy, out_len, back, len - 1, &why) == -1);
	free(copy);
	free(back);
	return xf;
}

static void test_roundtrips(void)
{
	const size_t lens[] = { 1, 2, 3, 4095, 4096, 100001, 3 << 20 };
	uint8_t *p = malloc(3 << 20);
	struct gs_compress codecs[] = { { GS_CODEC_LZ4, 0 }, { GS_CODEC_LZ4, 9 }, { GS_CODEC_ZSTD, 0 },
					{ GS_CODEC_ZSTD, 1 } };
	for (size_t k = 0; k < GS_ARRAY_SIZE(codecs); k++) {
		for (size_t i = 0; i < GS_ARRAY_SIZE(lens); i++) {
			size_t st;
			fill_text(p, lens[i]);
			int xf = roundtrip(&codecs[k], p, lens[i], &st);
			if (lens[i] >= 4096)
				CHECK(xf >= 0); /* text compresses */
			fill_random(p, lens[i]);
			CHECK_INT(roundtrip(&codecs[k], p, lens[i], &st), -1); /* noise is stored as it is */
		}
		/* bf16: the split wins and the result shrinks */
		size_t st = 0;
		fill_bf16(p, 3 << 20);
		CHECK_INT(roundtrip(&codecs[k], p, 3 << 20, &st), GS_XFORM_SPLIT2);
		/* zstd codes the sign-and-exponent plane's few values in bits; lz4 only finds repeats */
		CHECK(st > 0 && st < (codecs[k].codec == GS_CODEC_ZSTD ? (3u << 20) * 3 / 4 : (3u << 20)));
		printf("     bf16-like 3 MiB, %s level %d: %zu bytes (ratio %.2f)\n", gs_codec_name(codecs[k].codec),
		       gs_compress_level(&codecs[k]), st, (double)(3 << 20) / (double)st);
	}
	free(p);
}

/* An image of three allocations: text (compresses), bf16 (split), noise (raw), with a ZERO chunk among them. */
#define CH (1u << 20)
static void write_image(const char *dir, uint8_t codec, uint8_t **data)
{
	struct gs_image_writer_opts o = { .how = "agent", .compress_codec = codec };
	struct gs_image_writer *w;
	struct gs_err err = { 0 };
	CHECK_INT(image_test_writer_open(dir, &o, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "fake" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	*data = malloc(3 * 2 * CH);
	uint8_t *d = *data;
	fill_text(d, 2 * CH);
	fill_bf16(d + 2 * CH, 2 * CH);
	fill_random(d + 4 * CH, 2 * CH);
	memset(d + CH, 0, CH); /* the second chunk of the text is zero */
	for (uint64_t a = 0; a < 3; a++) {
		struct gs_image_allocation al = { .id = a, .va = 0x10000000 * (a + 1), .size = 2 * CH, .kind = 1 };
		CHECK_INT(gs_image_writer_add_allocation(w, &al, &err), 0);
		for (uint64_t off = 0; off < 2 * CH; off += CH)
			CHECK_INT(gs_image_write_chunk(w, a, off, d + a * 2 * CH + off, CH, &err), 0);
	}
	struct gs_image_writer_stats st;
	gs_image_writer_stats(w, &st);
	if (codec) {
		CHECK_INT(st.compressed_chunks, 3); /* text, bf16 x2 */
		CHECK(st.payload_bytes < st.data_bytes);
	}
	CHECK_INT(image_test_writer_commit(w, &err), 0);
}

static void check_contents(struct gs_image *img, const uint8_t *d)
{
	struct gs_err err = { 0 };
	uint8_t *buf = malloc(CH);
	for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		CHECK_INT(gs_image_read_chunk(img, i, buf, &err), 0);
		CHECK(memcmp(buf, d + c->alloc_id * 2 * CH + c->offset, CH) == 0);
	}
	free(buf);
}

static void test_image_compressed(void)
{
	const uint8_t codecs[] = { GS_CODEC_LZ4, GS_CODEC_ZSTD };
	for (size_t k = 0; k < 2; k++) {
		const char *dir = scratch_dir(k ? "zstd" : "lz4");
		uint8_t *d;
		write_image(dir, codecs[k], &d);
		struct gs_image *img;
		struct gs_err err = { 0 };
		CHECK_INT(gs_image_open(dir, &img, &err), 0);
		if (!img)
			return;
		CHECK_INT(gs_image_get_info(img)->format_version, GS_FMT_VERSION_COMPRESS);
		size_t compressed = 0, split = 0, zero = 0;
		for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
			const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
			if (c->flags & GS_CHUNK_F_COMPRESSED) {
				compressed++;
				CHECK_INT(c->codec, codecs[k]);
				CHECK(c->stored_length < c->length);
				split += c->transform == GS_XFORM_SPLIT2;
			} else if (c->flags & GS_CHUNK_F_ZERO) {
				zero++;
			} else {
				CHECK(c->stored_length == c->length && c->stored_crc32c == c->crc32c);
			}
		}
		CHECK_INT(compressed, 3);
		CHECK_INT(split, 2);
		CHECK_INT(zero, 1);
		check_contents(img, d);
		CHECK_INT(gs_image_verify(img, 2, &err), 0);
		struct gs_image_totals t;
		gs_image_totals(img, &t);
		CHECK_INT(t.compressed_chunks, 3);
		CHECK_INT(t.data_bytes, 5 * CH);
		CHECK(t.stored_bytes < t.data_bytes);
		/* inspect shows it */
		char *text = NULL;
		size_t tlen = 0;
		FILE *f = open_memstream(&text, &tlen);
		gs_image_describe_text(img, f);
		fclose(f);
		CHECK_CONTAINS(text, k ? "compression  zstd, 3 of 5 stored chunks" : "compression  lz4, 3 of 5 stored chunks");
		free(text);
		struct gs_json j;
		gs_json_init(&j);
		gs_image_describe_json(img, &j);
		const char *js = gs_json_finish(&j);
		CHECK(js != NULL);
		CHECK_CONTAINS(js ? js : "", k ? "\"codec\":\"zstd\"" : "\"codec\":\"lz4\"");
		CHECK_CONTAINS(js ? js : "", "\"compressed\":3");
		gs_json_free(&j);

		/* damage a compressed chunk: found by the stored bytes' checksum, naming the chunk */
		size_t victim = 0;
		while (!(gs_image_chunk_at(img, victim)->flags & GS_CHUNK_F_COMPRESSED))
			victim++;
		const struct gs_image_chunk *c = gs_image_chunk_at(img, victim);
		char path[900];
		path_join(path, sizeof(path), dir, gs_image_data_file_at(img, c->file_index)->name);
		uint64_t at = c->file_offset + c->stored_length / 2;
		uint64_t alloc_id = c->alloc_id, offset = c->offset;
		gs_image_close(img);
		int fd = open(path, O_RDWR);
		uint8_t b;
		CHECK(pread(fd, &b, 1, (off_t)at) == 1);
		b ^= 0x10;
		CHECK(pwrite(fd, &b, 1, (off_t)at) == 1);
		close(fd);
		CHECK_INT(gs_image_open(dir, &img, &err), 0);
		uint8_t *buf = malloc(CH);
		gs_err_clear(&err);
		CHECK_INT(gs_image_read_chunk(img, victim, buf, &err), GS_E_IMAGE);
		char want[200];
		snprintf(want, sizeof(want), "chunk %zu (allocation %" PRIu64 ", offset %" PRIu64, victim, alloc_id, offset);
		CHECK_CONTAINS(err.msg, want);
		CHECK_CONTAINS(err.msg, "checksum of the stored bytes");
		gs_err_clear(&err);
		CHECK_INT(gs_image_verify(img, 2, &err), GS_E_IMAGE);
		CHECK_CONTAINS(err.msg, want);
		free(buf);
		gs_image_close(img);
		free(d);
	}
}

/*
 * Without compression the writer still writes version 1, readable by every gpusnap before version 2: its
 * records are longer (stored_* and the fingerprint follow the 48 bytes a version 1 reader takes).
 */
static void test_uncompressed_is_version_1(void)
{
	const char *dir = scratch_dir("plain");
	uint8_t *d;
	write_image(dir, GS_CODEC_NONE, &d);
	struct gs_image *img;
	struct gs_err err = { 0 };
	CHECK_INT(gs_image_open(dir, &img, &err), 0);
	CHECK_INT(gs_image_get_info(img)->format_version, 1);
	char path[900];
	path_join(path, sizeof(path), dir, "manifest.img");
	int fd = open(path, O_RDONLY);
	struct gs_fmt_manifest_header h;
	CHECK(pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h));
	struct gs_fmt_section s[8];
	CHECK(pread(fd, s, sizeof(s[0]) * h.section_count, (off_t)h.section_table_offset) > 0);
	close(fd);
	for (uint32_t i = 0; i < h.section_count; i++)
		if (s[i].type == GS_SEC_CHUNKS)
			CHECK_INT(s[i].entry_size, sizeof(struct gs_fmt_chunk));
	check_contents(img, d);
	gs_image_close(img);
	free(d);
}

/* A manifest model of one allocation in one chunk of 8192 bytes stored in 4096 (compressed). */
static void one_chunk_manifest(struct gs_manifest *m, struct gs_image_allocation *a, struct gs_image_chunk *c,
			       struct gs_image_data_file *f, struct gs_image_gpu *g, uint32_t version)
{
	memset(m, 0, sizeof(*m));
	m->info = (struct gs_image_info){ .format_version = version, .checksum_algo = GS_CSUM_CRC32C, .how = "agent" };
	*g = (struct gs_image_gpu){ .index = 0, .name = "g" };
	*a = (struct gs_image_allocation){ .id = 1, .size = 8192 };
	*f = (struct gs_image_data_file){ .index = 0, .size = 8192, .name = "gpu-data-0000.img" };
	*c = (struct gs_image_chunk){ .alloc_id = 1, .length = 8192, .file_offset = 4096, .flags = GS_CHUNK_F_COMPRESSED,
				      .stored_length = 4096, .codec = GS_CODEC_ZSTD };
	m->gpus = g;
	m->ngpus = 1;
	m->allocs = a;
	m->nallocs = 1;
	m->chunks = c;
	m->nchunks = 1;
	m->files = f;
	m->nfiles = 1;
}

static int encode_decode(struct gs_manifest *m, struct gs_err *err)
{
	void *buf;
	size_t len;
	if (gs_manifest_encode(m, &buf, &len, err))
		return -1;
	struct gs_manifest out;
	memset(&out, 0, sizeof(out));
	int rc = gs_manifest_decode(buf, len, &out, err);
	gs_manifest_free(&out);
	return rc;
}

static void test_manifest_rules(void)
{
	struct gs_manifest m;
	struct gs_image_allocation a;
	struct gs_image_chunk c;
	struct gs_image_data_file f;
	struct gs_image_gpu g;
	struct gs_err err = { 0 };
	one_chunk_manifest(&m, &a, &c, &f, &g, 2);
	CHECK_INT(encode_decode(&m, &err), 0);
	/* an unknown codec: one line naming the chunk and the codec */
	c.codec = 9;
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "chunk 0 (allocation 1, offset 0, 8192 bytes): compressed with unknown codec 9");
	CHECK(!strchr(err.msg, '\n'));
	c.codec = GS_CODEC_LZ4;
	c.transform = 7;
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "unknown transform 7");
	c.transform = 0;
	c.stored_length = 8192; /* not smaller */
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "not between 1 and its length");
	c.stored_length = 8192 - 1;
	f.size = 8192; /* 4096 + 8191 lies past the file */
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "lies past the end");
	c.stored_length = 4096;
	/* compressed chunks need version 2: a version 1 image (48-byte records) cannot carry them */
	one_chunk_manifest(&m, &a, &c, &f, &g, 1);
	gs_err_clear(&err);
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "unknown in format version 1");
	/* a version 3 manifest is refused naming the versions this build reads */
	one_chunk_manifest(&m, &a, &c, &f, &g, 3);
	CHECK_INT(encode_decode(&m, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "image format version 3 is not supported (this gpusnap reads versions 1 to 2)");
}

int main(void)
{
	gs_log_init_from_env();
	scratch_init("codec");
	RUN(test_parse);
	RUN(test_split);
	RUN(test_roundtrips);
	RUN(test_image_compressed);
	RUN(test_uncompressed_is_version_1);
	RUN(test_manifest_rules);
	scratch_cleanup();
	return TEST_SUMMARY();
}
