/*
 * image.h - gpusnap's GPU image: writing one (dump), reading and verifying
 * one (restore, inspect), describing one (inspect).
 *
 * An image is a directory: manifest.img, gpu-data-NNNN.img files and, when
 * CRIU took the CPU state, cpu/ and cpu-files.img. The byte layout is in
 * format.h and docs/FORMAT.md. A writer builds the image under a temporary
 * sibling name and publishing puts it in place atomically, so DIR is always
 * either the old image, the new one, or absent; never half of one. One
 * writer per DIR at a time; an image that will not be published is never
 * deleted if it is complete (gs_image_tmp_keep).
 *
 * Strings and blobs in the structs returned by the reader point into the
 * image and stay valid until gs_image_close. Structs passed to the writer are
 * copied; the caller keeps ownership of what it passed.
 */
#ifndef GPUSNAP_IMAGE_IMAGE_H
#define GPUSNAP_IMAGE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/json.h"
#include "image/format.h"

/* What an allocation is, so restore knows how to re-create it. Stored as a u32; readers accept any value. */
enum gs_image_alloc_kind {
	GS_ALLOC_KIND_UNKNOWN = 0,
	GS_ALLOC_KIND_DEVICE = 1,  /* cudaMalloc / cuMemAlloc family, made releasable by the agent */
	GS_ALLOC_KIND_APP_VMM = 2, /* the app's own cuMemCreate + cuMemMap mapping */
	GS_ALLOC_KIND_POOL = 3,    /* memory of a stream-ordered pool (cudaMallocAsync / cuMemPool) */
};
/* "device", "app-vmm", "pool", "unknown"; "other" for values this build does not know. */
const char *gs_image_alloc_kind_name(uint32_t kind);

struct gs_image_gpu {
	uint32_t index;        /* CUDA device ordinal in the dumped process */
	uint8_t uuid[16];
	const char *name;
	uint32_t cc_major, cc_minor;
	uint64_t total_memory; /* bytes */
};

struct gs_image_allocation {
	uint64_t id;        /* unique within the image; chosen by the dumper */
	uint64_t va;        /* device virtual address */
	uint64_t size;      /* bytes; 0 allowed (no chunks) */
	uint32_t gpu_index;
	uint32_t kind;      /* enum gs_image_alloc_kind */
	uint32_t flags;     /* GS_ALLOC_F_* (format.h) */
	const void *blob;   /* opaque per-allocation bytes for the agent, may be NULL */
	size_t blob_len;    /* <= GS_FMT_BLOB_MAX */
};

struct gs_image_chunk {
	uint64_t alloc_id;
	uint64_t offset;      /* within the allocation */
	uint64_t length;
	uint64_t file_offset; /* within the data file */
	uint32_t file_index;
	uint32_t flags;       /* GS_CHUNK_F_ZERO: nothing stored, the bytes are zero; GS_CHUNK_F_COMPRESSED */
	uint32_t crc32c;      /* of the `length` bytes (uncompressed) */
	uint64_t stored_length; /* bytes in the data file (== length unless COMPRESSED; 0 for ZERO) */
	uint32_t stored_crc32c; /* CRC-32C of the stored bytes (== crc32c unless COMPRESSED) */
	uint8_t codec;          /* enum gs_fmt_codec */
	uint8_t transform;      /* enum gs_fmt_transform */
	uint64_t fp_lo, fp_hi;  /* fingerprint of the `length` bytes (core/fingerprint.h); 0, 0: none recorded */
};

struct gs_image_data_file {
	uint32_t index;
	uint64_t size;
	const char *name;
};

struct gs_image_kv {
	const char *key;
	const char *value;
};

/* An incremental image's parent (FORMAT.md 4.11): the image its PARENT chunks are in. */
struct gs_image_parent {
	uint8_t image_id[16];
	uint32_t manifest_crc32c;
	const char *path; /* as recorded: absolute, or relative to the directory holding the image's directory */
};

/* The chunk store an image's STORED chunks are in (FORMAT.md 4.12; image/store.h). */
struct gs_image_store {
	uint8_t store_id[16];
	const char *path; /* as recorded: absolute, or relative to the directory holding the image's directory */
};

