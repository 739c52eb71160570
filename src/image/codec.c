/*
 * codec.c - chunk compression through liblz4 and libzstd, the byte-plane
 * split, the per-chunk choice between them, and the thread's scratch buffers
 * (see codec.h).
 *
 * The libraries are loaded with dlopen when a codec is first used, not
 * linked: this code runs inside the agent too, which is preloaded into
 * applications and containers that may lack them, and a link-time
 * dependency would keep the agent from loading there at all (ld.so ignores
 * a preload it cannot resolve). Without the library only that codec is
 * missing, and says so.
 */
#include "image/codec.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lz4.h>
#include <lz4hc.h>
#include <zstd.h>

#include "common/util.h"

/* ------------------------------------------------------ the libraries */

#define LZ4_SONAME "liblz4.so.1"
#define ZSTD_SONAME "libzstd.so.1"

/* The functions used, typed by the libraries' own headers. */
static struct {
	bool lz4_ok, zstd_ok;
	char lz4_why[160], zstd_why[160];
	__typeof__(LZ4_compressBound) *lz4_bound;
	__typeof__(LZ4_sizeofState) *lz4_state_size;
	__typeof__(LZ4_compress_fast_extState) *lz4_compress;
	__typeof__(LZ4_sizeofStateHC) *lz4hc_state_size;
	__typeof__(LZ4_compress_HC_extStateHC) *lz4hc_compress;
	__typeof__(LZ4_decompress_safe) *lz4_decompress;
	__typeof__(ZSTD_maxCLevel) *zstd_max_level;
	__typeof__(ZSTD_compressBound) *zstd_bound;
	__typeof__(ZSTD_createCCtx) *zstd_create_cctx;
	__typeof__(ZSTD_freeCCtx) *zstd_free_cctx;
	__typeof__(ZSTD_compressCCtx) *zstd_compress;
	__typeof__(ZSTD_isError) *zstd_is_error;
	__typeof__(ZSTD_findFrameCompressedSize) *zstd_frame_size;
	__typeof__(ZSTD_getFrameContentSize) *zstd_content_size;
	__typeof__(ZSTD_createDCtx) *zstd_create_dctx;
	__typeof__(ZSTD_freeDCtx) *zstd_free_dctx;
	__typeof__(ZSTD_decompressDCtx) *zstd_decompress;
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

/* A function of a library: where its pointer goes and the name dlsym finds it by. */
struct lib_sym {
	void **slot;
	const char *name;
};

/* The slot of lib's member field (POSIX guarantees the conversion dlsym's users rely on). */
#define SLOT(field) ((void **)&lib.field)

static const struct lib_sym lz4_syms[] = {
	{ SLOT(lz4_bound), "LZ4_compressBound" },
	{ SLOT(lz4_state_size), "LZ4_sizeofState" },
	{ SLOT(lz4_compress), "LZ4_compress_fast_extState" },
	{ SLOT(lz4hc_state_size), "LZ4_sizeofStateHC" },
	{ SLOT(lz4hc_compress), "LZ4_compress_HC_extStateHC" },
	{ SLOT(lz4_decompress), "LZ4_decompress_safe" },
};

static const struct lib_sym zstd_syms[] = {
	{ SLOT(zstd_max_level), "ZSTD_maxCLevel" },
	{ SLOT(zstd_bound), "ZSTD_compressBound" },
	{ SLOT(zstd_create_cctx), "ZSTD_createCCtx" },
	{ SLOT(zstd_free_cctx), "ZSTD_freeCCtx" },
	{ SLOT(zstd_compress), "ZSTD_compressCCtx" },
	{ SLOT(zstd_is_error), "ZSTD_isError" },
	{ SLOT(zstd_frame_size), "ZSTD_findFrameCompressedSize" },
	{ SLOT(zstd_content_size), "ZSTD_getFrameContentSize" },
	{ SLOT(zstd_create_dctx), "ZSTD_createDCtx" },
	{ SLOT(zstd_free_dctx), "ZSTD_freeDCtx" },
	{ SLOT(zstd_decompress), "ZSTD_decompressDCtx" },
};

/* Loads soname and its n functions syms[]; false, with why set, when it or one of them is missing. */
static bool load_lib(const char *soname, const struct lib_sym *syms, size_t n, char *why, size_t why_size)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, why_size, "%s cannot be loaded here (%s)", soname, e ? e : "no reason given");
		return false;
	}
	bool ok = true;
	for (size_t i = 0; i < n; i++)
		if (!(*syms[i].slot = dlsym(h, syms[i].name)))
			ok = false;
	if (!ok)
		snprintf(why, why_size, "%s lacks a function gpusnap uses (too old)", soname);
	return ok;
}

