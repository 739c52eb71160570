/*
 * make_seeds.c - writes the seed corpus of every fuzz harness from real
 * objects: images written by the image writer (the unit tests' standard
 * image and smaller ones), frames built with the protocol's builders as the
 * CLI and the agent build them, real CRIU logs and version output, and
 * command lines of the kind users type.
 *
 *   make_seeds OUT_DIR CRIU_LOG_DIR
 *
 * writes OUT_DIR/<harness>/<seed> (harness: image, manifest, protocol,
 * criu_log, options, plugin_config), each in its harness's input layout (see each
 * fuzz_*.c). CRIU_LOG_DIR holds captured CRIU logs (tests/fuzz/criu-logs).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/protocol.h"
#include "image/image.h"
#include "image/store.h"
#include "image/image_fs.h"
#include "image/manifest.h"
#include "image_test_util.h" /* tests/unit: the standard image */

static const char *out_dir;

static void die(const char *what)
{
	fprintf(stderr, "make_seeds: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A growable byte buffer. */
struct bytes {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct bytes *b, const void *data, size_t len)
{
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		if (!(b->p = realloc(b->p, cap)))
			die("out of memory");
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
}

static void put_u8(struct bytes *b, uint8_t v)
{
	put(b, &v, 1);
}

static void put_record(struct bytes *b, const void *data, size_t len)
{
	uint8_t n[4] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24) };
	put(b, n, 4);
	put(b, data, len);
}

static void write_seed(const char *harness, const char *name, const void *data, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", out_dir, harness);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		die(path);
	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, harness, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || gs_fs_pwrite_full(fd, data, len, 0))
		die(path);
	close(fd);
}

/* ------------------------------------------------------------------ images */

/* Packs a committed image directory into fuzz_image's layout and the manifest into fuzz_manifest's. */
static void seed_image(const char *dir, const char *name, uint8_t extra_flags)
{
	char path[4200];
	size_t len;
	path_join(path, sizeof(path), dir, GS_FMT_MANIFEST_NAME);
	unsigned char *manifest = slurp(path, &len);
	if (!manifest)
		die(path);
	struct bytes img = { 0 };
	put_u8(&img, 0x3 | extra_flags); /* repair checksums after mutation */
	put_u8(&img, 0);                 /* the number of data files, set below */
	put_record(&img, manifest, len);
	uint8_t ndata = 0;
	for (uint32_t i = 0;; i++) {
		char file[GS_FMT_DATA_NAME_MAX];
		size_t flen;
		gs_fmt_data_file_name(i, file);
		path_join(path, sizeof(path), dir, file);
		unsigned char *data = slurp(path, &flen);
		if (!data)
			break;
		put_record(&img, data, flen);
		free(data);
		ndata++;
	}
	img.p[1] = ndata;
	if (extra_flags & 0x4) { /* cpu/: a file as CRIU writes them (a protobuf image: magic, then entries) */
		static const uint8_t core[] = { 0x54, 0x4e, 0x51, 0x58, 0x31, 0x9d, 0x01, 0x00, 4, 0, 0, 0, 8, 1, 16, 2 };
		put_record(&img, core, sizeof(core));
	}
	write_seed("image", name, img.p, img.len);
	img.p[0] = extra_flags; /* the same bytes with the checksums checked as they are */
	char raw[128];
	snprintf(raw, sizeof(raw), "%s-raw", name);
	write_seed("image", raw, img.p, img.len);
	free(img.p);

	struct bytes m = { 0 };
	put_u8(&m, 0x1);
	put(&m, manifest, len);
	write_seed("manifest", name, m.p, m.len);
	m.p[0] = 0;
	write_seed("manifest", raw, m.p, m.len);
	free(m.p);
	free(manifest);
}