struct gs_image_info {
	uint32_t format_version;
	uint8_t image_id[16];
	int64_t created_ns;          /* Unix epoch, UTC */
	const char *gpusnap_version;
	const char *hostname;
	int32_t source_pid;
	const char *source_comm;
	const char *how;             /* "agent", "driver", ... */
	bool cpu_state;              /* cpu/ holds CRIU's images */
	uint32_t checksum_algo;      /* GS_CSUM_CRC32C */
};

/* ------------------------------------------------------------------ writer */

struct gs_image_writer;
struct gs_store;

struct gs_image_writer_opts {
	int32_t source_pid;          /* the dumped process (0 if none) */
	const char *source_comm;     /* its command name; NULL: "" */
	const char *how;             /* how the GPU state was taken ("agent", "driver"); NULL: "" */
	uint64_t max_data_file_size; /* start a new data file when the next payload would pass this; 0: never */
	bool no_direct_io;           /* never use O_DIRECT (it is used only where buffer, offset and length allow) */
	bool no_data_sync;           /* seal leaves the data files unsynced: gs_image_publish syncs them */
	bool store_zero_chunks;      /* store all-zero chunks as data instead of flagging them ZERO */
	bool replace;                /* the tests' image_test_writer_open: gs_image_tmp_opts.replace */
	const char *target;          /* DIR the image will be published at, named in messages; NULL: the temporary path */
	/*
	 * Where payloads go through memory (no_direct_io, O_DIRECT refused, or a
	 * memory file system), spread them over up to this many data files written
	 * at once: a file takes one buffered write at a time (its inode lock), so
	 * several writer threads into one file copy one after another. Give the
	 * number of threads that write chunks; 0 or 1: one file at a time.
	 */
	unsigned parallel_data_files;
	/*
	 * Compress each stored chunk with this codec (enum gs_fmt_codec; NONE:
	 * not at all) at this level (0: the codec's default; image/codec.h),
	 * on the thread that writes it. A compressing writer writes format
	 * version 2; a chunk that does not shrink is stored as it is.
	 */
	uint8_t compress_codec;
	int compress_level;
	/*
	 * An incremental image (format version 2): the image its PARENT chunks
	 * (gs_image_write_parent_chunk) are in, copied; NULL: a full image.
	 */
	const struct gs_image_parent *parent;
	/*
	 * An image whose chunks go into a chunk store (image/store.h, format
	 * version 2): every stored (non-ZERO) chunk becomes an object there
	 * (written where the store lacks it, reused where it has it; the store
	 * handle holds the dump's ref) and a STORED record here; store_rec is
	 * the store's path as the image records it (absolute, or relative to
	 * the directory holding DIR). Not owned: the caller closes it after
	 * the seal. NULL: a self-contained image.
	 */
	struct gs_store *store;
	const char *store_rec;
};

/*
 * A writer is opened in a temporary directory (gs_image_writer_open_in,
 * below), sealed there, and the image published at DIR by the directory's
 * owner (gs_image_publish).
 *
 * Fault points (common/fault.h): GS_FI_IMAGE_WRITE at every write of the
 * image's files (ENOSPC: GS_E_NO_SPACE; EIO: GS_E_FAILURE), GS_FI_IMAGE_PUBLISH
 * in gs_image_publish (first hit: before the rename, second: right after it).
 */
/* Records a GPU; indexes must be unique. Thread-safe, like every writer call. */
int gs_image_writer_add_gpu(struct gs_image_writer *w, const struct gs_image_gpu *gpu, struct gs_err *err);
/* Records an allocation (ids unique, gpu_index added before seal). The blob is copied. */
int gs_image_writer_add_allocation(struct gs_image_writer *w, const struct gs_image_allocation *a,
				   struct gs_err *err);
/* Sets (or replaces) a metadata string; bounded by GS_FMT_META_* limits. */
int gs_image_writer_set_metadata(struct gs_image_writer *w, const char *key, const char *value, struct gs_err *err);

