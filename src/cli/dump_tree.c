/*
 * dump_tree.c - `gpusnap dump --tree -D DIR PID` (see dump_tree.h): the
 * process tree rooted at PID in one image, CRIU's dump of the whole tree in
 * DIR/cpu/ and the GPU state of each CUDA process of it in an image of its
 * own, DIR/procs/<pid>/ (an agent's streamed data, or a driver-path
 * manifest whose data CRIU's pages carry).
 *
 * The order is suspend --tree's: memory shared between the processes is
 * linked first (share_tree.h; refused before anything changes when it
 * cannot move), every agent's gate closes before any agent waits for GPU
 * work (ranks wait on each other), then each agent streams its data into
 * its image and releases its GPU memory; an exported allocation is saved
 * once, by its exporter, and once every agent is done the importers let go
 * of their imports and every agent closes its duplicates, so neither the
 * driver (which refuses imported memory) nor CRIU meets the shared memory.
 * Then the driver checkpoints every CUDA process, CRIU dumps the tree, and
 * the image is published. With --leave-running each agent's data goes into
 * a copy in memory of the dump's own (a stage per process, as dump's, where
 * memory has room for all of them): the tree runs again from those, and
 * the image is written from them while it runs. Any failure before CRIU's
 * dump undoes all: the
 * driver puts the processes back, the agents take their data back from
 * their images as one job (cli_share_resume: exports made again, handed to
 * the importers, no gate open before all are back), nothing is left at DIR.
 */
#define LOG_PREFIX "dump: "
#include "cli/dump_tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cli/cli_criu.h"
#include "cli/dump_common.h"
#include "cli/interrupt.h"
#include "cli/op_lock.h"
#include "cli/share_tree.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"
#include "image/image.h"

/* How long a gate closed by GATE waits for its dump before the agent reopens it by itself. */
#define GATE_LEASE_MARGIN_S 120.0
#define GATE_LEASE_NO_LIMIT_S 3600.0

struct tree_run {
	pid_t root;
	char comm[64];
	struct cli_session s;
	bool session;
	struct gs_criu criu;
	pid_t *pids; /* the CUDA processes of the tree, parents first */
	int n;
	struct cli_agent *agents;
	struct gs_ckpt_proc *procs;
	struct cli_op **locks; /* [n]: each CUDA process's; root_lock: the root's when it is not one of them */
	struct cli_op *root_lock;
	char (*images)[4096]; /* each process's GPU image in the temporary directory, then at DIR */
	const char **image_ptrs;
	struct gs_image_tmp *tmp;
	char cpu_dir[4096];
	bool shared;
	/* GPU memory each process held before the dump (NVML): its GPUs in the images, free memory checked on restore */
	uint64_t (*vram)[CLI_MAX_GPUS];
	uint64_t *gpu_mask;
	/* what has been done, for undoing it */
	bool *gated, *dumped;
	bool driver_suspended, published;
	bool undo_failed; /* an agent could not take its data back: its image is kept */
	double agents_s, criu_s, total_s;
	/* --leave-running: from the agents' quiesce (or the driver's lock) to the tree's resume */
	double stopped_at, paused_s;
	uint64_t gpu_bytes;
	/*
	 * --leave-running: each agent process's own copy of its data in memory
	 * (image.h, stage), written into DIR/procs/<pid> once the tree runs;
	 * NULL (staged false) where there was no room for all of them: the
	 * agents write into the image inside the pause, no_stage says why
	 */
	struct gs_image_stage **stages;
	bool staged, keep_stages;
	char no_stage[GS_ERR_MSG_MAX];
	uint64_t stage_bytes;
	double stage_write_s;
	/* --store: what the store held already (never copied), what the dump added; kept: the image kept elsewhere */
	uint64_t store_bytes, store_new_objects;
	bool kept;
	struct dump_keep keep; /* --keep K: what it removed */
};

int dump_tree_parse_pids(const char *value, pid_t **pids, int *n, struct gs_err *err)
{
	*pids = NULL;
	*n = 0;
	size_t cap = 0;
	const char *p = value ? value : "";
	while (*p) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || (*end && *end != ' ') || errno || v <= 0 || v > 0x3fffffff)
			break;
		for (int i = 0; i < *n; i++)
			if ((*pids)[i] == (pid_t)v)
				goto bad;
		if ((size_t)*n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			pid_t *np = realloc(*pids, nc * sizeof(pid_t));
			if (!np) {
				free(*pids);
				*pids = NULL;
				return gs_fail(err, GS_E_FAILURE, "out of memory");
			}
			*pids = np;
			cap = nc;
		}
		(*pids)[(*n)++] = (pid_t)v;
		p = end;
	}
	if (!*p && *n > 0)
		return 0;