/* A small image: short allocations in several data files, a blob, ZERO and NO_DATA allocations. */
static int write_small_image(const char *dir, bool cpu, struct gs_err *err)
{
	struct gs_image_writer_opts o = { .source_pid = 4242, .source_comm = "python3", .how = "agent",
					  .max_data_file_size = 3 * GS_FMT_ALIGN, .no_direct_io = true };
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, &o, &w, err);
	if (rc)
		return rc;
	struct gs_image_gpu g = { .index = 0, .name = "NVIDIA H100 80GB HBM3", .cc_major = 9, .total_memory = 85ULL << 30 };
	memset(g.uuid, 0x5a, sizeof(g.uuid));
	static const uint8_t blob[] = { 'v', 'm', 'm', 0, 1, 2, 3 };
	const struct gs_image_allocation allocs[] = {
		{ .id = 1, .va = 0x7f0000000000ULL, .size = 100, .kind = GS_ALLOC_KIND_DEVICE },
		{ .id = 2, .va = 0x7f0000200000ULL, .size = 300, .kind = GS_ALLOC_KIND_APP_VMM, .blob = blob,
		  .blob_len = sizeof(blob) },
		{ .id = 3, .va = 0x7f0000400000ULL, .size = 1 << 20, .kind = GS_ALLOC_KIND_POOL },
		{ .id = 4, .va = 0x7f0000800000ULL, .size = 4096, .kind = GS_ALLOC_KIND_DEVICE, .flags = GS_ALLOC_F_NO_DATA },
		{ .id = 5, .va = 0x7f0000a00000ULL, .size = 0, .kind = GS_ALLOC_KIND_DEVICE },
	};
	uint8_t data[300];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	if ((rc = gs_image_writer_add_gpu(w, &g, err)))
		goto fail;
	for (size_t i = 0; i < sizeof(allocs) / sizeof(allocs[0]); i++)
		if ((rc = gs_image_writer_add_allocation(w, &allocs[i], err)))
			goto fail;
	if ((rc = gs_image_write_chunk(w, 1, 0, data, 100, err)) || (rc = gs_image_write_chunk(w, 2, 0, data, 150, err)) ||
	    (rc = gs_image_write_chunk(w, 2, 150, data + 150, 150, err)) ||
	    (rc = gs_image_write_zero_chunk(w, 3, 0, 1 << 20, err)) ||
	    (rc = gs_image_writer_set_metadata(w, "model", "tiny", err)))
		goto fail;
	if (cpu) {
		char cpu_path[4200];
		if ((rc = gs_image_writer_cpu_dir(w, cpu_path, sizeof(cpu_path), err)))
			goto fail;
	}
	return image_test_writer_commit(w, err);
fail:
	image_test_writer_abort(w);
	return rc;
}

/*
 * A compressed image (format version 2) with codec: a chunk of text (compressed as it is), two of
 * bf16-like data (byte-plane split), one of noise (stored raw) and a ZERO chunk.
 */
static int write_compressed_image(const char *dir, uint8_t codec, struct gs_err *err)
{
	struct gs_image_writer_opts o = { .source_pid = 4242, .source_comm = "python3", .how = "agent",
					  .no_direct_io = true, .compress_codec = codec };
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, &o, &w, err);
	if (rc)
		return rc;
	enum { CH = 64 << 10 };
	static uint8_t data[4 * CH];
	static const char text[] = "weights of layer 7, head 3; ";
	uint64_t x = 0x2545f4914f6cdd1dULL;
	for (size_t i = 0; i < CH; i++)
		data[i] = (uint8_t)text[(i + i / 509) % (sizeof(text) - 1)];
	for (size_t i = CH; i < 3 * CH; i += 2) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[i] = (uint8_t)x;
		data[i + 1] = (uint8_t)(0x3c + (x >> 8) % 3);
	}
	for (size_t i = 3 * CH; i < 4 * CH; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[i] = (uint8_t)x;
	}
	struct gs_image_gpu g = { .index = 0, .name = "NVIDIA H200", .cc_major = 9, .total_memory = 141ULL << 30 };
	struct gs_image_allocation a = { .id = 1, .va = 0x7f0000000000ULL, .size = 5 * CH, .kind = GS_ALLOC_KIND_DEVICE };
	if ((rc = gs_image_writer_add_gpu(w, &g, err)) || (rc = gs_image_writer_add_allocation(w, &a, err)))
		goto fail;
	for (uint64_t k = 0; k < 4; k++)
		if ((rc = gs_image_write_chunk(w, 1, k * CH, data + k * CH, CH, err)))
			goto fail;
	if ((rc = gs_image_write_zero_chunk(w, 1, 4 * CH, CH, err)))
		goto fail;
	return image_test_writer_commit(w, err);
