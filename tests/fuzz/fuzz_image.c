/*
 * fuzz_image.c - libFuzzer harness for the image reader (src/image): an
 * image directory is built from the fuzz input, opened with gs_image_open,
 * described as `gpusnap inspect` does (text and JSON), and every chunk is
 * read with gs_image_read_chunk and checked with gs_image_verify.
 *
 * Input: one flags byte, one byte N, then records (u32 length, bytes;
 * fuzz.h): the first is manifest.img, the next N (at most 8) gpu-data-0000.img,
 * gpu-data-0001.img, ..., the rest files in cpu/ (core-0.img, ...; CRIU's
 * images). Flags: bit 0 repairs the manifest's framing (size, trailer, CRC)
 * and bit 1 each data file header's CRC after mutation, so the fuzzer gets
 * past the checksums to the parsers; bit 2 creates cpu/; bit 3 reads without
 * O_DIRECT; bit 4 makes the cpu/ files group-writable; bit 5 adds a symbolic
 * link cpu/pages-1.img -> ../manifest.img; bit 6 makes the data files
 * group-writable; bit 7 puts a symbolic link to the manifest where the last
 * data file would be. The directory lives under $TMPDIR (or /tmp), one per
 * process.
 *
 * Properties: the reader either refuses the image with GS_E_IMAGE,
 * GS_E_PERMISSION or GS_E_NO_SPACE and a message, or every chunk it lists
 * lies inside its allocation, and a chunk read succeeds exactly when
 * gs_image_verify says the image is good (ZERO chunks read as zeros).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "fuzz.h"
#include "image/crc32c.h"
#include "image/format.h"
#include "image/image.h"
#include "image/image_fs.h"
#include "image/manifest.h"

#define FLAG_FIX_MANIFEST 0x1u
#define FLAG_FIX_DATA_HEADERS 0x2u
#define FLAG_CPU_DIR 0x4u
#define FLAG_BUFFERED 0x8u
#define FLAG_CPU_WRITABLE 0x10u
#define FLAG_CPU_SYMLINK 0x20u
#define FLAG_DATA_WRITABLE 0x40u
#define FLAG_DATA_SYMLINK 0x80u
#define MAX_DATA_FILES 8
/* Chunks longer than this are not read into memory (only ZERO chunks can be: stored ones lie in the input). */
#define MAX_READ (16u << 20)

static char root[256];  /* per-process scratch directory */
static char image[300]; /* root/img, made anew for each input */

static void remove_root(void)
{
	if (root[0])
		gs_fs_remove_tree(AT_FDCWD, root);
}

void fuzz_setup(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(root, sizeof(root), "%s/gpusnap-fuzz-image-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("fuzz_image: mkdtemp");
		exit(1);
	}
	snprintf(image, sizeof(image), "%s/img", root);
	atexit(remove_root);
}

static void put_file(const char *name, const uint8_t *data, size_t len)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/%s", image, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(gs_fs_pwrite_full(fd, data, len, 0) == 0);
	close(fd);
}

/* cpu/ and what the flags and the remaining records put in it. */
static void put_cpu_dir(struct fuzz_in *in, uint8_t flags)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/%s", image, GS_FMT_CPU_DIR_NAME);
	FUZZ_ASSERT(mkdir(path, 0700) == 0);
	const uint8_t *rec;
	size_t len;
	for (int i = 0; i < MAX_DATA_FILES && fuzz_record(in, &rec, &len); i++) {
		char name[64];
		snprintf(name, sizeof(name), "%s/core-%d.img", GS_FMT_CPU_DIR_NAME, i);
		put_file(name, rec, len);
		snprintf(path, sizeof(path), "%s/%s", image, name);
		if (flags & FLAG_CPU_WRITABLE)
			FUZZ_ASSERT(chmod(path, 0620) == 0);
	}
	if (flags & FLAG_CPU_SYMLINK) {
		snprintf(path, sizeof(path), "%s/%s/pages-1.img", image, GS_FMT_CPU_DIR_NAME);
		FUZZ_ASSERT(symlink("../" GS_FMT_MANIFEST_NAME, path) == 0);
	}
}

static void fix_data_header(uint8_t *buf, size_t len)
{
	if (len < sizeof(struct gs_fmt_data_header))
		return;
	uint32_t crc = gs_crc32c(0, buf, offsetof(struct gs_fmt_data_header, crc32c));
	memcpy(buf + offsetof(struct gs_fmt_data_header, crc32c), &crc, 4);
}

