/*
 * process_op.c - the shared suspend/resume flow (see process_op.h).
 */
#include "cli/process_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/interrupt.h"
#include "common/proc.h"
#include "common/util.h"

/*
 * What the next command says about process pid if this gpusnap is killed in
 * the middle of op; image: where the GPU data is that a killed gpusnap left,
 * still there until this operation has taken it back.
 */
static void record_working(struct cli_op *lock, const struct process_op *op, pid_t pid, const char *image)
{
	char alive[GS_ERR_MSG_MAX];
	if (op->action[0] == 's')
		snprintf(alive, sizeof(alive),
			 "process %d was left suspended by a gpusnap suspend (pid %d) that was killed; gpusnap resume %d puts "
			 "it back", (int)pid, (int)getpid(), (int)pid);
	else
		snprintf(alive, sizeof(alive),
			 "process %d was left partly resumed by a gpusnap resume (pid %d) that was killed; gpusnap resume %d "
			 "finishes it", (int)pid, (int)getpid(), (int)pid);
	cli_op_step(lock, op->action, image && *image ? image : NULL, alive, NULL);
}

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
	if (rc) {
		cli_op_explain_gone(pid, &err);
		return cli_report_error(&err);
	}
	cli_signals_catch();
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
	struct cli_op **locks = calloc((size_t)n, sizeof(*locks));
	struct cli_op_record *left = calloc((size_t)n, sizeof(*left));
	if (!o.procs || !o.agents || !o.vram_before || !o.vram_after || !masks || !locks || !left) {
		rc = gs_fail(&err, GS_E_FAILURE, "out of memory");
		cli_report_error(&err);
		goto out;
	}
	/* one operation per process: every target is ours before any is touched */
	for (int i = 0; i < n; i++)
		if ((rc = cli_op_begin(pids[i], false, op->action, &locks[i], &left[i], &err))) {
			cli_op_explain_gone(pids[i], &err);
			cli_report_error(&err);
			goto out;
		}
	for (int i = 0; i < n && !op->driver_only; i++)
		if ((rc = cli_agent_probe(pids[i], &o.agents[i], &err))) {
			cli_report_error(&err);
			goto out;
		}
	for (int i = 0; i < n; i++) {
		if (left[i].action[0] && op->found_left)
			op->found_left(op->ctx, pids[i], &left[i]);
		record_working(locks[i], op, pids[i], left[i].image);
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
	if (cli_signal_caught()) {
		snprintf(what, sizeof(what), "%s of process %d", op->action, (int)pids[0]);
		rc = cli_fail_interrupted(&err, what);
		cli_err_append(&err, "nothing was done");
	} else {
		rc = op->run(&s, o.procs, o.agents, n, op->ctx, &err);
	}
	o.total_s = gs_now() - t0;
	cli_progress_stop(progress);
	/* a process another operation left suspended: the refusal says by whom and what to do */
	for (int i = 0; rc == GS_E_STATE && i < n; i++)
		if (left[i].action[0] && left[i].if_alive[0]) {
			cli_err_append(&err, "%s", left[i].if_alive);
			break;
		}

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
	else if (cli_signal_caught())
		fprintf(stderr, "gpusnap: %s came when the %s of process %d could no longer be undone; it was finished\n",
			cli_signal_name(cli_signal_caught()), op->action, (int)pids[0]);
out:
	for (int i = 0; locks && i < n; i++)
		cli_op_end(locks[i], rc == 0);
	free(locks);
	free(left);
	free(o.procs);
	free(o.agents);
	free(o.vram_before);
	free(o.vram_after);
	free(masks);
	free(pids);
	cli_session_close(&s);
	return rc;
}