fail:
	image_test_writer_abort(w);
	return rc;
}

/*
 * An incremental image (format version 2) of an allocation in two chunks: one stored, one left in a
 * parent named "parent" (which the fuzzer's directory lacks: the chain's refusal is what it reaches).
 */
static int write_incremental_image(const char *dir, struct gs_err *err)
{
	static const struct gs_image_parent parent = { .image_id = { 1, 2, 3 }, .manifest_crc32c = 0x1234,
						       .path = "parent" };
	struct gs_image_writer_opts o = { .source_pid = 4242, .source_comm = "python3", .how = "agent",
					  .no_direct_io = true, .parent = &parent };
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, &o, &w, err);
	if (rc)
		return rc;
	uint8_t data[4096];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 5 + 3);
	struct gs_image_gpu g = { .index = 0, .name = "NVIDIA H200", .cc_major = 9, .total_memory = 141ULL << 30 };
	struct gs_image_allocation a = { .id = 1, .va = 0x7f0000000000ULL, .size = 2 * sizeof(data),
					 .kind = GS_ALLOC_KIND_DEVICE };
	if ((rc = gs_image_writer_add_gpu(w, &g, err)) || (rc = gs_image_writer_add_allocation(w, &a, err)) ||
	    (rc = gs_image_write_parent_chunk(w, 1, 0, sizeof(data), 0, 0xabcdef01u, 0x1111, 0x2222, err)) ||
	    (rc = gs_image_write_chunk_fp(w, 1, sizeof(data), data, sizeof(data), 0x3333, 0x4444, err)))
		goto fail;
	return image_test_writer_commit(w, err);
fail:
	image_test_writer_abort(w);
	return rc;
}

/*
 * An image written into a chunk store (format version 2: a store section, STORED chunks) at
 * store_dir: one chunk in the store, one ZERO. The fuzzer's directory holds the image alone, so the
 * manifest's store record and STORED chunks are parsed and validated, and the store's absence is the
 * refusal it reaches after that.
 */
static int write_stored_image(const char *dir, const char *store_dir, struct gs_err *err)
{
	struct gs_store *st;
	char ref[64];
	int rc = gs_store_open(store_dir, true, &st, err);
	if (rc)
		return rc;
	if ((rc = gs_store_ref_create(st, dir, ref, sizeof(ref), err))) {
		gs_store_close(st);
		return rc;
	}
	struct gs_image_writer_opts o = { .source_pid = 4242, .source_comm = "python3", .how = "agent",
					  .no_direct_io = true, .store = st, .store_rec = "store" };
	struct gs_image_writer *w;
	if ((rc = image_test_writer_open(dir, &o, &w, err))) {
		gs_store_close(st);
		return rc;
	}
	uint8_t data[4096];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 11 + 1);
	struct gs_image_gpu g = { .index = 0, .name = "NVIDIA H200", .cc_major = 9, .total_memory = 141ULL << 30 };
	struct gs_image_allocation a = { .id = 1, .va = 0x7f0000000000ULL, .size = 2 * sizeof(data),
					 .kind = GS_ALLOC_KIND_DEVICE };
	if ((rc = gs_image_writer_add_gpu(w, &g, err)) || (rc = gs_image_writer_add_allocation(w, &a, err)) ||
	    (rc = gs_image_write_chunk(w, 1, 0, data, sizeof(data), err)) ||
	    (rc = gs_image_write_zero_chunk(w, 1, sizeof(data), sizeof(data), err))) {
		image_test_writer_abort(w);
		gs_store_close(st);
		return rc;
	}
	rc = image_test_writer_commit(w, err);
	gs_store_close(st);
	return rc;
}

