/*
 * cmd_restore.c - `gpusnap restore -D DIR`: brings a dumped process back
 * from an image, running, with its GPU memory, on the same GPUs or mapped
 * ones (--map); any number of times from the same image.
 *
 * Checked before anything is started: the image (complete, trusted), CRIU,
 * the GPU types (considering --map), free GPU memory, the PID the image needs.
 * Every chunk's checksum (unless --no-verify) is checked before the process
 * runs a single instruction of its own: the checksum pass reads the whole
 * image, at the disk's speed from a cold disk, so it runs while CRIU brings
 * the process back *stopped* (--leave-stopped) and the driver restores its
 * GPU state on the driver's own restore thread, the only thread let run
 * (common/lone_thread.h; the app's threads must not touch GPU memory before
 * the driver mapped it back, as CRIU's CUDA plugin also ensures). Only when
 * the pass is good does the process continue (SIGCONT); for agent images the
 * agent then streams the data from the image (now in the page cache) to the
 * GPU. --verify-first runs the pass before CRIU instead. Where the restore
 * thread cannot be run alone (no ptrace rights, a driver that names none),
 * the process continues after the pass and the driver restores it running,
 * the older order.
 *
 * With lazy pages (--lazy-pages, GPUSNAP_RESTORE_LAZY) CRIU's own part
 * shrinks to the process's structure: CRIU's files are checked before it, a
 * `criu lazy-pages` daemon (criu.h, struct gs_criu_lazy) fills the CPU
 * memory while the driver and the agent do their part, and the restore
 * ends once it is done; a daemon that fails kills the process.
 *
 * Any failure after CRIU kills the restored process, so a refused restore
 * leaves no process and the image as it was. The image is only read: CRIU's
 * log and work files go to a folder of their own under the runtime directory.
 * It is held for reading until the restore ends (gs_image_open_held): a dump
 * replacing DIR meanwhile waits, so no file is removed under CRIU or the
 * agent. An image without checksums of CRIU's files is restored only with
 * --allow-unverified-cpu.
 *
 * The PID the image needs is locked for the restore, and the restored
 * process too once it exists (op_lock.h): a second restore of the image, or
 * a resume of the process it brings back, waits for nothing and is refused.
 * An ending signal (interrupt.h) before the process continues kills it (it
 * never ran; the image is unchanged); one after it is obeyed once the restore
 * is complete. A half-restored process that a killed gpusnap left stopped is
 * removed by the next restore of the image.
 */
#define LOG_PREFIX "restore: "
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cli/cli_criu.h"
#include "cli/dump_common.h"
#include "cli/dump_tree.h"
#include "cli/interrupt.h"
#include "cli/op_lock.h"
#include "cli/share_tree.h"
#include "cli/work_dir.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/lone_thread.h"
#include "common/proc.h"
#include "common/settings.h"
#include "core/control_socket.h"
#include "core/share_plan.h"
#include "common/util.h"
#include "criu/criu.h"
#include "cuda/checkpoint.h"
#include "image/image.h"

static const char *const restore_usage[] = {
	"gpusnap restore [--map FROM=TO]... [--no-verify | --verify-first] [--verify-gpu] [--lazy-pages] "
	"[--allow-unverified-cpu] [--json] "
	"-D DIR",
	NULL,
};

