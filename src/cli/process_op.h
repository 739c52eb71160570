/*
 * process_op.h - the flow that suspend and resume share: resolve the target
 * processes, lock each (op_lock.h: one operation per process), read GPU
 * memory before, run the operation with a progress line and the ending
 * signals recorded (interrupt.h), read GPU memory after, report (human or
 * JSON), return the exit code.
 */
#ifndef GPUSNAP_CLI_PROCESS_OP_H
#define GPUSNAP_CLI_PROCESS_OP_H

#include "cli/agent_client.h"
#include "cli/op_lock.h"
#include "cli/report.h"

struct process_op {
	const char *action; /* "suspend" / "resume" */
	const char *pid_arg;
	bool tree, json;
	bool driver_only; /* --driver: ignore agents */
	/*
	 * Runs the operation on procs[0..n); the targets are already validated as
	 * CUDA processes; agents[i].present says process i has a gpusnap agent.
	 */
	int (*run)(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n, void *ctx,
		   struct gs_err *err);
	void *ctx;
	/*
	 * Optional: told, before run, of what a killed operation left on process
	 * i (where its GPU data is), so run can take it from there.
	 */
	void (*found_left)(void *ctx, pid_t pid, const struct cli_op_record *left);
};

int process_op_execute(const struct process_op *op);

#endif