static int write_empty_image(const char *dir, struct gs_err *err)
{
	struct gs_image_writer *w;
	int rc = image_test_writer_open(dir, NULL, &w, err);
	return rc ? rc : image_test_writer_commit(w, err);
}

/* Where an image NAME is written: a path under the scratch root with nothing there yet. */
static const char *image_path(const char *name)
{
	const char *dir = scratch_dir(name);
	rmdir(dir);
	return dir;
}

/* An image that could not be written ends the run: its seeds would be missing. */
static void check_written(int rc, const char *what, const struct gs_err *err)
{
	if (rc) {
		fprintf(stderr, "make_seeds: %s: %s\n", what, err->msg);
		exit(1);
	}
}

static void seed_images(void)
{
	scratch_init("fuzz-seeds");
	struct gs_err err = { 0 };
	const char *std = image_path("std");
	check_written(write_std_image(std, NULL, 7, &err), "standard image", &err);
	seed_image(std, "std", 0);
	const char *small = image_path("small");
	check_written(write_small_image(small, false, &err), "small image", &err);
	seed_image(small, "small", 0);
	const char *cpu = image_path("cpu");
	check_written(write_small_image(cpu, true, &err), "small image with cpu/", &err);
	seed_image(cpu, "small-cpu", 0x4);
	seed_image(cpu, "small-cpu-buffered", 0x4 | 0x8);
	seed_image(cpu, "small-cpu-untrusted", 0x4 | 0x10 | 0x20);
	seed_image(small, "small-data-untrusted", 0x40);
	seed_image(small, "small-data-symlink", 0x80);
	const char *lz4 = image_path("lz4");
	check_written(write_compressed_image(lz4, GS_CODEC_LZ4, &err), "lz4-compressed image", &err);
	seed_image(lz4, "compressed-lz4", 0);
	const char *zstd = image_path("zstd");
	check_written(write_compressed_image(zstd, GS_CODEC_ZSTD, &err), "zstd-compressed image", &err);
	seed_image(zstd, "compressed-zstd", 0);
	const char *incr = image_path("incremental");
	check_written(write_incremental_image(incr, &err), "incremental image", &err);
	seed_image(incr, "incremental", 0);
	const char *stored = image_path("stored");
	char store_dir[1024];
	snprintf(store_dir, sizeof(store_dir), "%s/store", scratch_root);
	check_written(write_stored_image(stored, store_dir, &err), "stored image", &err);
	seed_image(stored, "stored", 0);
	const char *empty = image_path("empty");
	check_written(write_empty_image(empty, &err), "empty image", &err);
	seed_image(empty, "empty", 0);
	scratch_cleanup();
}

/* ---------------------------------------------------------------- protocol */

static void seed_frame(const char *name, struct gs_msg *m, uint8_t flags)
{
	const void *frame;
	size_t len;
	struct gs_err err = { 0 };
	if (gs_msg_finish(m, &frame, &len, &err)) {
		fprintf(stderr, "make_seeds: frame %s: %s\n", name, err.msg);
		exit(1);
	}
	struct bytes b = { 0 };
	put_u8(&b, flags | 0x2);
	put(&b, frame, len);
	write_seed("protocol", name, b.p, b.len);
	char raw[128];
	snprintf(raw, sizeof(raw), "%s-raw", name);
	b.p[0] = flags;
	write_seed("protocol", raw, b.p, b.len);
	free(b.p);
	gs_msg_free(m);
}

