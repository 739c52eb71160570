/*
 * cmd_suspend.c - `gpusnap suspend PID`: take a process's GPU state off the
 * GPU into its host memory (its VRAM drops to zero) until `gpusnap resume`.
 *
 * A process started with the gpusnap agent (`gpusnap run`) takes the fast
 * path: the agent moves its data, then the driver checkpoints what is left
 * (context, modules). Others, or any with --driver, take the driver path.
 *
 * --tree with several agents: ranks of one job may wait on each other's GPU
 * work (a collective), so every gate of the tree is closed first (GATE,
 * which does not wait for GPU work), and only then does each agent wait for
 * its work and move its data (SUSPEND). A failure anywhere, a timeout
 * included, rolls back all: gates opened (OPEN), suspended agents resumed.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli/interrupt.h"
#include "cli/process_op.h"
#include "cli/share_tree.h"
#include "cli/suspend_resume.h"
#include "common/fault.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"

static const char *const suspend_usage[] = {
	"gpusnap suspend [--timeout SECONDS] [--tree] [--keep-context] [--driver] [--json] PID",
	NULL,
};

const struct cli_doc suspend_doc = {
	.args = "PID",
	.description =
		"Takes the GPU state of process PID off the GPU into the process's host memory: its GPU memory drops "
		"to zero and the process waits on its next CUDA call until gpusnap resume puts the state back.\n\n"
		"A process started with gpusnap run takes the fast path: its agent copies the data out, then the "
		"driver checkpoints what is left (context, modules). Any other CUDA process, or any with --driver, "
		"takes the driver path. A failure or a timeout anywhere rolls the suspend back: the process runs on.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "" }, { GS_E_NO_PROCESS, "" },
						{ GS_E_NOT_CUDA, "" }, { GS_E_PERMISSION, "" },
						{ GS_E_STATE, "already suspended, stopped, frozen, capturing a CUDA graph, or "
							      "another gpusnap is at work on it (named)" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" },
						{ GS_E_TIMEOUT, "GPU work did not finish within --timeout; the process runs on" },
						{ GS_E_NO_SPACE, "not enough host memory for the GPU data" }, { GS_E_AGENT, "" },
						{ GS_E_PARTIAL, "" }, { GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap suspend 1234", "Free the GPU memory of process 1234 until it is resumed." },
		{ "gpusnap suspend --tree --timeout 60 $(pgrep -o torchrun)",
		  "Suspend every CUDA process of a torchrun job, waiting up to a minute for running GPU work." },
		{ NULL, NULL } },
};

#define DEFAULT_LOCK_TIMEOUT_S 30.0

struct suspend_ctx {
	double timeout;
	bool keep_context;
};

/* How long a gate closed by GATE waits for its SUSPEND before the agent reopens it by itself. */
#define GATE_LEASE_MARGIN_S 120.0
#define GATE_LEASE_NO_LIMIT_S 3600.0

/* The processes of the suspend under way, for undo_agents: memory they share is handed back first (share_tree.h). */
static struct {
	pid_t *pids;
	int n;
	bool shared;
} share_set;

/*
 * Rolls back agents [0, upto): each takes its data back; [upto, gated_to)
 * had only their gates closed: opened. The agent at `failed` rolled itself
 * back already (or stays suspended, saying why): left alone. false if one
 * could not (its error printed).
 */
static bool undo_agents(struct cli_agent *agents, struct gs_ckpt_proc *procs, int upto, int gated_to, int failed)
{
	bool all = true, shared = share_set.shared && upto > 0;
	if (shared) {
		/*
		 * the agents' status changed: asked again; then the exports are made again and handed to the
		 * importers, and the suspended agents resume as one job, no gate open before all are back
		 */
		struct gs_err e = { 0 };
		for (int i = 0; i < share_set.n; i++)
			if (agents[i].present && cli_agent_probe(procs[i].pid, &agents[i], &e))
				cli_report_error(&e);
		if (cli_share_resume(share_set.pids, agents, share_set.n, NULL, &e)) {
			cli_report_error(&e);
			all = false;
		}
	}
	for (int i = 0; i < (gated_to > upto ? gated_to : upto); i++) {
		struct gs_err e = { 0 };
		if (!agents[i].present || i == failed || (shared && i < upto))
			continue;
		if (i < upto ? cli_agent_resume(procs[i].pid, &agents[i], &e) : cli_agent_open(procs[i].pid, &agents[i], &e)) {
			cli_report_error(&e);
			all = false;
		}
	}
	return all;
}

