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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/interrupt.h"
#include "cli/process_op.h"
#include "cli/share_tree.h"
#include "cli/spill.h"
#include "cli/suspend_resume.h"
#include "common/fault.h"
#include "common/settings.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"

static const char *const suspend_usage[] = {
	"gpusnap suspend [--timeout SECONDS] [--tree] [--keep-context] [--spill DIR [--spill-only]] [--driver] [--json] PID",
	NULL,
};

const struct cli_doc suspend_doc = {
	.args = "PID",
	.description =
		"Takes the GPU state of process PID off the GPU into the process's host memory: its GPU memory drops "
		"to zero and the process waits on its next CUDA call until gpusnap resume puts the state back.\n\n"
		"A process started with gpusnap run takes the fast path: its agent copies the data out, then the "
		"driver checkpoints what is left (context, modules). Any other CUDA process, or any with --driver, "
		"takes the driver path. A failure or a timeout anywhere rolls the suspend back: the process runs on.\n\n"
		"The agent asks for host memory only for the data it will hold: all-zero chunks stay on the GPU. Where "
		"host memory would not hold it (less GPUSNAP_HOST_MEMORY_MARGIN), the suspend is refused, or with a "
		"spill directory (--spill DIR, or GPUSNAP_SPILL_DIR) the agent keeps in host memory what fits and "
		"streams the rest into an image there, in one pass; --spill-only streams all of it. Resume reads it "
		"back and removes it.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "" }, { GS_E_NO_PROCESS, "" },
						{ GS_E_NOT_CUDA, "" }, { GS_E_PERMISSION, "the spill directory is another user's, "
							"writable by others, or read-only" },
						{ GS_E_STATE, "already suspended, stopped, frozen, capturing a CUDA graph, or "
							      "another gpusnap is at work on it (named)" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" },
						{ GS_E_TIMEOUT, "GPU work did not finish within --timeout; the process runs on" },
						{ GS_E_NO_SPACE, "not enough host memory for the GPU data, or the spill "
								 "directory's file system is full; the process runs on" },
						{ GS_E_AGENT, "" },
						{ GS_E_PARTIAL, "" }, { GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR GPUSNAP_SPILL_DIR GPUSNAP_HOST_MEMORY_MARGIN",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap suspend 1234", "Free the GPU memory of process 1234 until it is resumed." },
		{ "gpusnap suspend --spill /var/spool/gpusnap 1234",
		  "The same, its data on disk there if host memory would not hold it." },
		{ "gpusnap suspend --tree --timeout 60 $(pgrep -o torchrun)",
		  "Suspend every CUDA process of a torchrun job, waiting up to a minute for running GPU work." },
		{ NULL, NULL } },
};

#define DEFAULT_LOCK_TIMEOUT_S 30.0

/* How long a gate closed by GATE waits for its SUSPEND before the agent reopens it by itself. */
#define GATE_LEASE_MARGIN_S 120.0
#define GATE_LEASE_NO_LIMIT_S 3600.0

/* The processes of the suspend under way, for undo_agents: memory they share is handed back first (share_tree.h). */
static struct {
	pid_t *pids;
	int n;
	bool shared;
	bool *spilled; /* per process: its agent spilled the data (the rollback reads it back from the spill) */
} share_set;