bad:
	free(*pids);
	*pids = NULL;
	*n = 0;
	return gs_fail(err, GS_E_IMAGE, "the image's list of processes ('%s') is malformed", value ? value : "");
}

/* A manifest in dir: the GPUs in mask (every GPU when 0), metadata, no allocations; the store it names (NULL: none). */
static int write_manifest(struct tree_run *r, const char *dir, pid_t pid, const char *comm, const char *how,
			  const uint64_t *vram, uint64_t mask, const char *pid_list, struct gs_store *store,
			  const char *store_rec, struct gs_err *err)
{
	struct gs_image_writer_opts wo = { .source_pid = pid, .source_comm = comm, .how = how };
	struct gs_image_writer *w;
	int rc = gs_image_writer_open_in(dir, &wo, &w, err);
	if (rc)
		return rc;
	/* a tree's own manifest names the store its processes' images keep their chunks in (FORMAT.md 12) */
	if (store)
		rc = gs_image_writer_set_store(w, store, store_rec, err);
	if (!rc)
		rc = dump_add_gpus(w, &r->s, mask, err);
	if (!rc)
		rc = dump_set_metadata(w, &r->s, vram, mask, err);
	if (!rc && pid_list)
		rc = gs_image_writer_set_metadata(w, DUMP_TREE_META_PIDS, pid_list, err);
	if (rc) {
		gs_image_writer_abort(w);
		return rc;
	}
	return gs_image_writer_seal(w, err);
}

/* The checks before anything is touched; locks every process of the operation. */
static int prepare(struct tree_run *r, const struct dump_tree_opts *o, const char *pid_arg, struct gs_err *err)
{
	int pid, rc;
	if (gs_parse_pid(pid_arg, &pid))
		return gs_fail(err, GS_E_USAGE, "'%s' is not a process ID", pid_arg);
	if ((rc = gs_proc_check(pid, err)))
		return rc;
	r->root = pid;
	gs_proc_comm(pid, r->comm, sizeof(r->comm));
	if ((rc = cli_session_open(&r->s, err)))
		return rc;
	r->session = true;
	/* CRIU after the CUDA processes are found: a tree without one is told so (exit 4), not sent for CRIU */
	if ((rc = gs_cuda_require_checkpoint(&r->s.cu, err)) ||
	    (rc = cli_targets(&r->s, pid_arg, true, &r->pids, &r->n, err)) || (rc = cli_criu_find(&r->criu, err)))
		return rc;
	int n = r->n;
	r->agents = calloc((size_t)n, sizeof(*r->agents));
	r->procs = calloc((size_t)n, sizeof(*r->procs));
	r->locks = calloc((size_t)n, sizeof(*r->locks));
	r->images = calloc((size_t)n, sizeof(*r->images));
	r->image_ptrs = calloc((size_t)n, sizeof(*r->image_ptrs));
	r->gated = calloc((size_t)n, sizeof(bool));
	r->dumped = calloc((size_t)n, sizeof(bool));
	r->vram = calloc((size_t)n, sizeof(*r->vram));
	r->gpu_mask = calloc((size_t)n, sizeof(*r->gpu_mask));
	r->stages = calloc((size_t)n, sizeof(*r->stages));
	if (!r->agents || !r->procs || !r->locks || !r->images || !r->image_ptrs || !r->gated || !r->dumped || !r->vram ||
	    !r->gpu_mask || !r->stages)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	struct cli_op_record left;
	bool root_is_cuda = false;
	for (int i = 0; i < n; i++) {
		r->procs[i].pid = r->pids[i];
		root_is_cuda |= r->pids[i] == r->root;
		if ((rc = cli_op_begin(r->pids[i], false, "dump", &r->locks[i], &left, err))) {
			cli_op_explain_gone(r->pids[i], err);
			return rc;
		}
		CUprocessState st;
		if ((rc = gs_ckpt_get_state(&r->s.cu, r->pids[i], &st, err)))
			return rc;
		if (st != CU_PROCESS_STATE_RUNNING)
			return gs_fail(err, GS_E_STATE, "process %d is %s; resume it (gpusnap resume --tree %d) before dumping "
				       "the tree", (int)r->pids[i], gs_cuda_state_name(st), (int)r->root);
		if (!o->driver_only && (rc = cli_agent_probe(r->pids[i], &r->agents[i], err)))
			return rc;
		/* before anything moves (afterwards the processes hold nothing), once: the check and the metadata */
		cli_process_vram_per_gpu(&r->s, r->pids[i], r->vram[i], &r->gpu_mask[i]);
		if (!r->agents[i].present &&
		    (rc = cli_driver_multi_gpu_check(&r->s, r->pids[i], &r->gpu_mask[i], o->multi_gpu_driver, err)))
			return rc;
		if (r->agents[i].present && !(r->agents[i].caps & GS_CAP_DUMP_RUNNING))
			return gs_fail(err, GS_E_AGENT, "the agent of process %d is older than dump --tree (it cannot stream "
				       "its data into an image): start the job again with this gpusnap's run", (int)r->pids[i]);
		if (r->agents[i].present && o->store && !(r->agents[i].caps & GS_CAP_DUMP_STORE))
			return gs_fail(err, GS_E_AGENT, "--store needs the gpusnap agent's streamed dump, which process %d lacks "
				       "(an older agent)", (int)r->pids[i]);
		if (r->agents[i].present && r->agents[i].state != GS_AGENT_RUNNING)
			return gs_fail(err, GS_E_STATE, "process %d is suspended; resume it (gpusnap resume --tree %d) before "
				       "dumping the tree", (int)r->pids[i], (int)r->root);
		struct stat pst;
		char ppath[64];
		snprintf(ppath, sizeof(ppath), "/proc/%d", (int)r->pids[i]);
		/* the agent writes its image as the process's user, and restore trusts only this user's (or root's) files */
		if (r->agents[i].present && stat(ppath, &pst) == 0 && pst.st_uid != geteuid() && pst.st_uid != 0)
			return gs_fail(err, GS_E_PERMISSION,
				       "process %d runs as user %u and its agent would write the image: run gpusnap dump as "
				       "that user, or use --driver", (int)r->pids[i], (unsigned)pst.st_uid);
	}
	if (!root_is_cuda && (rc = cli_op_begin(r->root, false, "dump", &r->root_lock, &left, err)))
		return rc;
	if ((rc = gs_criu_dumpable(&r->criu, r->root, o->tcp, NULL, err)))
		return rc;
	return cli_tree_check_device_files(r->root, r->pids, r->n, err);
}