/*
 * The suspend stops before its end (a signal came, or a test injected a
 * failure at point): the error names why; the caller appends what became of
 * the processes.
 */
static int stopped(struct gs_ckpt_proc *procs, int n, enum gs_fault_point point, struct gs_err *err)
{
	char what[64];
	snprintf(what, sizeof(what), "suspend of process %d%s", (int)procs[0].pid, n > 1 ? " (tree)" : "");
	return cli_signal_caught() ? cli_fail_interrupted(err, what)
				   : gs_fail(err, GS_E_FAILURE, "%s failed at '%s' (injected)", what, gs_fault_name(point));
}

static void say_undone(struct gs_ckpt_proc *procs, int n, bool agents_back, struct gs_err *err)
{
	if (!agents_back)
		cli_err_append(err, "undone but for the agents named above");
	else
		cli_err_append(err, n > 1 ? "undone, the processes run on" : "undone, process %d runs on", (int)procs[0].pid);
}

/* Whether every agent of a tree can close its gate first: two or more agents, all with GS_CAP_GATE. */
static bool gate_first(const struct cli_agent *agents, int n)
{
	int count = 0;
	for (int i = 0; i < n; i++) {
		if (agents[i].present && !(agents[i].caps & GS_CAP_GATE))
			return false;
		count += agents[i].present;
	}
	return count > 1;
}

