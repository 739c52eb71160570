/*
 * dump_common.h - what `gpusnap dump` and `gpusnap restore` agree on beyond
 * the image format: metadata keys gpusnap writes, and sizes of what an image
 * holds for reports.
 */
#ifndef GPUSNAP_CLI_DUMP_COMMON_H
#define GPUSNAP_CLI_DUMP_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "image/image.h"
#include "image/store.h"

/* Metadata key prefix: "vram_bytes.GPU-<uuid>" = GPU memory the process held on that GPU when dumped (NVML). */
#define DUMP_META_VRAM_PREFIX "vram_bytes."

/* Adds the session's GPUs in mask to the image (every GPU when mask is 0: where the process is on is unknown). */
int dump_add_gpus(struct gs_image_writer *w, const struct cli_session *s, uint64_t mask, struct gs_err *err);
/* Records vram[i] for each GPU i in mask under DUMP_META_VRAM_PREFIX + its UUID. */
int dump_set_metadata(struct gs_image_writer *w, const struct cli_session *s, const uint64_t *vram, uint64_t mask,
		      struct gs_err *err);
/*
 * The command that restores an image a dump kept unpublished: "gpusnap
 * restore", with --allow-unverified-cpu where the image has no checksums of
 * CRIU's files (cpu_listed false: gpusnap died or failed before it wrote them).
 */
const char *dump_restore_cmd(bool cpu_listed);
/*
 * dump --leave-running's own copy of a process's GPU data (the stage,
 * image.h) in GPUSNAP_STAGE_DIR (default /dev/shm), sized need, or NULL
 * with why (n bytes) filled: the agent takes no directory descriptor, or
 * the memory pid is charged with (its cgroup's, else the host's) has no room
 * for total bytes (all the stages of one dump: each process's agent fills
 * its own, charged to it) and a margin, or the stage directory has none.
 * cpu_state: as gs_image_stage_create's.
 */
struct gs_image_stage *dump_stage_open(pid_t pid, const struct cli_agent *agent, uint64_t need, uint64_t total,
				       bool cpu_state, char *why, size_t n);
/* Bytes a process's stage needs: what its agent manages, or the driver's count of its GPU memory where larger. */
uint64_t dump_stage_need(const struct cli_agent *agent, const uint64_t *vram);
/*
 * The agent's dump of pid into dir, or into stage where one is given (by
 * its locked descriptor: gs_image_stage_fd).
 */
int dump_agent_into(pid_t pid, struct cli_agent *agent, const char *dir, const struct gs_image_stage *stage,
		    double timeout, const struct gs_dump_opts *d, struct gs_err *err);
/* --keep K: what it looks at (dir published, of the store st at store_path) and what it did. */
struct dump_keep {
	const char *dir, *store_path;
	struct gs_store *st;
	int keep;
	uint64_t removed, gc_objects, gc_bytes;
};
/*
 * --keep K, after dir was published: the older images of dir's series
 * beside it removed, the store collected (dump_common.c says which are
 * the series). What fails is said on stderr: the dump is done.
 */
void dump_keep_newest(struct dump_keep *k);
/* Bytes of the regular files under dir/sub (0 if absent). */
uint64_t dump_dir_bytes(const char *dir, const char *sub);

#endif