/*
 * Between steps before CRIU: a test's injected failure at point (GS_FI_COUNT_:
 * none here), or a signal that came, stops the dump here (undo follows).
 */
static int stop_if_signalled(struct tree_run *r, enum gs_fault_point point, struct gs_err *err)
{
	if (point != GS_FI_COUNT_ && gs_fault(point)) {
		int e = gs_fault_errno(point, EIO);
		return gs_fail_errno(err, gs_exit_from_errno(e), e, "dump of tree %d failed at '%s' (injected)", (int)r->root,
				     gs_fault_name(point));
	}
	if (!cli_signal_caught())
		return 0;
	char what[64];
	snprintf(what, sizeof(what), "dump of tree %d", (int)r->root);
	return cli_fail_interrupted(err, what);
}

/* What the next command says should this gpusnap be killed from here on. */
static void record_step(struct tree_run *r, const struct dump_tree_opts *o, const char *step, bool criu_done)
{
	char alive[GS_ERR_MSG_MAX], gone[GS_ERR_MSG_MAX];
	int me = (int)getpid(), root = (int)r->root;
	snprintf(alive, sizeof(alive), "process tree %d was left suspended by a gpusnap dump --tree (pid %d) that was "
		 "killed; gpusnap resume --tree %d puts it back", root, me, root);
	const char *tmp = gs_image_tmp_path(r->tmp);
	if (gs_image_tmp_cpu_listed(r->tmp))
		snprintf(gone, sizeof(gone), "a gpusnap dump --tree (pid %d) was killed after CRIU dumped the process tree "
			 "%d, before it published the image at '%s': the image is complete at '%s'; gpusnap restore -D '%s' "
			 "brings the tree back", me, root, o->dir, tmp, tmp);
	else /* CRIU may have finished after gpusnap died, which then never wrote the checksums of CRIU's files */
		snprintf(gone, sizeof(gone), "CRIU dumped the process tree %d for a gpusnap dump --tree (pid %d) that was "
			 "killed before it published the image at '%s' or checksummed CRIU's files: check '%s' with gpusnap "
			 "inspect --verify --allow-unverified-cpu, then gpusnap restore --allow-unverified-cpu -D '%s' brings "
			 "the tree back", root, me, o->dir, tmp, tmp);
	for (int i = 0; i < r->n; i++)
		cli_op_step(r->locks[i], step, r->image_ptrs[i], alive, criu_done ? gone : NULL);
}

