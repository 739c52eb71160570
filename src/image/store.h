/*
 * store.h - the chunk store shared by images (dump --store, FORMAT.md 4.12):
 * opening and creating one, its objects (one chunk each, named by content)
 * written once and reused by every dump that meets the same bytes, the ref
 * files by which dumps register in it, reading an object back for an image,
 * and `gpusnap gc`'s collection of what no image refers to.
 *
 * Locking (FORMAT.md 9.1): a dump holds a shared flock on its ref file for
 * its lifetime, and a shared flock on STORE/lock around each "append the
 * object's name to the ref; find or create the object" step; gc holds
 * STORE/lock exclusively for its whole scan and delete. So an object gc
 * deletes is never one a dump has just decided to reuse.
 */
#ifndef GPUSNAP_IMAGE_STORE_H
#define GPUSNAP_IMAGE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "image/format.h"

/* What an object holds: its header's fields. */
struct gs_store_object {
	uint64_t length, stored_length;
	uint64_t fp_lo, fp_hi;
	uint32_t crc32c, stored_crc32c;
	uint8_t codec, transform;
};

/* The object's name for a chunk ("<fp_hi><fp_lo>-<crc>-<length>", hex), and its path under the store. */
void gs_store_object_name(uint64_t fp_lo, uint64_t fp_hi, uint32_t crc32c, uint64_t length,
			  char name[GS_STORE_OBJECT_NAME_MAX]);
/* "objects/XX/<name>" into path (n bytes). */
void gs_store_object_path(const char *name, char *path, size_t n);
/* True if name is exactly an object name; its parts into the pointers. */
bool gs_store_object_name_parse(const char *name, uint64_t *fp_lo, uint64_t *fp_hi, uint32_t *crc32c,
				uint64_t *length);
/* The header of an object holding o. */
void gs_store_object_header_build(struct gs_fmt_object_header *h, const struct gs_store_object *o);
/*
 * Checks len bytes read from an object's start: magic, version, the
 * header's CRC, and fields that agree with each other (as a chunk record's
 * must). 0 with *o filled, or -1 with *why (static) saying what is wrong.
 */
int gs_store_object_header_parse(const void *buf, size_t len, struct gs_store_object *o, uint32_t *header_size,
				 const char **why);

struct gs_store;

/*
 * Opens the store at path: the directory and every one above it by the
 * image trust rules (FORMAT.md 8; GS_E_PERMISSION naming the one that
 * fails), its store.img (magic, version, CRC; anything else is "not a
 * store"). With create, a missing directory (its parent must exist) or an
 * empty one is made a store first (0700, a new random id); without, an
 * absent one is "no store". "Not a store" is GS_E_USAGE with create (the
 * user named it), GS_E_IMAGE without (an image named it).
 */
int gs_store_open(const char *path, bool create, struct gs_store **s, struct gs_err *err);
void gs_store_close(struct gs_store *s);
/* The path it was opened at, and its id. */
const char *gs_store_path(const struct gs_store *s);
const uint8_t *gs_store_id(const struct gs_store *s);

/*
 * Registers a dump in the store: creates refs/<pid>-<random>.ref naming
 * image (the absolute path the image will be published at), durable, and
 * holds a shared flock on it until gs_store_close; its file name goes to
 * name (n bytes) for the agent (gs_store_ref_attach). One ref per store
 * handle.
 */
int gs_store_ref_create(struct gs_store *s, const char *image, char *name, size_t n, struct gs_err *err);
/* Opens the ref a gpusnap created (its name), holding a shared flock on it too until gs_store_close. */
int gs_store_ref_attach(struct gs_store *s, const char *name, struct gs_err *err);
/* Appends a new image line (the last one counts): the dump's image went elsewhere (kept under another name). */
int gs_store_ref_set_image(struct gs_store *s, const char *image, struct gs_err *err);
/* Removes the ref (a dump that published nothing): gc would remove it, this is sooner. */
void gs_store_ref_remove(struct gs_store *s);

