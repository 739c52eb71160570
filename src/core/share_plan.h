/*
 * share_plan.h - GPU memory shared between processes as file descriptors
 * (cuMemExportToShareableHandle / cuMemImportFromShareableHandle with
 * POSIX file descriptors, as NCCL does with cuMem): the records the agents
 * report, their wire form, and the plan gpusnap makes from them before a
 * suspend or dump of several processes (docs/DESIGN.md, "Memory shared
 * between processes").
 *
 * An agent keeps a duplicate of every descriptor it saw exported (export)
 * or imported (import) and reports its number. Two such descriptors refer to
 * the same exported allocation when they are the same open file, which the
 * caller tells (kcmp(2) KCMP_FILE in gpusnap); the plan links each import to
 * the export it came from and refuses what cannot be moved.
 *
 * No CUDA, no I/O: the comparison is the caller's callback.
 */
#ifndef GPUSNAP_CORE_SHARE_PLAN_H
#define GPUSNAP_CORE_SHARE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "core/protocol.h"

/* export flags */
#define GS_SHARE_EXPORT_READY 1u /* a descriptor of the allocation is open in the agent (fd valid) */
/* import flags */
#define GS_SHARE_IMPORT_APP_HOLDS 1u /* the app still holds a descriptor of the memory it imported */
#define GS_SHARE_IMPORT_LINKED 2u    /* exporter and export are known (SHARE_LINK) */
#define GS_SHARE_IMPORT_RELEASED 4u  /* released by a suspend or dump: waits for a descriptor to import again */

/* One exported allocation of process pid (vh: the app's handle, the agent's virtual one). */
struct gs_share_export {
	pid_t pid;
	uint64_t vh;
	int fd; /* in pid, or -1 */
	uint32_t flags;
};

/* One imported allocation of process pid and, once linked, where it comes from. */
struct gs_share_import {
	pid_t pid;
	uint64_t vh;
	int fd; /* in pid, or -1 */
	uint32_t flags;
	pid_t exporter;
	uint64_t export_vh;
};

/* A link or a descriptor handed to an importer (SHARE_LINK, SHARE_IMPORT): import vh, exporter, export vh, fd index. */
struct gs_share_link {
	uint64_t import_vh;
	pid_t exporter;
	uint64_t export_vh;
	uint32_t fd_index; /* reserved (0): SHARE_IMPORT passes one descriptor per request */
};

/* Wire form: one BYTES field per record (little-endian u64s), tags below. */
enum {
	GS_F_SHARE_EXPORT = 130, /* bytes: vh, fd, flags */
	GS_F_SHARE_IMPORT = 131, /* bytes: vh, fd, flags, exporter, export vh */
	GS_F_SHARE_LINK = 132,   /* bytes: import vh, exporter, export vh, fd index */
};
/* Metadata keys of an agent's image (followed by 0, 1, ...; agent_share.h gs_share_describe) and a value's limit. */
#define GS_SHARE_META_EXPORT "share.export."
#define GS_SHARE_META_IMPORT "share.import."
#define GS_SHARE_DESCRIBE_MAX 4096
/*
 * Reads an import's metadata value: its exporter and the exporter's handle.
 * GS_E_IMAGE naming key when malformed.
 */
int gs_share_parse_import_meta(const char *key, const char *value, pid_t *exporter, uint64_t *export_vh,
			       struct gs_err *err);
/* Reads an export's metadata value: the handle. GS_E_IMAGE when malformed. */
int gs_share_parse_export_meta(const char *key, const char *value, uint64_t *vh, struct gs_err *err);

void gs_share_add_export(struct gs_msg *m, const struct gs_share_export *e);
void gs_share_add_import(struct gs_msg *m, const struct gs_share_import *i);
void gs_share_add_link(struct gs_msg *m, const struct gs_share_link *l);
/*
 * Decodes every record of one kind in m into a malloc'd array (*out, *n;
 * NULL and 0 when none); pid is set to `pid` for exports and imports.
 * GS_E_AGENT for a record of the wrong size.
 */
int gs_share_get_exports(const struct gs_msg *m, pid_t pid, struct gs_share_export **out, size_t *n,
			 struct gs_err *err);
int gs_share_get_imports(const struct gs_msg *m, pid_t pid, struct gs_share_import **out, size_t *n,
			 struct gs_err *err);
int gs_share_get_links(const struct gs_msg *m, struct gs_share_link **out, size_t *n, struct gs_err *err);

/* 0: the two descriptors are the same open file; 1: they are not; -1: cannot tell (err set). */
typedef int (*gs_share_same_file_fn)(void *ctx, pid_t pid_a, int fd_a, pid_t pid_b, int fd_b, struct gs_err *err);

/*
 * Links every import to the export it came from (sets exporter, export_vh
 * and GS_SHARE_IMPORT_LINKED). Refuses, GS_E_STATE naming the process:
 * an importer that still holds the descriptor it imported from (the memory
 * could not be freed and would not follow the exporter), an import no
 * export of these processes matches (its exporter is outside them, runs
 * without the agent, or keeps the descriptor it exported open itself), and,
 * unless `together` (every process of a tree is in the set), any export
 * at all (an importer elsewhere would keep the old memory). An import
 * already released (by a suspend) keeps its link.
 */
int gs_share_plan(struct gs_share_export *exports, size_t nexports, struct gs_share_import *imports, size_t nimports,
		  bool together, gs_share_same_file_fn same, void *ctx, struct gs_err *err);

#endif