/* The agents' data part: gates first, then each agent's image; the shared memory let go at the end. */
static int agents_out(struct tree_run *r, const struct dump_tree_opts *o, struct gs_err *err)
{
	int rc = cli_share_before_suspend(r->pids, r->agents, r->n, true, &r->shared, err);
	if (rc)
		return rc;
	int gates = 0;
	bool all_gate = true;
	for (int i = 0; i < r->n; i++) {
		gates += r->agents[i].present;
		all_gate &= !r->agents[i].present || (r->agents[i].caps & GS_CAP_GATE);
	}
	if (gates > 1 && all_gate) {
		double lease = o->timeout > 0 ? GATE_LEASE_MARGIN_S + 2.0 * r->n * o->timeout : GATE_LEASE_NO_LIMIT_S;
		for (int i = 0; i < r->n && !rc; i++)
			if (r->agents[i].present && !(rc = cli_agent_gate(r->pids[i], &r->agents[i], o->timeout, lease, err)))
				r->gated[i] = true;
		if (rc)
			return rc;
	}
	double t = gs_now();
	for (int i = 0; i < r->n && !rc; i++) {
		if (!r->agents[i].present)
			continue;
		struct gs_dump_opts d = { .running = true, .cached = o->leave_running, .compress_codec = o->compress_codec,
					  .compress_level = o->compress_level, .store = o->store_path,
					  .store_rec = o->store ? o->store_part_rec : NULL,
					  .store_ref = o->store ? o->store_ref : NULL };
		rc = dump_agent_into(r->pids[i], &r->agents[i], r->image_ptrs[i], r->stages[i], o->timeout, &d, err);
		if (rc) {
			/* it walked back and runs on (its gate open), unless its own undo failed: then it stays
			 * suspended, its data in its image */
			struct cli_agent now;
			struct gs_err e = { 0 };
			if (!cli_agent_probe(r->pids[i], &now, &e) && now.present && now.state != GS_AGENT_RUNNING)
				r->dumped[i] = true;
			else
				r->gated[i] = false;
			break;
		}
		r->dumped[i] = true;
		r->gated[i] = false;
		r->gpu_bytes += cli_agent_counter(&r->agents[i], "bytes");
		r->store_bytes += cli_agent_counter(&r->agents[i], "store_bytes");
		r->store_new_objects += cli_agent_counter(&r->agents[i], "store_new_objects");
	}
	r->agents_s = gs_now() - t;
	/* every process is off the GPU: the memory they share can go, before the driver and CRIU meet it */
	if (!rc && r->shared)
		rc = cli_share_release(r->pids, r->agents, r->n, err);
	return rc;
}

/* Where each agent process's data goes: its stage, or its directory in the temporary image. */
static void point_images(struct tree_run *r)
{
	for (int i = 0; i < r->n; i++)
		r->image_ptrs[i] = !r->agents[i].present ? NULL
				   : r->stages[i]	   ? gs_image_stage_path(r->stages[i])
							   : r->images[i];
}

static void free_stages(struct tree_run *r, bool keep)
{
	for (int i = 0; i < r->n; i++) {
		gs_image_stage_free(r->stages[i], keep);
		r->stages[i] = NULL;
	}
	r->staged = false;
	point_images(r);
}

/*
 * --leave-running: a stage per agent process, each charged to the memory
 * of its process, which must have room for all of them (they may share a
 * cgroup); all or none (staged says which), no_stage says why none.
 */
static void open_stages(struct tree_run *r)
{
	uint64_t total = 0;
	for (int i = 0; i < r->n; i++)
		if (r->agents[i].present)
			total += dump_stage_need(&r->agents[i], r->vram[i]);
	r->staged = true;
	for (int i = 0; i < r->n && r->staged; i++)
		if (r->agents[i].present &&
		    !(r->stages[i] = dump_stage_open(r->pids[i], &r->agents[i], dump_stage_need(&r->agents[i], r->vram[i]),
						     total, false, r->no_stage, sizeof(r->no_stage))))
			free_stages(r, false);
	point_images(r);
}

/* The complete temporary image, kept under a name of its own (never deleted: it may be the only copy). */
static int keep_tmp(struct tree_run *r, const struct dump_tree_opts *o, char *kept, size_t n)
{
	struct gs_err ke = { 0 };
	int rc = gs_image_tmp_keep(r->tmp, kept, n, &ke);
	if (rc)
		fprintf(stderr, "gpusnap: %s\n", ke.msg);
	r->tmp = NULL; /* freed by gs_image_tmp_keep */
	r->kept = true;
	/* its processes' STORED chunks stay for the kept image: the dump's ref names it from now on */
	if (o->store && gs_store_ref_set_image(o->store, kept, &ke))
		fprintf(stderr, "gpusnap: %s\n", ke.msg);
	return rc;
}