/*
 * Stores bytes [offset, offset+len) of allocation alloc_id: computes the
 * CRC-32C, records an all-zero range as a ZERO chunk (nothing written),
 * otherwise writes the payload at a 4096-aligned offset reserved for it.
 * Several threads may call this at once. O_DIRECT is used for the 4096-aligned
 * part when data is 4096-aligned and the file system accepts it. The chunks of
 * an allocation must cover it exactly by seal, in any order. 0 < len <=
 * GS_FMT_CHUNK_DATA_MAX. After a failure the writer is failed: later writes
 * and seal return the same error; call abort (or seal, which cleans up).
 */
int gs_image_write_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data, size_t len,
			 struct gs_err *err);
/* Same, with the payload's CRC-32C already computed by the caller (e.g. while copying); zeros still become ZERO. */
int gs_image_write_chunk_crc(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data,
			     size_t len, uint32_t crc32c, struct gs_err *err);
/*
 * gs_image_write_chunk with the chunk's fingerprint (core/fingerprint.h,
 * computed by the caller: the agent's GPU kernel) recorded in the manifest;
 * 0, 0: none. A chunk found all zero is ZERO and gets none.
 */
int gs_image_write_chunk_fp(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data,
			    size_t len, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err);
/*
 * Records [offset, offset+len) of allocation alloc_id as equal to chunk
 * parent_index of the parent image (opts->parent): nothing is stored; the
 * record keeps that chunk's crc32c and fingerprint (fp, not 0), which a
 * reader checks it against (FORMAT.md 4.11).
 */
int gs_image_write_parent_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				uint64_t parent_index, uint32_t crc32c, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err);
/*
 * Makes w an incremental image of parent (copied) after it was opened
 * without one (gs_image_writer_opts.parent), before its first chunk:
 * GS_E_FAILURE once a chunk was written.
 */
int gs_image_writer_set_parent(struct gs_image_writer *w, const struct gs_image_parent *parent, struct gs_err *err);
/*
 * Records [offset, offset+len) of a writer into a store (opts->store) as the
 * store's object for (crc32c, fp, len), which the caller claimed in the
 * store (gs_store_claim: the dump's ref lists it, and it is there): nothing
 * is written. The chunk's bytes never crossed PCIe.
 */
int gs_image_write_stored_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				uint32_t crc32c, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err);
/*
 * Makes w write into the chunk store s (as opts->store, rec as
 * opts->store_rec) after it was opened without one, before its first
 * chunk: GS_E_FAILURE once a chunk was written.
 */
int gs_image_writer_set_store(struct gs_image_writer *w, struct gs_store *s, const char *rec, struct gs_err *err);
/* Records [offset, offset+len) as all zero without looking at any data (the caller knows, e.g. from the GPU). */
int gs_image_write_zero_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
			      struct gs_err *err);
/*
 * Makes w a partial image (format version 2) before its first chunk:
 * gs_image_write_elsewhere_chunk may then record chunks held outside it.
 * GS_E_FAILURE once a chunk was written.
 */
int gs_image_writer_set_partial(struct gs_image_writer *w, struct gs_err *err);
/*
 * Records [offset, offset+len) of a partial image as held outside it
 * (GS_CHUNK_F_ELSEWHERE); only gs_image_open_partial opens the image.
 */
int gs_image_write_elsewhere_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				   struct gs_err *err);

/*
 * Creates cpu/ (0700) inside the temporary directory, marks the image as
 * holding CPU state and writes its path into path (n bytes) for CRIU's -D.
 * Calling it again returns the same path.
 */
int gs_image_writer_cpu_dir(struct gs_image_writer *w, char *path, size_t n, struct gs_err *err);
/* The temporary directory the image is built in (valid until seal/abort). */
const char *gs_image_writer_tmp_path(const struct gs_image_writer *w);

struct gs_image_writer_stats {
	uint64_t chunks, zero_chunks;
	uint64_t zero_bytes;       /* bytes recorded as ZERO chunks */
	uint64_t payload_bytes;    /* bytes written as chunk payloads (compressed where they are) */
	uint64_t data_bytes;       /* the uncompressed bytes of the stored (non-ZERO) chunks */
	uint64_t compressed_chunks;
	uint64_t parent_chunks, parent_bytes; /* PARENT chunks: in the parent image, not written */
	uint64_t store_chunks, store_bytes;   /* STORED chunks (opts->store): their uncompressed bytes */
	uint64_t store_new_objects;           /* of those, objects this writer wrote (the others were there) */
	uint64_t direct_bytes;     /* of those, written with O_DIRECT */
	uint32_t data_files;
};
void gs_image_writer_stats(struct gs_image_writer *w, struct gs_image_writer_stats *st);

