/*
 * codec.h - compression of chunk payloads (format version 2, docs/FORMAT.md
 * section 4.8.1): the codecs (Debian's liblz4 and libzstd), the byte-plane
 * split of 16-bit data done before them, the choice per chunk, and the
 * `--compress CODEC[:LEVEL]` syntax.
 *
 * The driver does not say what a chunk holds, so the writer decides per
 * chunk: a sample of it is compressed as it is and byte-plane split, and the
 * smaller wins (bf16/fp16 data: the exponent bytes compress, the mantissas
 * barely; mixed in one stream neither does). A chunk that would not shrink
 * by at least 1/32 is stored as it is. All calls are thread-safe: each
 * thread keeps its own scratch buffers and codec contexts, freed when it
 * exits, so the writer threads that call this compress in parallel. The
 * libraries are loaded when first needed (codec.c says why): a codec whose
 * library is missing compresses nothing and decompresses nothing, and
 * gs_codec_unavailable says why.
 */
#ifndef GPUSNAP_IMAGE_CODEC_H
#define GPUSNAP_IMAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "image/format.h"

struct gs_compress {
	uint8_t codec; /* enum gs_fmt_codec; GS_CODEC_NONE: no compression */
	int level;     /* the codec's level; 0: its default */
};

/* Levels: lz4 1 (its fast mode) to 12 (2 and up: LZ4HC), default 1; zstd 1 to 22, default 3. */
#define GS_LZ4_LEVEL_MAX 12
#define GS_ZSTD_LEVEL_DEFAULT 3
#define GS_ZSTD_LEVEL_MAX 22 /* where libzstd is not here to say its own */

/*
 * Parses "lz4", "zstd", "lz4:LEVEL", "zstd:LEVEL" or "none". GS_E_USAGE with
 * a message naming what is wrong (without the option's name) otherwise.
 */
int gs_compress_parse(const char *s, struct gs_compress *c, struct gs_err *err);
/* "none", "lz4", "zstd"; "unknown" for other values. */
const char *gs_codec_name(unsigned codec);
/* "none", "split2"; "unknown" for other values. */
const char *gs_transform_name(unsigned transform);
/* NULL where codec can be used here; else why not (its library cannot be loaded), a static string. */
const char *gs_codec_unavailable(unsigned codec);
/* The level c stands for (its default filled in). */
int gs_compress_level(const struct gs_compress *c);

/*
 * Compresses len bytes (0 < len <= GS_FMT_CHUNK_DATA_MAX) as chosen above.
 * Returns 1 with *out (a GS_FMT_ALIGN-aligned buffer of this thread, valid
 * until its next call here), *out_len and *transform set; 0 where the chunk
 * is to be stored as it is (it does not shrink, or no memory for the
 * buffers: compression is an optimization, never a failure).
 */
int gs_chunk_compress(const struct gs_compress *c, const void *src, size_t len, const void **out, size_t *out_len,
		      uint8_t *transform);

/*
 * Decompresses stored_len bytes of a chunk written with codec and transform
 * into dst, which takes exactly len bytes. 0, or -1 with *why (a static
 * string) where the bytes are not what the codec makes of len bytes
 * (damaged), -2 where memory for the scratch buffer is lacking, -3 with *why
 * where the codec's library cannot be loaded here.
 */
int gs_chunk_decompress(unsigned codec, unsigned transform, const void *src, size_t stored_len, void *dst, size_t len,
			const char **why);

/*
 * A GS_FMT_ALIGN-aligned buffer of this thread of at least len bytes, for a
 * compressed chunk's stored bytes read before gs_chunk_decompress (which uses
 * other buffers); valid until this thread's next call. NULL: out of memory.
 */
void *gs_codec_stored_buffer(size_t len);

/* The byte-plane split of 16-bit words and its inverse (FORMAT.md 4.8.1); dst and src do not overlap. */
void gs_split2(const void *src, void *dst, size_t len);
void gs_unsplit2(const void *src, void *dst, size_t len);

#endif
