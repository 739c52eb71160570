/*
 * protocol.h - the messages between gpusnap and its preloaded agent.
 *
 * One request and one reply per connection over a Unix stream socket
 * (control_socket.h). Every frame is a fixed 16-byte little-endian header
 *
 *     u32 magic "GSNP" | u16 protocol version | u16 message type | u32 payload length | u32 reserved (0)
 *
 * followed by the payload: a sequence of typed fields
 *
 *     u16 tag | u8 field type | u8 reserved (0) | u32 value length | value
 *
 * Field types: U64 and F64 (8 bytes, little-endian), STR (UTF-8 with a
 * terminating NUL, no NUL inside), BYTES (anything), NAMED_U64 / NAMED_F64 (a
 * NUL-terminated name of [a-z0-9_.-], 1-63 characters, then 8 bytes): named
 * numbers carry timings and byte counts, so the agent can report a new phase
 * without a protocol change. A tag may repeat (named fields do).
 *
 * Compatibility: the header layout never changes, so a peer of another
 * version is always recognised and named ("agent speaks protocol 2, gpusnap
 * speaks 1"). Within a version, new tags and new field types may be added:
 * decoders skip tags and types they do not know. Anything that changes the
 * meaning of an existing tag bumps GS_PROTO_VERSION.
 *
 * The decoder is strict about what it knows: payload at most
 * GS_MSG_MAX_PAYLOAD, every field inside the payload, fixed-size values of
 * their size, strings terminated and without embedded NUL, valid names. What
 * an agent sends is bounded too, since it runs in a process that may be
 * anyone's and its numbers reach root's terminal: a time (any F64 or named
 * F64) is finite, from 0 to GS_MSG_MAX_SECONDS; a count or byte count (any
 * named U64, and INFO's allocations and their bytes) at most
 * GS_MSG_MAX_AMOUNT, more than any process can address; a PID from 1 to
 * GS_MSG_MAX_PID. A frame with a number out of bounds is malformed
 * (GS_E_AGENT), never shown.
 *
 * Ownership and threads: a gs_msg owns its buffer; free it with gs_msg_free.
 * Pointers returned by getters point into the message and live as long as
 * it. One message is used by one thread at a time. No I/O here.
 */
#ifndef GPUSNAP_CORE_PROTOCOL_H
#define GPUSNAP_CORE_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GS_PROTO_MAGIC 0x504E5347u /* "GSNP" as little-endian bytes */
#define GS_PROTO_VERSION 1
#define GS_MSG_HEADER_SIZE 16
#define GS_MSG_MAX_PAYLOAD (16u << 20)
#define GS_MSG_MAX_NAME 63
/* Bounds on an agent's numbers: seconds, amounts (the 57-bit virtual address space of x86-64's 5-level paging), PIDs (PID_MAX_LIMIT) */
#define GS_MSG_MAX_SECONDS 1e7
#define GS_MSG_MAX_AMOUNT_BITS 57
#define GS_MSG_MAX_AMOUNT (1ull << GS_MSG_MAX_AMOUNT_BITS)
#define GS_MSG_MAX_PID 4194304

