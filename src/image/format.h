/*
 * format.h - the on-disk format of a gpusnap image: the one place that
 * defines it (docs/FORMAT.md explains it for readers in other languages).
 *
 * An image directory holds manifest.img (what the image contains), one or
 * more gpu-data-NNNN.img files (chunk payloads at 4096-aligned offsets) and
 * optionally cpu/ (CRIU's images) with cpu-files.img (their sizes and
 * checksums). Every file opens with a magic and the format version. All integers are little-endian; the structs below are the
 * exact byte layout (natural alignment, explicit padding, sizes asserted), so
 * they are copied to and from disk with memcpy on little-endian hosts.
 *
 * Compatibility: GS_FMT_VERSION changes when an older reader would misread
 * a newer image. Within one version a writer may add optional sections
 * (GS_SEC_F_OPTIONAL) and grow records at their end (entry_size); readers
 * skip what they do not know there. Reserved fields are written as zero and
 * ignored on read; unknown flag bits are rejected.
 */
#ifndef GPUSNAP_IMAGE_FORMAT_H
#define GPUSNAP_IMAGE_FORMAT_H

#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpusnap images are little-endian and copied with memcpy: add byte swapping for this host"
#endif

/*
 * The newest version this build writes and reads. A writer writes the lowest
 * version that holds what the image uses: version 1 unless a chunk is
 * compressed (GS_FMT_VERSION_COMPRESS), so older readers still read every
 * image that needs nothing newer. Readers read versions GS_FMT_VERSION_MIN
 * to GS_FMT_VERSION.
 */
#define GS_FMT_VERSION 2u
#define GS_FMT_VERSION_MIN 1u
#define GS_FMT_VERSION_COMPRESS 2u /* compressed chunks: chunk records of at least 64 bytes */
#define GS_FMT_VERSION_PARENT 2u   /* incremental images: a parent section, PARENT chunks */
#define GS_FMT_VERSION_PARTIAL 2u  /* partial images: ELSEWHERE chunks */
#define GS_FMT_VERSION_STORE 2u    /* images whose chunks are in a chunk store: a store section, STORED chunks */
#define GS_FMT_CHAIN_MAX 64u       /* images in a chain, the image itself included */

/* ---- names inside an image directory ---- */
#define GS_FMT_MANIFEST_NAME "manifest.img"
#define GS_FMT_CPU_DIR_NAME "cpu"
/* an image of a process tree (how "tree", FORMAT.md section 12): each CUDA process's image in procs/<pid>/ */
#define GS_FMT_HOW_TREE "tree"
#define GS_FMT_TREE_PROCS_NAME "procs"
#define GS_FMT_CPU_LIST_NAME "cpu-files.img" /* the list of cpu/'s files with their checksums */
#define GS_FMT_DATA_NAME_PREFIX "gpu-data-"
#define GS_FMT_DATA_NAME_SUFFIX ".img"
#define GS_FMT_DATA_NAME_DIGITS 4 /* zero-padded decimal index, more digits above 9999 */
#define GS_FMT_DATA_NAME_MAX 32   /* longest generated name plus NUL, with room */

/* ---- alignment ---- */
#define GS_FMT_ALIGN 4096u          /* payload offsets, data file sizes, data file header block */
#define GS_FMT_SECTION_ALIGN 8u     /* section offsets inside the manifest */