/* Writes the image directory; false if the input holds no manifest record. */
static int build_image(const uint8_t *data, size_t size, uint8_t flags)
{
	gs_fs_remove_tree(AT_FDCWD, image);
	FUZZ_ASSERT(mkdir(image, 0700) == 0);
	struct fuzz_in in = { data, size };
	uint8_t ndata = fuzz_u8(&in);
	const uint8_t *rec;
	size_t len;
	if (!fuzz_record(&in, &rec, &len))
		return 0;
	uint8_t *copy = fuzz_copy(rec, len);
	if (flags & FLAG_FIX_MANIFEST)
		fuzz_fix_manifest_framing(copy, len);
	put_file(GS_FMT_MANIFEST_NAME, copy, len);
	free(copy);
	for (uint32_t i = 0; i < ndata && i < MAX_DATA_FILES && fuzz_record(&in, &rec, &len); i++) {
		char name[GS_FMT_DATA_NAME_MAX];
		gs_fmt_data_file_name(i, name);
		if (flags & FLAG_FIX_DATA_HEADERS && len >= sizeof(struct gs_fmt_data_header)) {
			uint8_t header[sizeof(struct gs_fmt_data_header)];
			memcpy(header, rec, sizeof(header));
			fix_data_header(header, sizeof(header));
			char path[400];
			put_file(name, rec, len);
			snprintf(path, sizeof(path), "%s/%s", image, name);
			int fd = open(path, O_WRONLY | O_CLOEXEC);
			FUZZ_ASSERT(fd >= 0 && gs_fs_pwrite_full(fd, header, sizeof(header), 0) == 0);
			close(fd);
		} else {
			put_file(name, rec, len);
		}
		char path[400];
		snprintf(path, sizeof(path), "%s/%s", image, name);
		if (flags & FLAG_DATA_WRITABLE)
			FUZZ_ASSERT(chmod(path, 0620) == 0);
		if ((flags & FLAG_DATA_SYMLINK) && i + 1 == ndata) {
			FUZZ_ASSERT(unlink(path) == 0);
			FUZZ_ASSERT(symlink(GS_FMT_MANIFEST_NAME, path) == 0);
		}
	}
	if (flags & FLAG_CPU_DIR)
		put_cpu_dir(&in, flags);
	return 1;
}

static void describe(struct gs_image *img)
{
	struct gs_json j;
	gs_json_init(&j);
	gs_image_describe_json(img, &j);
	FUZZ_ASSERT(gs_json_finish(&j) != NULL);
	gs_json_free(&j);
	FILE *devnull = fopen("/dev/null", "w");
	FUZZ_ASSERT(devnull);
	gs_image_describe_text(img, devnull);
	fclose(devnull);
	struct gs_image_totals t;
	gs_image_totals(img, &t);
	FUZZ_ASSERT(t.zero_chunks <= t.chunks && t.chunks == gs_image_chunk_count(img));
}

/* Reads every chunk; returns whether all reads passed their checksum. */
static int read_all(struct gs_image *img)
{
	int all_good = 1;
	for (size_t a = 0; a < gs_image_allocation_count(img); a++) {
		const struct gs_image_allocation *al = gs_image_allocation_at(img, a);
		FUZZ_ASSERT(gs_image_find_allocation(img, al->id) == (ptrdiff_t)a);
		size_t first, count;
		gs_image_allocation_chunks(img, a, &first, &count);
		for (size_t i = first; i < first + count; i++) {
			const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
			FUZZ_ASSERT(c && c->alloc_id == al->id && c->offset < al->size && c->length <= al->size - c->offset);
			if (c->length > MAX_READ)
				continue;
			void *buf = NULL;
			FUZZ_ASSERT(posix_memalign(&buf, GS_FMT_ALIGN, c->length) == 0);
			struct gs_err err = { 0 };
			int rc = gs_image_read_chunk(img, i, buf, &err);
			if (rc) {
				FUZZ_ASSERT(err.code == GS_E_IMAGE && err.msg[0]);
				FUZZ_ASSERT(!(c->flags & GS_CHUNK_F_ZERO));
				all_good = 0;
			} else if (c->flags & GS_CHUNK_F_ZERO) {
				for (size_t k = 0; k < c->length; k++)
					FUZZ_ASSERT(((uint8_t *)buf)[k] == 0);
			}
			free(buf);
		}
	}
	return all_good;
}

void fuzz_one(uint8_t flags, const uint8_t *rest, size_t len)
{
	if (!build_image(rest, len, flags))
		return;
	struct gs_image *img;
	struct gs_err err = { 0 };
	if (gs_image_open(image, &img, &err)) {
		FUZZ_ASSERT(err.code == GS_E_IMAGE || err.code == GS_E_PERMISSION || err.code == GS_E_NO_SPACE);
		FUZZ_ASSERT(err.msg[0] != '\0');
		return;
	}
	gs_image_set_direct_io(img, !(flags & FLAG_BUFFERED));
	describe(img);
	char cpu[512];
	struct gs_err cerr = { 0 };
	FUZZ_ASSERT((gs_image_cpu_dir(img, cpu, sizeof(cpu), &cerr) == 0) == gs_image_get_info(img)->cpu_state);
	int reads_good = read_all(img);
	int rc = gs_image_verify(img, 1, &err);
	int big = 0; /* a chunk read_all skipped: verify may see more than it did */
	for (size_t i = 0; i < gs_image_chunk_count(img); i++)
		big |= gs_image_chunk_at(img, i)->length > MAX_READ;
	if (!big)
		FUZZ_ASSERT((rc == 0) == reads_good);
	gs_image_close(img);
}
