/*
 * cpu_list.h - cpu-files.img, the list of CRIU's files in an image: every
 * regular file under cpu/, its size, and the CRC-32C of each piece of it
 * (format.h, docs/FORMAT.md section 11). The publisher writes it after CRIU
 * filled cpu/ (image_writer.c); the reader compares it with cpu/ when it
 * opens an image and checks the pieces' checksums in gs_image_verify
 * (image_reader.c). No file system access here except the scan of cpu/ and
 * reading a piece, both relative to a directory descriptor.
 *
 * Decoding treats the bytes as hostile, as manifest.c does: counts come from
 * the file's size, every reference is checked before use.
 */
#ifndef GPUSNAP_IMAGE_CPU_LIST_H
#define GPUSNAP_IMAGE_CPU_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* One regular file under cpu/: its path relative to cpu/ and its size. */
struct gs_cpu_file {
	const char *name;
	uint64_t size;
};

/* What is under cpu/ now: files in ascending strcmp order of name. */
struct gs_cpu_scan {
	struct gs_cpu_file *files;
	size_t nfiles;
	char *names; /* owned: the names, NUL-separated */
	size_t names_len, names_cap;
};

struct gs_cpu_piece {
	const char *name; /* the file's path relative to cpu/; points into the list */
	uint64_t file_size;
	uint64_t offset, length;
	uint32_t crc32c;
};

struct gs_cpu_list {
	uint8_t image_id[16];
	uint32_t manifest_crc32c;
	struct gs_cpu_piece *pieces; /* ascending (name, offset); a file's pieces tile [0, file_size) */
	size_t npieces;
	size_t nfiles;
	uint64_t bytes; /* sum of the files' sizes */
	void *raw;      /* owned: the decoded file, or the names of a built list */
};

/*
 * Walks cpu/ (cpu_fd; cpu_path names it in messages): every entry passes
 * gs_fs_check_entry (no symlink, FIFO, device or hard-linked file, trusted
 * owner and mode), at most GS_FS_MAX_DEPTH levels; regular files are listed.
 * Free s with gs_cpu_scan_free, also after a failure.
 */
int gs_cpu_scan(int cpu_fd, const char *cpu_path, struct gs_cpu_scan *s, struct gs_err *err);
void gs_cpu_scan_free(struct gs_cpu_scan *s);

/* A list of s's files cut into pieces of at most piece bytes, checksums still 0. Free with gs_cpu_list_free. */
int gs_cpu_list_from_scan(const struct gs_cpu_scan *s, const uint8_t image_id[16], uint32_t manifest_crc32c,
			  uint64_t piece, struct gs_cpu_list *l, struct gs_err *err);
/* The bytes of cpu-files.img (malloc'd into *buf). */
int gs_cpu_list_encode(const struct gs_cpu_list *l, void **buf, size_t *len, struct gs_err *err);
/* Parses and validates len bytes; takes buf (kept in l->raw, or freed on failure). GS_E_IMAGE without the file name. */
int gs_cpu_list_decode(void *buf, size_t len, struct gs_cpu_list *l, struct gs_err *err);
void gs_cpu_list_free(struct gs_cpu_list *l);

/*
 * Checks that cpu/ holds exactly the listed files with their sizes: the
 * first extra, missing or resized file is named (GS_E_IMAGE). image names
 * the image in messages.
 */
int gs_cpu_list_match(const struct gs_cpu_list *l, const struct gs_cpu_scan *s, const char *image,
		      struct gs_err *err);

/*
 * Reads piece p from cpu_fd (reopened by name without following symlinks,
 * checked as by gs_cpu_scan, of the listed size) through buf (buf_size
 * bytes) and puts its CRC-32C in *crc. Fault point GS_FI_IMAGE_READ.
 * Errors: GS_E_IMAGE (changed, short, EIO), GS_E_PERMISSION, GS_E_FAILURE.
 */
int gs_cpu_piece_crc(int cpu_fd, const char *image, const struct gs_cpu_piece *p, void *buf, size_t buf_size,
		     uint32_t *crc, struct gs_err *err);

#endif
