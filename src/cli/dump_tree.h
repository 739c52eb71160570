/*
 * dump_tree.h - `gpusnap dump --tree` and the restore of the image it
 * writes: a process tree (CRIU dumps it whole) with the GPU state of each
 * CUDA process in it, ranks of one job that share GPU memory included
 * (docs/FORMAT.md, "Images of a process tree"; docs/DESIGN.md, "Dump and
 * restore through CRIU").
 */
#ifndef GPUSNAP_CLI_DUMP_TREE_H
#define GPUSNAP_CLI_DUMP_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "criu/criu.h"
#include "image/format.h"
#include "image/store.h"

/* The image's `how` and where its processes' GPU images are. */
#define DUMP_TREE_HOW GS_FMT_HOW_TREE
#define DUMP_TREE_PROCS_DIR GS_FMT_TREE_PROCS_NAME
/* Metadata key: the PIDs of the tree's CUDA processes, in decimal, separated by spaces; each has DIR/procs/<pid>/. */
#define DUMP_TREE_META_PIDS "tree.cuda_pids"

struct dump_tree_opts {
	const char *dir; /* absolute */
	double timeout;
	bool leave_running, driver_only, json, replace;
	bool multi_gpu_driver; /* --multi-gpu-driver */
	enum gs_criu_tcp tcp;
	uint8_t compress_codec; /* --compress (image/codec.h) */
	int compress_level;
	/*
	 * --store: the chunk store (its ref created, naming dir; the ref is
	 * removed where no image is published or kept), its absolute path, what
	 * DIR's manifest and each process's (DIR/procs/<pid>) record of it (a
	 * path relative to where each lies, or the absolute path) and the ref's
	 * name; keep: --keep K (0: none)
	 */
	struct gs_store *store;
	const char *store_path, *store_rec, *store_part_rec, *store_ref;
	int keep;
};

/* `gpusnap dump --tree`: the exit code, everything said on stdout/stderr. */
int dump_tree(const struct dump_tree_opts *o, const char *pid_arg);

/*
 * Parses DUMP_TREE_META_PIDS's value into a malloc'd array (*pids, *n):
 * GS_E_IMAGE for anything but one or more positive PIDs, each once.
 */
int dump_tree_parse_pids(const char *value, pid_t **pids, int *n, struct gs_err *err);

#endif
