/*
 * agent_client.h - the command line's side of the agent protocol: is there a
 * gpusnap agent in a process, what does it hold, and asking it to suspend or
 * resume. Timings and counters of a reply are kept for the report.
 */
#ifndef GPUSNAP_CLI_AGENT_CLIENT_H
#define GPUSNAP_CLI_AGENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "core/protocol.h"

#define CLI_AGENT_MAX_FIELDS 32

struct cli_agent_reply {
	int ntimings, ncounters;
	char timing_name[CLI_AGENT_MAX_FIELDS][64];
	double timing_s[CLI_AGENT_MAX_FIELDS];
	char counter_name[CLI_AGENT_MAX_FIELDS][64];
	uint64_t counter[CLI_AGENT_MAX_FIELDS];
};

struct cli_agent {
	bool present;
	char socket[512];
	uint64_t state; /* enum gs_agent_state */
	uint64_t caps, alloc_count, alloc_bytes, unmanaged_count, unmanaged_bytes;
	char fault[512]; /* why it stays suspended: an undo of its own failed ("" when none); made printable */
	/* suspended: bytes of its data in host memory, in an image (a spill); INFO's GS_F_HELD_* */
	uint64_t held_memory, held_image;
	/* where the last suspend put the data, for the report: "" (host memory) or the spill directory */
	char spill_dir[512];
	struct cli_agent_reply last; /* of the last request (a tree's OPEN follows its RESUME) */
	uint64_t verify_gpu_chunks;  /* the chunks its last RESUME with verify_gpu checked on the GPU */
};

/*
 * One request to pid's agent, with pass_fd (or -1) passed along
 * (SCM_RIGHTS): the agent's result code (messages made printable, a code
 * gpusnap does not have is GS_E_AGENT), its reply in *reply (free it in any
 * case).
 */
struct gs_msg;
int cli_agent_exchange(pid_t pid, const struct cli_agent *ag, struct gs_msg *req, int pass_fd, struct gs_msg *reply,
		       double timeout_s, struct gs_err *err);
/* Looks for the agent of pid; an absent agent is not an error (present = false). */
int cli_agent_probe(pid_t pid, struct cli_agent *ag, struct gs_err *err);
/*
 * cli_agent_probe of several processes at once, all within bound_s (the list
 * of every CUDA process, where any user may start an agent that accepts and
 * never answers): the HELLOs go out together (gs_ctl_call_many). Each ask
 * gets what cli_agent_probe would give, with silent set for an agent that
 * did not answer within the bound (rc GS_E_AGENT then).
 */
struct cli_agent_ask {
	pid_t pid;             /* in */
	struct cli_agent *ag;  /* out: what the agent said (caller-owned) */
	int rc;                /* out: as cli_agent_probe's */
	bool silent;           /* out: the agent did not answer in time */
	struct gs_err err;     /* out, when rc != 0 */
};
void cli_agent_probe_all(struct cli_agent_ask *asks, size_t n, double bound_s);
/* SUSPEND (keep_context: data only) and RESUME; timeout_s bounds the wait for GPU work (<= 0: no limit). */
int cli_agent_suspend(pid_t pid, struct cli_agent *ag, double timeout_s, bool keep_context, struct gs_err *err);
int cli_agent_resume(pid_t pid, struct cli_agent *ag, struct gs_err *err);
/*
 * SUSPEND_FD (agents with GS_CAP_SPILL; GS_E_AGENT otherwise): as
 * cli_agent_suspend, with spill_fd an empty temporary image directory the
 * agent streams the data into when host memory would not hold it, or always
 * (spill_only). Its counter "spilled" says which it did.
 */
int cli_agent_suspend_spill(pid_t pid, struct cli_agent *ag, double timeout_s, bool keep_context, int spill_fd,
			    bool spill_only, struct gs_err *err);
/*
 * PREPARE (agents that offer it; others: 0 at once): the agent starts getting
 * its copy ring ready for a RESUME from an image, without any CUDA call, so
 * it may be sent before the driver restores the process. Replies at once.
 */
int cli_agent_prepare(pid_t pid, struct cli_agent *ag, struct gs_err *err);
/*
 * RESUME after loading the GPU data from the image at image_dir (NULL: from
 * the agent's staging memory); verify_gpu: the agent checks the loaded data
 * against the image's fingerprints on the GPU first (restore --verify-gpu;
 * an agent without GS_CAP_VERIFY_GPU is refused, GS_E_AGENT).
 */
int cli_agent_resume_from(pid_t pid, struct cli_agent *ag, const char *image_dir, bool verify_gpu, struct gs_err *err);
/*
 * DUMP into the image directory image_dir (a temporary one from
 * gs_image_tmp_create), as o says (struct gs_dump_opts, core/protocol.h: the
 * dump's options as one struct down to the agent's image writer). All of the
 * agent's CUDA calls are done when it replies.
 *
 * o->running (the agent offers GS_CAP_DUMP_RUNNING): the agent quiesces the
 * app, streams its GPU data into image_dir through a small pinned ring, seals
 * the image and releases the GPU memory; it is suspended afterwards, its data
 * only in the image (resume with cli_agent_resume_from). On failure it runs on
 * as before. timeout_s bounds the wait for running GPU work. o->cached: the
 * image is read back right away (--leave-running): agents that offer
 * GS_CAP_DUMP_CACHED write it through the page cache and leave the data
 * files' fsync to gs_image_publish (asked of others, it is not sent).
 *
 * Otherwise the agent (suspended) writes the data it holds and seals it;
 * o->drop_staging frees its staging memory afterwards, so CRIU does not carry
 * the data a second time (timeout_s unused).
 */
int cli_agent_dump(pid_t pid, struct cli_agent *ag, const char *image_dir, double timeout_s,
		   const struct gs_dump_opts *o, struct gs_err *err);
/*
 * A running process's DUMP with the image directory as a descriptor (agents
 * with GS_CAP_DIR_FD; GS_E_AGENT otherwise): for an agent in another mount
 * namespace, where the caller's path would name another directory or none.
 */
int cli_agent_dump_fd(pid_t pid, struct cli_agent *ag, int dir_fd, double timeout_s, const struct gs_dump_opts *o,
		      struct gs_err *err);
/*
 * RESUME from the image at image_dir (NULL: from staging memory); gated:
 * the gate stays closed until cli_agent_open (memory shared between
 * processes, share_tree.h); verify_gpu: as cli_agent_resume_from's. The
 * directory goes as a descriptor where the agent takes one that way (it may
 * live in another mount namespace, a container's), else as the path.
 */
int cli_agent_resume_image(pid_t pid, struct cli_agent *ag, const char *image_dir, bool gated, bool verify_gpu,
			   struct gs_err *err);
/*
 * --tree (agents with GS_CAP_GATE): GATE closes the process's gate and
 * replies without waiting for its GPU work (timeout_s bounds the wait for
 * app threads inside the driver; <= 0: no limit); the agent reopens it by
 * itself after lease_s unless SUSPEND or OPEN comes first. OPEN reopens it.
 */
int cli_agent_gate(pid_t pid, struct cli_agent *ag, double timeout_s, double lease_s, struct gs_err *err);
int cli_agent_open(pid_t pid, struct cli_agent *ag, struct gs_err *err);
/* Sum of the named timings of the last reply (seconds). */
double cli_agent_timing(const struct cli_agent *ag, const char *name);
uint64_t cli_agent_counter(const struct cli_agent *ag, const char *name);

#endif