/*
 * Removes what the writer wrote and frees w (no chunk write may be in
 * flight). NULL is allowed. Its manifest and data files are removed; the
 * directory (and cpu/) is left to the directory's owner.
 */
void gs_image_writer_abort(struct gs_image_writer *w);

/* --------------------------------------- writing in one process, publishing in another
 *
 * `gpusnap dump` of a process with the agent: the CLI creates the temporary
 * directory (and holds its lock), the agent inside the app writes the GPU
 * part into it and seals it (manifest written, everything fsync'ed), CRIU
 * fills cpu/, and the CLI publishes it at DIR. The temporary name is never a
 * valid image name, so nobody takes a sealed but unpublished image for one.
 */
struct gs_image_tmp;
struct gs_image_tmp_opts {
	int32_t source_pid;      /* the process the image will be of; 0: unknown (no check of whose DIR is) */
	/*
	 * The same process's PID in its own PID namespace (a container's),
	 * which its agent records as the image's source; 0: as source_pid. An
	 * image at DIR naming either is this process's.
	 */
	int32_t source_pid_own;
	const char *source_comm; /* its command name (/proc/PID/comm) */
	bool replace;            /* replace an image of another process at DIR */
};
/*
 * Claims DIR for one writer and makes the directory the image is built in:
 * - DIR's parent must exist and be safe, as every directory above it
 *   (image_fs.h: owned by root or this user, not writable by others unless
 *   sticky): GS_E_PERMISSION naming the directory otherwise;
 * - another live writer of DIR (its temporary directory is locked) makes this
 *   one fail at once: GS_E_STATE naming its PID;
 * - DIR must be absent, an empty directory, or a gpusnap image (anything else
 *   is refused, so a mistyped DIR never deletes someone's files), and with
 *   opts->source_pid an image of the same process (same PID and command
 *   name, as a restored process has) unless opts->replace: GS_E_USAGE;
 * - leftovers of dead writers are removed, except complete images (with a
 *   manifest), which are renamed as gs_image_tmp_keep does and reported;
 * - creates <parent>/.<name>.tmp-<pid>-XXXXXX (0700) and flock()s it for t's
 *   lifetime: DIR's writer lock.
 * opts may be NULL.
 */
int gs_image_tmp_create(const char *dir, const struct gs_image_tmp_opts *opts, struct gs_image_tmp **t,
			struct gs_err *err);
const char *gs_image_tmp_path(const struct gs_image_tmp *t);
/* DIR, where gs_image_publish puts the image. */
const char *gs_image_tmp_target(const struct gs_image_tmp *t);
/* Creates cpu/ (0700) in the temporary directory (and holds it open); path (n bytes) gets its path. */
int gs_image_tmp_cpu_dir(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err);
/*
 * cpu/ as above, its path through this process's descriptor of it
 * ("/proc/<pid>/fd/<n>", valid until t is freed), for CRIU's -D: CRIU writes
 * into this directory whatever happens to the names above it.
 */
int gs_image_tmp_cpu_fd_path(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err);
/*
 * Puts a sealed temporary directory at DIR (FORMAT.md section 9, steps 7-10):
 * with CPU state, cpu-files.img listing and checksumming every file CRIU
 * wrote into cpu/ (read back on all CPUs); fsync of cpu/ and the directory,
 * rename or atomic exchange with the old DIR, fsync of the parent, deletion
 * of the old image. *published says whether the image is at DIR now (it can
 * be, with an error from the last fsync). Does not free t: call
 * gs_image_tmp_close after success; after a failure with *published false,
 * gs_image_tmp_keep where the image is needed (the process is gone, or its
 * data is only there), else gs_image_tmp_discard.
 */