const struct cli_doc restore_doc = {
	.args = "DIR",
	.description =
		"Brings the process (or process tree) that gpusnap dump wrote into DIR back, running, with the PID it "
		"had, on the GPUs it used or, with --map, on others of the same type.\n\n"
		"Every chunk and CRIU file of the image is checked against its checksum while CRIU restores the "
		"process, which is held stopped until the check passed. Any failure kills the half-restored process: "
		"a refused restore leaves no process and the image as it was. The image is only read.\n\n"
		"With --lazy-pages (or GPUSNAP_RESTORE_LAZY), CRIU brings the process back with its CPU memory empty "
		"and a `criu lazy-pages` daemon fills it while the driver restores the process and the agent loads "
		"the GPU data; CRIU's files are checked before the daemon serves a page, and the restore ends once every "
		"page is in. A daemon that fails kills the process.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "--lazy-pages for the image of a process tree" },
						{ GS_E_PERMISSION, "an image path that others could change (named); --lazy-pages "
								   "where userfaultfd is for root only" },
						{ GS_E_STATE, "another gpusnap is restoring the image or at work on its PID" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" },
						{ GS_E_TIMEOUT, "a criu run took longer than GPUSNAP_CRIU_TIMEOUT" },
						{ GS_E_GPU_MAP, "--map invalid, or an image GPU not here and not mapped" },
						{ GS_E_IMAGE, "image missing, truncated, corrupt or of an unknown version (the "
							      "file or chunk is named)" },
						{ GS_E_GPU_MISMATCH, "" }, { GS_E_NO_VRAM, "" },
						{ GS_E_CRIU, "CRIU missing, too old or failed, the PID the image needs is in "
							     "use, --lazy-pages without userfaultfd, or the lazy-pages daemon failed "
							     "(the process is killed)" },
						{ GS_E_AGENT, "" }, { GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_CRIU GPUSNAP_CRIU_TIMEOUT GPUSNAP_RESTORE_LAZY GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap restore -D /ckpt/job", "Bring the dumped job back." },
		{ "gpusnap restore -D /ckpt/job --map 0=1", "Bring it back with image GPU 0's state on GPU 1." },
		{ NULL, NULL } },
};

struct restore_opts {
	const char *dir;
	struct gs_string_list maps;
	bool no_verify, verify_first, json, allow_unverified_cpu;
	bool verify_gpu; /* the agent checks the loaded data's fingerprints on the GPU */
	bool lazy_pages; /* --lazy-pages: GPUSNAP_RESTORE_LAZY=on for this restore */
};

struct restore_run {
	struct gs_image *img;
	const struct gs_image_info *info;
	struct gs_criu criu;
	struct cli_session s;
	bool session;
	int *target;            /* machine GPU index for each image GPU */
	CUcheckpointGpuPair *pairs;
	unsigned npairs;
	char work[PATH_MAX];
	pid_t pid;
	struct gs_ckpt_proc proc;
	struct cli_agent agent;
	struct cli_op *lock;       /* of the PID the image needs, then of the restored process too */
	struct cli_op_record left; /* what a killed gpusnap left on that PID, if anything */
	double verify_s, criu_s, gpu_s, total_s;
	double verify_wait_s; /* how long the held process waited for the checksum pass */
	uint64_t verified_bytes;
	/* the checksum pass on its own thread, alongside CRIU and the driver */
	pthread_t verify_thread;
	bool verifying;
	int verify_rc;
	struct gs_err verify_err;
	bool held_restore; /* the driver restored while the app's threads were held stopped */
	/* lazy pages: CRIU's daemon fills the CPU memory while the GPU part goes on */
	bool lazy;
	bool lazy_auto;                /* GPUSNAP_RESTORE_LAZY=auto: a daemon that does not start means a whole restore */
	char lazy_why[GS_ERR_MSG_MAX]; /* why not, when not */
	struct gs_criu_lazy lazy_d;
	enum gs_image_part verify_part; /* what the pass alongside checks (a lazy restore checks CRIU's files first) */
	bool cpu_checked;               /* CRIU's files are checked, or need not be before CRIU (cpu_checked()) */
	double t0;                      /* the restore's start */
	double verify_cpu_s;            /* CRIU's files checked before CRIU ran (lazy) */
	double verify_cpu_wait_s;       /* of which after the daemon was ready: CRIU waited (not in criu_s) */
	double ready_s;                 /* from t0: the process runs with its GPU data */
	double lazy_done_s;             /* from t0: every CPU page in (lazy) */
	/* an image of a process tree (dump --tree): its CUDA processes, each with its GPU image */
	bool tree;
	pid_t *tree_pids;
	int tree_n;
	struct gs_image **tree_imgs;
	char (*tree_dirs)[PATH_MAX];
	struct cli_agent *tree_agents;
	struct gs_ckpt_proc *tree_procs;
};

static const char *uuid_str(const uint8_t u[16], char *b, size_t n)
{
	return gs_image_format_uuid(u, b, n);
}

/* The image GPU a map side names: its recorded index or its UUID; -1 if none. */
static int image_gpu(const struct gs_image *img, const char *side)
{
	int idx;
	CUuuid u;
	bool by_index = gs_parse_int(side, &idx) == 0;
	if (!by_index && gs_cuda_uuid_parse(side, &u))
		return -1;
	for (size_t k = 0; k < gs_image_gpu_count(img); k++) {
		const struct gs_image_gpu *g = gs_image_gpu_at(img, k);
		if (by_index ? (int)g->index == idx : !memcmp(g->uuid, u.bytes, 16))
			return (int)k;
	}
	return -1;
}

/* Decides where each image GPU goes (--map, else the GPU with the same UUID) and checks the types. */
static int plan_gpus(struct restore_run *r, const struct restore_opts *o, struct gs_err *err)
{
	size_t n = gs_image_gpu_count(r->img);
	r->target = calloc(n ? n : 1, sizeof(int));
	if (!r->target)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (size_t k = 0; k < n; k++)
		r->target[k] = -1;
	for (int i = 0; i < o->maps.count; i++) {
		const char *spec = o->maps.items[i];
		const char *eq = strchr(spec, '=');
		char from[128];
		if (!eq || eq == spec || !eq[1] || (size_t)(eq - spec) >= sizeof(from))
			return gs_fail(err, GS_E_GPU_MAP, "bad GPU map '%s' (expected FROM=TO, e.g. 0=1)", spec);
		snprintf(from, sizeof(from), "%.*s", (int)(eq - spec), spec);
		int k = image_gpu(r->img, from);
		if (k < 0)
			return gs_fail(err, GS_E_GPU_MAP, "the image has no GPU '%s' (gpusnap inspect lists its GPUs)", from);
		int m = gs_gpus_find(r->s.gpus, r->s.ngpus, eq + 1);
		if (m < 0)
			return gs_fail(err, GS_E_GPU_MAP, "GPU '%s' is not on this machine (it has %d GPU%s)", eq + 1,
				       r->s.ngpus, r->s.ngpus == 1 ? "" : "s");
		if (r->target[k] >= 0)
			return gs_fail(err, GS_E_GPU_MAP, "image GPU '%s' is mapped twice", from);
		r->target[k] = m;
	}
	for (size_t k = 0; k < n; k++) {
		if (r->target[k] >= 0)
			continue;
		const struct gs_image_gpu *g = gs_image_gpu_at(r->img, k);
		r->target[k] = gs_gpus_find_uuid(r->s.gpus, r->s.ngpus, g->uuid);
		if (r->target[k] < 0) {
			char ub[48];
			return gs_fail(err, GS_E_GPU_MAP,
				       "image GPU %" PRIu32 " (%s, %s) is not on this machine; map it with --map %" PRIu32 "=TO",
				       g->index, uuid_str(g->uuid, ub, sizeof(ub)), g->name, g->index);
		}
	}
	bool moved = false;
	for (size_t k = 0; k < n; k++) {
		const struct gs_image_gpu *g = gs_image_gpu_at(r->img, k);
		const struct gs_gpu *t = &r->s.gpus[r->target[k]];
		if (strcmp(g->name, t->name) || g->cc_major != (uint32_t)t->cc_major || g->cc_minor != (uint32_t)t->cc_minor)
			return gs_fail(err, GS_E_GPU_MISMATCH,
				       "image GPU %" PRIu32 " is a %s (compute capability %" PRIu32 ".%" PRIu32 "), GPU %d of this "
				       "machine a %s (%d.%d): different GPU types",
				       g->index, g->name, g->cc_major, g->cc_minor, t->index, t->name, t->cc_major, t->cc_minor);
		for (size_t j = 0; j < k; j++)
			if (r->target[j] == r->target[k])
				return gs_fail(err, GS_E_GPU_MAP, "two image GPUs would go to GPU %d; map each onto its own GPU",
					       t->index);
		moved |= memcmp(g->uuid, t->uuid.bytes, 16) != 0;
	}
	if (!moved)
		return 0;
	r->pairs = calloc(n, sizeof(*r->pairs));
	if (!r->pairs)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (size_t k = 0; k < n; k++) {
		memcpy(r->pairs[k].oldUuid.bytes, gs_image_gpu_at(r->img, k)->uuid, 16);
		r->pairs[k].newUuid = r->s.gpus[r->target[k]].uuid;
	}
	r->npairs = (unsigned)n;
	/* on the machine it was dumped on, the process also saw GPUs it held no memory on: pair those too */
	bool same_machine = true;
	for (size_t k = 0; k < n; k++)
		same_machine &= gs_gpus_find_uuid(r->s.gpus, r->s.ngpus, gs_image_gpu_at(r->img, k)->uuid) >= 0;
	return same_machine ? gs_gpu_pairs_complete(&r->pairs, &r->npairs, r->s.gpus, r->s.ngpus, err) : 0;
}

/* GPU memory the image needs on image GPU k: what the process held when dumped, else its allocations. */
static uint64_t needed_bytes(const struct restore_run *r, size_t k)
{
	const struct gs_image_gpu *g = gs_image_gpu_at(r->img, k);
	char key[128], ub[48];
	snprintf(key, sizeof(key), "%s%s", DUMP_META_VRAM_PREFIX, uuid_str(g->uuid, ub, sizeof(ub)));
	const char *v = gs_image_metadata_get(r->img, key);
	uint64_t bytes = 0;
	if (v && gs_parse_size(v, &bytes) == 0)
		return bytes;
	for (size_t i = 0; i < gs_image_allocation_count(r->img); i++) {
		const struct gs_image_allocation *a = gs_image_allocation_at(r->img, i);
		if (a->gpu_index == g->index)
			bytes += a->size;
	}
	return bytes;
}

static int check_vram(struct restore_run *r, struct gs_err *err)
{
	if (!r->s.nvml)
		return 0; /* no NVML: the driver or the agent says so if memory runs out */
	struct gs_nvml_gpu g[CLI_MAX_GPUS];
	int ng = gs_nvml_gpus(r->s.nvml, g, CLI_MAX_GPUS);
	for (int m = 0; m < ng && m < CLI_MAX_GPUS; m++) {
		uint64_t need = 0;
		for (size_t k = 0; k < gs_image_gpu_count(r->img); k++)
			if (r->target[k] == m)
				need += needed_bytes(r, k);
		uint64_t free_b = g[m].total_bytes > g[m].used_bytes ? g[m].total_bytes - g[m].used_bytes : 0;
		if (need > free_b) {
			char a[32], b[32];
			return gs_fail(err, GS_E_NO_VRAM, "not enough free memory on GPU %d: the image needs %s, %s are free", m,
				       gs_format_bytes(need, a, sizeof(a)), gs_format_bytes(free_b, b, sizeof(b)));
		}
	}
	return 0;
}

/*
 * CRIU restores the PID the process had: say who holds it before trying. A
 * process whose main thread has ended is left to CRIU's wait: gs_proc_life
 * counts one whose other threads still run as alive (a main thread that
 * called pthread_exit), but a process just killed looks the same while the
 * kernel tears its threads down (a CUDA process's for a while), and that
 * one frees the PID by itself.
 */
static int check_pid_free(pid_t pid, struct gs_err *err)
{
	if (pid <= 0 || gs_proc_life(pid, NULL) != GS_PROC_LIVES)
		return 0;
	struct gs_proc_stat st;
	if (gs_proc_read_stat(pid, &st) == 0 && (st.state == 'Z' || st.state == 'X'))
		return 0;
	char comm[64];
	gs_proc_comm(pid, comm, sizeof(comm));
	return gs_fail(err, GS_E_CRIU,
		       "cannot restore: pid %d, which the image needs, is in use by '%s' (the dumped process, or an earlier "
		       "restore of this image, still running?); stop it first",
		       (int)pid, comm);
}

/* The restore's own folder (work_dir.h: named for this gpusnap; those of killed restores go first). */
static int make_work_dir(struct restore_run *r, struct gs_err *err)
{
	return cli_work_dir_make("restore", r->work, sizeof(r->work), err);
}

static void remove_work_dir(struct restore_run *r)
{
	char p[PATH_MAX + 32];
	const char *names[] = { GS_CRIU_RESTORE_LOG, GS_CRIU_RESTORE_PIDFILE, "stats-restore", GS_CRIU_LAZY_LOG,
				GS_CRIU_LAZY_SOCKET };
	for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++) {
		snprintf(p, sizeof(p), "%s/%s", r->work, names[i]);
		unlink(p);
	}
	rmdir(r->work);
}