static int run_suspend(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n, void *arg,
		       struct gs_err *err)
{
	struct suspend_ctx *ctx = arg;
	for (int i = 0; i < n; i++) {
		if (ctx->keep_context && !agents[i].present)
			return gs_fail(err, GS_E_AGENT,
				       "--keep-context needs the gpusnap agent, and process %d runs without it (start it with gpusnap run)",
				       (int)procs[i].pid);
		/* a gate left closed by a gpusnap that died before its suspend is no obstacle: the agent takes it over */
		if (agents[i].present && agents[i].state != GS_AGENT_RUNNING && agents[i].state != GS_AGENT_GATED)
			return gs_fail(err, GS_E_STATE, "process %d is already suspended", (int)procs[i].pid);
	}
	/* memory shared between the processes: every import linked to its export, or the suspend is refused */
	share_set.n = n;
	share_set.shared = false;
	if (n <= 0 || !(share_set.pids = calloc((size_t)n, sizeof(pid_t))))
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < n; i++)
		share_set.pids[i] = procs[i].pid;
	int src = cli_share_before_suspend(share_set.pids, agents, n, n > 1, &share_set.shared, err);
	if (src)
		return src;
	/* every gate first, then the waits: no agent waits for GPU work while another's app still runs */
	int gated = 0;
	if (gate_first(agents, n)) {
		double lease = ctx->timeout > 0 ? GATE_LEASE_MARGIN_S + 2.0 * n * ctx->timeout : GATE_LEASE_NO_LIMIT_S;
		for (; gated < n; gated++) {
			if (!agents[gated].present)
				continue;
			int rc = cli_agent_gate(procs[gated].pid, &agents[gated], ctx->timeout, lease, err);
			if (rc) {
				undo_agents(agents, procs, 0, gated, gated);
				return rc;
			}
		}
		if (gs_fault(GS_FI_SUSPEND_AFTER_GATES) || cli_signal_caught()) {
			bool back = undo_agents(agents, procs, 0, n, -1);
			int rc = stopped(procs, n, GS_FI_SUSPEND_AFTER_GATES, err);
			say_undone(procs, n, back, err);
			return rc;
		}
	}
	/* data part: each agent waits for its app's GPU work and moves its memory to host */
	for (int i = 0; i < n; i++) {
		if (!agents[i].present)
			continue;
		int rc = cli_agent_suspend(procs[i].pid, &agents[i], ctx->timeout, ctx->keep_context, err);
		if (rc) {
			undo_agents(agents, procs, i, gated, i);
			return rc;
		}
	}
	if (gs_fault(GS_FI_SUSPEND_AFTER_AGENT) || cli_signal_caught()) {
		bool back = undo_agents(agents, procs, n, n, -1);
		int rc = stopped(procs, n, GS_FI_SUSPEND_AFTER_AGENT, err);
		say_undone(procs, n, back, err);
		return rc;
	}
	/* every process is suspended: the memory they share can go now (share_tree.h) */
	if (share_set.shared) {
		int rc = cli_share_release(share_set.pids, agents, n, err);
		if (rc) {
			undo_agents(agents, procs, n, n, -1);
			return rc;
		}
	}
	if (ctx->keep_context) {
		for (int i = 0; i < n; i++) {
			procs[i].state_before = procs[i].state_after = CU_PROCESS_STATE_RUNNING;
			procs[i].state_known = true;
		}
		return 0;
	}
	/* control part: the driver checkpoints the rest (all processes, with its own rollback) */
	int rc = gs_ckpt_suspend(&s->cu, procs, n, ctx->timeout, err);
	if (!rc && (gs_fault(GS_FI_SUSPEND_AFTER_DRIVER) || cli_signal_caught())) {
		struct gs_err e = { 0 };
		rc = stopped(procs, n, GS_FI_SUSPEND_AFTER_DRIVER, err);
		if (gs_ckpt_resume(&s->cu, procs, n, NULL, 0, &e)) {
			/* the driver keeps the processes checkpointed: suspended, whole; the agents keep their data */
			cli_err_append(err, "cannot undo it (%s); gpusnap resume %d puts it back", e.msg, (int)procs[0].pid);
			return rc;
		}
		say_undone(procs, n, undo_agents(agents, procs, n, n, -1), err);
		return rc;
	}
	if (rc)
		undo_agents(agents, procs, n, n, -1);
	return rc;
}

int cli_suspend_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		      double timeout_s, bool keep_context, struct gs_err *err)
{
	struct suspend_ctx ctx = { .timeout = timeout_s, .keep_context = keep_context };
	int rc = run_suspend(s, procs, agents, n, &ctx, err);
	free(share_set.pids);
	share_set.pids = NULL;
	return rc;
}

int cmd_suspend(int argc, char **argv)
{
	bool tree = false, json = false, driver = false;
	struct suspend_ctx ctx = { .timeout = DEFAULT_LOCK_TIMEOUT_S };
	const struct gs_option opts[] = {
		GS_OPT_SECONDS_(0, "timeout", &ctx.timeout, "SECONDS",
				"wait at most this long for running GPU work (default 30, 0 = no limit)"),
		GS_OPT_BOOL_(0, "tree", &tree, "suspend every CUDA process in PID's process tree"),
		GS_OPT_BOOL_(0, "keep-context", &ctx.keep_context,
			     "agent only: release the data but keep the CUDA context (faster both ways)"),
		GS_OPT_BOOL_(0, "driver", &driver, "use the driver path even where the gpusnap agent runs"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, suspend_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("suspend", argv, nargs, 1, "PID")))
		return rc;
	if (driver && ctx.keep_context)
		return cli_usage_error("suspend", "--keep-context and --driver exclude each other");
	struct process_op op = {
		.action = "suspend", .pid_arg = argv[0], .tree = tree, .json = json, .driver_only = driver,
		.run = run_suspend, .ctx = &ctx,
	};
	rc = process_op_execute(&op);
	free(share_set.pids);
	return rc;
}