int gs_image_publish(struct gs_image_tmp *t, bool *published, struct gs_err *err);
/*
 * With CPU state: lists and checksums CRIU's files into cpu-files.img now,
 * as gs_image_publish would (which then does not again), so that the image,
 * should it be kept unpublished from here on, verifies as a published one.
 * Call it once CRIU has written cpu/. 0 or an error code (GS_E_NO_SPACE...).
 */
int gs_image_tmp_list_cpu(struct gs_image_tmp *t, struct gs_err *err);
/* Whether t's directory holds cpu-files.img (the checksums of CRIU's files). */
bool gs_image_tmp_cpu_listed(const struct gs_image_tmp *t);
/*
 * gs_image_publish without the fsync of the image's files before the rename:
 * the image is complete at DIR for every reader at once, but on the disk only
 * once gs_image_sync(DIR) returned; a crash before that may leave it torn
 * (its checksums name what is), and the old image at DIR is gone. For an
 * image whose publish must not wait for the disk while a process stands
 * still (the CRIU plugin's --leave-running, whose tools read the image as
 * soon as CRIU returns); the rename and the parent's fsync are as above.
 */
int gs_image_publish_unsynced(struct gs_image_tmp *t, bool *published, struct gs_err *err);
/*
 * Makes the image at dir durable: fsync of every file and directory in it
 * (after gs_image_publish_unsynced). Fault point GS_FI_IMAGE_SYNC.
 */
int gs_image_sync(const char *dir, struct gs_err *err);
/*
 * Gives up t's image without publishing or deleting it: renames it to
 * <DIR>.kept-<pid>-<UTC time> (pid: the process it is of), a name no dump's
 * cleanup touches, writes its path into path (n bytes) and frees t. If the
 * rename fails, the image stays at its temporary name (the next dump to DIR
 * renames it), path names that and the error says so.
 */
int gs_image_tmp_keep(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err);

/*
 * What name, an entry of DIR's parent, is to DIR (whose last component is
 * base): one of its temporary directories (.<base>.tmp-<pid>-XXXXXX), one
 * of its kept images (<base>.kept-<pid>-<time>), or neither.
 */
enum gs_image_leftover { GS_LEFTOVER_NONE, GS_LEFTOVER_TMP, GS_LEFTOVER_KEPT };
enum gs_image_leftover gs_image_leftover_of(const char *base, const char *name);
/*
 * Frees t and releases its lock, leaving the directory (after publish: nothing
 * is left at the temporary name). Not for an unpublished image that must be
 * kept: the next dump would keep it too, but under a name the user does not
 * know yet; use gs_image_tmp_keep.
 */
void gs_image_tmp_close(struct gs_image_tmp *t);
/* Removes the temporary directory (manifest first) and frees t. NULL is allowed. */
void gs_image_tmp_discard(struct gs_image_tmp *t);
/*
 * A writer into tmp_path, an existing empty directory of this user with mode
 * 0700 (from gs_image_tmp_create in another process). If tmp_path holds cpu/
 * already, the image is marked as holding CPU state. No lock is taken: the
 * directory's owner holds it.
 */
int gs_image_writer_open_in(const char *tmp_path, const struct gs_image_writer_opts *opts,
			    struct gs_image_writer **w, struct gs_err *err);
/*
 * Validates the image (every allocation covered), sets each data file's final
 * size, fsyncs it, writes and fsyncs the manifest and the directory, without
 * moving it. Always consumes w; on failure what w wrote is removed (as abort).
 */
int gs_image_writer_seal(struct gs_image_writer *w, struct gs_err *err);

/* ------------------------------------------------------------------ stage */

/*
 * dump --leave-running's own copy of the GPU data (image_stage.c): the agent
 * writes its image into a private directory of a memory file system while
 * the process stands still and reads it back on resume; then it goes into
 * the temporary image while the process runs.
 */