enum gs_msg_type {
	GS_MSG_HELLO = 1,   /* gpusnap -> agent: who are you; reply INFO */
	GS_MSG_INFO = 2,    /* agent -> gpusnap: pid, version, allocations, capabilities, state, unmanaged memory */
	GS_MSG_SUSPEND = 3, /* gpusnap -> agent: TIMEOUT, FLAGS (GS_SUSPEND_*); reply RESULT */
	GS_MSG_RESUME = 4,  /* gpusnap -> agent: TIMEOUT, DIR (the image holding the data, if any); reply RESULT */
	GS_MSG_STATUS = 5,  /* gpusnap -> agent: current state; reply INFO */
	GS_MSG_DUMP = 6,    /* gpusnap -> agent: DIR, TIMEOUT, FLAGS (GS_DUMP_*); reply RESULT */
	GS_MSG_RESULT = 7,  /* agent -> gpusnap: CODE, MESSAGE, TIMING*, COUNTER* */
	GS_MSG_PREPARE = 8, /* gpusnap -> agent, before the driver restores it: start getting host memory ready for
			       a RESUME from an image (no CUDA call); reply RESULT at once */
	/*
	 * --tree: every gate of the tree closes before any process waits for its
	 * GPU work (ranks that wait on each other would deadlock otherwise).
	 * GATE: TIMEOUT (for app threads to leave the driver), LEASE (seconds
	 * until the agent reopens the gate by itself if no SUSPEND or OPEN came);
	 * reply RESULT once the gate is closed, without waiting for GPU work.
	 * OPEN: reopens a gate GATE closed (the rollback); RESULT.
	 */
	GS_MSG_GATE = 9,
	GS_MSG_OPEN = 10,
	/*
	 * 20-29: the CRIU plugin (issue 12). The agent may live in another mount
	 * namespace (a container) than the image directory's path means: the
	 * directory travels with the request as a descriptor (SCM_RIGHTS on the
	 * control socket, gs_ctl_call_fd), not as DIR. Agents with GS_CAP_DIR_FD.
	 * DUMP_FD: as DUMP (TIMEOUT, FLAGS GS_DUMP_*), into the passed directory.
	 * RESUME_FD: as RESUME, loading the GPU data from the passed directory
	 * (FLAGS GS_RESUME_STAY_GATED: agents with GS_CAP_GATED_FD).
	 */
	GS_MSG_DUMP_FD = 20,
	GS_MSG_RESUME_FD = 21,
	/*
	 * SUSPEND_FD: as SUSPEND (TIMEOUT, FLAGS GS_SUSPEND_*), with a spill
	 * directory passed as a descriptor: an empty temporary image directory
	 * (the storage tier). After the zero scan the agent holds the
	 * data in host memory if it fits there (and GS_SUSPEND_SPILL_ONLY is not
	 * set), else streams it into that directory as a sealed image; the reply's
	 * counter "spilled" says which. Agents with GS_CAP_SPILL.
	 */
	GS_MSG_SUSPEND_FD = 22,
	/*
	 * 30-39: GPU memory shared between processes as file descriptors
	 * (core/share_plan.h; records GS_F_SHARE_*). SHARES: the agent's
	 * exports and imports (RESULT with the records). SHARE_LINK: before a
	 * suspend or dump of several processes, each import's exporter (LINK
	 * records; sent to every agent that shares, as the go-ahead). SHARE_EXPORT:
	 * suspended, create the exported allocations again and export them
	 * (RESULT with EXPORT records, their descriptors open in the agent).
	 * SHARE_IMPORT: suspended, the descriptor to import one import from on
	 * resume (one LINK record; the descriptor passed along, gs_ctl_call_fd).
	 */
	GS_MSG_SHARES = 30,
	GS_MSG_SHARE_LINK = 31,
	GS_MSG_SHARE_EXPORT = 32,
	GS_MSG_SHARE_IMPORT = 33,
	/*
	 * SHARE_RELEASE: suspended, once every process of the operation is: let go
	 * of the imports (duplicates kept, so a rollback stays local); with FLAGS
	 * GS_SHARE_RELEASE_CLOSE, close the duplicates (the memory can go).
	 */
	GS_MSG_SHARE_RELEASE = 34,
};

/* Field tags: one namespace for all message types. */
enum gs_msg_tag {
	GS_F_PID = 1,               /* u64: the agent's process id as it sees itself */
	GS_F_VERSION = 2,           /* str: gpusnap version of the sender */
	GS_F_ALLOC_COUNT = 3,       /* u64: allocations the agent manages */
	GS_F_ALLOC_BYTES = 4,       /* u64: their bytes */
	GS_F_CAPS = 5,              /* u64: GS_CAP_* bits */
	GS_F_STATE = 6,             /* u64: enum gs_agent_state */
	GS_F_UNMANAGED_COUNT = 7,   /* u64: device memory the agent cannot release (managed, IPC) */
	GS_F_UNMANAGED_BYTES = 8,   /* u64 */
	GS_F_UNMANAGED_DETAIL = 9,  /* str: one line per kind, e.g. "managed 3 allocations 1.00 GiB" */
	GS_F_TIMEOUT = 10,          /* f64: seconds the agent may wait for GPU work; <= 0: no limit */
	GS_F_FLAGS = 11,            /* u64: GS_SUSPEND_* */
	GS_F_DIR = 12,              /* str: image directory */
	GS_F_CODE = 13,             /* u64: gs exit code (err.h) */
	GS_F_MESSAGE = 14,          /* str: one line */
	GS_F_TIMING = 15,           /* named f64, repeated: seconds per phase ("quiesce", "copy_out") */
	GS_F_COUNTER = 16,          /* named u64, repeated: byte and item counts ("bytes_copied") */
	GS_F_DEVICE_COUNT = 17,     /* u64: GPUs the app uses */
	GS_F_LEASE = 18,            /* f64: GATE: seconds the gate may stay closed waiting for the SUSPEND */
	GS_F_FAULT = 19,            /* str: INFO: why the process stays suspended (an undo failed); absent if none */
	GS_F_HELD_MEMORY = 20,      /* u64: INFO, suspended: bytes of GPU data the agent holds in host memory */
	GS_F_HELD_IMAGE = 21,       /* u64: INFO, suspended: bytes of GPU data in an image (spilled or dumped) */
	GS_F_COMPRESS = 40,         /* u64: DUMP, DUMP_FD: codec (enum gs_fmt_codec) | level << 8; absent: none */
	GS_F_PARENT = 41,           /* str: DUMP, DUMP_FD: the parent image to open (dump --parent); absent: a full image */
	GS_F_PARENT_REC = 42,       /* str: with GS_F_PARENT: the parent's path as the image records it */
	GS_F_STORE = 43,            /* str: DUMP, DUMP_FD: the chunk store to write into (dump --store); absent: none */
	GS_F_STORE_REC = 44,        /* str: with GS_F_STORE: the store's path as the image records it */
	GS_F_STORE_REF = 45,        /* str: with GS_F_STORE: the dump's ref file in the store's refs/ (the command made it) */
};