/* ---- bounds every reader enforces (writers refuse to exceed them) ---- */
#define GS_FMT_MANIFEST_MAX (1ULL << 30)   /* 1 GiB; 1e6 allocations need ~110 MB */
#define GS_FMT_SECTIONS_MAX 256u
#define GS_FMT_DATA_FILES_MAX 4096u
#define GS_FMT_CHUNK_DATA_MAX (1ULL << 30) /* a stored (non-ZERO) chunk; ZERO chunks are unbounded */
#define GS_FMT_STRING_MAX 4096u            /* info strings, GPU names, metadata keys */
#define GS_FMT_META_VALUE_MAX 16384u
#define GS_FMT_META_COUNT_MAX 1024u
#define GS_FMT_BLOB_MAX 65536u             /* per-allocation opaque bytes */
#define GS_FMT_CPU_LIST_MAX (256ULL << 20) /* cpu-files.img: ~5e6 pieces, 300 TB of CRIU files in 64 MiB pieces */
#define GS_FMT_CPU_PIECE (64ULL << 20)     /* the writer's piece size in cpu-files.img (readers take any up to CHUNK_DATA_MAX) */

/* ---- magics (8 bytes, no NUL) ---- */
#define GS_FMT_MANIFEST_MAGIC "GPUSNAPM"
#define GS_FMT_TRAILER_MAGIC "GPUSNAPE"
#define GS_FMT_DATA_MAGIC "GPUSNAPD"
#define GS_FMT_MAGIC_LEN 8

/* manifest.img: header, section table, sections, trailer. */
struct gs_fmt_manifest_header {
	char magic[8];                 /* GS_FMT_MANIFEST_MAGIC */
	uint32_t version;              /* GS_FMT_VERSION */
	uint32_t header_size;          /* sizeof(struct gs_fmt_manifest_header) as written */
	uint64_t manifest_size;        /* whole file, trailer included */
	uint64_t section_table_offset; /* from the start of the file, 8-aligned */
	uint32_t section_count;
	uint32_t section_entry_size;   /* sizeof(struct gs_fmt_section) as written */
	uint8_t image_id[16];          /* random; repeated in every data file header */
	uint32_t flags;                /* none defined: must be 0 */
	uint32_t reserved;
};

enum gs_fmt_section_type {
	GS_SEC_INFO = 1,        /* one struct gs_fmt_info */
	GS_SEC_HEAP = 2,        /* raw bytes: strings (NUL-terminated) and blobs that records point to */
	GS_SEC_DATA_FILES = 3,  /* struct gs_fmt_data_file[], in index order */
	GS_SEC_GPUS = 4,        /* struct gs_fmt_gpu[] */
	GS_SEC_ALLOCATIONS = 5, /* struct gs_fmt_allocation[], ascending unique id */
	GS_SEC_CHUNKS = 6,      /* struct gs_fmt_chunk[], ascending (alloc_id, offset) */
	GS_SEC_METADATA = 7,    /* struct gs_fmt_metadata[], unique keys */
	GS_SEC_PARENT = 8,      /* version 2, only in an incremental image: one struct gs_fmt_parent */
	GS_SEC_STORE = 9,       /* version 2, only in an image with STORED chunks: one struct gs_fmt_store */
};
#define GS_SEC_TYPE_MAX GS_SEC_STORE
#define GS_SEC_F_OPTIONAL 0x1u /* a reader that does not know the type may skip the section */

struct gs_fmt_section {
	uint32_t type;       /* enum gs_fmt_section_type */
	uint32_t flags;      /* GS_SEC_F_* */
	uint64_t offset;     /* from the start of the file, 8-aligned */
	uint64_t length;     /* bytes; a multiple of entry_size for record sections */
	uint32_t entry_size; /* record size as written (>= the struct below); 0 for HEAP */
	uint32_t reserved;
};

/* A string or blob in the HEAP section. Strings have a NUL at heap[offset + length]. */
struct gs_fmt_ref {
	uint64_t offset; /* from the start of the HEAP section */
	uint64_t length; /* bytes, without the string's NUL */
};

#define GS_INFO_F_CPU_STATE 0x1u /* cpu/ holds CRIU's images of the process */
#define GS_INFO_F_KNOWN GS_INFO_F_CPU_STATE

#define GS_CSUM_CRC32C 1u /* the only chunk checksum of version 1 */