struct gs_image_stage;
/*
 * Makes <mem_dir>/.gpusnap-live-<pid>-XXXXXX (0700; with an empty cpu/ when
 * cpu_state: the image it goes into holds CRIU's files beside it, not so a
 * process's part of a tree's image). mem_dir must be an absolute path on
 * tmpfs (or ramfs) with room for total bytes (this stage's need and those
 * of the other stages of the same dump, which share it) and the files'
 * headers: else GS_E_NO_SPACE saying why (the caller writes into the image
 * instead). owner: the process whose data it will hold (as this process
 * sees it), named in the stage for gs_image_stage_sweep.
 */
int gs_image_stage_create(const char *mem_dir, uint64_t need, uint64_t total, bool cpu_state, pid_t owner,
			  struct gs_image_stage **s, struct gs_err *err);
const char *gs_image_stage_path(const struct gs_image_stage *s);
/*
 * The stage's directory, open and flock()ed (shared) while it exists: the
 * descriptor to hand the agent, so the lock lasts while it writes.
 */
int gs_image_stage_fd(const struct gs_image_stage *s);
/*
 * Opens the stage's files and removes its directory: from here its memory
 * lives as long as s (freed should this process die). The manifest is
 * written last by gs_image_stage_write.
 */
int gs_image_stage_detach(struct gs_image_stage *s, struct gs_err *err);
/*
 * Writes the detached stage's files into t's temporary directory, or into
 * its existing subdirectory subdir (a tree's procs/<pid>) (each through
 * O_DIRECT where the file system takes it, fdatasync'ed; the manifest last,
 * then the directories' fsync): that directory then holds the image as if
 * the agent had written it there, ready for gs_image_publish. *bytes gets
 * what was written. Fault point GS_FI_DUMP_STAGE_WRITE before each write.
 */
int gs_image_stage_write(struct gs_image_stage *s, struct gs_image_tmp *t, const char *subdir, uint64_t *bytes,
			 struct gs_err *err);
/*
 * An incremental image in the stage records its parent by absolute path, so
 * that a resume from the stage (its dump killed in the pause) finds the
 * chain from where the stage is; rec, the path the published image records
 * (relative to DIR's directory where the parent is beside it), replaces it
 * in the manifest gs_image_stage_write writes. Copied; NULL: as staged.
 */
int gs_image_stage_set_parent_rec(struct gs_image_stage *s, const char *rec, struct gs_err *err);
/* Closes s; its directory, if not detached, is removed unless keep (it holds a suspended process's data). */
void gs_image_stage_free(struct gs_image_stage *s, bool keep);
/*
 * Whether path names a stage directory (.gpusnap-live-*) that this user
 * owns: one a dump killed inside its pause left with a process's data.
 */
bool gs_image_stage_is_left(const char *path);
/* Removes such a directory once its data is back on the GPU (resume); 0, or -1 with errno. */
int gs_image_stage_discard(const char *path);
/*
 * Removes the stages of this user in mem_dir that are of no use: made in
 * this PID namespace, their maker gone, nobody writing into them (their
 * flock free), and the process whose data they hold gone (or no manifest
 * in them: never finished). Returns how many it removed.
 */
int gs_image_stage_sweep(const char *mem_dir);

/* ------------------------------------------------------------------ reader */

struct gs_image;

/*
 * Opens and validates DIR: every directory above it (owned by this user or
 * root, not writable by group or others unless sticky), the directory and
 * everything in it (owned by this user or root, not writable by group or
 * others; no symlinks, hard-linked files, FIFOs, sockets or devices: refused
 * before anything is opened), manifest magic, version, checksum and
 * consistency (every allocation covered by its chunks, every reference in
 * bounds), each data file present, of the recorded size, with a header of
 * this image; with CPU state, cpu/ holding exactly the files cpu-files.img
 * lists, of the listed sizes (images written before that list: cpu/ as it
 * is, gs_image_cpu_files says so); an incremental image's whole chain of
 * parents, opened and checked with it (gs_image_parent). Payload checksums
 * are checked by gs_image_read_chunk and gs_image_verify, not here. Nothing is opened in a
 * way that can block (a FIFO fails at once).
 * Errors: GS_E_IMAGE (not an image, corrupt, unknown version, a FIFO),
 * GS_E_PERMISSION (untrusted owner or mode, a link, an unsafe directory above).
 */
