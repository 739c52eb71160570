/*
 * suspend_resume.h - the suspend and the resume of processes that are
 * already locked (op_lock.h) and probed for agents, exactly as the suspend
 * and resume commands run them (cmd_suspend.c, cmd_resume.c), for commands
 * that combine the two (switch). Whatever those commands learn to do (a
 * spill tier, say) a caller of these gets with no change of its own.
 */
#ifndef GPUSNAP_CLI_SUSPEND_RESUME_H
#define GPUSNAP_CLI_SUSPEND_RESUME_H

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cuda/checkpoint.h"

/* How a suspend runs: the suspend command's options, which switch takes for its OUT half too. */
struct cli_suspend_opts {
	double timeout;        /* --timeout: seconds for the GPU work, 0 = no limit */
	bool keep_context;     /* --keep-context */
	const char *spill_dir; /* --spill DIR, else GPUSNAP_SPILL_DIR; NULL: no storage tier */
	bool spill_said;       /* --spill or --spill-only: a process that cannot spill is refused */
	bool spill_only;       /* --spill-only */
	bool multi_gpu_driver; /* --multi-gpu-driver: a process without the agent on several GPUs is not refused */
};

/*
 * Completes o once the command line is parsed (--spill and --spill-only in
 * o, driver: --driver): GPUSNAP_SPILL_DIR where no --spill was given, the
 * options that exclude each other, the spill directory checked before
 * anything is touched, the spills of processes that are gone swept. 0, or
 * the exit code once the one-line error is printed (cmd names the command).
 */
int cli_suspend_opts_settle(const char *cmd, struct cli_suspend_opts *o, bool driver);

/*
 * `gpusnap suspend` of procs[0..n) (agents[i].present: process i has an
 * agent) as o says: on failure, a timeout or a signal (interrupt.h) it rolls
 * itself back and the processes run on. 0 or the exit code, err set.
 */
int cli_suspend_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		      const struct cli_suspend_opts *o, struct gs_err *err);
/*
 * `gpusnap resume` of procs[0..n) on the GPUs they used, the GPU data from
 * where their suspend left it. A failure leaves them suspended (the agent's
 * data with the agent, say), never lost. 0 or the exit code, err set.
 */
int cli_resume_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		     struct gs_err *err);

#endif