/* The tree runs again: each stage's data goes into DIR/procs/<pid> of the temporary image, the stages' memory with it. */
static int write_stages(struct tree_run *r, struct gs_err *err)
{
	double t = gs_now();
	int rc = 0;
	for (int i = 0; i < r->n && !rc; i++) {
		if (!r->stages[i])
			continue;
		char sub[64];
		uint64_t bytes = 0;
		snprintf(sub, sizeof(sub), "%s/%d", DUMP_TREE_PROCS_DIR, (int)r->pids[i]);
		rc = gs_image_stage_write(r->stages[i], r->tmp, sub, &bytes, err);
		r->stage_bytes += bytes;
	}
	r->stage_write_s = gs_now() - t;
	return rc;
}

/* The paths of the stages, for a message: "'a', 'b'". */
static void stage_paths(const struct tree_run *r, char *out, size_t n)
{
	size_t used = 0;
	out[0] = '\0';
	for (int i = 0; i < r->n && used < n; i++)
		if (r->stages[i]) {
			int k = snprintf(out + used, n - used, "%s'%s'", used ? ", " : "", gs_image_stage_path(r->stages[i]));
			used += k > 0 ? (size_t)k : 0;
		}
}

/*
 * --leave-running once CRIU has dumped the tree, as cmd_dump.c's: the tree
 * goes on first, its agents reading their data back from their stages (or
 * from the temporary image, written through the page cache), and the image
 * is written from the stages and published (made durable) while it runs. A
 * tree that did not resume keeps its data in the image, which is then
 * published all the same (or kept), or in the stages, which are kept.
 */
static int finish_leave_running(struct tree_run *r, const struct dump_tree_opts *o, struct gs_err *err)
{
	for (int i = 0; i < r->n; i++)
		snprintf(r->images[i], sizeof(r->images[i]), "%s/%s/%d", gs_image_tmp_path(r->tmp), DUMP_TREE_PROCS_DIR,
			 (int)r->pids[i]);
	point_images(r);
	int rc = gs_ckpt_resume(&r->s.cu, r->procs, r->n, NULL, 0, err);
	if (!rc) {
		r->driver_suspended = false;
		for (int i = 0; i < r->n; i++)
			if (r->agents[i].present && (rc = cli_agent_probe(r->pids[i], &r->agents[i], err)))
				break;
	}
	if (!rc)
		rc = cli_share_resume(r->pids, r->agents, r->n, r->image_ptrs, false, err);
	if (!rc)
		r->paused_s = gs_now() - r->stopped_at;
	/* the image holds the data of whoever did not resume: no undo from here on, whatever the publish does */
	memset(r->dumped, 0, (size_t)r->n * sizeof(bool));
	r->driver_suspended = false;
	/* the stages' memory is gpusnap's alone from here: nothing is left of it should gpusnap die */
	for (int i = 0; !rc && i < r->n; i++) {
		int drc = r->stages[i] ? gs_image_stage_detach(r->stages[i], err) : 0;
		if (drc) {
			gs_err_wrap(err, "the tree of process %d runs on, but its image was not written at '%s'", (int)r->root,
				    o->dir);
			return drc;
		}
	}
	/*
	 * The tree runs: the publish touches only the image (whose directory
	 * stays locked by r->tmp), so the processes are let go for other
	 * commands now (a suspend to preempt the job right after its
	 * checkpoint need not wait for the fsync of many GiB).
	 */
	for (int i = 0; !rc && i < r->n; i++) {
		cli_op_end(r->locks[i], true);
		r->locks[i] = NULL;
	}
	struct gs_err pe = { 0 };
	int prc = 0;
	if (r->staged && !rc)
		prc = write_stages(r, &pe);
	else if (r->staged) /* an image without the GPU data would be no image */
		prc = gs_fail(&pe, GS_E_AGENT, "the GPU data stayed in the dump's copies");
	if (!prc)
		prc = gs_image_publish(r->tmp, &r->published, &pe);
	if (!rc) {
		if (prc) { /* the temporary image goes */
			*err = pe;
			gs_err_wrap(err, "the tree of process %d runs on, but its image was not published at '%s'",
				    (int)r->root, o->dir);
		}
		return prc;
	}
	if (r->published) {
		gs_err_wrap(err, "the image at '%s' is complete, but the tree did not resume (gpusnap resume --tree %d)",
			    o->dir, (int)r->root);
	} else if (r->staged) {
		char at[2048];
		stage_paths(r, at, sizeof(at));
		r->keep_stages = true;
		gs_err_wrap(err, "the tree did not resume after its dump and no image was published; its GPU data is kept "
			    "in %s (gpusnap resume --tree %d)", at, (int)r->root);
	} else {
		char kept[4096];
		keep_tmp(r, o, kept, sizeof(kept));
		gs_err_wrap(err, "the tree did not resume after its dump, and the image was not published (%s); it is kept at "
			    "'%s'", pe.msg, kept);
	}
	return rc;
}

static void undo(struct tree_run *r);