int gs_image_open(const char *dir, struct gs_image **img, struct gs_err *err);
/*
 * gs_image_open refuses a partial image (chunks flagged ELSEWHERE: a suspend's
 * spill whose other part is in the process's host memory), so restore and
 * inspect never take one for a whole image; this opens one too (the agent's
 * resume of a split suspend). Reading an ELSEWHERE chunk fails.
 */
int gs_image_open_partial(const char *dir, struct gs_image **img, struct gs_err *err);
/*
 * gs_image_open holding the image for reading until gs_image_close: a shared
 * flock() on DIR's directory, taken before anything in it is read. A publish
 * that would replace DIR (gs_image_publish) takes it exclusively first, so it
 * waits for the readers (and a new writer's claim refuses), and the files a
 * reader uses are never removed under it. A publish holding DIR (replacing
 * it, or ending its own publish) is waited for a few seconds, said on stderr,
 * then GS_E_STATE naming it; an image replaced between the open and the lock
 * is opened again. For restore and inspect --verify; the agent's own reads
 * of an image its gpusnap holds go through gs_image_open.
 */
int gs_image_open_held(const char *dir, struct gs_image **img, struct gs_err *err);
void gs_image_close(struct gs_image *img);

const char *gs_image_path(const struct gs_image *img);
const struct gs_image_info *gs_image_get_info(const struct gs_image *img);
size_t gs_image_gpu_count(const struct gs_image *img);
const struct gs_image_gpu *gs_image_gpu_at(const struct gs_image *img, size_t i);
/* Allocations in ascending id order. */
size_t gs_image_allocation_count(const struct gs_image *img);
const struct gs_image_allocation *gs_image_allocation_at(const struct gs_image *img, size_t i);
/* Index of allocation `id`, or -1. */
ptrdiff_t gs_image_find_allocation(const struct gs_image *img, uint64_t id);
/* Chunks in ascending (allocation id, offset) order; those of allocation i are [*first, *first + *count). */
size_t gs_image_chunk_count(const struct gs_image *img);
const struct gs_image_chunk *gs_image_chunk_at(const struct gs_image *img, size_t i);
void gs_image_allocation_chunks(const struct gs_image *img, size_t alloc_index, size_t *first, size_t *count);
size_t gs_image_data_file_count(const struct gs_image *img);
const struct gs_image_data_file *gs_image_data_file_at(const struct gs_image *img, size_t i);
size_t gs_image_metadata_count(const struct gs_image *img);
const struct gs_image_kv *gs_image_metadata_at(const struct gs_image *img, size_t i);
/* Value of key, or NULL. */
const char *gs_image_metadata_get(const struct gs_image *img, const char *key);
/* Path of cpu/ in path (n bytes); GS_E_IMAGE if the image holds no CPU state. */
int gs_image_cpu_dir(const struct gs_image *img, char *path, size_t n, struct gs_err *err);
/*
 * A path to the cpu/ that gs_image_open checked, through this process's
 * descriptor of it: "/proc/<pid>/fd/<n>", valid until gs_image_close. Give
 * it to CRIU (run by this process) instead of the path: whatever happens to
 * the names meanwhile, CRIU reads the directory that was checked.
 */
int gs_image_cpu_dir_fd_path(const struct gs_image *img, char *path, size_t n, struct gs_err *err);
/*
 * True if the image lists CRIU's files (cpu-files.img: sizes and checksums,
 * checked by gs_image_open and gs_image_verify); with their count and total
 * size. False for images without CPU state, or written before the list.
 */
bool gs_image_cpu_files(const struct gs_image *img, size_t *nfiles, uint64_t *bytes);
/*
 * GS_E_IMAGE where the image holds CPU state but no cpu-files.img, so that
 * CRIU's files cannot be checked (an image a killed dump kept before it
 * wrote the list, or one of a gpusnap older than the list); 0 otherwise.
 */
int gs_image_require_cpu_list(const struct gs_image *img, struct gs_err *err);

/*
 * Reads chunk i into buf (its `length` bytes) and checks its CRC-32C; a ZERO
 * chunk is memset. Thread-safe. O_DIRECT for the aligned part when buf is
 * 4096-aligned (see gs_image_set_direct_io). A mismatch is GS_E_IMAGE naming
 * the chunk (allocation id, offset) and its file.
 */