/*
 * Finds the object of a chunk known by its fingerprint and length only (the
 * agent's GPU fingerprint, before any copy): 1 with its CRC-32C in *crc32c,
 * 0 where the store has none. Nothing is claimed: see gs_store_claim.
 */
int gs_store_find(struct gs_store *s, uint64_t fp_lo, uint64_t fp_hi, uint64_t length, uint32_t *crc32c);
/*
 * Under the shared lock: appends each of the n object names to the ref,
 * then checks each one is there; present[i] says which (gc cannot take
 * them from now on: the ref lists them). Needs a ref.
 */
int gs_store_claim(struct gs_store *s, size_t n, char (*names)[GS_STORE_OBJECT_NAME_MAX], bool *present,
		   struct gs_err *err);
/*
 * Under the shared lock: appends the object's name to the ref, then reuses
 * the object if the store has it (*created false) or writes it (header,
 * then o->stored_length payload bytes; under tmp/, fsynced, renamed in,
 * never half visible; *created true). Thread-safe. A full disk is
 * GS_E_NO_SPACE naming the store; nothing is left half-written. Fault point
 * GS_FI_IMAGE_WRITE at each write.
 */
int gs_store_put(struct gs_store *s, const struct gs_store_object *o, const void *payload, bool *created,
		 struct gs_err *err);
/* fsync of the object directories gs_store_put renamed objects into (before an image naming them is sealed). */
int gs_store_sync(struct gs_store *s, struct gs_err *err);

/*
 * The object for want (length, crc32c, fingerprint): present, trusted, its
 * header agreeing with want and its size with the header. GS_E_IMAGE saying
 * what is wrong (the caller names the chunk); the object's path in path.
 */
int gs_store_check_object(struct gs_store *s, const struct gs_store_object *want, char *path, size_t n,
			  struct gs_err *err);
/*
 * Reads the object for want into buf (want->length bytes), checking as a
 * data file's chunk is checked: header, the stored bytes' CRC, then (after
 * decompressing) the chunk's CRC. GS_E_IMAGE naming the object on any
 * mismatch. Thread-safe. Fault point GS_FI_IMAGE_READ.
 */
int gs_store_read_object(struct gs_store *s, const struct gs_store_object *want, void *buf, struct gs_err *err);

/* ---------------------------------------------------------------- gc */

/* What gc does with a ref (gs_store_gc_ref_fate): the decision, apart from the I/O. */
enum gs_store_ref_fate {
	GS_REF_KEEP_LIVE,  /* its dump runs (its flock is held): it keeps the objects it lists and its image's */
	GS_REF_KEEP_IMAGE, /* its image, or what its dump left beside it, names this store: their objects stay */
	GS_REF_REMOVE,     /* dead, its image gone or naming another store, nothing left: removed with its temp objects */
};
/*
 * live: someone holds the ref's flock; image_names_store: the directory
 * its last image line names holds an image whose store record names this
 * store (its id); dup: another ref kept for that image already; leftover:
 * beside that directory, a complete image its dump did not publish (the
 * temporary directory of a dump that died, or a kept image) names this store.
 */
enum gs_store_ref_fate gs_store_gc_ref_fate(bool live, bool image_names_store, bool dup, bool leftover);

struct gs_store_gc_result {
	uint64_t objects, objects_removed, bytes_removed;
	uint64_t refs, refs_removed;
	uint64_t temp_removed; /* temporary objects of dead dumps */
	uint64_t images;       /* images that keep objects */
};
/*
 * `gpusnap gc STORE`: under STORE/lock held exclusively (waited for at most
 * wait_s seconds: GS_E_STATE after), decides each ref's fate, keeps every
 * object a live ref lists or a kept image's manifest names, and removes the
 * rest (with dry_run: only counts them). Each removed object's name, and
 * each removed ref's image, is written to list (if non-NULL) as
 * "object NAME" / "ref FILE IMAGE" lines. An image a ref names that cannot
 * be read (damaged, untrusted) stops gc before anything is removed: what
 * it refers to is unknown (its error, wrapped).
 */
int gs_store_gc(const char *path, bool dry_run, double wait_s, struct gs_store_gc_result *r, FILE *list,
		struct gs_err *err);

#endif
