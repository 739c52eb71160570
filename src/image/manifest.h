/*
 * manifest.h - the manifest as data: encoding it to bytes, decoding and
 * validating bytes (no file system access; image_writer.c and
 * image_reader.c do the I/O). Also the names and headers of data files.
 *
 * Writer and reader apply the same rules (gs_manifest_validate), so an image
 * the writer commits is one the reader accepts, and a dumper bug (a missing
 * chunk, an overlap) fails the dump instead of the restore.
 */
#ifndef GPUSNAP_IMAGE_MANIFEST_H
#define GPUSNAP_IMAGE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "image/format.h"
#include "image/image.h"

struct gs_manifest {
	struct gs_image_info info;
	struct gs_image_data_file *files;
	size_t nfiles;
	struct gs_image_gpu *gpus; /* ascending index */
	size_t ngpus;
	struct gs_image_allocation *allocs; /* ascending id */
	size_t nallocs;
	struct gs_image_chunk *chunks; /* ascending (alloc_id, offset) */
	size_t nchunks;
	struct gs_image_kv *meta;
	size_t nmeta;
	bool has_parent; /* an incremental image: parent is set (version 2) */
	struct gs_image_parent parent;
	bool has_store; /* an image with STORED chunks: store is set (version 2) */
	struct gs_image_store store;
	/* Set by validate: chunks of allocs[i] are [alloc_chunk_start[i], alloc_chunk_start[i + 1]). */
	size_t *alloc_chunk_start;
	/* Set by decode: the manifest bytes that strings and blobs point into. */
	void *raw;
	size_t raw_len;
};

/*
 * Serializes m (strings NULL are written as "") in format version
 * m->info.format_version (below 2, 0 included: version 1). Checks only what encoding
 * needs (the size limit), so tests can craft hostile manifests with it; the
 * writer validates first. *buf is malloc'd.
 */
int gs_manifest_encode(const struct gs_manifest *m, void **buf, size_t *len, struct gs_err *err);
/*
 * Parses and validates len bytes. Takes ownership of buf (kept in m->raw on
 * success, freed on failure). Errors are GS_E_IMAGE with a message saying
 * what is wrong (without the file name; the caller adds it).
 */
int gs_manifest_decode(void *buf, size_t len, struct gs_manifest *m, struct gs_err *err);
/*
 * The rules of a consistent manifest: bounds, sort orders, unique ids,
 * every allocation exactly covered by its chunks, payloads inside their
 * data files. Fills m->alloc_chunk_start. GS_E_IMAGE on failure.
 */
int gs_manifest_validate(struct gs_manifest *m, struct gs_err *err);
/* Frees what decode/validate allocated (arrays and raw), not strings the caller owns. */
void gs_manifest_free(struct gs_manifest *m);
/* The CRC-32C in a decoded manifest's trailer (what cpu-files.img names its manifest by). */
uint32_t gs_manifest_crc32c(const struct gs_manifest *m);
/*
 * Reads and decodes dir_fd's manifest.img (image_reader.c: opened as every
 * image file is, image_fs.h gs_fs_open_file). dir_path names the image in
 * messages. Free m with gs_manifest_free.
 */
int gs_manifest_read_at(int dir_fd, const char *dir_path, struct gs_manifest *m, struct gs_err *err);


/* "gpu-data-0007.img" for index 7. */
void gs_fmt_data_file_name(uint32_t index, char name[GS_FMT_DATA_NAME_MAX]);
/* True if name is exactly a generated data file name; its index in *index. Rejects '/', "..", NUL, anything else. */
bool gs_fmt_data_file_name_parse(const char *name, uint32_t *index);
/* Fills the first GS_FMT_ALIGN bytes of a data file (zero-padded header) of format `version`. */
void gs_fmt_data_header_build(void *block, uint32_t version, const uint8_t image_id[16], uint32_t file_index);
/* Checks a data file header read from disk (of format `version`, the manifest's); GS_E_IMAGE naming `name` on failure. */
int gs_fmt_data_header_check(const void *block, size_t len, uint32_t version, const uint8_t image_id[16],
			     uint32_t file_index, const char *name, struct gs_err *err);

#endif