/*
 * A restored process that cannot be completed is killed: a refused restore
 * leaves no process. It is waited for (up to 5 s), so no copy of it is seen
 * after gpusnap returns; said on stderr only if it had been let run.
 */
static void kill_restored(pid_t pid, bool ran)
{
	if (pid <= 0 || kill(pid, SIGKILL))
		return;
	if (ran)
		fprintf(stderr, "gpusnap: killed the half-restored process %d\n", (int)pid);
	for (int i = 0; i < 500; i++) {
		struct gs_proc_stat st;
		/* a zombie runs nothing, but `kill -0` still finds it until its new parent reaps it */
		if (gs_proc_read_stat(pid, &st))
			return;
		usleep(10000);
	}
}

/*
 * Lets every process of the restored tree continue: CRIU left them all
 * stopped (--leave-stopped), the processes under the root too (a server's
 * workers, DataLoader workers), which would otherwise stay stopped for good.
 */
static int continue_tree(pid_t root, struct gs_err *err)
{
	pid_t *all;
	size_t n;
	int rc = gs_proc_tree(root, &all, &n, err);
	if (rc)
		return rc == GS_E_NO_PROCESS ? gs_fail(err, GS_E_NO_PROCESS, "the restored process %d is gone", (int)root)
					     : rc;
	for (size_t k = 0; k < n && !rc; k++)
		if (kill(all[k], SIGCONT) && errno != ESRCH)
			rc = gs_fail_errno(err, GS_E_NO_PROCESS, errno, "cannot let the restored process %d continue",
					   (int)all[k]);
	free(all);
	return rc;
}

/* Every process of a restored tree is killed (kill_restored), the root last. */
static void kill_restored_tree(pid_t root, bool ran)
{
	pid_t *all = NULL;
	size_t n = 0;
	struct gs_err e = { 0 };
	if (root > 0 && gs_proc_tree(root, &all, &n, &e) == 0)
		for (size_t i = n; i-- > 1;)
			kill_restored(all[i], ran);
	free(all);
	kill_restored(root, ran);
}

/*
 * A copy of the image that a killed gpusnap restore left stopped, never run,
 * at the PID the image needs (its record says so, with the copy's start
 * time): it is removed, so this restore can take the PID.
 */
static void remove_left_copy(struct restore_run *r)
{
	pid_t pid = r->info->source_pid;
	struct gs_proc_stat st;
	if (!r->left.action[0] || strcmp(r->left.step, "held") || !r->left.restored_start || gs_proc_read_stat(pid, &st) ||
	    st.start_time != r->left.restored_start)
		return;
	fprintf(stderr, "gpusnap: note: removing process %d, a copy of this image that a gpusnap restore (pid %d) left "
		"stopped, never run, when it was killed\n", (int)pid, (int)r->left.holder);
	kill_restored(pid, false);
}

/* Whether the GPU image of the tree's process exporter records the export export_vh. */
static bool tree_exports(const struct restore_run *r, pid_t exporter, uint64_t export_vh, struct gs_err *err)
{
	for (int i = 0; i < r->tree_n; i++) {
		if (r->tree_pids[i] != exporter)
			continue;
		for (size_t k = 0; k < gs_image_metadata_count(r->tree_imgs[i]); k++) {
			const struct gs_image_kv *kv = gs_image_metadata_at(r->tree_imgs[i], k);
			uint64_t vh;
			if (!strncmp(kv->key, GS_SHARE_META_EXPORT, strlen(GS_SHARE_META_EXPORT)) &&
			    !gs_share_parse_export_meta(kv->key, kv->value, &vh, err) && vh == export_vh)
				return true;
		}
	}
	return false;
}

/*
 * Memory shared between the tree's processes: every import an image
 * records must come from an export another image of the tree records (its
 * exporter re-creates it and hands it over), else nothing is started.
 */
