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

/*
 * `gpusnap suspend` of procs[0..n) (agents[i].present: process i has an
 * agent): on failure, a timeout or a signal (interrupt.h) it rolls itself
 * back and the processes run on. timeout_s as suspend's --timeout;
 * keep_context as --keep-context. 0 or the exit code, err set.
 */
int cli_suspend_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		      double timeout_s, bool keep_context, struct gs_err *err);
/*
 * `gpusnap resume` of procs[0..n) on the GPUs they used, the GPU data from
 * where their suspend left it. A failure leaves them suspended (the agent's
 * data with the agent, say), never lost. 0 or the exit code, err set.
 */
int cli_resume_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		     struct gs_err *err);

#endif
