/*
 * process_op.c - the shared suspend/resume flow (see process_op.h).
 */
#include "cli/process_op.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/proc.h"
#include "common/util.h"

int process_op_execute(const struct process_op *op)
{
	struct gs_err err = { 0 };
	struct cli_session s;
	pid_t *pids = NULL;
	int n = 0;
	int pid;
	/* the process is checked before the driver: a wrong PID is named as such on any machine */
	int rc = gs_parse_pid(op->pid_arg, &pid) ? gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", op->pid_arg)
						  : gs_proc_check(pid, &err);
	if (rc)
		return cli_report_error(&err);
	rc = cli_session_open(&s, &err);
	if (!rc)
		rc = gs_cuda_require_checkpoint(&s.cu, &err);
	if (!rc)
		rc = cli_targets(&s, op->pid_arg, op->tree, &pids, &n, &err);
	if (rc) {
		cli_session_close(&s);
		return cli_report_error(&err);
	}

	struct cli_outcome o = { .action = op->action, .nprocs = n, .err = &err };
	o.procs = calloc((size_t)n, sizeof(*o.procs));
	o.agents = calloc((size_t)n, sizeof(*o.agents));
	o.vram_before = calloc((size_t)n, sizeof(uint64_t));
	o.vram_after = calloc((size_t)n, sizeof(uint64_t));
	uint64_t *masks = calloc((size_t)n, sizeof(uint64_t));
	if (!o.procs || !o.agents || !o.vram_before || !o.vram_after || !masks) {
		rc = gs_fail(&err, GS_E_FAILURE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n && !op->driver_only; i++)
		if ((rc = cli_agent_probe(pids[i], &o.agents[i], &err))) {
			cli_report_error(&err);
			goto out;
		}
	cli_vram_read(&s, &o.gpus_before);
	for (int i = 0; i < n; i++) {
		o.procs[i].pid = pids[i];
		o.vram_before[i] = cli_process_vram(&s, pids[i], &masks[i]);
	}

	char what[64];
	snprintf(what, sizeof(what), "%s %d%s", op->action, (int)pids[0], n > 1 ? " (tree)" : "");
	struct cli_progress *progress = cli_progress_start(what);
	double t0 = gs_now();
	rc = op->run(&s, o.procs, o.agents, n, op->ctx, &err);
	o.total_s = gs_now() - t0;
	cli_progress_stop(progress);

	cli_vram_read(&s, &o.gpus_after);
	for (int i = 0; i < n; i++) {
		o.vram_after[i] = cli_process_vram(&s, pids[i], NULL);
		if (rc == 0 && op->action[0] == 's')
			cli_record_suspend(&s, pids[i], masks[i]);
		else if (rc == 0)
			cli_forget_suspend(pids[i]);
	}
	o.rc = rc;
	cli_print_outcome(&s, &o, op->json);
	if (rc)
		cli_report_error(&err);
out:
	free(o.procs);
	free(o.agents);
	free(o.vram_before);
	free(o.vram_after);
	free(masks);
	free(pids);
	cli_session_close(&s);
	return rc;
}
