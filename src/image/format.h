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
#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpusnap images are little-endian and copied with memcpy: add byte swapping for this host"
#endif

#define GS_FMT_VERSION 1u

/* ---- names inside an image directory ---- */
#define GS_FMT_MANIFEST_NAME "manifest.img"
#define GS_FMT_CPU_DIR_NAME "cpu"
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
};
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

#define GS_CHUNK_F_ZERO 0x1u /* all bytes are zero; nothing stored (file_index, file_offset, crc32c are 0) */
/*
 * the payload is not in this image: a partial image (a suspend's spill whose
 * other part stayed in the process's host memory); nothing stored, file_index,
 * file_offset, crc32c are 0. Only gs_image_open_partial opens such an image.
 */
#define GS_CHUNK_F_ELSEWHERE 0x2u
#define GS_CHUNK_F_KNOWN (GS_CHUNK_F_ZERO | GS_CHUNK_F_ELSEWHERE)

struct gs_fmt_chunk {
	uint64_t alloc_id;    /* a gs_fmt_allocation.id */
	uint64_t offset;      /* within the allocation */
	uint64_t length;      /* bytes, > 0 */
	uint64_t file_offset; /* within the data file, a multiple of GS_FMT_ALIGN, >= GS_FMT_ALIGN */
	uint32_t file_index;  /* a gs_fmt_data_file.index */
	uint32_t flags;       /* GS_CHUNK_F_* */
	uint32_t crc32c;      /* CRC-32C of the payload's `length` bytes */
	uint32_t reserved;
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
	uint32_t version;      /* GS_FMT_VERSION */
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
_Static_assert(sizeof(struct gs_fmt_chunk) == 48, "chunk record layout");
_Static_assert(sizeof(struct gs_fmt_metadata) == 32, "metadata record layout");
_Static_assert(sizeof(struct gs_fmt_manifest_trailer) == 16, "trailer layout");
_Static_assert(sizeof(struct gs_fmt_data_header) == 64, "data header layout");
_Static_assert(offsetof(struct gs_fmt_data_header, crc32c) == 60, "data header crc position");
_Static_assert(sizeof(struct gs_fmt_cpu_list_header) == 64, "cpu list header layout");
_Static_assert(sizeof(struct gs_fmt_cpu_piece) == 48, "cpu piece record layout");

#endif