enum gs_msg_field_type {
	GS_FT_U64 = 1,
	GS_FT_F64 = 2,
	GS_FT_STR = 3,
	GS_FT_BYTES = 4,
	GS_FT_NAMED_U64 = 5,
	GS_FT_NAMED_F64 = 6,
};

enum gs_agent_caps {
	GS_CAP_SUSPEND = 1u << 0,
	GS_CAP_KEEP_CONTEXT = 1u << 1,
	GS_CAP_DUMP = 1u << 2,
	GS_CAP_RESERVED_POOL = 1u << 3, /* a staging pool is reserved (--reserve) */
	GS_CAP_DUMP_RUNNING = 1u << 4,  /* DUMP with GS_DUMP_RUNNING: streams a running process's data into the image */
	GS_CAP_PREPARE = 1u << 5,       /* PREPARE: maps the copy ring while the driver restores the process */
	GS_CAP_GATE = 1u << 6,          /* GATE and OPEN; TIMEOUT <= 0 means no limit */
	GS_CAP_DUMP_CACHED = 1u << 7,   /* DUMP with GS_DUMP_CACHED */
	GS_CAP_DUMP_COMPRESS = 1u << 12, /* DUMP, DUMP_FD with GS_F_COMPRESS: compressed chunks */
	GS_CAP_VERIFY_GPU = 1u << 13,    /* RESUME, RESUME_FD with GS_RESUME_VERIFY_GPU */
	GS_CAP_DUMP_PARENT = 1u << 14,   /* DUMP, DUMP_FD (running) with GS_F_PARENT: incremental images */
	GS_CAP_DUMP_STORE = 1u << 15,    /* DUMP, DUMP_FD (running) with GS_F_STORE: chunks into a chunk store */
	GS_CAP_DIR_FD = 1u << 20,       /* DUMP_FD and RESUME_FD: the image directory passed as a descriptor */
	GS_CAP_GATED_FD = 1u << 21,     /* RESUME_FD takes GS_RESUME_STAY_GATED as RESUME does */
	GS_CAP_SPILL = 1u << 22,        /* SUSPEND_FD: a suspend that may spill into an image (the storage tier) */
};

enum gs_suspend_flags {
	GS_SUSPEND_KEEP_CONTEXT = 1u << 0, /* release data only; keep the CUDA context (no driver checkpoint) */
	GS_DUMP_DROP_STAGING = 1u << 1,    /* DUMP: free the staging memory once the image is written */
	GS_DUMP_RUNNING = 1u << 2,         /* DUMP of a running process: quiesce, stream to the image, release */
	/*
	 * DUMP (with RUNNING): the image is read back right after (dump
	 * --leave-running): write it through the page cache and leave the data
	 * files' fsync to the publish, which comes once the process runs again.
	 */
	GS_DUMP_CACHED = 1u << 3,
	GS_SUSPEND_SPILL_ONLY = 1u << 4, /* SUSPEND_FD: into the passed directory even if host memory would hold it */
};
/* RESUME: memory shared between processes (GS_MSG_SHARES): leave the gate closed (GATED) until OPEN. */
#define GS_RESUME_STAY_GATED (1u << 8)
/* RESUME from an image: check every chunk's fingerprint on the GPU once it is loaded (restore --verify-gpu). */
#define GS_RESUME_VERIFY_GPU (1u << 9)
#define GS_RESUME_FLAGS_KNOWN ((uint64_t)(GS_RESUME_STAY_GATED | GS_RESUME_VERIFY_GPU))
/* SHARE_RELEASE: the second step, closing the agent's duplicates of shared descriptors. */
#define GS_SHARE_RELEASE_CLOSE (1u << 0)
/* The FLAGS each request may carry (gs_msg_check_request refuses others): add a new flag here too. */
#define GS_SUSPEND_FLAGS_KNOWN ((uint64_t)GS_SUSPEND_KEEP_CONTEXT)
#define GS_SUSPEND_FD_FLAGS_KNOWN ((uint64_t)(GS_SUSPEND_KEEP_CONTEXT | GS_SUSPEND_SPILL_ONLY))
#define GS_DUMP_FLAGS_KNOWN ((uint64_t)(GS_DUMP_DROP_STAGING | GS_DUMP_RUNNING | GS_DUMP_CACHED))