struct gs_fmt_info {
	int64_t created_ns;           /* wall clock when the dump started, ns since the Unix epoch (UTC) */
	uint32_t flags;               /* GS_INFO_F_* */
	int32_t source_pid;           /* the dumped process, in the dumping tool's PID namespace; 0 if none */
	uint32_t checksum_algo;       /* GS_CSUM_CRC32C */
	uint32_t payload_align;       /* GS_FMT_ALIGN */
	struct gs_fmt_ref gpusnap_version;
	struct gs_fmt_ref hostname;
	struct gs_fmt_ref source_comm; /* command name (/proc/PID/comm) */
	struct gs_fmt_ref how;         /* how it was taken: "agent", "driver", ... */
};

struct gs_fmt_data_file {
	uint32_t index;         /* equals its position in the section */
	uint32_t flags;         /* none defined: must be 0 */
	uint64_t size;          /* exact file size, a multiple of GS_FMT_ALIGN */
	struct gs_fmt_ref name; /* must equal the name generated from index */
};

struct gs_fmt_gpu {
	uint32_t index;        /* the CUDA device ordinal in the dumped process; unique */
	uint32_t cc_major;     /* compute capability */
	uint32_t cc_minor;
	uint32_t reserved;
	uint64_t total_memory; /* bytes */
	uint8_t uuid[16];      /* CUuuid bytes */
	struct gs_fmt_ref name; /* "NVIDIA H100 80GB HBM3" */
};

#define GS_ALLOC_F_NO_DATA 0x1u /* contents are not in this image (e.g. the driver's copy carries them); no chunks */
#define GS_ALLOC_F_KNOWN GS_ALLOC_F_NO_DATA

struct gs_fmt_allocation {
	uint64_t id;        /* unique within the image */
	uint64_t va;        /* device virtual address */
	uint64_t size;      /* bytes; 0 is allowed (such an allocation has no chunks) */
	uint32_t gpu_index; /* a gs_fmt_gpu.index of this image */
	uint32_t kind;      /* enum gs_image_alloc_kind (image.h); readers accept any value */
	uint32_t flags;     /* GS_ALLOC_F_* */
	uint32_t reserved;
	struct gs_fmt_ref blob; /* opaque bytes for the agent, <= GS_FMT_BLOB_MAX; length 0 if none */
};

#define GS_CHUNK_F_ZERO 0x1u       /* all bytes are zero; nothing stored (file_index, file_offset, crc32c are 0) */
#define GS_CHUNK_F_COMPRESSED 0x2u /* version 2: the payload is `stored_length` bytes of `codec` output */
#define GS_CHUNK_F_KNOWN_V1 GS_CHUNK_F_ZERO
#define GS_CHUNK_F_PARENT 0x4u     /* version 2: the bytes are chunk `file_offset` of the parent image; nothing stored */
/*
 * version 2: the bytes are not in this image, nothing stored (a partial image:
 * a suspend's spill whose other part stayed in the process's host memory);
 * only gs_image_open_partial opens an image with such chunks
 */
#define GS_CHUNK_F_ELSEWHERE 0x8u
/*
 * version 2: the bytes are in the chunk store the image names (struct
 * gs_fmt_store), in the object named by the record's fingerprint, crc32c and
 * length; nothing stored in the image (FORMAT.md 4.12)
 */
#define GS_CHUNK_F_STORED 0x10u
#define GS_CHUNK_F_KNOWN \
	(GS_CHUNK_F_ZERO | GS_CHUNK_F_COMPRESSED | GS_CHUNK_F_PARENT | GS_CHUNK_F_ELSEWHERE | GS_CHUNK_F_STORED)

/* Compression codecs of a chunk (version 2). */
enum gs_fmt_codec {
	GS_CODEC_NONE = 0,
	GS_CODEC_LZ4 = 1,  /* one LZ4 block (LZ4_decompress_safe), no frame */
	GS_CODEC_ZSTD = 2, /* one zstd frame with its content size */
};
#define GS_CODEC_MAX GS_CODEC_ZSTD