static int run(struct tree_run *r, const struct dump_tree_opts *o, struct gs_err *err)
{
	double t0 = gs_now();
	/* as dump's: an image at DIR of the root, by its PID here or in its own namespace, is its own */
	struct gs_image_tmp_opts to = { .source_pid = r->root, .source_pid_own = gs_proc_own_pid(r->root),
					.source_comm = r->comm, .replace = o->replace };
	int rc = gs_image_tmp_create(o->dir, &to, &r->tmp, err);
	if (rc || (rc = gs_image_tmp_cpu_fd_path(r->tmp, r->cpu_dir, sizeof(r->cpu_dir), err)))
		return rc;
	char procs_dir[4096];
	snprintf(procs_dir, sizeof(procs_dir), "%s/%s", gs_image_tmp_path(r->tmp), DUMP_TREE_PROCS_DIR);
	if (mkdir(procs_dir, 0700))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create '%s'", procs_dir);
	for (int i = 0; i < r->n; i++) {
		snprintf(r->images[i], sizeof(r->images[i]), "%s/%d", procs_dir, (int)r->pids[i]);
		if (mkdir(r->images[i], 0700))
			return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create '%s'", r->images[i]);
	}
	if (o->leave_running && o->store) /* each process's manifest names the store by a path relative to DIR */
		snprintf(r->no_stage, sizeof(r->no_stage), "a dump into a chunk store (--store) writes into the store");
	else if (o->leave_running)
		open_stages(r);
	point_images(r);
	if ((rc = stop_if_signalled(r, GS_FI_COUNT_, err)))
		return rc;
	record_step(r, o, "agent", false);
	r->stopped_at = gs_now();
	rc = agents_out(r, o, err);
	if (rc == GS_E_NO_SPACE && r->staged) {
		/*
		 * A stage filled up after all (others use the memory too): every
		 * agent takes its data back from its stage, and all of them write
		 * into the image inside the pause instead, as without stages.
		 */
		snprintf(r->no_stage, sizeof(r->no_stage), "%s", err->msg);
		pr_info("a copy in memory filled up (%s): the image is written inside the pause", err->msg);
		undo(r);
		if (r->undo_failed)
			return rc;
		free_stages(r, false);
		memset(r->gated, 0, (size_t)r->n * sizeof(bool));
		memset(r->dumped, 0, (size_t)r->n * sizeof(bool));
		r->gpu_bytes = 0;
		*err = (struct gs_err){ 0 };
		record_step(r, o, "agent", false);
		rc = agents_out(r, o, err);
	}
	if (rc || (rc = stop_if_signalled(r, GS_FI_DUMP_TREE_AFTER_AGENTS, err)))
		return rc;
	record_step(r, o, "driver", false);
	if ((rc = gs_ckpt_suspend(&r->s.cu, r->procs, r->n, o->timeout, err)))
		return rc;
	r->driver_suspended = true;
	/* the manifests: a driver-path process's (its data is in CRIU's pages), the tree's with every GPU used */
	uint64_t vram_all[CLI_MAX_GPUS] = { 0 }, mask_all = 0;
	char pid_list[4096] = "";
	size_t used = 0;
	for (int i = 0; i < r->n && !rc; i++) {
		for (int g = 0; g < CLI_MAX_GPUS; g++)
			vram_all[g] += r->vram[i][g];
		mask_all |= r->gpu_mask[i];
		int k = snprintf(pid_list + used, sizeof(pid_list) - used, "%s%d", used ? " " : "", (int)r->pids[i]);
		if (k < 0 || (size_t)k >= sizeof(pid_list) - used)
			rc = gs_fail(err, GS_E_FAILURE, "the tree of process %d has too many CUDA processes for one image (%d)",
				     (int)r->root, r->n);
		else
			used += (size_t)k;
		if (!rc && !r->agents[i].present) {
			char comm[64];
			gs_proc_comm(r->pids[i], comm, sizeof(comm));
			rc = write_manifest(r, r->images[i], r->pids[i], comm, "driver", r->vram[i], r->gpu_mask[i], NULL, NULL,
					    NULL, err);
		}
	}
	if (rc || (rc = write_manifest(r, gs_image_tmp_path(r->tmp), r->root, r->comm, DUMP_TREE_HOW, vram_all, mask_all,
				       pid_list, o->store, o->store_rec, err)))
		return rc;
	if ((rc = stop_if_signalled(r, GS_FI_DUMP_TREE_AFTER_DRIVER, err)))
		return rc;
	struct gs_criu_dump_opts co = { .leave_running = o->leave_running, .tcp = o->tcp };
	record_step(r, o, "criu", true);
	double t = gs_now();
	rc = gs_criu_dump(&r->criu, r->root, r->cpu_dir, &co, err);
	r->criu_s = gs_now() - t;
	if (rc)
		return rc; /* criu resumes the tree it could not dump: undo puts it back on the GPU */
	if (o->leave_running) {
		rc = finish_leave_running(r, o, err);
		r->total_s = gs_now() - t0;
		return rc;
	}
	r->driver_suspended = false; /* the processes are gone: nothing to undo from here on */
	/* CRIU's files get their checksums first: an image kept from here on verifies as a published one */
	rc = gs_image_tmp_list_cpu(r->tmp, err);
	record_step(r, o, "publish", true);
	if (!rc)
		rc = gs_image_publish(r->tmp, &r->published, err);
	if (rc && !r->published) {
		char kept[4096];
		bool listed = gs_image_tmp_cpu_listed(r->tmp);
		keep_tmp(r, o, kept, sizeof(kept));
		gs_err_wrap(err, "tree %d was dumped, but its image was not published; it is kept at '%s' (%s -D '%s' "
			    "brings the tree back)", (int)r->root, kept, dump_restore_cmd(listed), kept);
		return rc;
	}
	r->total_s = gs_now() - t0;
	return rc;
}