enum gs_agent_state {
	GS_AGENT_RUNNING = 0,
	GS_AGENT_SUSPENDED = 1,     /* data and context released */
	GS_AGENT_DATA_RELEASED = 2, /* keep-context suspend: data released, context kept */
	GS_AGENT_BUSY = 3,          /* a suspend or resume is under way */
	GS_AGENT_GATED = 4,         /* GATE closed the gate; its SUSPEND has not come yet */
};

/* Who sent a frame being decoded: names the sides in version messages. */
enum gs_peer {
	GS_PEER_AGENT = 0,
	GS_PEER_CLI = 1,
};

struct gs_msg_slot; /* internal: where a field sits in the buffer */

struct gs_msg {
	uint16_t type;
	uint16_t version;
	uint8_t *buf; /* header + payload */
	size_t len, cap;
	struct gs_msg_slot *slots;
	size_t nslots, slots_cap;
	const char *failed; /* first builder failure, NULL if none */
};

/* A decoded view of one field. */
struct gs_msg_field {
	uint16_t tag;
	uint8_t type;
	const char *name; /* named types, else NULL */
	uint64_t u64;     /* U64, NAMED_U64 */
	double f64;       /* F64, NAMED_F64 */
	const char *str;  /* STR (NUL-terminated) */
	const void *data; /* STR, BYTES: the value; len excludes a STR's NUL */
	size_t len;
};

void gs_msg_init(struct gs_msg *m, uint16_t type);
void gs_msg_free(struct gs_msg *m);

/*
 * Builders append a field. A failure (out of memory, payload over the limit,
 * bad name) is remembered in m->failed and reported by gs_msg_finish, so a
 * message can be built without checking every call.
 */