/* What is done to a chunk's bytes before its codec (version 2). */
enum gs_fmt_transform {
	GS_XFORM_NONE = 0,
	GS_XFORM_SPLIT2 = 1, /* byte-plane split of 16-bit words: even bytes, then odd bytes (FORMAT.md 4.8.1) */
};
#define GS_XFORM_MAX GS_XFORM_SPLIT2

/*
 * The chunk record as this build writes it (80 bytes). A reader takes the
 * fields its entry_size covers: version 1 records of 48 bytes (gpusnap before
 * version 2) end at `reserved`; from 64 bytes on the stored_* fields are
 * there (required in version 2), from 80 the fingerprint. Writers of either
 * version write all 80; readers of version 1 alone use the first 48.
 */
struct gs_fmt_chunk {
	uint64_t alloc_id;    /* a gs_fmt_allocation.id */
	uint64_t offset;      /* within the allocation */
	uint64_t length;      /* bytes, > 0 */
	uint64_t file_offset; /* within the data file, a multiple of GS_FMT_ALIGN, >= GS_FMT_ALIGN */
	uint32_t file_index;  /* a gs_fmt_data_file.index */
	uint32_t flags;       /* GS_CHUNK_F_* */
	uint32_t crc32c;      /* CRC-32C of the chunk's `length` bytes (uncompressed) */
	uint32_t reserved;
	/* version 2 */
	uint64_t stored_length; /* payload bytes in the data file: `length` unless COMPRESSED; 0 for ZERO */
	uint32_t stored_crc32c; /* CRC-32C of those stored bytes: `crc32c` unless COMPRESSED; 0 for ZERO */
	uint8_t codec;          /* enum gs_fmt_codec: NONE unless COMPRESSED */
	uint8_t transform;      /* enum gs_fmt_transform: NONE unless COMPRESSED */
	uint16_t reserved2;
	uint64_t fp_lo, fp_hi;  /* the chunk's fingerprint (FORMAT.md 4.8.2, core/fingerprint.h); 0, 0: none (ZERO: always) */
};
#define GS_FMT_CHUNK_V1_SIZE 48u      /* the version 1 record: up to `reserved` */
#define GS_FMT_CHUNK_STORED_SIZE 64u  /* with the stored_* fields: version 2's minimum */

/* The image an incremental one was taken against (its PARENT chunks are there). */
struct gs_fmt_parent {
	uint8_t image_id[16];     /* the parent's image_id */
	uint32_t manifest_crc32c; /* the parent manifest trailer's crc32c: that exact manifest */
	uint32_t flags;           /* none defined: must be 0 */
	struct gs_fmt_ref path;   /* string: absolute, or relative to the directory that holds this image's directory */
};

/* The chunk store an image's STORED chunks are in (FORMAT.md 4.12). */
struct gs_fmt_store {
	uint8_t store_id[16];   /* the store's id (its store.img): another store at that path is refused */
	uint32_t flags;         /* none defined: must be 0 */
	uint32_t reserved;
	struct gs_fmt_ref path; /* string: absolute, or relative to the directory that holds this image's directory */
};

struct gs_fmt_metadata {
	struct gs_fmt_ref key;   /* 1..GS_FMT_STRING_MAX bytes */
	struct gs_fmt_ref value; /* 0..GS_FMT_META_VALUE_MAX bytes */
};

/* Last 16 bytes of the manifest. */
struct gs_fmt_manifest_trailer {
	char magic[8];    /* GS_FMT_TRAILER_MAGIC */
	uint32_t reserved;
	uint32_t crc32c;  /* CRC-32C of every byte of the manifest before this field */
};