static int check_tree_shares(const struct restore_run *r, struct gs_err *err)
{
	for (int i = 0; i < r->tree_n; i++) {
		for (size_t k = 0; k < gs_image_metadata_count(r->tree_imgs[i]); k++) {
			const struct gs_image_kv *kv = gs_image_metadata_at(r->tree_imgs[i], k);
			if (strncmp(kv->key, GS_SHARE_META_IMPORT, strlen(GS_SHARE_META_IMPORT)))
				continue;
			pid_t exporter;
			uint64_t export_vh;
			int rc = gs_share_parse_import_meta(kv->key, kv->value, &exporter, &export_vh, err);
			if (rc) {
				gs_err_wrap(err, "'%s'", r->tree_dirs[i]);
				return rc;
			}
			struct gs_err e = { 0 };
			if (!tree_exports(r, exporter, export_vh, &e))
				return gs_fail(err, GS_E_IMAGE, "'%s': process %d imported GPU memory that process %d exported "
					       "(%#llx), and the image holds no such export: not a whole image of the tree",
					       r->tree_dirs[i], (int)r->tree_pids[i], (int)exporter,
					       (unsigned long long)export_vh);
		}
	}
	return 0;
}

/*
 * An image of a process tree: the GPU image of each of its CUDA processes,
 * DIR/procs/<pid>/ (opened, so checked as any image), each taken by an
 * agent or by the driver.
 */
static int open_tree(struct restore_run *r, const struct restore_opts *o, struct gs_err *err)
{
	int rc = dump_tree_parse_pids(gs_image_metadata_get(r->img, DUMP_TREE_META_PIDS), &r->tree_pids, &r->tree_n,
				      err);
	if (rc) {
		gs_err_wrap(err, "'%s'", o->dir);
		return rc;
	}
	int n = r->tree_n;
	r->tree_imgs = calloc((size_t)n, sizeof(*r->tree_imgs));
	r->tree_dirs = calloc((size_t)n, sizeof(*r->tree_dirs));
	r->tree_agents = calloc((size_t)n, sizeof(*r->tree_agents));
	r->tree_procs = calloc((size_t)n, sizeof(*r->tree_procs));
	if (!r->tree_imgs || !r->tree_dirs || !r->tree_agents || !r->tree_procs)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < n; i++) {
		snprintf(r->tree_dirs[i], sizeof(r->tree_dirs[i]), "%s/%s/%d", o->dir, DUMP_TREE_PROCS_DIR,
			 (int)r->tree_pids[i]);
		if ((rc = gs_image_open(r->tree_dirs[i], &r->tree_imgs[i], err)))
			return rc;
		const struct gs_image_info *in = gs_image_get_info(r->tree_imgs[i]);
		if (in->source_pid != r->tree_pids[i] || (strcmp(in->how, "agent") && strcmp(in->how, "driver")))
			return gs_fail(err, GS_E_IMAGE, "'%s' is not the GPU image of process %d of the tree (it is of process "
				       "%d, taken by '%s')", r->tree_dirs[i], (int)r->tree_pids[i], (int)in->source_pid, in->how);
		gs_image_set_direct_io(r->tree_imgs[i], false);
	}
	return check_tree_shares(r, err);
}

enum { LAZY_AUTO, LAZY_ON, LAZY_OFF }; /* GPUSNAP_RESTORE_LAZY's choices, auto|on|off */

/*
 * Whether CRIU restores the CPU memory lazily (GPUSNAP_RESTORE_LAZY,
 * --lazy-pages): on refuses where it cannot be done, auto falls back to the
 * whole restore and says why (log at info, --json).
 */
static int decide_lazy(struct restore_run *r, const struct restore_opts *o, struct gs_err *err)
{
	int mode = o->lazy_pages ? LAZY_ON : gs_setting_choice(GS_S_RESTORE_LAZY);
	r->lazy_auto = mode == LAZY_AUTO;
	if (mode == LAZY_OFF) {
		snprintf(r->lazy_why, sizeof(r->lazy_why), "not asked for (GPUSNAP_RESTORE_LAZY=off)");
		return 0;
	}
	char why[GS_ERR_MSG_MAX - 128];
	int rc;
	if (r->tree) {
		rc = GS_E_USAGE;
		snprintf(why, sizeof(why), "the image of a process tree (dump --tree) is restored whole");
	} else {
		rc = gs_criu_uffd_usable(why, sizeof(why));
	}
	if (!rc) {
		r->lazy = true;
		return 0;
	}
	if (mode == LAZY_ON)
		return gs_fail(err, rc, "cannot restore '%s' with lazy pages (%s): %s", o->dir,
			       o->lazy_pages ? "--lazy-pages" : "GPUSNAP_RESTORE_LAZY=on", why);
	snprintf(r->lazy_why, sizeof(r->lazy_why), "%s", why);
	pr_info("the CPU memory comes back whole before the process goes on, not lazily: %s", why);
	return 0;
}

static int checks(struct restore_run *r, const struct restore_opts *o, struct gs_err *err)
{
	/* held for reading until the end: a dump replacing DIR meanwhile waits, its claim refuses */
	int rc = gs_image_open_held(o->dir, &r->img, err);
	if (rc)
		return rc;
	r->info = gs_image_get_info(r->img);
	if (!r->info->cpu_state)
		return gs_fail(err, GS_E_IMAGE, "'%s' holds no CPU state (not written by gpusnap dump): nothing to restore",
			       o->dir);
	/* CRIU restores whatever its files say: unchecked ones only when the user says so */
	if (!o->allow_unverified_cpu && (rc = gs_image_require_cpu_list(r->img, err))) {
		cli_err_append(err, "gpusnap restore --allow-unverified-cpu restores it all the same");
		return rc;
	}
	bool agent = !strcmp(r->info->how, "agent");
	r->tree = !strcmp(r->info->how, DUMP_TREE_HOW);
	if (!agent && !r->tree && strcmp(r->info->how, "driver"))
		return gs_fail(err, GS_E_IMAGE, "'%s' was taken in a way this gpusnap does not restore ('%s')", o->dir,
			       r->info->how);
	if (o->verify_gpu && !agent && !r->tree)
		return gs_fail(err, GS_E_USAGE, "--verify-gpu needs an image written by the gpusnap agent: '%s' was taken by "
			       "the driver, its GPU data is in CRIU's images", o->dir);
	if (r->tree && (rc = open_tree(r, o, err)))
		return rc;
	/* a tree: each agent's part checked on the GPU; one with no agent's part has nothing to check */
	bool tree_agent = false;
	for (int i = 0; r->tree && i < r->tree_n; i++)
		tree_agent |= !strcmp(gs_image_get_info(r->tree_imgs[i])->how, "agent");
	if (o->verify_gpu && r->tree && !tree_agent)
		return gs_fail(err, GS_E_USAGE, "--verify-gpu needs GPU data written by the gpusnap agent: every process of "
			       "the tree in '%s' was taken by the driver, its GPU data is in CRIU's images", o->dir);
	/* one restore of the PID at a time: the checks below hold only while no other gpusnap restores it */
	pid_t pid = r->info->source_pid;
	if ((rc = cli_op_begin(pid, true, "restore", &r->lock, &r->left, err)))
		return rc;
	if ((rc = cli_criu_find(&r->criu, err)) || (rc = decide_lazy(r, o, err)))
		return rc;
	if ((rc = cli_session_open(&r->s, err)))
		return rc;
	r->session = true;
	if ((rc = gs_cuda_require_checkpoint(&r->s.cu, err)) || (rc = plan_gpus(r, o, err)) || (rc = check_vram(r, err)))
		return rc;
	remove_left_copy(r);
	for (int i = 0; i < r->tree_n; i++)
		if (r->tree_pids[i] != pid && (rc = check_pid_free(r->tree_pids[i], err)))
			return rc;
	if ((rc = check_pid_free(pid, err))) {
		/* the process at the PID may be one a killed restore left: say what to do with it */
		struct gs_proc_stat st;
		const struct cli_op_record *l = &r->left;
		if (l->action[0] && l->if_alive[0] && gs_proc_read_stat(pid, &st) == 0 &&
		    (l->restored_start ? l->restored_start == st.start_time : !strcmp(l->step, "criu")))
			cli_err_append(err, "%s", l->if_alive);
		return rc;
	}
	/* buffered: the agent reads the same bytes right after, from the page cache */
	gs_image_set_direct_io(r->img, false);
	return 0;
}