static void seed_protocol(void)
{
	const uint8_t from_cli = 0x1;
	struct gs_msg m;
	/* requests, as src/cli/agent_client.c builds them */
	gs_msg_init(&m, GS_MSG_HELLO);
	seed_frame("hello", &m, from_cli);
	gs_msg_init(&m, GS_MSG_SUSPEND);
	gs_msg_add_f64(&m, GS_F_TIMEOUT, 60);
	gs_msg_add_u64(&m, GS_F_FLAGS, GS_SUSPEND_KEEP_CONTEXT);
	seed_frame("suspend", &m, from_cli);
	gs_msg_init(&m, GS_MSG_RESUME);
	gs_msg_add_f64(&m, GS_F_TIMEOUT, 0);
	gs_msg_add_u64(&m, GS_F_FLAGS, 0);
	gs_msg_add_str(&m, GS_F_DIR, "/var/lib/gpusnap/.model.tmp-4242-abcdef");
	seed_frame("resume", &m, from_cli);
	gs_msg_init(&m, GS_MSG_DUMP);
	gs_msg_add_f64(&m, GS_F_TIMEOUT, 30.5);
	gs_msg_add_u64(&m, GS_F_FLAGS, GS_DUMP_DROP_STAGING | GS_DUMP_RUNNING);
	gs_msg_add_str(&m, GS_F_DIR, "/tmp/img");
	seed_frame("dump", &m, from_cli);
	gs_msg_init(&m, GS_MSG_STATUS);
	seed_frame("status", &m, from_cli);
	gs_msg_init(&m, GS_MSG_PREPARE);
	seed_frame("prepare", &m, from_cli);
	/* replies, as src/agent builds them */
	gs_msg_init(&m, GS_MSG_INFO);
	gs_msg_add_u64(&m, GS_F_PID, 4242);
	gs_msg_add_str(&m, GS_F_VERSION, "0.1.0");
	gs_msg_add_u64(&m, GS_F_ALLOC_COUNT, 12);
	gs_msg_add_u64(&m, GS_F_ALLOC_BYTES, 8ULL << 30);
	gs_msg_add_u64(&m, GS_F_CAPS, GS_CAP_SUSPEND | GS_CAP_DUMP | GS_CAP_DUMP_RUNNING | GS_CAP_PREPARE);
	gs_msg_add_u64(&m, GS_F_STATE, GS_AGENT_SUSPENDED);
	gs_msg_add_u64(&m, GS_F_UNMANAGED_COUNT, 1);
	gs_msg_add_u64(&m, GS_F_UNMANAGED_BYTES, 1 << 20);
	gs_msg_add_str(&m, GS_F_UNMANAGED_DETAIL, "managed 1 allocations 1.00 MiB\n");
	gs_msg_add_u64(&m, GS_F_DEVICE_COUNT, 2);
	seed_frame("info", &m, 0);
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_set_result(&m, 0, "%s", "ok");
	gs_msg_add_named_f64(&m, GS_F_TIMING, "quiesce", 0.0125);
	gs_msg_add_named_f64(&m, GS_F_TIMING, "copy_out", 0.19);
	gs_msg_add_named_u64(&m, GS_F_COUNTER, "bytes", 8ULL << 30);
	gs_msg_add_named_u64(&m, GS_F_COUNTER, "ring_bytes", 64 << 20);
	seed_frame("result-ok", &m, 0);
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_set_result(&m, 9, "timed out after %.1f s waiting for the app's GPU work", 60.0);
	seed_frame("result-error", &m, 0);
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_u64(&m, GS_F_CODE, 0);
	gs_msg_add_u64(&m, 999, 7); /* a tag from the future */
	gs_msg_add_bytes(&m, 1000, "\0\1\2", 3);
	gs_msg_add_str(&m, GS_F_MESSAGE, "");
	gs_msg_add_bytes(&m, 1001, NULL, 0);
	seed_frame("result-unknown-tags", &m, 0);
}

/* ---------------------------------------------------------------- criu text */

static void seed_text(const char *harness, const char *name, uint8_t flags, const char *text, size_t len)
{
	struct bytes b = { 0 };
	put_u8(&b, flags);
	put(&b, text, len);
	write_seed(harness, name, b.p, b.len);
	free(b.p);
}

