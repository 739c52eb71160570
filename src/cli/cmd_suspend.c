/*
 * cmd_suspend.c - `gpusnap suspend PID`: take a process's GPU state off the
 * GPU into its host memory (its VRAM drops to zero) until `gpusnap resume`.
 */
#include "cli/process_op.h"
#include "cuda/checkpoint.h"

static const char *const suspend_usage[] = {
	"gpusnap suspend [--timeout SECONDS] [--tree] [--json] PID",
	NULL,
};

#define DEFAULT_LOCK_TIMEOUT_S 30.0

static int run_suspend(struct cli_session *s, struct gs_ckpt_proc *procs, int n, void *ctx, struct gs_err *err)
{
	double timeout = *(double *)ctx;
	return gs_ckpt_suspend(&s->cu, procs, n, timeout, err);
}

int cmd_suspend(int argc, char **argv)
{
	bool tree = false, json = false;
	double timeout = DEFAULT_LOCK_TIMEOUT_S;
	const struct gs_option opts[] = {
		GS_OPT_SECONDS_(0, "timeout", &timeout, "SECONDS",
				"wait at most this long for running GPU work (default 30, 0 = no limit)"),
		GS_OPT_BOOL_(0, "tree", &tree, "suspend every CUDA process in PID's process tree"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, suspend_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs != 1) {
		gs_print_usage(stderr, suspend_usage, opts);
		return GS_E_USAGE;
	}
	struct process_op op = {
		.action = "suspend", .pid_arg = argv[0], .tree = tree, .json = json, .run = run_suspend, .ctx = &timeout,
	};
	return process_op_execute(&op);
}