/* The checksum pass; sets verify_rc, verify_err, verify_s and verified_bytes. */
static void verify_image(struct restore_run *r)
{
	double t = gs_now();
	r->verify_rc = gs_image_verify_part(r->img, 0, r->verify_part, &r->verify_err);
	for (int i = 0; i < r->tree_n && !r->verify_rc; i++)
		r->verify_rc = gs_image_verify(r->tree_imgs[i], 0, &r->verify_err);
	r->verify_s += gs_now() - t;
	/* the GPU data's bytes, counted by the pass that checks them (not by a lazy restore's first, of CRIU's files) */
	for (int i = -1; !r->verify_rc && r->verify_part != GS_IMAGE_PART_CPU && i < r->tree_n; i++) {
		struct gs_image_totals tot;
		gs_image_totals(i < 0 ? r->img : r->tree_imgs[i], &tot);
		r->verified_bytes += tot.stored_bytes;
	}
}

static void *verify_main(void *arg)
{
	verify_image(arg);
	return NULL;
}

static int start_verify(struct restore_run *r, struct gs_err *err)
{
	int e = pthread_create(&r->verify_thread, NULL, verify_main, r);
	if (e)
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot start the checksum pass");
	r->verifying = true;
	return 0;
}

/* Waits for the checksum pass started alongside; its error, if any, into err. */
static int join_verify(struct restore_run *r, struct gs_err *err)
{
	if (!r->verifying)
		return 0;
	double t = gs_now();
	pthread_join(r->verify_thread, NULL);
	r->verifying = false;
	r->verify_wait_s = gs_now() - t;
	if (r->verify_rc && err)
		*err = r->verify_err;
	return r->verify_rc;
}

/*
 * The driver's restore while the app's threads stay stopped: only the
 * driver's restore thread runs. -1 when that cannot be done here (no ptrace
 * rights, no restore thread named): the caller lets the process continue
 * and restores it running. 0 or an error code otherwise.
 */
static int driver_restore_held_of(struct restore_run *r, pid_t pid, struct gs_ckpt_proc *proc, struct gs_err *err)
{
	struct gs_err e = { 0 };
	pid_t tid = 0;
	struct gs_lone_thread lone;
	if (gs_process_wait_stopped(pid, 5, &e) || gs_ckpt_restore_thread(&r->s.cu, pid, &tid, &e) ||
	    gs_lone_thread_start(pid, tid, &lone, &e)) {
		pr_info("the driver restores process %d running, not held: %s", (int)pid, e.msg);
		return -1;
	}
	proc->pid = pid;
	int rc = gs_ckpt_resume(&r->s.cu, proc, 1, r->pairs, r->npairs, err);
	int src = gs_lone_thread_stop(&lone, &e);
	if (!rc && src)
		rc = gs_fail(err, src, "after the driver's restore: %s", e.msg);
	return rc;
}

static int driver_restore_held(struct restore_run *r, struct gs_err *err)
{
	int rc = driver_restore_held_of(r, r->pid, &r->proc, err);
	r->held_restore = !rc;
	return rc;
}

/* What the user is told should gpusnap be killed while the restored process is held or loading. */
static void record_step(struct restore_run *r, const struct restore_opts *o, const char *step)
{
	char alive[GS_ERR_MSG_MAX], gone[GS_ERR_MSG_MAX];
	int me = (int)getpid(), pid = (int)r->info->source_pid;
	bool loading = !strcmp(step, "load");
	/* the restore named again: with the flag this one needed (an image without checksums of CRIU's files) */
	const char *again = gs_image_cpu_files(r->img, NULL, NULL) ? "gpusnap restore" : dump_restore_cmd(false);
	if (loading && r->tree)
		/* the agents load as one job, each from its own image: only a new restore does that again */
		snprintf(alive, sizeof(alive), "the process tree %d was restored from '%s' by a gpusnap restore (pid %d) "
			 "that was killed while its agents loaded their GPU data: kill -9 every process of the tree, then "
			 "%s -D '%s' again", pid, o->dir, me, again, o->dir);
	else if (loading)
		snprintf(alive, sizeof(alive), "process %d was restored from '%s' by a gpusnap restore (pid %d) that was "
			 "killed before the agent loaded its GPU data: gpusnap resume %d loads it", pid, o->dir, me, pid);
	else if (!strcmp(step, "resume"))
		snprintf(alive, sizeof(alive), "process %d was restored from '%s' by a gpusnap restore (pid %d) that was "
			 "killed before the driver had put it back on the GPU: gpusnap resume %d finishes it", pid, o->dir, me,
			 pid);
	else if (!strcmp(step, "pages"))
		snprintf(alive, sizeof(alive), "process %d was restored from '%s' by a gpusnap restore (pid %d) that was "
			 "killed while CRIU's lazy-pages daemon filled its CPU memory: if no 'criu lazy-pages' runs any more "
			 "and it had not finished, the process's memory is incomplete: kill -9 %d, then %s -D '%s' again",
			 pid, o->dir, me, pid, again, o->dir);
	else if (!strcmp(step, "criu"))
		/* which process CRIU made is not known yet: the user decides */
		snprintf(alive, sizeof(alive), "process %d may be a copy of the image at '%s' that CRIU made for a gpusnap "
			 "restore (pid %d) that was killed; if it is stopped, it never ran: kill -9 %d, then restore again", pid,
			 o->dir, me, pid);
	else
		snprintf(alive, sizeof(alive), "process %d is a copy of the image at '%s' that a gpusnap restore (pid %d) "
			 "left stopped, never run, when it was killed: %s -D '%s' removes it and restores again",
			 pid, o->dir, me, again, o->dir);
	snprintf(gone, sizeof(gone), "a gpusnap restore (pid %d) from '%s' was killed; the image is unchanged: %s -D "
		 "'%s' brings the process back", me, o->dir, again, o->dir);
	cli_op_step(r->lock, step, loading ? o->dir : NULL, alive, gone);
}