int gs_image_read_chunk(struct gs_image *img, size_t i, void *buf, struct gs_err *err);
/* Reads without O_DIRECT when false (restoring from the page cache is faster buffered). Default: true. */
void gs_image_set_direct_io(struct gs_image *img, bool on);
/*
 * Checks every stored chunk's CRC and every listed piece of CRIU's files
 * (cpu-files.img) with nthreads threads (0: one per CPU, at most 16); the
 * first bad chunk or CPU file is named (GS_E_IMAGE; also for EIO). An image
 * with CPU state but no list gets a warning in the log: its CPU files cannot
 * be checked. Fault point GS_FI_IMAGE_READ (each read).
 */
int gs_image_verify(struct gs_image *img, unsigned nthreads, struct gs_err *err);
/*
 * gs_image_verify of a part: CRIU's listed files only (a lazy restore
 * checks them before its daemon serves a page), or the stored chunks only
 * (then checked alongside); GS_IMAGE_PART_ALL is gs_image_verify.
 */
enum gs_image_part { GS_IMAGE_PART_ALL, GS_IMAGE_PART_CPU, GS_IMAGE_PART_GPU };
int gs_image_verify_part(struct gs_image *img, unsigned nthreads, enum gs_image_part part, struct gs_err *err);
/*
 * With on, gs_image_verify also checks each stored chunk's fingerprint
 * (FORMAT.md 4.8.2, core/fingerprint.h) where the image records one, on the
 * CPU: a mismatch is GS_E_IMAGE naming the chunk. For inspect --verify;
 * restore's checksum pass leaves it to --verify-gpu (several times slower
 * than the CRC on a CPU). Default: off.
 */
void gs_image_set_verify_fingerprints(struct gs_image *img, bool on);
/*
 * An incremental image's parent (FORMAT.md 4.11), opened and checked by
 * gs_image_open with the image: its whole chain is present, readable, free
 * of loops, of the same process and GPUs, and holds every chunk the image
 * refers to (GS_E_IMAGE naming the broken link otherwise). Reads of the
 * image's PARENT chunks go there. NULL for a full image.
 */
const struct gs_image *gs_image_parent(const struct gs_image *img);
/*
 * The chunk store of an image with STORED chunks (FORMAT.md 4.12), opened
 * and checked by gs_image_open: its path as found (the record resolved);
 * NULL for an image without one. Reads of STORED chunks go there.
 */
const char *gs_image_store_path(const struct gs_image *img);
/* The CRC-32C in the image's manifest trailer: what an incremental image records of its parent. */
uint32_t gs_image_manifest_crc32c(const struct gs_image *img);

/* ---------------------------------------------------------------- describe */

struct gs_image_totals {
	uint64_t alloc_bytes;     /* sum of allocation sizes */
	uint64_t chunks, zero_chunks;
	uint64_t zero_bytes;      /* bytes in ZERO chunks */
	uint64_t stored_bytes;    /* payload bytes in data files (compressed where chunks are) */
	uint64_t data_bytes;      /* uncompressed bytes of the stored (non-ZERO) chunks: data_bytes / stored_bytes is the ratio */
	uint64_t compressed_chunks;
	uint64_t fingerprinted;   /* stored chunks whose record holds a fingerprint */
	uint64_t parent_chunks, parent_bytes; /* PARENT chunks: their bytes are in the parent image */
	uint64_t store_chunks, store_bytes;   /* STORED chunks: their bytes are in the chunk store */
	uint64_t data_file_bytes; /* sum of data file sizes */
};
void gs_image_totals(const struct gs_image *img, struct gs_image_totals *t);
/* `gpusnap inspect --json`: one JSON object (process, GPUs, allocations with each listed, chunks, versions). */
void gs_image_describe_json(const struct gs_image *img, struct gs_json *j);
/* `gpusnap inspect`: a short human summary. */
void gs_image_describe_text(const struct gs_image *img, FILE *out);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's form) into buf (>= 41 bytes). */
const char *gs_image_format_uuid(const uint8_t uuid[16], char *buf, size_t n);

#endif
