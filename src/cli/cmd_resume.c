/*
 * cmd_resume.c - `gpusnap resume PID`: put a suspended process's GPU state
 * back, on the same GPUs or, with --map, on others of the same type.
 */
#include <stdlib.h>

#include "cli/process_op.h"
#include "cuda/checkpoint.h"

static const char *const resume_usage[] = {
	"gpusnap resume [--map FROM=TO]... [--tree] [--json] PID",
	NULL,
};

struct resume_ctx {
	struct gs_string_list maps;
};

static int run_resume(struct cli_session *s, struct gs_ckpt_proc *procs, int n, void *ctx, struct gs_err *err)
{
	struct resume_ctx *rc_ = ctx;
	CUcheckpointGpuPair *pairs = NULL;
	unsigned npairs = 0;
	if (rc_->maps.count) {
		/* every process of the set must have its GPUs covered; check each one's record */
		for (int i = 0; i < n; i++) {
			CUuuid used[64];
			int nused = cli_recorded_gpus(procs[i].pid, used, 64);
			CUcheckpointGpuPair *p = NULL;
			unsigned np = 0;
			int rc = gs_gpu_map_parse(rc_->maps.items, rc_->maps.count, s->gpus, s->ngpus, nused > 0 ? used : NULL,
						  nused > 0 ? nused : 0, &p, &np, err);
			if (rc) {
				/* nothing was touched: the processes stay suspended */
				gs_err_wrap(err, "process %d stays suspended", (int)procs[i].pid);
				free(pairs);
				return rc;
			}
			free(pairs);
			pairs = p;
			npairs = np;
		}
	}
	int rc = gs_ckpt_resume(&s->cu, procs, n, pairs, npairs, err);
	free(pairs);
	return rc;
}

int cmd_resume(int argc, char **argv)
{
	bool tree = false, json = false;
	struct resume_ctx ctx = { { 0 } };
	const struct gs_option opts[] = {
		GS_OPT_LIST_(0, "map", &ctx.maps, "FROM=TO",
			     "resume GPU FROM's state on GPU TO (index or UUID; repeat for each GPU used)"),
		GS_OPT_BOOL_(0, "tree", &tree, "resume every suspended CUDA process in PID's process tree"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, resume_usage, 0, &nargs);
	if (rc == 0 && nargs != 1) {
		gs_print_usage(stderr, resume_usage, opts);
		rc = GS_E_USAGE;
	}
	if (rc == 0) {
		struct process_op op = {
			.action = "resume", .pid_arg = argv[0], .tree = tree, .json = json, .run = run_resume, .ctx = &ctx,
		};
		rc = process_op_execute(&op);
	}
	gs_string_list_free(&ctx.maps);
	return rc == GS_PARSE_HELP ? 0 : rc;
}