/* Brings the tree back to running after a failure before CRIU's dump. */
static void undo(struct tree_run *r)
{
	struct gs_err e = { 0 };
	if (r->driver_suspended && gs_ckpt_resume(&r->s.cu, r->procs, r->n, NULL, 0, &e)) {
		fprintf(stderr, "gpusnap: could not put the tree's processes back on the GPU: %s\n", e.msg);
		r->undo_failed = true;
	}
	r->driver_suspended = false;
	bool any = false;
	for (int i = 0; i < r->n; i++)
		any |= r->dumped[i];
	if (any) {
		for (int i = 0; i < r->n; i++)
			if (r->agents[i].present && cli_agent_probe(r->pids[i], &r->agents[i], &e))
				fprintf(stderr, "gpusnap: %s\n", e.msg);
		/* each agent takes its data back from its image; shared memory is handed over first */
		if (cli_share_resume(r->pids, r->agents, r->n, r->image_ptrs, false, &e)) {
			fprintf(stderr, "gpusnap: %s\n", e.msg);
			r->undo_failed = true;
		}
	}
	for (int i = 0; i < r->n; i++) {
		if (r->gated[i] && !r->dumped[i] && cli_agent_open(r->pids[i], &r->agents[i], &e)) {
			fprintf(stderr, "gpusnap: %s\n", e.msg);
			r->undo_failed = true;
		}
	}
}

static void print_outcome(const struct tree_run *r, const struct dump_tree_opts *o, int rc, const struct gs_err *err)
{
	if (o->json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "dump", rc, err);
		gs_json_kv_int(&j, "pid", r->root);
		gs_json_kv_bool(&j, "tree", true);
		gs_json_kv_string(&j, "dir", o->dir);
		gs_json_kv_bool(&j, "leave_running", o->leave_running);
		gs_json_kv_bool(&j, "published", r->published);
		gs_json_kv_bool(&j, "shared_memory", r->shared);
		gs_json_kv_uint(&j, "gpu_data_bytes", r->gpu_bytes);
		if (o->store) {
			gs_json_kv_string(&j, "store", o->store_path);
			gs_json_kv_uint(&j, "store_bytes", r->store_bytes);
			gs_json_kv_uint(&j, "store_new_objects", r->store_new_objects);
		}
		if (o->keep) {
			gs_json_kv_uint(&j, "keep_removed", r->keep.removed);
			gs_json_kv_uint(&j, "keep_gc_objects", r->keep.gc_objects);
			gs_json_kv_uint(&j, "keep_gc_bytes", r->keep.gc_bytes);
		}
		if (o->leave_running) {
			gs_json_kv_bool(&j, "staged", r->staged);
			if (r->staged)
				gs_json_kv_uint(&j, "stage_written_bytes", r->stage_bytes);
			else
				gs_json_kv_string(&j, "no_stage", r->no_stage);
		}
		gs_json_key(&j, "processes");
		gs_json_array_begin(&j);
		for (int i = 0; i < r->n; i++) {
			gs_json_object_begin(&j);
			gs_json_kv_int(&j, "pid", r->pids[i]);
			gs_json_kv_string(&j, "path", r->agents[i].present ? "agent" : "driver");
			gs_json_object_end(&j);
		}
		gs_json_array_end(&j);
		gs_json_key(&j, "times");
		gs_json_object_begin(&j);
		gs_json_kv_double(&j, "total_s", r->total_s);
		gs_json_kv_double(&j, "agents_s", r->agents_s);
		gs_json_kv_double(&j, "criu_s", r->criu_s);
		if (o->leave_running)
			gs_json_kv_double(&j, "paused_s", r->paused_s);
		if (r->staged)
			gs_json_kv_double(&j, "stage_write_s", r->stage_write_s);
		gs_json_object_end(&j);
		gs_json_object_end(&j);
		cli_json_print(&j);
		return;
	}
	if (rc)
		return;
	char b[32], comm[sizeof(r->comm)];
	printf("dumped tree %d (%s, %d CUDA process%s) to %s: %s of GPU data written by the agents in %.2f s, CRIU part "
	       "%.2f s, total %.2f s\n", (int)r->root, gs_printable(comm, sizeof(comm), r->comm), r->n, r->n == 1 ? "" : "es", o->dir,
	       gs_format_bytes(r->gpu_bytes, b, sizeof(b)), r->agents_s, r->criu_s, r->total_s);
	if (o->leave_running && r->staged)
		printf("the tree of process %d keeps running (it stood still for %.2f s; the image was written from memory "
		       "in %.2f s after)\n", (int)r->root, r->paused_s, r->stage_write_s);
	else if (o->leave_running)
		printf("the tree of process %d keeps running (it stood still for %.2f s)\n", (int)r->root, r->paused_s);
	else
		printf("the tree of process %d is gone; gpusnap restore -D %s brings it back\n", (int)r->root, o->dir);
}