void gs_msg_add_u64(struct gs_msg *m, uint16_t tag, uint64_t v);
void gs_msg_add_f64(struct gs_msg *m, uint16_t tag, double v);
void gs_msg_add_str(struct gs_msg *m, uint16_t tag, const char *s);
void gs_msg_add_bytes(struct gs_msg *m, uint16_t tag, const void *data, size_t len);
void gs_msg_add_named_u64(struct gs_msg *m, uint16_t tag, const char *name, uint64_t v);
void gs_msg_add_named_f64(struct gs_msg *m, uint16_t tag, const char *name, double v);
/* A RESULT: code, then the message (printf-style), nothing else yet. */
void gs_msg_set_result(struct gs_msg *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Completes the header; *frame (owned by m, valid until the next change) and
 * *len are what goes on the wire. GS_E_FAILURE with the builder's failure.
 */
int gs_msg_finish(struct gs_msg *m, const void **frame, size_t *len, struct gs_err *err);

/*
 * Checks a frame's first GS_MSG_HEADER_SIZE bytes: magic and payload bound.
 * Stores the payload length. Used by readers to know how much follows; the
 * version is checked by gs_msg_decode once the whole frame is read, so a
 * stream stays in step even with a peer of another version.
 */
int gs_msg_parse_header(const void *header, enum gs_peer from, uint32_t *payload_len, struct gs_err *err);
/*
 * Decodes a whole frame into m (which it initialises; free it even on
 * failure). GS_E_AGENT for anything malformed or a version mismatch; the
 * message names the problem.
 */
int gs_msg_decode(const void *frame, size_t len, enum gs_peer from, struct gs_msg *m, struct gs_err *err);

/* Getters: the first field with this tag and the expected type. */
bool gs_msg_get_u64(const struct gs_msg *m, uint16_t tag, uint64_t *v);
bool gs_msg_get_f64(const struct gs_msg *m, uint16_t tag, double *v);
const char *gs_msg_get_str(const struct gs_msg *m, uint16_t tag); /* NULL if absent */
bool gs_msg_get_bytes(const struct gs_msg *m, uint16_t tag, const void **data, size_t *len);
/* A named field with this tag and name. */
bool gs_msg_get_named_u64(const struct gs_msg *m, uint16_t tag, const char *name, uint64_t *v);
bool gs_msg_get_named_f64(const struct gs_msg *m, uint16_t tag, const char *name, double *v);
/* All fields in order (also unknown tags of known types), e.g. to list every TIMING. */
size_t gs_msg_field_count(const struct gs_msg *m);
bool gs_msg_field_at(const struct gs_msg *m, size_t i, struct gs_msg_field *f);

/*
 * For a RESULT reply: returns its code (GS_OK or an error) and, for an error,
 * fills err with the agent's message. A RESULT without a code is GS_E_AGENT.
 */
int gs_msg_result_code(const struct gs_msg *m, struct gs_err *err);

/*
 * For the agent, before it acts on a request from gpusnap: the FLAGS are
 * ones this request type knows (GS_*_FLAGS_KNOWN) and a TIMEOUT is a finite
 * number >= 0. GS_E_USAGE naming what is wrong; a request that fails is
 * answered with that and not carried out. Types it does not know pass (the
 * handler answers them).
 */
int gs_msg_check_request(const struct gs_msg *req, struct gs_err *err);
/* Whether a request type changes the agent's state (suspend, resume, dump, prepare, gate, open): one runs at a time. */
bool gs_msg_is_operation(uint16_t type);

/*
 * What a dump does, as one struct from the command line (cmd_dump.c, through
 * agent_client.c) to the agent's lifecycle and its image writer: it travels
 * as the DUMP request's GS_DUMP_* flags.
 */
struct gs_dump_opts {
	bool running;      /* GS_DUMP_RUNNING: quiesce, stream the running process's data into the image, release */
	bool cached;       /* GS_DUMP_CACHED: the image is read back right after; data files' fsync left to the publish */
	bool drop_staging; /* GS_DUMP_DROP_STAGING: (of a suspended process) free the staging once the image is written */
	uint8_t compress_codec; /* GS_F_COMPRESS: compress the image's chunks (enum gs_fmt_codec, image/format.h) */
	int compress_level;     /* 0: the codec's default */
	const char *parent;     /* GS_F_PARENT: an incremental image against this one; NULL: full. Decoded: into the message */
	const char *parent_rec; /* GS_F_PARENT_REC: the parent's path as recorded (NULL: parent) */
	const char *store;      /* GS_F_STORE: the chunk store the image's chunks go into; NULL: none. Decoded: into the message */
	const char *store_rec;  /* GS_F_STORE_REC: the store's path as recorded (NULL: store) */
	const char *store_ref;  /* GS_F_STORE_REF: the dump's ref in the store (a file name in its refs/) */
};

/*
 * A control request from gpusnap to the agent, decoded once from its message
 * (gs_request_decode, after gs_msg_check_request) or built by the command and
 * encoded into one (gs_request_encode). Only the members of its type count.
 */
struct gs_request {
	uint16_t type;              /* enum gs_msg_type */
	double timeout_s;           /* GS_F_TIMEOUT: the agent's bound on waiting for GPU work; 0: none */
	double lease_s;             /* GS_F_LEASE (GATE); 0: absent */
	const char *dir;            /* GS_F_DIR (DUMP, RESUME): the image directory; NULL: absent. Decoded: into the message */
	bool keep_context;          /* SUSPEND: GS_SUSPEND_KEEP_CONTEXT */
	bool stay_gated;            /* RESUME, RESUME_FD: GS_RESUME_STAY_GATED */
	bool spill_only;            /* SUSPEND_FD: GS_SUSPEND_SPILL_ONLY */
	bool verify_gpu;            /* RESUME, RESUME_FD: GS_RESUME_VERIFY_GPU */
	struct gs_dump_opts dump;   /* DUMP, DUMP_FD */
};
/* The timeout a request without GS_F_TIMEOUT gets, in seconds. */
#define GS_REQUEST_DEFAULT_TIMEOUT_S 30.0

/* Fills r from m; r->dir points into m. Checks nothing gs_msg_check_request does not. */
void gs_request_decode(const struct gs_msg *m, struct gs_request *r);
/* Initializes m (gs_msg_init) as the message of r. */
void gs_request_encode(const struct gs_request *r, struct gs_msg *m);

/* "hello", "suspend", ... ; "unknown" otherwise. */
const char *gs_msg_type_name(uint16_t type);
const char *gs_agent_state_name(uint64_t state);

#endif
