/*
 * agent_lifecycle.h - the one state machine of the app's GPU data inside the
 * agent: every request that moves it (suspend, dump, resume, restore, the
 * tree's gate) is a walk along these states, and the state is written in one
 * place (agent_lifecycle.c).
 *
 *   RUNNING --gate--> GATED --sync--> QUIESCED --copy--> COPIED --release--> RELEASED
 *      ^                |                |                  |                    |
 *      +------open------+------open------+<-----drop--------+<----bring back-----+
 *
 *   RUNNING   the gate is open; the data is on the GPU.
 *   GATED     the gate is closed for a --tree suspend (GATE request); a
 *             lease reopens it if its SUSPEND never comes.
 *   QUIESCED  the gate is closed and every context's GPU work has ended.
 *   COPIED    + a full copy of the data in the holder: a staging pool
 *             (suspend) or a sealed image (dump).
 *   RELEASED  + physical memory released (some or all regions): the data is
 *             only in the holder. This is "suspended" (keep-context: data
 *             released); `gpusnap state` shows it.
 *
 * Each forward step has its undo, the step back beside it; a failed request
 * walks back from where it stopped. The rule the machine keeps: the gate opens
 * only from QUIESCED or GATED, where the data is on the GPU; so the app never
 * runs on memory that does not hold its data. When a step back fails (the
 * memory cannot be re-created, the holder cannot be read), the walk stops in
 * RELEASED: the process stays suspended with its data in the holder, INFO
 * carries why (GS_F_FAULT, shown as "suspended (rollback failed: ...)"),
 * and RESUME, which is the same walk back, retries.
 *
 * Every function takes a->lock for its whole run and returns a gs code with
 * err set; timings and counters go into reply. Timeouts: <= 0 means no limit.
 */
#ifndef GPUSNAP_AGENT_AGENT_LIFECYCLE_H
#define GPUSNAP_AGENT_AGENT_LIFECYCLE_H

#include <stdbool.h>

#include "agent/base/agent.h"
#include "core/protocol.h"

/* SUSPEND: to RELEASED through a staging pool; keep_context: the driver is not asked to checkpoint. */
int gs_lc_suspend(struct gs_agent *a, double timeout_s, bool keep_context, struct gs_msg *reply, struct gs_err *err);
/*
 * SUSPEND_FD: as SUSPEND, with a spill directory: dir, an empty
 * temporary image directory (dir_name as below). After the zero scan the
 * data goes into a staging pool if the host admits it and !only, else it is
 * streamed into a sealed image in dir (the reply's counter "spilled" is 1);
 * the process is suspended either way, RESUME_FD with that directory brings
 * it back. A spill that fails (a full disk) walks back: the process runs on.
 */
struct gs_lc_spill {
	const char *dir;
	const char *dir_name;
	bool only; /* spill even where host memory would hold it */
};
int gs_lc_suspend_spill(struct gs_agent *a, double timeout_s, bool keep_context, const struct gs_lc_spill *sp,
			struct gs_msg *reply, struct gs_err *err);
/*
 * dir_name, below: what gpu_dir is called where it came as a descriptor
 * (gpu_dir then /proc/self/fd/N/.): the directory's real path as this
 * process sees it, or NULL when it has none. It, never a descriptor's path,
 * is recorded as where the data is (the descriptor is closed after the
 * request), for a later RESUME without a directory and for messages.
 *
 * DUMP: as o says (core/protocol.h, struct gs_dump_opts), the one struct the
 * command line's options travel in down to the image writer. o->running: to
 * RELEASED through a sealed image in gpu_dir (no staging pool); o->cached:
 * through the page cache, the data files left for the publish to sync.
 * Otherwise gs_lc_save.
 */
int gs_lc_dump(struct gs_agent *a, const char *gpu_dir, const char *dir_name, double timeout_s,
	       const struct gs_dump_opts *o, struct gs_msg *reply, struct gs_err *err);
/*
 * DUMP of a suspended process (agents before the streamed dump): writes the
 * staging pool into a sealed image in gpu_dir; o->drop_staging frees the pool
 * afterwards, and the image becomes the holder.
 */
int gs_lc_save(struct gs_agent *a, const char *gpu_dir, const char *dir_name, const struct gs_dump_opts *o,
	       struct gs_msg *reply, struct gs_err *err);
/*
 * RESUME: back to RUNNING, the data from the image at gpu_dir when given,
 * else from the holder (the staging pool, or the image the data was dumped
 * to). On failure the process stays suspended and a later RESUME retries:
 * an image at gpu_dir that matched is where the data is said to be from then
 * on (a plugin's dump publishes its image under another name than the one
 * it was written to), and the agent's INFO says that the resume failed
 * (GS_F_FAULT) until one succeeds. verify_gpu: the data loaded from an
 * image is checked against the image's fingerprints on the GPU
 * (agent_fingerprint.h) before the process goes on; a mismatch fails the
 * resume (GS_E_IMAGE naming the chunk). stay_gated leaves the gate closed
 * (GATED, with a lease) until OPEN: processes that share memory
 * (agent_share.h).
 */
int gs_lc_resume_gated(struct gs_agent *a, const char *gpu_dir, const char *dir_name, bool stay_gated, bool verify_gpu,
		       struct gs_msg *reply, struct gs_err *err);
/* PREPARE: with the data in an image, gets the restore's copy ring ready (no CUDA call); replies at once. */
int gs_lc_prepare(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err);
/* GATE (RUNNING -> GATED) and its undo OPEN (GATED -> RUNNING; a RUNNING agent, its lease expired, is fine). */
int gs_lc_gate(struct gs_agent *a, double timeout_s, double lease_s, struct gs_msg *reply, struct gs_err *err);
int gs_lc_open(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err);
/* Adds the state (GS_F_STATE) and, if an undo failed, why (GS_F_FAULT) to an INFO reply; does not wait for a->lock. */
void gs_lc_info(struct gs_agent *a, struct gs_msg *reply);

#endif