/* Takes agent i's data back: from its spill if it spilled (removed then), else from its host memory. */
static int resume_agent(pid_t pid, struct cli_agent *ag, int i, struct gs_err *err)
{
	char image[PATH_MAX];
	if (!share_set.spilled || !share_set.spilled[i] || !cli_spill_lookup(pid, image, sizeof(image), NULL, 0))
		return cli_agent_resume(pid, ag, err);
	int rc = cli_agent_resume_image(pid, ag, image, false, false, err);
	if (!rc) {
		cli_spill_forget(pid);
		share_set.spilled[i] = false;
	}
	return rc;
}

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
		if (cli_share_resume(share_set.pids, agents, share_set.n, NULL, false, &e)) {
			cli_report_error(&e);
			all = false;
		}
	}
	for (int i = 0; i < (gated_to > upto ? gated_to : upto); i++) {
		struct gs_err e = { 0 };
		if (!agents[i].present || i == failed || (shared && i < upto))
			continue;
		if (i < upto ? resume_agent(procs[i].pid, &agents[i], i, &e) : cli_agent_open(procs[i].pid, &agents[i], &e)) {
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

/*
 * Suspends agent i: with a spill directory that applies, through a spill
 * folder made for it (spill.h), the agent choosing host memory or the spill
 * after its zero scan; else into host memory alone.
 */
static int suspend_agent(struct cli_suspend_opts *ctx, pid_t pid, struct cli_agent *ag, int i, struct gs_err *err)
{
	/* an older agent cannot spill: without --spill it suspends into host memory as before */
	bool spill = ctx->spill_dir && !share_set.shared && (ctx->spill_said || (ag->caps & GS_CAP_SPILL));
	if (!spill) {
		int rc = cli_agent_suspend(pid, ag, ctx->timeout, ctx->keep_context, err);
		if (!rc)
			cli_spill_forget(pid); /* the data is in host memory: no record of an older spill may say otherwise */
		return rc;
	}
	struct cli_spill sp;
	int rc = cli_spill_begin(ctx->spill_dir, pid, &sp, err);
	if (rc) {
		cli_err_append(err, "process %d runs on", (int)pid);
		return rc;
	}
	rc = cli_agent_suspend_spill(pid, ag, ctx->timeout, ctx->keep_context, sp.fd, ctx->spill_only, err);
	bool spilled = !rc && cli_agent_counter(ag, "spilled");
	struct gs_err e = { 0 };
	if (rc) {
		/* an agent whose own rollback failed after it spilled stays suspended with its data there: kept */
		struct cli_agent now;
		spilled = !cli_agent_probe(pid, &now, &e) && now.present && now.state != GS_AGENT_RUNNING &&
			  now.held_image;
		gs_err_clear(&e);
	}
	if (cli_spill_end(&sp, spilled, &e))
		fprintf(stderr, "gpusnap: %s\n", e.msg); /* suspended all the same: resume finds the data (spill.h) */
	else if (rc && spilled)
		cli_err_append(err, "the spill is at '%s' now", sp.image);
	if (rc && !strstr(err->msg, "stays suspended"))
		cli_err_append(err, "nothing was spilled, process %d runs on with its data on the GPU", (int)pid);
	if (spilled) {
		share_set.spilled[i] = true;
		snprintf(ag->spill_dir, sizeof(ag->spill_dir), "%s", sp.folder);
		char *slash = strrchr(ag->spill_dir, '/');
		if (slash)
			*slash = '\0'; /* the spill directory, as state names it */
	}
	return rc;
}

static int run_suspend(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n, void *arg,
		       struct gs_err *err)
{
	struct cli_suspend_opts *ctx = arg;
	for (int i = 0; i < n; i++) {
		if (ctx->keep_context && !agents[i].present)
			return gs_fail(err, GS_E_AGENT,
				       "--keep-context needs the gpusnap agent, and process %d runs without it (start it with gpusnap run)",
				       (int)procs[i].pid);
		if (ctx->spill_said && !agents[i].present)
			return gs_fail(err, GS_E_AGENT,
				       "--spill needs the gpusnap agent, and process %d runs without it (start it with gpusnap run)",
				       (int)procs[i].pid);
		int mrc;
		if (!agents[i].present && (mrc = cli_driver_multi_gpu_check(s, procs[i].pid, NULL, ctx->multi_gpu_driver, err)))
			return mrc;
		/* a gate left closed by a gpusnap that died before its suspend is no obstacle: the agent takes it over */
		if (agents[i].present && agents[i].state != GS_AGENT_RUNNING && agents[i].state != GS_AGENT_GATED)
			return gs_fail(err, GS_E_STATE, "process %d is already suspended", (int)procs[i].pid);
	}
	/* memory shared between the processes: every import linked to its export, or the suspend is refused */
	share_set.n = n;
	share_set.shared = false;
	if (n <= 0 || !(share_set.pids = calloc((size_t)n, sizeof(pid_t))) ||
	    !(share_set.spilled = calloc((size_t)n, sizeof(bool))))
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < n; i++)
		share_set.pids[i] = procs[i].pid;
	int src = cli_share_before_suspend(share_set.pids, agents, n, n > 1, &share_set.shared, err);
	if (src)
		return src;
	if (share_set.shared && ctx->spill_said)
		return gs_fail(err, GS_E_USAGE, "--spill is not for processes that share GPU memory with each other: they "
			       "resume as one job, from host memory");
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
	/* data part: each agent waits for its app's GPU work and moves its memory to host (or to its spill) */
	for (int i = 0; i < n; i++) {
		if (!agents[i].present)
			continue;
		int rc = suspend_agent(ctx, procs[i].pid, &agents[i], i, err);
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
		      const struct cli_suspend_opts *o, struct gs_err *err)
{
	struct cli_suspend_opts ctx = *o; /* run_suspend's argument is not const */
	int rc = run_suspend(s, procs, agents, n, &ctx, err);
	free(share_set.pids);
	free(share_set.spilled);
	share_set.pids = NULL;
	share_set.spilled = NULL;
	return rc;
}

int cli_suspend_opts_settle(const char *cmd, struct cli_suspend_opts *o, bool driver)
{
	o->spill_said = o->spill_dir || o->spill_only;
	if (!o->spill_dir && gs_setting_is_set(GS_S_SPILL_DIR))
		o->spill_dir = gs_setting_str(GS_S_SPILL_DIR);
	if (o->spill_only && !o->spill_dir)
		return cli_usage_error(cmd, "--spill-only needs a spill directory: --spill DIR or GPUSNAP_SPILL_DIR");
	if (driver && o->spill_said)
		return cli_usage_error(cmd, "--spill and --driver exclude each other");
	if (driver)
		o->spill_dir = NULL;
	cli_sweep_leftovers(); /* what processes that are gone left: spills, stages */
	if (o->spill_dir) {
		/* before anything is touched: a spill directory that cannot take spills is said at once */
		struct gs_err e = { 0 };
		int rc = cli_spill_check_dir(o->spill_dir, &e);
		if (rc) {
			cli_err_append(&e, "nothing was done");
			return cli_report_error(&e);
		}
	}
	return 0;
}

int cmd_suspend(int argc, char **argv)
{
	bool tree = false, json = false, driver = false;
	struct cli_suspend_opts ctx = { .timeout = DEFAULT_LOCK_TIMEOUT_S };
	const struct gs_option opts[] = {
		GS_OPT_SECONDS_(0, "timeout", &ctx.timeout, "SECONDS",
				"wait at most this long for running GPU work (default 30, 0 = no limit)"),
		GS_OPT_BOOL_(0, "tree", &tree, "suspend every CUDA process in PID's process tree"),
		GS_OPT_BOOL_(0, "keep-context", &ctx.keep_context,
			     "agent only: release the data but keep the CUDA context (faster both ways)"),
		GS_OPT_STRING_(0, "spill", &ctx.spill_dir, "DIR",
			       "agent only: put the GPU data in DIR when host memory would not hold it (default "
			       "GPUSNAP_SPILL_DIR)"),
		GS_OPT_BOOL_(0, "spill-only", &ctx.spill_only, "put the GPU data in the spill directory always"),
		GS_OPT_BOOL_(0, "driver", &driver, "use the driver path even where the gpusnap agent runs"),
		GS_OPT_BOOL_(0, "multi-gpu-driver", &ctx.multi_gpu_driver, "driver path: go ahead with a process holding memory on several GPUs (the driver cannot restore some such processes)"),
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
	if ((rc = cli_suspend_opts_settle("suspend", &ctx, driver)))
		return rc;
	struct process_op op = {
		.action = "suspend", .pid_arg = argv[0], .tree = tree, .json = json, .driver_only = driver,
		.run = run_suspend, .ctx = &ctx,
	};
	rc = process_op_execute(&op);
	free(share_set.pids);
	free(share_set.spilled);
	return rc;
}