static void lib_load(void)
{
	lib.lz4_ok = load_lib(LZ4_SONAME, lz4_syms, GS_ARRAY_SIZE(lz4_syms), lib.lz4_why, sizeof(lib.lz4_why));
	lib.zstd_ok = load_lib(ZSTD_SONAME, zstd_syms, GS_ARRAY_SIZE(zstd_syms), lib.zstd_why, sizeof(lib.zstd_why));
}

const char *gs_codec_unavailable(unsigned codec)
{
	pthread_once(&lib_once, lib_load);
	if (codec == GS_CODEC_LZ4)
		return lib.lz4_ok ? NULL : lib.lz4_why;
	if (codec == GS_CODEC_ZSTD)
		return lib.zstd_ok ? NULL : lib.zstd_why;
	return codec == GS_CODEC_NONE ? NULL : "unknown codec";
}

/* The sample a chunk's transform is chosen on: this much from its start, middle and end. */
#define SAMPLE_PIECE (32u << 10)
#define SAMPLE_MAX (3 * SAMPLE_PIECE)

struct buf {
	void *p;
	size_t cap;
};

/* One thread's buffers and codec states (freed by the key's destructor when the thread exits). */
struct scratch {
	struct buf split, out, sample, sample_split, sample_out, dec, stored;
	void *lz4_state, *lz4hc_state;
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v)
{
	struct scratch *s = v;
	if (!s)
		return;
	free(s->split.p);
	free(s->out.p);
	free(s->sample.p);
	free(s->sample_split.p);
	free(s->sample_out.p);
	free(s->dec.p);
	free(s->stored.p);
	free(s->lz4_state);
	free(s->lz4hc_state);
	if (s->cctx)
		lib.zstd_free_cctx(s->cctx); /* made only through the library, so it is loaded */
	if (s->dctx)
		lib.zstd_free_dctx(s->dctx);
	free(s);
}

static void scratch_key_make(void)
{
	(void)pthread_key_create(&scratch_key, scratch_free);
}

static struct scratch *scratch_get(void)
{
	pthread_once(&scratch_once, scratch_key_make);
	struct scratch *s = pthread_getspecific(scratch_key);
	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (s && pthread_setspecific(scratch_key, s)) {
		free(s);
		s = NULL;
	}
	return s;
}

/* b holds at least n bytes, GS_FMT_ALIGN-aligned (so the writer may write it with O_DIRECT). */
static bool reserve(struct buf *b, size_t n)
{
	if (b->cap >= n)
		return true;
	void *p = NULL;
	size_t cap = gs_round_up(n, GS_FMT_ALIGN);
	if (posix_memalign(&p, GS_FMT_ALIGN, cap))
		return false;
	free(b->p);
	b->p = p;
	b->cap = cap;
	return true;
}

/* ------------------------------------------------------------ options */

const char *gs_codec_name(unsigned codec)
{
	switch (codec) {
	case GS_CODEC_NONE: return "none";
	case GS_CODEC_LZ4: return "lz4";
	case GS_CODEC_ZSTD: return "zstd";
	default: return "unknown";
	}
}

const char *gs_transform_name(unsigned transform)
{
	switch (transform) {
	case GS_XFORM_NONE: return "none";
	case GS_XFORM_SPLIT2: return "split2";
	default: return "unknown";
	}
}

static int level_max(unsigned codec)
{
	/* zstd's own maximum where the library is here, else the one of the version gpusnap was built with */
	if (codec == GS_CODEC_ZSTD)
		return gs_codec_unavailable(codec) ? GS_ZSTD_LEVEL_MAX : lib.zstd_max_level();
	return codec == GS_CODEC_LZ4 ? GS_LZ4_LEVEL_MAX : 0;
}

int gs_compress_level(const struct gs_compress *c)
{
	if (c->level)
		return c->level;
	return c->codec == GS_CODEC_ZSTD ? GS_ZSTD_LEVEL_DEFAULT : c->codec == GS_CODEC_LZ4 ? 1 : 0;
}

