/*
 * cmd_resume.c - `gpusnap resume PID`: put a suspended process's GPU state
 * back, on the same GPUs or, with --map, on others of the same type. With
 * --image DIR the agent takes its GPU data from an image it wrote (a dump
 * that could not put the process back says where that image is).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/process_op.h"
#include "common/fault.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"

static const char *const resume_usage[] = {
	"gpusnap resume [--map FROM=TO]... [--tree] [--image DIR] [--json] PID",
	NULL,
};

struct resume_ctx {
	struct gs_string_list maps;
	const char *image; /* the agent's data is in this image (absolute path), or NULL */
};

/* Parses the map against every driver-suspended process's recorded GPUs. */
static int build_pairs(struct cli_session *s, struct resume_ctx *ctx, struct gs_ckpt_proc *procs, int n,
		       CUcheckpointGpuPair **pairs, unsigned *npairs, struct gs_err *err)
{
	*pairs = NULL;
	*npairs = 0;
	for (int i = 0; i < n && ctx->maps.count; i++) {
		CUuuid used[64];
		int nused = cli_recorded_gpus(procs[i].pid, used, 64);
		CUcheckpointGpuPair *p = NULL;
		unsigned np = 0;
		int rc = gs_gpu_map_parse(ctx->maps.items, ctx->maps.count, s->gpus, s->ngpus, nused > 0 ? used : NULL,
					  nused > 0 ? nused : 0, &p, &np, err);
		free(*pairs);
		*pairs = NULL;
		if (rc) {
			/* nothing was touched: the processes stay suspended */
			gs_err_wrap(err, "process %d stays suspended", (int)procs[i].pid);
			return rc;
		}
		if ((rc = gs_gpu_pairs_complete(&p, &np, s->gpus, s->ngpus, err))) {
			free(p);
			gs_err_wrap(err, "process %d stays suspended", (int)procs[i].pid);
			return rc;
		}
		*pairs = p;
		*npairs = np;
	}
	return 0;
}

static int run_resume(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n, void *arg,
		      struct gs_err *err)
{
	struct resume_ctx *ctx = arg;
	/* which processes the driver holds checkpointed, which agents hold data */
	struct gs_ckpt_proc *drv = calloc((size_t)n, sizeof(*drv));
	int *drv_index = calloc((size_t)n, sizeof(int));
	int ndrv = 0, nagent = 0, rc = 0;
	if (!drv || !drv_index) {
		rc = gs_fail(err, GS_E_FAILURE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_get_state(&s->cu, procs[i].pid, &procs[i].state_before, err)))
			goto out;
		procs[i].state_after = procs[i].state_before;
		procs[i].state_known = true;
		if (procs[i].state_before == CU_PROCESS_STATE_CHECKPOINTED) {
			drv_index[ndrv] = i;
			drv[ndrv++].pid = procs[i].pid;
		}
		if (agents[i].present && agents[i].state != GS_AGENT_RUNNING)
			nagent++;
	}
	/* a gate a --tree suspend closed and never got to (gpusnap died there): reopen it rather than wait for its lease */
	int reopened = 0;
	for (int i = 0; i < n; i++) {
		if (!agents[i].present || agents[i].state != GS_AGENT_GATED)
			continue;
		if ((rc = cli_agent_open(procs[i].pid, &agents[i], err)))
			goto out;
		agents[i].state = GS_AGENT_RUNNING;
		nagent--;
		reopened++;
	}
	if (!ndrv && !nagent && reopened)
		goto out;
	if (!ndrv && !nagent) {
		rc = gs_fail(err, GS_E_STATE, "process %d is not suspended (it is %s)", (int)procs[0].pid,
			     gs_cuda_state_name(procs[0].state_before));
		goto out;
	}
	if (ctx->maps.count && !ndrv) {
		rc = gs_fail(err, GS_E_GPU_MAP, "--map needs a full suspend: process %d kept its CUDA context", (int)procs[0].pid);
		goto out;
	}
	if (ndrv) {
		CUcheckpointGpuPair *pairs = NULL;
		unsigned npairs = 0;
		if ((rc = build_pairs(s, ctx, drv, ndrv, &pairs, &npairs, err)))
			goto out;
		rc = gs_ckpt_resume(&s->cu, drv, ndrv, pairs, npairs, err);
		free(pairs);
		for (int k = 0; k < ndrv; k++) {
			struct gs_ckpt_proc *p = &procs[drv_index[k]];
			p->restore_s = drv[k].restore_s;
			p->unlock_s = drv[k].unlock_s;
			p->state_after = drv[k].state_after;
			p->state_known = drv[k].state_known;
		}
		if (rc)
			goto out;
		if (gs_fault(GS_FI_RESUME_AFTER_DRIVER)) {
			rc = gs_fail(err, GS_E_FAILURE, "injected failure after the driver's resume");
			goto out;
		}
	}
	/* data part: each agent re-creates its memory at the same addresses and lets the app go on */
	for (int i = 0; i < n; i++) {
		if (!agents[i].present || agents[i].state == GS_AGENT_RUNNING)
			continue;
		int r = cli_agent_resume_from(procs[i].pid, &agents[i], ctx->image, err);
		if (r && !rc)
			rc = r;
	}
out:
	free(drv);
	free(drv_index);
	return rc;
}

int cmd_resume(int argc, char **argv)
{
	bool tree = false, json = false;
	struct resume_ctx ctx = { .image = NULL };
	const struct gs_option opts[] = {
		GS_OPT_LIST_(0, "map", &ctx.maps, "FROM=TO",
			     "resume GPU FROM's state on GPU TO (index or UUID; repeat for each GPU used)"),
		GS_OPT_BOOL_(0, "tree", &tree, "resume every suspended CUDA process in PID's process tree"),
		GS_OPT_STRING_(0, "image", &ctx.image, "DIR",
			       "the agent takes the process's GPU data from this image (one its dump left behind)"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, resume_usage, 0, &nargs);
	if (rc == 0 && nargs != 1) {
		gs_print_usage(stderr, resume_usage, opts);
		rc = GS_E_USAGE;
	}
	char absimage[PATH_MAX];
	if (rc == 0 && ctx.image && tree) {
		fprintf(stderr, "gpusnap resume: --image is for one process, not --tree\n");
		rc = GS_E_USAGE;
	}
	if (rc == 0 && ctx.image) {
		/* the agent reads it from its own working directory */
		if (!realpath(ctx.image, absimage)) {
			fprintf(stderr, "gpusnap: no image at '%s': %s\n", ctx.image, strerror(errno));
			rc = GS_E_IMAGE;
		} else {
			ctx.image = absimage;
		}
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
