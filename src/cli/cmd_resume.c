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

#include "cli/interrupt.h"
#include "cli/process_op.h"
#include "cli/share_tree.h"
#include "cli/spill.h"
#include "cli/suspend_resume.h"
#include "common/fault.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"
#include "image/image.h"

static const char *const resume_usage[] = {
	"gpusnap resume [--map FROM=TO]... [--tree] [--image DIR] [--json] PID",
	NULL,
};

const struct cli_doc resume_doc = {
	.args = "PID",
	.description =
		"Puts the GPU state of a process that gpusnap suspend took off the GPU back, on the same GPUs or, "
		"with --map, on others of the same type; the process carries on from its next CUDA call.\n\n"
		"A process that a killed gpusnap, or a failed dump, left suspended is resumed the same way: gpusnap "
		"state names the command that puts it back.\n\n"
		"Data a suspend spilled to disk (suspend --spill) is read back from its spill directory, which is "
		"removed afterwards; a spill that is damaged or gone is refused, naming what, and the process stays "
		"suspended.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "" }, { GS_E_NO_PROCESS, "" },
						{ GS_E_NOT_CUDA, "" }, { GS_E_PERMISSION, "" },
						{ GS_E_STATE, "not suspended, or another gpusnap is at work on it (named)" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" }, { GS_E_GPU_MAP, "" },
						{ GS_E_IMAGE, "--image, or the spill the data is in: missing or damaged (the "
							     "chunk named); the process stays suspended" },
						{ GS_E_GPU_MISMATCH, "" }, { GS_E_NO_VRAM, "" },
						{ GS_E_AGENT, "the agent failed; or --image for a process without the agent" },
						{ GS_E_PARTIAL, "" }, { GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap resume 1234", "Put process 1234's GPU state back where it was." },
		{ "gpusnap resume --map 0=1 1234", "Put it on GPU 1 instead of GPU 0 (the same GPU type)." },
		{ NULL, NULL } },
};

/*
 * A process left by a gpusnap that did not finish (op_lock.h): its GPU data
 * may be in image (used without --image), and a driver lock it holds is that
 * gpusnap's. A dump --tree leaves each process of the tree so, each with
 * its own data (its stage).
 */
struct resume_left {
	pid_t pid;
	char image[PATH_MAX];
};

struct resume_ctx {
	struct gs_string_list maps;
	const char *image; /* the agent's data is in this image (absolute path), or NULL */
	struct resume_left *left;
	int nleft;
};

static void found_left(void *arg, pid_t pid, const struct cli_op_record *left)
{
	struct resume_ctx *ctx = arg;
	struct resume_left *l = realloc(ctx->left, ((size_t)ctx->nleft + 1) * sizeof(*l));
	if (!l) { /* its data stays where it is, said by gpusnap state; this resume goes on without it */
		fprintf(stderr, "gpusnap: warning: out of memory: what a gpusnap left on process %d is not used\n", (int)pid);
		return;
	}
	ctx->left = l;
	l[ctx->nleft].pid = pid;
	snprintf(l[ctx->nleft].image, sizeof(l[ctx->nleft].image), "%s", left->image);
	ctx->nleft++;
}

/* What a gpusnap that did not finish left on pid, or NULL. */
static struct resume_left *left_of(const struct resume_ctx *ctx, pid_t pid)
{
	for (int i = 0; i < ctx->nleft; i++)
		if (ctx->left[i].pid == pid)
			return &ctx->left[i];
	return NULL;
}

/* A driver lock that a killed gpusnap left on the process (it died between lock and checkpoint): released. */
static int unlock_left(struct cli_session *s, struct gs_ckpt_proc *p, struct gs_err *err)
{
	int rc = gs_ckpt_unlock(&s->cu, p->pid, &p->unlock_s, err);
	if (rc)
		return rc;
	fprintf(stderr, "gpusnap: note: released the driver lock a gpusnap that did not finish left on process %d\n",
		(int)p->pid);
	return gs_ckpt_get_state(&s->cu, p->pid, &p->state_before, err);
}

/*
 * The driver could not restore processes it still holds checkpointed: their
 * records say so for `state`, and one that held memory on several GPUs gets
 * the likely cause (the driver cannot restore some processes on several
 * GPUs; gs_ckpt_refuse_multi_gpu), which retrying does not cure.
 */
static void note_driver_resume_failed(const struct gs_ckpt_proc *drv, int ndrv, struct gs_err *err)
{
	char said[GS_ERR_MSG_MAX];
	snprintf(said, sizeof(said), "%s", err->msg);
	for (int k = 0; k < ndrv; k++) {
		if (!drv[k].state_known || drv[k].state_after != CU_PROCESS_STATE_CHECKPOINTED)
			continue;
		cli_record_resume_failure(drv[k].pid, said);
		CUuuid used[64];
		int nused = cli_recorded_gpus(drv[k].pid, used, 64);
		if (nused >= 2)
			cli_err_append(err, "process %d held memory on %d GPUs when suspended: if every resume fails so, the "
				       "driver cannot restore it and its GPU state is lost: "
				       "end it and start it again under gpusnap run", (int)drv[k].pid, nused);
	}
}

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
	int ndrv = 0, nagent = 0, nunlocked = 0, rc = 0;
	pid_t *pids = NULL;
	const char **images = NULL;
	char (*spilled)[PATH_MAX] = NULL; /* per process: the spill its data is in ("" when none) */
	if (!drv || !drv_index) {
		rc = gs_fail(err, GS_E_FAILURE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_get_state(&s->cu, procs[i].pid, &procs[i].state_before, err)))
			goto out;
		if (procs[i].state_before == CU_PROCESS_STATE_LOCKED && left_of(ctx, procs[i].pid)) {
			if ((rc = unlock_left(s, &procs[i], err)))
				goto out;
			nunlocked++;
		}
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
	if (!ndrv && !nagent && (reopened || nunlocked))
		goto out; /* a gate or the driver's lock was all there was to undo */
	if (!ndrv && !nagent) {
		rc = gs_fail(err, GS_E_STATE, "process %d is not suspended (it is %s)", (int)procs[0].pid,
			     gs_cuda_state_name(procs[0].state_before));
		goto out;
	}
	for (int i = 0; ctx->image && i < n; i++) {
		if (agents[i].present && agents[i].state != GS_AGENT_RUNNING)
			continue;
		/* the driver holds all of this process's GPU state: the image would go unread */
		rc = gs_fail(err, GS_E_AGENT,
			     agents[i].present ? "--image: the agent of process %d holds no GPU data to load (it was suspended "
						 "with --driver); resume it without --image"
					       : "--image: process %d runs without the gpusnap agent, so its GPU data is with the "
						 "driver, not in an image; resume it without --image",
			     (int)procs[i].pid);
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
		if (rc) {
			if (rc == GS_E_FAILURE)
				note_driver_resume_failed(drv, ndrv, err);
			goto out;
		}
	}
	if (gs_fault(GS_FI_RESUME_AFTER_DRIVER)) {
		rc = gs_fail(err, GS_E_FAILURE, "resume of process %d failed at '%s' (injected): the driver part is done; "
			     "gpusnap resume %d finishes it", (int)procs[0].pid, gs_fault_name(GS_FI_RESUME_AFTER_DRIVER),
			     (int)procs[0].pid);
		goto out;
	}
	/*
	 * data part: each agent re-creates its memory at the same addresses and lets the app go on; memory
	 * shared between the processes is made again by its exporters and handed to its importers first, and
	 * no gate opens before every agent is back (share_tree.h)
	 */
	pids = calloc((size_t)n, sizeof(pid_t));
	images = calloc((size_t)n, sizeof(char *));
	spilled = calloc((size_t)n, sizeof(*spilled));
	if (!pids || !images || !spilled) {
		rc = gs_fail(err, GS_E_FAILURE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		pids[i] = procs[i].pid;
		images[i] = ctx->image;
		const struct resume_left *left = left_of(ctx, procs[i].pid);
		if (!ctx->image && left && left->image[0] && agents[i].present && agents[i].state != GS_AGENT_RUNNING) {
			images[i] = left->image;
			fprintf(stderr, "gpusnap: note: process %d's GPU data is taken from '%s', where a gpusnap that did not "
				"finish left it\n", (int)procs[i].pid, images[i]);
		} else if (!ctx->image && agents[i].present && agents[i].state != GS_AGENT_RUNNING &&
			   cli_spill_lookup(procs[i].pid, spilled[i], sizeof(spilled[i]), NULL, 0)) {
			images[i] = spilled[i]; /* a suspend spilled it (spill.h): read back, then removed */
		}
	}
	rc = cli_share_resume(pids, agents, n, images, false, err);
	/* a dump killed inside its pause left the data in a stage of its own: back on the GPU, it goes */
	for (int i = 0; !rc && i < n; i++) {
		const struct resume_left *left = left_of(ctx, pids[i]);
		if (left && images[i] == left->image && gs_image_stage_is_left(images[i]) && gs_image_stage_discard(images[i]))
			fprintf(stderr, "gpusnap: warning: cannot remove '%s': %s\n", images[i], strerror(errno));
	}
	/* each spill that was read back goes (--tree: also where another process's resume failed) */
	for (int i = 0; i < n; i++) {
		struct gs_err e = { 0 };
		if ((spilled[i][0] || (ctx->image && agents[i].present)) &&
		    (!rc || (cli_agent_probe(procs[i].pid, &agents[i], &e) == 0 && agents[i].state == GS_AGENT_RUNNING)))
			cli_spill_forget(procs[i].pid);
	}
out:
	free(spilled);
	free(pids);
	free(images);
	free(drv);
	free(drv_index);
	return rc;
}

int cli_resume_procs(struct cli_session *s, struct gs_ckpt_proc *procs, struct cli_agent *agents, int n,
		     struct gs_err *err)
{
	struct resume_ctx ctx = { .image = NULL };
	return run_resume(s, procs, agents, n, &ctx, err);
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
	if (rc == 0)
		rc = cli_want_args("resume", argv, nargs, 1, "PID");
	char absimage[PATH_MAX];
	if (rc == 0 && ctx.image && tree)
		rc = cli_usage_error("resume", "--image is for one process, not --tree");
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
		cli_sweep_leftovers(); /* what processes that are gone left: spills, stages */
		struct process_op op = {
			.action = "resume", .pid_arg = argv[0], .tree = tree, .json = json, .run = run_resume, .ctx = &ctx,
			.found_left = found_left,
		};
		rc = process_op_execute(&op);
	}
	gs_string_list_free(&ctx.maps);
	free(ctx.left);
	return rc == GS_PARSE_HELP ? 0 : rc;
}