/* Before the process continues: a signal, or a test's injected failure at point, ends the restore here. */
static int stop_held(struct restore_run *r, const struct restore_opts *o, enum gs_fault_point point, struct gs_err *err)
{
	if (gs_fault(point)) {
		int e = gs_fault_errno(point, EIO);
		return gs_fail_errno(err, gs_exit_from_errno(e), e, "restore from '%s' failed at '%s' (injected)", o->dir,
				     gs_fault_name(point));
	}
	if (!cli_signal_caught())
		return 0;
	char what[PATH_MAX + 32];
	snprintf(what, sizeof(what), "restore from '%s'", o->dir);
	int rc = cli_fail_interrupted(err, what);
	cli_err_append(err, "the restored process %d was killed before it ran; the image is unchanged", (int)r->pid);
	return rc;
}

/*
 * The GPU part of a restored tree (held stopped by CRIU): the driver puts
 * each CUDA process back (held where it can), the checksum pass ends, every
 * task of the tree continues, and the agents load their data from their
 * images as one job (cli_share_resume: memory shared between them made again
 * by its exporters and handed to its importers, no gate open before all are
 * back). *ran: the tree was let continue.
 */
static int restore_tree_gpu(struct restore_run *r, const struct restore_opts *o, bool *ran, struct gs_err *err)
{
	int n = r->tree_n, rc = 0;
	int *held = calloc((size_t)n, sizeof(int));
	const char **images = calloc((size_t)n, sizeof(char *));
	if (!held || !images) {
		rc = gs_fail(err, GS_E_FAILURE, "out of memory");
		goto out;
	}
	for (int i = 0; i < n && !rc; i++) {
		held[i] = driver_restore_held_of(r, r->tree_pids[i], &r->tree_procs[i], err);
		if (held[i] > 0)
			rc = held[i];
	}
	if (rc) {
		join_verify(r, NULL);
		goto out;
	}
	if ((rc = join_verify(r, err)) || (rc = stop_held(r, o, GS_FI_RESTORE_BEFORE_CONT, err)))
		goto out;
	record_step(r, o, "load");
	if ((rc = continue_tree(r->pid, err)))
		goto out;
	*ran = true;
	if (gs_fault(GS_FI_RESTORE_TREE_BEFORE_AGENTS)) {
		rc = gs_fail(err, GS_E_FAILURE, "restore from '%s' failed at '%s' (injected)", o->dir,
			     gs_fault_name(GS_FI_RESTORE_TREE_BEFORE_AGENTS));
		goto out;
	}
	for (int i = 0; i < n && !rc; i++) {
		r->tree_procs[i].pid = r->tree_pids[i];
		if (held[i] < 0)
			rc = gs_ckpt_resume(&r->s.cu, &r->tree_procs[i], 1, r->pairs, r->npairs, err);
	}
	for (int i = 0; i < n && !rc; i++) {
		if (strcmp(gs_image_get_info(r->tree_imgs[i])->how, "agent"))
			continue; /* the driver put it back whole */
		struct cli_agent *ag = &r->tree_agents[i];
		if (!(rc = cli_agent_probe(r->tree_pids[i], ag, err)) && !ag->present)
			rc = gs_fail(err, GS_E_AGENT, "the restored process %d has no gpusnap agent answering",
				     (int)r->tree_pids[i]);
		struct gs_err e = { 0 };
		if (!rc && cli_agent_prepare(r->tree_pids[i], ag, &e))
			pr_debug("%s", e.msg);
		images[i] = r->tree_dirs[i];
	}
	if (!rc)
		rc = cli_share_resume(r->tree_pids, r->tree_agents, n, images, o->verify_gpu, err);
out:
	free(held);
	free(images);
	return rc;
}

/*
 * A lazy restore's gate before criu restore runs (gs_criu_restore_opts.
 * before_restore), once: the pass over CRIU's files, started with the
 * daemon, is waited for (the daemon serves pages from them), then the pass
 * over the GPU data starts, alongside CRIU as for any restore.
 */
static int cpu_checked(void *ctx, struct gs_err *err)
{
	struct restore_run *r = ctx;
	if (r->cpu_checked)
		return 0;
	r->cpu_checked = true;
	double t = gs_now();
	pthread_join(r->verify_thread, NULL);
	r->verifying = false;
	r->verify_cpu_s = r->verify_s;
	r->verify_cpu_wait_s = gs_now() - t;
	if (r->verify_rc) {
		*err = r->verify_err;
		return r->verify_rc;
	}
	r->verify_part = GS_IMAGE_PART_GPU;
	return start_verify(r, err);
}

/*
 * The lazy-pages daemon of a lazy restore: wait, until it has put every
 * page in; else a look. A daemon that failed fails the restore (its process
 * has pages that read as zeros: the caller kills it).
 */
static int lazy_check(struct restore_run *r, bool wait, struct gs_err *err)
{
	if (!r->lazy)
		return 0;
	int rc = gs_criu_lazy_check(&r->lazy_d, wait, err);
	if (rc)
		cli_err_append(err, "the restored process %d was killed; the image is unchanged", (int)r->pid);
	return rc;
}