int gs_compress_parse(const char *s, struct gs_compress *c, struct gs_err *err)
{
	*c = (struct gs_compress){ 0 };
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);
	if (n == 4 && !strncmp(s, "none", 4) && !colon)
		return 0;
	if (n == 3 && !strncmp(s, "lz4", 3))
		c->codec = GS_CODEC_LZ4;
	else if (n == 4 && !strncmp(s, "zstd", 4))
		c->codec = GS_CODEC_ZSTD;
	else
		return gs_fail(err, GS_E_USAGE, "unknown compression '%s' (lz4, zstd or none; lz4:LEVEL, zstd:LEVEL)", s);
	if (!colon)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(colon + 1, &end, 10);
	int max = level_max(c->codec);
	if (!colon[1] || *end || errno || v < 1 || v > max)
		return gs_fail(err, GS_E_USAGE, "compression level '%s' of %s is not a number from 1 to %d", colon + 1,
			       gs_codec_name(c->codec), max);
	c->level = (int)v;
	return 0;
}

/* --------------------------------------------------------- transforms */

void gs_split2(const void *src, void *dst, size_t len)
{
	const uint8_t *s = src;
	uint8_t *lo = dst, *hi = lo + len / 2;
	size_t n = len / 2;
	for (size_t i = 0; i < n; i++) {
		lo[i] = s[2 * i];
		hi[i] = s[2 * i + 1];
	}
	if (len & 1)
		lo[len - 1] = s[len - 1];
}

void gs_unsplit2(const void *src, void *dst, size_t len)
{
	const uint8_t *lo = src, *hi = lo + len / 2;
	uint8_t *d = dst;
	size_t n = len / 2;
	for (size_t i = 0; i < n; i++) {
		d[2 * i] = lo[i];
		d[2 * i + 1] = hi[i];
	}
	if (len & 1)
		d[len - 1] = lo[len - 1];
}

/* --------------------------------------------------------- compression */

static size_t bound(unsigned codec, size_t len)
{
	return codec == GS_CODEC_LZ4 ? (size_t)lib.lz4_bound((int)len) : lib.zstd_bound(len);
}

/* Compresses len bytes of src into dst (cap bytes); the compressed size, or 0 on failure. */
static size_t encode(struct scratch *s, const struct gs_compress *c, const void *src, size_t len, void *dst, size_t cap)
{
	int level = gs_compress_level(c);
	if (c->codec == GS_CODEC_LZ4) {
		if (len > LZ4_MAX_INPUT_SIZE || cap > INT_MAX)
			return 0;
		int r;
		if (level <= 1) {
			if (!s->lz4_state && !(s->lz4_state = malloc((size_t)lib.lz4_state_size())))
				return 0;
			r = lib.lz4_compress(s->lz4_state, src, dst, (int)len, (int)cap, 1);
		} else {
			if (!s->lz4hc_state && !(s->lz4hc_state = malloc((size_t)lib.lz4hc_state_size())))
				return 0;
			r = lib.lz4hc_compress(s->lz4hc_state, src, dst, (int)len, (int)cap, level);
		}
		return r > 0 ? (size_t)r : 0;
	}
	if (!s->cctx && !(s->cctx = lib.zstd_create_cctx()))
		return 0;
	size_t r = lib.zstd_compress(s->cctx, dst, cap, src, len, level);
	return lib.zstd_is_error(r) ? 0 : r;
}

/* At most SAMPLE_MAX bytes of src, from its start, middle and end (even offsets and lengths), into dst. */
static size_t take_sample(const uint8_t *src, size_t len, uint8_t *dst)
{
	if (len <= SAMPLE_MAX) {
		memcpy(dst, src, len);
		return len;
	}
	size_t mid = (len / 2 - SAMPLE_PIECE / 2) & ~(size_t)1, end = (len - SAMPLE_PIECE) & ~(size_t)1;
	memcpy(dst, src, SAMPLE_PIECE);
	memcpy(dst + SAMPLE_PIECE, src + mid, SAMPLE_PIECE);
	memcpy(dst + 2 * SAMPLE_PIECE, src + end, SAMPLE_PIECE);
	return SAMPLE_MAX;
}

/* Whether out bytes are worth storing instead of len: a saving of at least 1/32. */
static bool shrinks(size_t out, size_t len)
{
	return out > 0 && out <= len - len / 32 && out < len;
}