int dump_tree(const struct dump_tree_opts *o, const char *pid_arg)
{
	struct gs_err err = { 0 };
	struct tree_run *r = calloc(1, sizeof(*r));
	if (!r)
		return cli_report_error(&(struct gs_err){ GS_E_FAILURE, "out of memory" });
	cli_signals_catch();
	int rc = prepare(r, o, pid_arg, &err);
	if (rc == GS_E_NO_PROCESS)
		cli_op_explain_gone(r->root, &err);
	if (!rc) {
		char what[64];
		snprintf(what, sizeof(what), "dump --tree %d", (int)r->root);
		struct cli_progress *progress = cli_progress_start(what);
		rc = run(r, o, &err);
		cli_progress_stop(progress);
		if (rc && !r->published)
			undo(r);
		snprintf(what, sizeof(what), "dump of tree %d", (int)r->root);
		rc = cli_dump_failed_by_signal(rc, r->published, r->undo_failed, what, "the processes run on", o->dir, &err);
	}
	if (r->staged && r->undo_failed && !r->published) {
		/* an agent's data is only in its stage: kept, and said where */
		char at[2048];
		stage_paths(r, at, sizeof(at));
		r->keep_stages = true;
		fprintf(stderr, "gpusnap: the GPU data of the processes that stay suspended is kept in %s (gpusnap resume "
			"--tree %d puts them back)\n", at, (int)r->root);
	}
	if (r->tmp && r->undo_failed && !r->published && !r->keep_stages) {
		/* an agent's data is only in its image: kept, and said where */
		char kept[4096];
		if (!keep_tmp(r, o, kept, sizeof(kept)))
			fprintf(stderr, "gpusnap: the GPU data of the processes that stay suspended is kept in '%s/%s/<pid>' "
				"(gpusnap resume --image DIR PID puts one back)\n", kept, DUMP_TREE_PROCS_DIR);
	} else if (r->tmp) {
		if (r->published)
			gs_image_tmp_close(r->tmp);
		else
			gs_image_tmp_discard(r->tmp);
	}
	/* the ref names what the store's objects are kept for: the image, a kept one; nothing published, none */
	if (o->store && !r->published && !r->kept)
		gs_store_ref_remove(o->store);
	if (!rc && r->published && o->keep) {
		r->keep = (struct dump_keep){ .dir = o->dir, .store_path = o->store_path, .st = o->store, .keep = o->keep };
		dump_keep_newest(&r->keep);
	}
	print_outcome(r, o, rc, &err);
	if (rc)
		cli_report_error(&err);
	else if (cli_signal_caught())
		fprintf(stderr, "gpusnap: %s came after CRIU had dumped tree %d, too late to undo; the dump was finished\n",
			cli_signal_name(cli_signal_caught()), (int)r->root);
	for (int i = 0; r->locks && i < r->n; i++)
		cli_op_end(r->locks[i], rc == 0);
	cli_op_end(r->root_lock, rc == 0);
	if (r->session)
		cli_session_close(&r->s);
	free(r->pids);
	free(r->agents);
	free(r->procs);
	free(r->locks);
	free(r->images);
	free(r->image_ptrs);
	free(r->gated);
	free(r->dumped);
	free(r->vram);
	free(r->gpu_mask);
	if (r->stages)
		for (int i = 0; i < r->n; i++)
			gs_image_stage_free(r->stages[i], r->keep_stages);
	free(r->stages);
	free(r);
	return rc;
}