static int run_restore(struct restore_run *r, const struct restore_opts *o, struct gs_err *err)
{
	/* CRIU (root) reads the cpu/ that was checked, through our descriptor of it: no rename can swap it */
	char cpu[PATH_MAX];
	int rc = gs_image_cpu_dir_fd_path(r->img, cpu, sizeof(cpu), err);
	if (rc || (rc = make_work_dir(r, err)))
		return rc;
	if (!o->no_verify && o->verify_first) {
		verify_image(r);
		if (r->verify_rc) {
			*err = r->verify_err;
			remove_work_dir(r);
			return r->verify_rc;
		}
	}
	/* from here a signal is obeyed between steps, never inside one (CRIU, the driver, the agent) */
	cli_signals_catch();
	if (cli_signal_caught()) {
		char what[PATH_MAX + 32];
		snprintf(what, sizeof(what), "restore from '%s'", o->dir);
		rc = cli_fail_interrupted(err, what);
		cli_err_append(err, "nothing was restored");
		remove_work_dir(r);
		return rc;
	}
	/* lazily: CRIU's files first, while the daemon starts (cpu_checked), then the GPU data alongside */
	r->verify_part = r->lazy ? GS_IMAGE_PART_CPU : GS_IMAGE_PART_ALL;
	r->cpu_checked = !r->lazy || o->no_verify || o->verify_first;
	if (!o->no_verify && !o->verify_first && (rc = start_verify(r, err))) {
		remove_work_dir(r);
		return rc;
	}
	const char *extra[] = { "--work-dir", r->work, NULL };
	struct gs_criu_restore_opts co = { .work_dir = r->work, .extra_args = extra, .leave_stopped = true,
					   .image_pid = r->info->source_pid, .lazy = r->lazy ? &r->lazy_d : NULL,
					   .before_restore = cpu_checked, .before_ctx = r };
	record_step(r, o, "criu");
	double t = gs_now();
	/* a signal while CRIU runs stops it and kills the task it was making, which never ran */
	cli_signals_on_first(gs_criu_interrupt);
	rc = gs_criu_restore(&r->criu, cpu, &co, &r->pid, err);
	if (rc && r->lazy && r->lazy_d.start_failed && r->lazy_auto && !cli_signal_caught()) {
		/* auto: a criu whose lazy-pages daemon does not start restores whole (nothing was restored yet) */
		snprintf(r->lazy_why, sizeof(r->lazy_why), "%s", err->msg);
		pr_info("the CPU memory comes back whole, not lazily: %s", err->msg);
		r->lazy = false;
		co.lazy = NULL;
		gs_err_clear(err);
		if (!(rc = cpu_checked(r, err))) /* the rest of the pass alongside, as for any restore */
			rc = gs_criu_restore(&r->criu, cpu, &co, &r->pid, err);
	}
	cli_signals_on_first(NULL);
	r->criu_s = gs_now() - t - r->verify_cpu_wait_s;
	if (rc) {
		struct gs_err verr = { 0 };
		if (join_verify(r, &verr))
			*err = verr; /* a corrupt image explains a failing CRIU better than CRIU does */
		remove_work_dir(r);
		return err->code ? err->code : rc;
	}
	/* the process exists, stopped: it is ours until the restore ends */
	cli_op_restored(r->lock, r->pid);
	record_step(r, o, "held");

	t = gs_now();
	bool ran = false; /* let continue (SIGCONT): from then on a failure is visible to the app */
	int held = 0;
	/* a test's daemon that dies here: then waited for, so its end is seen at once */
	bool daemon_killed = r->lazy && gs_fault(GS_FI_RESTORE_LAZY_DAEMON);
	if (daemon_killed)
		gs_run_kill(&r->lazy_d.proc);
	if ((rc = stop_held(r, o, GS_FI_RESTORE_AFTER_CRIU, err)) || (rc = lazy_check(r, daemon_killed, err))) {
		join_verify(r, NULL);
		goto fail;
	}
	if (r->tree) {
		if ((rc = restore_tree_gpu(r, o, &ran, err)))
			goto fail;
		r->gpu_s = gs_now() - t - r->verify_wait_s;
		r->ready_s = gs_now() - r->t0;
		remove_work_dir(r);
		return 0;
	}
	held = driver_restore_held(r, err);
	if (held > 0) {
		rc = held;
		join_verify(r, NULL);
		goto fail;
	}
	if ((rc = join_verify(r, err)))
		goto fail; /* the app never ran: it is killed stopped */
	if ((rc = stop_held(r, o, GS_FI_RESTORE_BEFORE_CONT, err)) || (rc = lazy_check(r, false, err)))
		goto fail;
	/* the point of no return: the process runs its own code from here, and a signal waits for the end */
	record_step(r, o, !strcmp(r->info->how, "agent") ? "load" : "resume");
	if ((rc = continue_tree(r->pid, err)))
		goto fail;
	ran = true;
	if (gs_fault(GS_FI_RESTORE_AFTER_CONT)) {
		rc = gs_fail(err, GS_E_FAILURE, "restore from '%s' failed at '%s' (injected)", o->dir,
			     gs_fault_name(GS_FI_RESTORE_AFTER_CONT));
		goto fail;
	}
	r->proc.pid = r->pid;
	if (held < 0 && (rc = gs_ckpt_resume(&r->s.cu, &r->proc, 1, r->pairs, r->npairs, err)))
		goto fail;
	if (!strcmp(r->info->how, "agent")) {
		if (!(rc = cli_agent_probe(r->pid, &r->agent, err)) && !r->agent.present)
			rc = gs_fail(err, GS_E_AGENT, "the restored process %d has no gpusnap agent answering", (int)r->pid);
		if (rc)
			goto fail;
		/* it maps its copy ring; if it cannot, the load makes its own */
		struct gs_err e = { 0 };
		if (cli_agent_prepare(r->pid, &r->agent, &e))
			pr_debug("%s", e.msg);
		if ((rc = cli_agent_resume_from(r->pid, &r->agent, o->dir, o->verify_gpu, err)))
			goto fail;
	}
	r->gpu_s = gs_now() - t - r->verify_wait_s;
	r->ready_s = gs_now() - r->t0;
	/* the process runs; its memory is whole once the daemon is done, which the restore waits for */
	if (r->lazy)
		record_step(r, o, "pages");
	if ((rc = lazy_check(r, true, err)))
		goto fail;
	if (r->lazy)
		r->lazy_done_s = r->lazy_d.ended - r->t0;
	remove_work_dir(r);
	return 0;
fail:
	r->gpu_s = gs_now() - t - r->verify_wait_s;
	if (r->tree)
		kill_restored_tree(r->pid, ran);
	else
		kill_restored(r->pid, ran);
	gs_criu_lazy_stop(&r->lazy_d);
	remove_work_dir(r);
	return rc;
}