/*
 * cpu-files.img: header, piece records, names, trailer (struct
 * gs_fmt_manifest_trailer with GS_FMT_TRAILER_MAGIC). Written when the image
 * is published, after CRIU filled cpu/: every regular file under cpu/, cut
 * into pieces, each with its CRC-32C. It has its own version
 * (GS_FMT_CPU_LIST_VERSION, same rules as GS_FMT_VERSION); images without
 * the file (written before it existed) are read without checking cpu/'s
 * contents. Bound to one manifest by image_id and the manifest's CRC.
 */
#define GS_FMT_CPU_LIST_MAGIC "GPUSNAPC"
#define GS_FMT_CPU_LIST_VERSION 1u

struct gs_fmt_cpu_list_header {
	char magic[8];            /* GS_FMT_CPU_LIST_MAGIC */
	uint32_t version;         /* GS_FMT_CPU_LIST_VERSION */
	uint32_t header_size;     /* sizeof(struct gs_fmt_cpu_list_header) as written; pieces start here */
	uint64_t list_size;       /* whole file, trailer included */
	uint8_t image_id[16];     /* the manifest's image_id */
	uint32_t manifest_crc32c; /* the manifest trailer's crc32c: the list belongs to that exact manifest */
	uint32_t entry_size;      /* sizeof(struct gs_fmt_cpu_piece) as written */
	uint64_t piece_count;     /* records right after the header; the names follow them up to the trailer */
	uint32_t flags;           /* none defined: must be 0 */
	uint32_t reserved;
};

struct gs_fmt_cpu_piece {
	struct gs_fmt_ref name; /* into the names area: the file's path under cpu/ ('/'-separated, no "." or "..") */
	uint64_t file_size;     /* the whole file's size in bytes */
	uint64_t offset;        /* of this piece in the file */
	uint64_t length;        /* bytes; 0 only for the one piece of an empty file */
	uint32_t crc32c;        /* CRC-32C of the piece's bytes */
	uint32_t flags;         /* none defined: must be 0 */
};

/* First bytes of every data file; the rest of its first GS_FMT_ALIGN bytes are zero. */
struct gs_fmt_data_header {
	char magic[8];         /* GS_FMT_DATA_MAGIC */
	uint32_t version;      /* the manifest's version */
	uint32_t header_size;  /* sizeof(struct gs_fmt_data_header) */
	uint8_t image_id[16];  /* the manifest's image_id: a data file of another image is refused */
	uint32_t file_index;   /* the index its name says */
	uint32_t flags;        /* none defined: must be 0 */
	uint64_t data_start;   /* GS_FMT_ALIGN: first byte where payloads may be */
	uint8_t reserved[12];
	uint32_t crc32c;       /* CRC-32C of the bytes before this field */
};

_Static_assert(sizeof(struct gs_fmt_manifest_header) == 64, "manifest header layout");
_Static_assert(sizeof(struct gs_fmt_section) == 32, "section entry layout");
_Static_assert(sizeof(struct gs_fmt_ref) == 16, "ref layout");
_Static_assert(sizeof(struct gs_fmt_info) == 88, "info layout");
_Static_assert(sizeof(struct gs_fmt_data_file) == 32, "data file record layout");
_Static_assert(sizeof(struct gs_fmt_gpu) == 56, "gpu record layout");
_Static_assert(sizeof(struct gs_fmt_allocation) == 56, "allocation record layout");
_Static_assert(sizeof(struct gs_fmt_chunk) == 80, "chunk record layout");
_Static_assert(offsetof(struct gs_fmt_chunk, fp_lo) == GS_FMT_CHUNK_STORED_SIZE, "fingerprint position");
_Static_assert(offsetof(struct gs_fmt_chunk, stored_length) == GS_FMT_CHUNK_V1_SIZE, "version 1 chunk record prefix");
_Static_assert(sizeof(struct gs_fmt_metadata) == 32, "metadata record layout");
_Static_assert(sizeof(struct gs_fmt_parent) == 40, "parent record layout");
_Static_assert(sizeof(struct gs_fmt_store) == 40, "store record layout");
_Static_assert(sizeof(struct gs_fmt_manifest_trailer) == 16, "trailer layout");
_Static_assert(sizeof(struct gs_fmt_data_header) == 64, "data header layout");
_Static_assert(offsetof(struct gs_fmt_data_header, crc32c) == 60, "data header crc position");
_Static_assert(sizeof(struct gs_fmt_cpu_list_header) == 64, "cpu list header layout");
_Static_assert(sizeof(struct gs_fmt_cpu_piece) == 48, "cpu piece record layout");