int gs_chunk_compress(const struct gs_compress *c, const void *src, size_t len, const void **out, size_t *out_len,
		      uint8_t *transform)
{
	if (c->codec == GS_CODEC_NONE || c->codec > GS_CODEC_MAX || len == 0 || len > GS_FMT_CHUNK_DATA_MAX ||
	    gs_codec_unavailable(c->codec))
		return 0;
	struct scratch *s = scratch_get();
	size_t sb = bound(c->codec, SAMPLE_MAX);
	if (!s || !reserve(&s->sample, SAMPLE_MAX) || !reserve(&s->sample_split, SAMPLE_MAX) ||
	    !reserve(&s->sample_out, sb))
		return 0;
	/* the transform: whichever compresses the sample better */
	size_t n = take_sample(src, len, s->sample.p);
	size_t plain = encode(s, c, s->sample.p, n, s->sample_out.p, sb);
	gs_split2(s->sample.p, s->sample_split.p, n);
	size_t split = encode(s, c, s->sample_split.p, n, s->sample_out.p, sb);
	bool use_split = split && (!plain || split < plain);
	size_t best = use_split ? split : plain;
	if (!shrinks(best, n))
		return 0; /* the sample does not compress: neither will the chunk, most likely; not worth the time */

	const void *in = src;
	if (use_split) {
		if (!reserve(&s->split, len))
			return 0;
		gs_split2(src, s->split.p, len);
		in = s->split.p;
	}
	size_t cap = bound(c->codec, len);
	if (!reserve(&s->out, cap))
		return 0;
	size_t r = encode(s, c, in, len, s->out.p, cap);
	if (!shrinks(r, len))
		return 0;
	*out = s->out.p;
	*out_len = r;
	*transform = use_split ? GS_XFORM_SPLIT2 : GS_XFORM_NONE;
	return 1;
}

/* ------------------------------------------------------- decompression */

/* Decodes exactly len bytes from stored_len bytes; 0, or -1 with *why. */
static int decode(struct scratch *s, unsigned codec, const void *src, size_t stored_len, void *dst, size_t len,
		  const char **why)
{
	if (codec == GS_CODEC_LZ4) {
		if (stored_len > INT_MAX || len > INT_MAX) {
			*why = "longer than an lz4 block may be";
			return -1;
		}
		int r = lib.lz4_decompress(src, dst, (int)stored_len, (int)len);
		if (r < 0) {
			*why = "the lz4 block is damaged";
			return -1;
		}
		if ((size_t)r != len) {
			*why = "the lz4 block holds fewer bytes than the chunk";
			return -1;
		}
		return 0;
	}
	if (codec != GS_CODEC_ZSTD) {
		*why = "unknown codec";
		return -1;
	}
	if (lib.zstd_frame_size(src, stored_len) != stored_len) {
		*why = "the stored bytes are not exactly one zstd frame";
		return -1;
	}
	unsigned long long content = lib.zstd_content_size(src, stored_len);
	if (content != len) {
		*why = "the zstd frame's content size is not the chunk's length";
		return -1;
	}
	if (!s->dctx && !(s->dctx = lib.zstd_create_dctx()))
		return -2;
	size_t r = lib.zstd_decompress(s->dctx, dst, len, src, stored_len);
	if (lib.zstd_is_error(r)) {
		*why = "the zstd frame is damaged";
		return -1;
	}
	if (r != len) {
		*why = "the zstd frame holds fewer bytes than the chunk";
		return -1;
	}
	return 0;
}

int gs_chunk_decompress(unsigned codec, unsigned transform, const void *src, size_t stored_len, void *dst, size_t len,
			const char **why)
{
	*why = "";
	if (transform > GS_XFORM_MAX) {
		*why = "unknown transform";
		return -1;
	}
	if (codec != GS_CODEC_NONE && codec <= GS_CODEC_MAX && (*why = gs_codec_unavailable(codec)) != NULL)
		return -3;
	*why = "";
	struct scratch *s = scratch_get();
	if (!s)
		return -2;
	if (transform == GS_XFORM_NONE)
		return decode(s, codec, src, stored_len, dst, len, why);
	if (!reserve(&s->dec, len))
		return -2;
	int rc = decode(s, codec, src, stored_len, s->dec.p, len, why);
	if (!rc)
		gs_unsplit2(s->dec.p, dst, len);
	return rc;
}

void *gs_codec_stored_buffer(size_t len)
{
	struct scratch *s = scratch_get();
	return s && reserve(&s->stored, len ? len : 1) ? s->stored.p : NULL;
}