static void print_outcome(const struct restore_run *r, const struct restore_opts *o, int rc, const struct gs_err *err)
{
	if (o->json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "restore", rc, err);
		gs_json_kv_string(&j, "dir", o->dir);
		gs_json_kv_int(&j, "pid", rc ? 0 : r->pid);
		/* an image of an unknown kind is refused: what it says it is stays out of the document */
		if (r->info && (!strcmp(r->info->how, "agent") || !strcmp(r->info->how, "driver") ||
				!strcmp(r->info->how, DUMP_TREE_HOW)))
			gs_json_kv_string(&j, "path", r->info->how);
		if (r->agent.present) { /* the agent mapped its copy ring before the load */
			gs_json_kv_bool(&j, "ring_prepared", cli_agent_counter(&r->agent, "ring_prepared") != 0);
			/* the image's zero chunks, set on the GPU rather than read and copied */
			gs_json_kv_uint(&j, "zero_bytes", cli_agent_counter(&r->agent, "image_zero_bytes"));
			/* restore --verify-gpu: the chunks whose fingerprints were checked on the GPU */
			gs_json_kv_uint(&j, "verify_gpu_chunks", cli_agent_counter(&r->agent, "verify_gpu_chunks"));
		} else if (r->tree && r->tree_agents) { /* a tree's: every agent's together */
			uint64_t chunks = 0;
			for (int i = 0; i < r->tree_n; i++)
				if (r->tree_agents[i].present)
					chunks += r->tree_agents[i].verify_gpu_chunks;
			gs_json_kv_uint(&j, "verify_gpu_chunks", chunks);
		}
		gs_json_kv_uint(&j, "verified_bytes", r->verified_bytes);
		gs_json_kv_bool(&j, "verified_first", o->verify_first && !o->no_verify);
		gs_json_kv_bool(&j, "driver_restore_held", r->held_restore);
		gs_json_kv_bool(&j, "lazy_pages", r->lazy);
		gs_json_kv_string(&j, "lazy_pages_why", r->lazy ? "" : r->lazy_why);
		gs_json_key(&j, "gpus");
		gs_json_array_begin(&j);
		for (size_t k = 0; r->img && r->target && k < gs_image_gpu_count(r->img); k++) {
			gs_json_object_begin(&j);
			gs_json_kv_uint(&j, "image_gpu", gs_image_gpu_at(r->img, k)->index);
			gs_json_kv_int(&j, "gpu", r->target[k]);
			gs_json_object_end(&j);
		}
		gs_json_array_end(&j);
		gs_json_key(&j, "times");
		gs_json_object_begin(&j);
		gs_json_kv_double(&j, "total_s", r->total_s);
		gs_json_kv_double(&j, "verify_s", r->verify_s);
		gs_json_kv_double(&j, "verify_wait_s", r->verify_wait_s);
		gs_json_kv_double(&j, "criu_s", r->criu_s);
		gs_json_kv_double(&j, "verify_cpu_s", r->verify_cpu_s);
		gs_json_kv_double(&j, "ready_s", r->ready_s);
		gs_json_kv_double(&j, "lazy_pages_done_s", r->lazy_done_s);
		gs_json_kv_double(&j, "gpu_s", r->gpu_s);
		gs_json_kv_double(&j, "driver_restore_s", r->proc.restore_s);
		gs_json_kv_double(&j, "unlock_s", r->proc.unlock_s);
		if (r->agent.present) {
			for (int k = 0; k < r->agent.last.ntimings; k++) {
				char key[80];
				snprintf(key, sizeof(key), "agent_%s_s", r->agent.last.timing_name[k]);
				gs_json_kv_double(&j, key, r->agent.last.timing_s[k]);
			}
		}
		gs_json_object_end(&j);
		gs_json_object_end(&j);
		cli_json_print(&j);
		return;
	}
	if (rc)
		return;
	char comm[64], how[64]; /* the process's name, and how the image says it was written */
	gs_proc_comm(r->pid, comm, sizeof(comm));
	gs_printable(comm, sizeof(comm), comm);
	printf("restored %d (%s) from %s: %s path, CRIU part %.2f s, GPU part %.2f s", (int)r->pid, comm, o->dir,
	       gs_printable(how, sizeof(how), r->info->how), r->criu_s, r->gpu_s);
	if (!o->no_verify)
		printf(", checksums %.2f s%s", r->verify_s, o->verify_first ? " first" : " alongside");
	if (r->lazy)
		printf(", running after %.2f s, CPU pages in (lazily) after %.2f s", r->ready_s, r->lazy_done_s);
	printf(", total %.2f s\n", r->total_s);
}

int cmd_restore(int argc, char **argv)
{
	struct restore_opts o = { 0 };
	const struct gs_option opts[] = {
		GS_OPT_STRING_('D', "dir", &o.dir, "DIR", "image directory written by gpusnap dump (required)"),
		GS_OPT_LIST_(0, "map", &o.maps, "FROM=TO",
			     "put image GPU FROM (index or UUID, as gpusnap inspect lists) on GPU TO of this machine"),
		GS_OPT_BOOL_(0, "no-verify", &o.no_verify,
			     "skip the checksum pass before restoring (a bad chunk is still found while loading)"),
		GS_OPT_BOOL_(0, "verify-first", &o.verify_first,
			     "finish the checksum pass before CRIU starts (default: alongside, the process held stopped)"),
		GS_OPT_BOOL_(0, "verify-gpu", &o.verify_gpu,
			     "once the agent loaded the data, check every chunk's fingerprint on the GPU before the process "
			     "goes on"),
		GS_OPT_BOOL_(0, "lazy-pages", &o.lazy_pages,
			     "let the process go on before its CPU memory is back: CRIU's lazy-pages daemon fills it "
			     "meanwhile (GPUSNAP_RESTORE_LAZY=on)"),
		GS_OPT_BOOL_(0, "allow-unverified-cpu", &o.allow_unverified_cpu,
			     "restore an image without checksums of CRIU's files (a kept image of a dump killed in CRIU)"),
		GS_OPT_BOOL_(0, "json", &o.json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, restore_usage, 0, &nargs);
	if (rc == 0 && nargs == 1 && !o.dir)
		o.dir = argv[0]; /* `gpusnap restore DIR` reads as well as -D DIR */
	else if (rc == 0 && nargs > 0)
		rc = cli_usage_error("restore", "unexpected argument '%s'", argv[0]);
	else if (rc == 0 && (!o.dir || !*o.dir))
		rc = cli_usage_error("restore", "-D DIR is required");
	if (rc) {
		gs_string_list_free(&o.maps);
		return rc == GS_PARSE_HELP ? 0 : rc;
	}

	/* the agent loads from its own working directory: give it an absolute path */
	char absdir[PATH_MAX];
	if (realpath(o.dir, absdir))
		o.dir = absdir;
	struct gs_err err = { 0 };
	struct restore_run r = { 0 };
	double t0 = gs_now();
	r.t0 = t0;
	rc = checks(&r, &o, &err);
	if (!rc) {
		struct cli_progress *progress = cli_progress_start("restore");
		rc = run_restore(&r, &o, &err);
		cli_progress_stop(progress);
	}
	r.total_s = gs_now() - t0;
	if (rc && cli_signal_caught() && !cli_is_interrupted(rc)) {
		/* a step cut short by the signal (CRIU's run) failed: the signal is what happened */
		char cause[GS_ERR_MSG_MAX], what[PATH_MAX + 32];
		snprintf(cause, sizeof(cause), "%s", err.msg);
		snprintf(what, sizeof(what), "restore from '%s'", o.dir);
		rc = cli_fail_interrupted(&err, what);
		cli_err_append(&err, "no process is left and the image is unchanged (%s)", cause);
	}
	print_outcome(&r, &o, rc, &err);
	if (rc)
		cli_report_error(&err);
	else if (cli_signal_caught())
		fprintf(stderr, "gpusnap: %s came after process %d had started running; the restore was finished\n",
			cli_signal_name(cli_signal_caught()), (int)r.pid);
	cli_op_end(r.lock, rc == 0);
	free(r.target);
	free(r.pairs);
	for (int i = 0; r.tree_imgs && i < r.tree_n; i++)
		gs_image_close(r.tree_imgs[i]);
	free(r.tree_imgs);
	free(r.tree_dirs);
	free(r.tree_agents);
	free(r.tree_procs);
	free(r.tree_pids);
	gs_image_close(r.img);
	if (r.session)
		cli_session_close(&r.s);
	gs_string_list_free(&o.maps);
	return rc;
}