static void seed_criu(const char *log_dir)
{
	static const char *const texts[][2] = {
		{ "version-4.1.1", "Version: 4.1.1\n" },
		{ "version-git", "Version: 4.2\nGitID: v4.2-12-gabcdef\n" },
		{ "restore-busy", "(00.034747) Error (criu/cr-restore.c:1230): Can't fork for 6101: File exists\n"
				  "(00.034782) Error (criu/cr-restore.c:2320): Restoring FAILED." },
		{ "pie-error", "pie: 6307: Error (criu/pie/restorer.c:1500): Unable to map: Cannot allocate memory\n" },
		{ "dump-args", "--shell-job\n--file-locks\n--tcp-established\n" },
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		seed_text("criu_log", texts[i][0], 40, texts[i][1], strlen(texts[i][1]));
	DIR *d = opendir(log_dir);
	if (!d)
		die(log_dir);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[4200];
		size_t len;
		path_join(path, sizeof(path), log_dir, de->d_name);
		unsigned char *text = slurp(path, &len);
		if (!text)
			die(path);
		seed_text("criu_log", de->d_name, 60, (const char *)text, len);
		free(text);
	}
	closedir(d);
}

/* ----------------------------------------------------------------- options */

static void seed_options(void)
{
	/* NUL-separated arguments, as users type them to the subcommands */
	static const struct {
		const char *name;
		uint8_t flags;
		const char *args;
		size_t len;
	} cmds[] = {
#define ARGS(s) s, sizeof(s) - 1
		{ "suspend", 0, ARGS("--timeout\0" "30\0" "4242") },
		{ "short-joined", 0, ARGS("-t2.5\0" "-vq\0" "4242") },
		{ "dump", 0, ARGS("--image=/var/lib/img\0" "--reserve\0" "40G\0" "-x\0" "--tcp-close\0" "-x\0" "-v4\0" "4242") },
		{ "sizes", 0, ARGS("--reserve=512MiB\0" "--reserve=1T\0" "--reserve=3KB\0" "--reserve=18446744073709551615") },
		{ "run", 1, ARGS("--reserve=2G\0" "python3\0" "-u\0" "server.py\0" "--port\0" "8000") },
		{ "dashdash", 0, ARGS("-j\0" "4\0" "--\0" "--timeout\0" "-h") },
		{ "help", 0, ARGS("-h") },
		{ "bad", 0, ARGS("--timeout=-1\0" "--jobs=x\0" "--verbose=1\0" "--nope") },
		{ "fault-spec", 0, ARGS("image-write@3+=fail:ENOSPC,criu-run=kill\0" "--timeout\0" "1e3") },
		{ "fault-hold", 0, ARGS("agent-quiesce@2=hold:1\0" "-t\0" "inf") },
#undef ARGS
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		seed_text("options", cmds[i].name, cmds[i].flags, cmds[i].args, cmds[i].len);
}

/* ----------------------------------------------------------------- plugin_config */

static void seed_plugin_config(void)
{
	/* files as docs/CRIU.md shows them, and a few refused ones */
	static const char *const texts[][2] = {
		{ "every-key", "# gpusnap_criu.so\nmap = 0=1, 1=0\nno_verify = no\ndriver = yes\ntimeout = 2.5\n"
			       "leave_running = off\n" },
		{ "uuid-map", "map=GPU-8f3a2b1c-0000-4000-8000-00000000abcd=1 1=0\r\ntimeout=0\n" },
		{ "comments", "\n   # indented\n\t\n#map = x\n" },
		{ "unknown-key", "colour = blue\n" },
		{ "twice", "timeout = 1\ntimeout = 2\n" },
		{ "bad-values", "no_verify = 2\ntimeout = soon\nmap = 0=1=2\n" },
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		seed_text("plugin_config", texts[i][0], 0, texts[i][1], strlen(texts[i][1]));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: make_seeds OUT_DIR CRIU_LOG_DIR\n");
		return 2;
	}
	(void)tests_passed; /* test.h's counters come with the standard image's helpers */
	(void)tests_failed;
	out_dir = argv[1];
	if (mkdir(out_dir, 0700) < 0 && errno != EEXIST)
		die(out_dir);
	seed_images();
	seed_protocol();
	seed_criu(argv[2]);
	seed_options();
	seed_plugin_config();
	printf("make_seeds: seeds written to %s\n", out_dir);
	return 0;
}