/*
 * A chunk store (FORMAT.md 4.12): a directory shared by images, holding
 * store.img (its header: magic, version, id), lock (the gc lock), refs/ (one
 * ref file per dump that used the store), tmp/ (objects being written) and
 * objects/XX/ (the chunks, one file each, named by content: XX the first two
 * hex digits of the name, which is GS_STORE_OBJECT_NAME_FMT). Its own
 * version (GS_FMT_STORE_VERSION), same rules as GS_FMT_VERSION.
 */
#define GS_FMT_STORE_MAGIC "GPUSNAPS"
#define GS_FMT_OBJECT_MAGIC "GPUSNAPO"
#define GS_FMT_STORE_VERSION 1u
#define GS_STORE_HEADER_NAME "store.img"
#define GS_STORE_LOCK_NAME "lock"
#define GS_STORE_REFS_DIR "refs"
#define GS_STORE_TMP_DIR "tmp"
#define GS_STORE_OBJECTS_DIR "objects"
#define GS_STORE_REF_SUFFIX ".ref"
/* fp_hi, fp_lo (16 hex digits each), crc32c (8), length (hex, no leading zeros) */
#define GS_STORE_OBJECT_NAME_FMT "%016" PRIx64 "%016" PRIx64 "-%08" PRIx32 "-%" PRIx64
#define GS_STORE_OBJECT_NAME_MAX 64 /* 32 + 1 + 8 + 1 + 16 + NUL, with room */

struct gs_fmt_store_header {
	char magic[8];        /* GS_FMT_STORE_MAGIC */
	uint32_t version;     /* GS_FMT_STORE_VERSION */
	uint32_t header_size; /* sizeof(struct gs_fmt_store_header) as written */
	uint8_t store_id[16]; /* random, made when the store is created; images record it */
	uint32_t flags;       /* none defined: must be 0 */
	uint8_t reserved[8];
	uint32_t crc32c;      /* CRC-32C of the bytes before this field */
};

/* First bytes of every object; the payload (stored_length bytes) follows at header_size. */
struct gs_fmt_object_header {
	char magic[8];          /* GS_FMT_OBJECT_MAGIC */
	uint32_t version;       /* GS_FMT_STORE_VERSION */
	uint32_t header_size;   /* sizeof(struct gs_fmt_object_header) as written: where the payload starts */
	uint64_t length;        /* the chunk's bytes (uncompressed), > 0 */
	uint64_t stored_length; /* payload bytes: length unless codec is not NONE */
	uint64_t fp_lo, fp_hi;  /* the chunk's fingerprint (FORMAT.md 4.8.2), not 0, 0 */
	uint32_t crc32c;        /* CRC-32C of the length bytes */
	uint32_t stored_crc32c; /* CRC-32C of the payload: crc32c unless compressed */
	uint8_t codec;          /* enum gs_fmt_codec, as a chunk record's */
	uint8_t transform;      /* enum gs_fmt_transform */
	uint16_t reserved;
	uint32_t header_crc32c; /* CRC-32C of the bytes before this field */
};
_Static_assert(sizeof(struct gs_fmt_store_header) == 48, "store header layout");
_Static_assert(offsetof(struct gs_fmt_store_header, crc32c) == 44, "store header crc position");
_Static_assert(sizeof(struct gs_fmt_object_header) == 64, "object header layout");
_Static_assert(offsetof(struct gs_fmt_object_header, header_crc32c) == 60, "object header crc position");

#endif
