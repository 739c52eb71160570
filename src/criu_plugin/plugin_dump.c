/*
 * plugin_dump.c - `criu dump` through gpusnap_criu.so: every CUDA process of
 * the dumped tree leaves the GPU before CRIU freezes any task, and its GPU
 * state goes into CRIU's image directory as a gpusnap image
 * (gpusnap/<pid>/, docs/FORMAT.md).
 *
 * PAUSE_DEVICES comes for the root task before it is frozen, then for each
 * child while its parent is frozen already (with a cgroup freezer only for
 * the root). So the first call walks the whole tree and takes every CUDA
 * process off the GPU at once: the agent path where a gpusnap agent answers
 * (it streams the data into the process's image and releases the GPU), then
 * the driver's lock of every process before its checkpoint of any
 * (gs_ckpt_suspend); processes without the agent keep their data in host
 * memory, which CRIU's pages carry (a manifest with how=driver says so).
 * Agents that share GPU memory as file descriptors (NCCL's cuMem buffers,
 * cli/share_tree.h) are linked before any gate closes, each exported buffer
 * is saved once, by its exporter, and once every agent dumped the importers
 * let go and every agent closes its duplicates, before the driver's
 * checkpoint and before CRIU meets any descriptor; undoing it resumes them
 * as one job (exports made again and handed over, no gate open before all
 * are back). Later calls and CHECKPOINT_DEVICES only check that no CUDA
 * process was missed. The images are published when CRIU's dump succeeded;
 * a failed dump and --leave-running put every process back on the GPU (exit
 * hook). With --leave-running an agent's image is published unsynced, so that
 * it is whole when CRIU returns but the disk's fsync is not in the pause: the
 * helper that resumes the agent syncs it once the process runs again. Every
 * driver call goes through the driver helper (plugin_driver.c), forked at
 * init: criu itself must stay single-threaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/dump_common.h"
#include "cli/share_tree.h"
#include "common/fault.h"
#include "common/proc.h"
#include "common/util.h"
#include "core/protocol.h"
#include "criu/criu.h"
#include "criu_plugin/criu_plugin_abi.h"
#include "criu_plugin/plugin.h"
#include "cuda/gpus.h"

/*
 * CRIU's own options, `opts` (struct cr_options): its first member,
 * final_state, has been first since CRIU 3 and is what both `-R` and the
 * RPC request's leave_running (runc's `criu swrk`) set. The values are
 * CRIU's task states; anything else means the layout is not the one known
 * here, and the command line is asked instead.
 */
enum { CRIU_TASK_ALIVE = 1, CRIU_TASK_DEAD = 2, CRIU_TASK_STOPPED = 3 };

/*
 * What CRIU itself does with the tasks after a dump it finished: one of
 * CRIU_TASK_*, from its options (how: "CRIU's options"), else from criu's
 * command line (-R / --leave-running, -s / --leave-stopped, else a `criu
 * dump` ends them); 0 where neither says (an RPC request, `criu swrk`, of a
 * criu whose options have another layout).
 */
static int criu_final_state(const char **how)
{
	const int *opts = (const int *)gsp_criu_symbol("opts");
	if (opts && *opts >= CRIU_TASK_ALIVE && *opts <= CRIU_TASK_STOPPED) {
		*how = "CRIU's options";
		return *opts;
	}
	*how = "criu's command line";
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[8192];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	bool running = false, stopped = false, dump = false;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
		running |= !strcmp(buf + i, "-R") || !strcmp(buf + i, "--leave-running");
		stopped |= !strcmp(buf + i, "-s") || !strcmp(buf + i, "--leave-stopped");
		dump |= !strcmp(buf + i, "dump");
	}
	return running ? CRIU_TASK_ALIVE : stopped ? CRIU_TASK_STOPPED : dump ? CRIU_TASK_DEAD : 0;
}

static const char *final_state_text(int st)
{
	return st == CRIU_TASK_ALIVE ? "--leave-running (the tasks run on)"
	       : st == CRIU_TASK_STOPPED ? "--leave-stopped (the tasks stay stopped)"
					 : "to end the tasks after the dump (no --leave-running)";
}

/*
 * Whether the tasks run on after the dump (gsp.leave_running): what CRIU
 * was told, where the plugin can learn it; the leave_running setting only
 * where it cannot. A setting that contradicts CRIU refuses the dump here,
 * before anything moved: with `no` against CRIU's --leave-running the
 * processes would run on without their GPU state (the next CUDA call waits
 * forever); with `yes` against a CRIU that ends or stops them the plugin
 * would resume processes CRIU kills or keeps stopped.
 */
static int decide_leave_running(void)
{
	const char *how = "";
	int told = criu_final_state(&how);
	int setting = gsp.cfg.leave_running;
	if (setting >= 0 && told && setting != (told == CRIU_TASK_ALIVE)) {
		char origin[4200];
		gs_plugin_config_origin(&gsp.cfg, GS_PK_LEAVE_RUNNING, origin, sizeof(origin));
		gsp_err("refusing the dump: the leave_running setting says %s (%s), but criu was told %s (%s): drop the "
			"setting, the plugin reads CRIU's own", setting ? "yes" : "no", origin, final_state_text(told), how);
		return -1;
	}
	if (setting >= 0 && !told)
		how = "the leave_running setting";
	gsp.leave_running = told ? told == CRIU_TASK_ALIVE : setting > 0;
	gsp.leave_stopped = told == CRIU_TASK_STOPPED;
	if (gsp.leave_running)
		gsp_info("the tasks run on after the dump (%s)", how);
	return 0;
}

int gsp_dump_init(void)
{
	struct gs_err err = { 0 };
	/* a contradiction is refused for every dump, of processes without a GPU too: found at once */
	if (decide_leave_running())
		return -1;
	if (gsp_driver_start(&err)) {
		/* no driver, or one without the checkpoint API: no CUDA process to serve here */
		gsp_info("not active: %s", err.msg);
		return 0;
	}
	/*
	 * Tasks stopped by ptrace, not by the cgroup freezer: a failed dump or
	 * --leave-running needs the driver's restore thread to run while CRIU
	 * still holds the process (CRIU's CUDA plugin asks the same).
	 */
	void (*interrupt_only)(void) = (void (*)(void))gsp_criu_symbol("set_compel_interrupt_only_mode");
	if (interrupt_only)
		interrupt_only();
	gsp.active = true;
	return 0;
}

static struct gsp_proc *find_proc(pid_t pid)
{
	for (int i = 0; i < gsp.nprocs; i++)
		if (gsp.procs[i].pid == pid)
			return &gsp.procs[i];
	return NULL;
}

/* The CUDA processes of the tree of root (not CRIU itself), each running: gsp.procs. */
static int collect(pid_t root, struct gs_err *err)
{
	pid_t *all;
	size_t nall;
	int rc = gs_proc_tree(root, &all, &nall, err);
	if (rc)
		return rc;
	gsp.procs = calloc(nall ? nall : 1, sizeof(*gsp.procs));
	if (!gsp.procs) {
		free(all);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	for (size_t i = 0; i < nall && !rc; i++) {
		CUprocessState st;
		struct gs_err e = { 0 };
		/* criu itself, and a zombie of the tree (gone: CRIU dumps it as one, with no GPU state) */
		if (all[i] == getpid() || !gs_proc_alive(all[i]))
			continue;
		int r = gsp_driver_state(all[i], &st, &e);
		if (r == GS_E_NOT_CUDA || r == GS_E_NO_PROCESS)
			continue;
		if (r) {
			*err = e;
			rc = r;
		} else if (st != CU_PROCESS_STATE_RUNNING) {
			rc = gs_fail(err, GS_E_STATE, "CUDA process %d is %s; resume it before dumping it", (int)all[i],
				     gs_cuda_state_name(st));
		} else {
			struct gsp_proc *p = &gsp.procs[gsp.nprocs++];
			p->pid = all[i];
			p->nspid = gsp_ns_pid(all[i]);
			gs_proc_comm(all[i], p->comm, sizeof(p->comm));
		}
	}
	free(all);
	return rc;
}

/*
 * CRIU's own CUDA plugin in the same plugin folder would claim the same
 * processes (which runs first depends on readdir order) and record itself
 * as required in the image: refused with what to do. By the first
 * PAUSE_DEVICES every plugin of the folder is loaded.
 */
static int check_no_cuda_plugin(struct gs_err *err)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[4096 + 128];
	int rc = 0;
	while (!rc && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		char *base = path ? strrchr(path, '/') : NULL;
		if (base && !strncmp(base, "/cuda_plugin.so", 15)) {
			line[strcspn(line, "\n")] = '\0';
			rc = gs_fail(err, GS_E_CRIU, "CRIU's cuda_plugin.so is loaded too (%s): both would take the CUDA "
				     "processes; remove it from CRIU's plugin folder (gpusnap_criu.so also serves processes "
				     "without the agent)", path);
		}
	}
	fclose(f);
	return rc;
}

/* CRIU's image directory as a path (the agent and the image writer work with paths). */
static int images_dir(struct gs_err *err)
{
	if (gsp.images_fd < 0)
		return gs_fail(err, GS_E_CRIU, "this criu gives its plugins no image directory (criu_get_image_dir)");
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", gsp.images_fd);
	if (!realpath(link, gsp.images_dir))
		return gs_fail_errno(err, GS_E_CRIU, errno, "cannot resolve CRIU's image directory");
	char sub[sizeof(gsp.images_dir) + 16];
	snprintf(sub, sizeof(sub), "%s/%s", gsp.images_dir, GSP_SUBDIR);
	if (mkdir(sub, 0700) && errno != EEXIST)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create '%s'", sub);
	return 0;
}

/* The image of a process dumped by the driver: its GPUs, no allocations (CRIU's pages hold the data). */
static int write_driver_manifest(struct gsp_proc *p, struct gs_err *err)
{
	struct gs_image_writer_opts wo = { .source_pid = p->nspid, .source_comm = p->comm, .how = "driver" };
	struct gs_image_writer *w;
	int rc = gs_image_writer_open_in(gs_image_tmp_path(p->tmp), &wo, &w, err);
	if (rc)
		return rc;
	uint64_t vram[CLI_MAX_GPUS] = { 0 }, mask = 0;
	gsp_driver_vram(p->pid, vram, &mask);
	rc = dump_add_gpus(w, &gsp.s, mask, err);
	if (!rc)
		rc = dump_set_metadata(w, &gsp.s, vram, mask, err);
	if (rc) {
		gs_image_writer_abort(w);
		return rc;
	}
	return gs_image_writer_seal(w, err);
}

/* The tree's processes as share_tree.h takes them: their PIDs and (copies of) their agents. */
static int share_arrays(pid_t **pids, struct cli_agent **agents, struct gs_err *err)
{
	size_t n = gsp.nprocs ? (size_t)gsp.nprocs : 1;
	*pids = calloc(n, sizeof(**pids));
	*agents = calloc(n, sizeof(**agents));
	if (!*pids || !*agents) {
		free(*pids);
		free(*agents);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	for (int i = 0; i < gsp.nprocs; i++) {
		(*pids)[i] = gsp.procs[i].pid;
		(*agents)[i] = gsp.procs[i].agent;
	}
	return 0;
}

/*
 * The agents that share memory take their data back as one job: from
 * images[i] (NULL: an agent not suspended, or from its own memory), the
 * exports made again and handed to the importers, every gate held until
 * all are back (cli_share_resume). On failure they stay suspended.
 */
static int share_resume(const char *const *images, struct gs_err *err)
{
	pid_t *pids;
	struct cli_agent *agents;
	int rc = share_arrays(&pids, &agents, err);
	if (rc)
		return rc;
	/* each agent's state now (suspended ones resume); one that does not answer is said and left out */
	for (int i = 0; i < gsp.nprocs; i++) {
		struct gs_err e = { 0 };
		if (agents[i].present && cli_agent_probe(pids[i], &agents[i], &e))
			gsp_err("%s", e.msg);
	}
	rc = cli_share_resume(pids, agents, gsp.nprocs, images, false, err);
	for (int i = 0; i < gsp.nprocs; i++)
		gsp.procs[i].agent = agents[i];
	free(pids);
	free(agents);
	return rc;
}

/* Undoes what PAUSE_DEVICES did while the processes still run (nothing frozen yet). */
static void undo_running(void)
{
	struct gs_err e = { 0 };
	if (gsp.driver_suspended && gsp_driver_resume(gsp.ck, gsp.nprocs, &e))
		gsp_err("could not put the processes back on the GPU: %s", e.msg);
	gsp.driver_suspended = false;
	/* agents that share memory: back together from their temporary images, before any gate opens */
	bool shared_back = false, shared_kept = false;
	const char **images = gsp.shared ? calloc((size_t)gsp.nprocs + 1, sizeof(*images)) : NULL;
	bool any = false;
	for (int i = 0; images && i < gsp.nprocs; i++) {
		images[i] = gsp.procs[i].agent_dumped ? gs_image_tmp_path(gsp.procs[i].tmp) : NULL;
		any |= gsp.procs[i].agent_dumped;
	}
	if (gsp.shared && any) {
		if (!images || share_resume(images, &e)) {
			gsp_err("the processes that share GPU memory stay suspended, their GPU data kept in their images: %s",
				images ? e.msg : "out of memory");
			shared_kept = true;
		} else {
			shared_back = true;
		}
	}
	free(images);
	for (int i = 0; i < gsp.nprocs; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		bool keep = false;
		if (p->agent_dumped && (shared_back || shared_kept)) {
			keep = shared_kept;
		} else if (p->agent_dumped && gsp_agent_resume(p->pid, &p->agent, gs_image_tmp_path(p->tmp), &e)) {
			gsp_err("process %d stays suspended, its GPU data kept in its image: %s", (int)p->pid, e.msg);
			keep = true;
		} else if (p->agent_staged && cli_agent_resume(p->pid, &p->agent, &e)) {
			gsp_err("process %d stays suspended with its GPU data in host memory: %s (gpusnap resume %d)", (int)p->pid,
				e.msg, (int)p->pid);
		} else if (!p->agent_dumped && p->agent_gated && cli_agent_open(p->pid, &p->agent, &e))
			gsp_err("could not open the gate of process %d again (it reopens by itself): %s", (int)p->pid, e.msg);
		p->agent_dumped = p->agent_gated = p->agent_staged = false;
		if (p->tmp && keep) {
			char kept[4096];
			if (gs_image_tmp_keep(p->tmp, kept, sizeof(kept), &e))
				gsp_err("%s", e.msg);
			else
				gsp_err("process %d: gpusnap resume --image '%s' %d puts it back", (int)p->pid, kept, (int)p->pid);
		} else if (p->tmp) {
			gs_image_tmp_discard(p->tmp);
		}
		p->tmp = NULL;
	}
}

static int take_off_gpu(struct gs_err *err)
{
	int rc = images_dir(err);
	bool driver_only = gsp.cfg.driver;
	for (int i = 0; i < gsp.nprocs && !rc; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		char dir[sizeof(gsp.images_dir) + 64];
		snprintf(dir, sizeof(dir), "%s/%s/%d", gsp.images_dir, GSP_SUBDIR, (int)p->nspid);
		struct gs_image_tmp_opts to = { .source_pid = p->nspid, .source_comm = p->comm, .replace = true };
		if ((rc = gs_image_tmp_create(dir, &to, &p->tmp, err)))
			break;
		if (!driver_only && (rc = cli_agent_probe(p->pid, &p->agent, err)))
			break;
		struct stat pst;
		char ppath[64];
		snprintf(ppath, sizeof(ppath), "/proc/%d", (int)p->pid);
		if (p->agent.present && stat(ppath, &pst) == 0 && pst.st_uid != geteuid()) {
			/* its agent would write files of its user into an image that restore only trusts from root */
			gsp_info("process %d runs as user %u: driver path", (int)p->pid, (unsigned)pst.st_uid);
			memset(&p->agent, 0, sizeof(p->agent));
		}
		if (p->agent.present && p->agent.state != GS_AGENT_RUNNING)
			rc = gs_fail(err, GS_E_STATE, "process %d is suspended; resume it before dumping it", (int)p->pid);
		if (!rc && !p->agent.present) {
			uint64_t vram[CLI_MAX_GPUS] = { 0 }, mask = 0;
			gsp_driver_vram(p->pid, vram, &mask);
			rc = gs_ckpt_refuse_multi_gpu(p->pid, mask, gsp.cfg.multi_gpu_driver, err);
		}
	}
	/*
	 * Memory the agents share: every import linked to its export before any
	 * gate closes, or the dump refused before anything changed (an importer
	 * whose exporter is outside the tree, a process of it without the agent).
	 */
	if (!rc && !driver_only) {
		pid_t *pids;
		struct cli_agent *agents;
		if (!(rc = share_arrays(&pids, &agents, err))) {
			rc = cli_share_before_suspend(pids, agents, gsp.nprocs, true, &gsp.shared, err);
			free(pids);
			free(agents);
		}
		if (!rc && gsp.shared)
			gsp_info("the agents of the tree share GPU memory: linked, each exported buffer saved by its exporter");
	}
	/*
	 * Several agents (ranks of one job that wait on each other): every gate
	 * closes before any process waits for its GPU work, as gpusnap suspend
	 * --tree does; an agent reopens its gate by itself if no dump follows.
	 */
	int gates = 0;
	for (int i = 0; i < gsp.nprocs; i++)
		gates += gsp.procs[i].agent.present && (gsp.procs[i].agent.caps & GS_CAP_GATE);
	for (int i = 0; i < gsp.nprocs && !rc && gates > 1; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		if (!p->agent.present || !(p->agent.caps & GS_CAP_GATE))
			continue;
		double lease = (gsp.cfg.timeout_s > 0 ? gsp.cfg.timeout_s : 600) + 60;
		if (!(rc = cli_agent_gate(p->pid, &p->agent, gsp.cfg.timeout_s, lease, err))) {
			p->agent_gated = true;
			gsp_info("process %d: the agent's gate is closed (%d agents in the tree)", (int)p->pid, gates);
		}
	}
	/* agents first: each finishes its own CUDA calls before it replies, which the driver's lock would block */
	for (int i = 0; i < gsp.nprocs && !rc; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		if (!p->agent.present)
			continue;
		const char *tmp = gs_image_tmp_path(p->tmp);
		double t = gs_now();
		const struct gs_dump_opts running = { .running = true, .cached = gsp.leave_running,
						      .compress_codec = gsp.cfg.compress.codec,
						      .compress_level = gsp.cfg.compress.level };
		if ((p->agent.caps & GS_CAP_DUMP_RUNNING) && (p->agent.caps & GS_CAP_DIR_FD)) {
			/* the agent may see another file system (a container's): it writes through our descriptor */
			int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			rc = fd < 0 ? gs_fail_errno(err, GS_E_FAILURE, errno, "cannot open '%s'", tmp)
				    : cli_agent_dump_fd(p->pid, &p->agent, fd, gsp.cfg.timeout_s, &running, err);
			if (fd >= 0)
				close(fd);
		} else if (p->agent.caps & GS_CAP_DUMP_RUNNING) {
			rc = cli_agent_dump(p->pid, &p->agent, tmp, gsp.cfg.timeout_s, &running, err);
		} else if (!(rc = cli_agent_suspend(p->pid, &p->agent, gsp.cfg.timeout_s, false, err))) {
			/* older agents: suspended into staging memory, then the image written from there */
			p->agent_staged = true;
			const struct gs_dump_opts staged = { .drop_staging = true, .compress_codec = gsp.cfg.compress.codec,
							     .compress_level = gsp.cfg.compress.level };
			if (!(rc = cli_agent_dump(p->pid, &p->agent, tmp, 0, &staged, err)))
				p->agent_staged = false;
		}
		if (!rc) {
			p->agent_dumped = true;
			gsp_info("process %d: the agent wrote %llu bytes of GPU data in %.2f s%s", (int)p->pid,
				 (unsigned long long)cli_agent_counter(&p->agent, "bytes"), gs_now() - t,
				 (p->agent.caps & GS_CAP_DIR_FD) ? " through the image directory's descriptor" : "");
		} else if (gsp.shared) {
			/* it walked back and runs on, unless its own undo failed: then its data is only in its image */
			struct cli_agent now;
			struct gs_err e = { 0 };
			if (!cli_agent_probe(p->pid, &now, &e) && now.present && now.state != GS_AGENT_RUNNING)
				p->agent_dumped = true;
		}
	}
	/* every agent is off the GPU: the shared memory goes before the driver's checkpoint and CRIU meet it */
	if (!rc && gsp.shared) {
		pid_t *pids;
		struct cli_agent *agents;
		if (!(rc = share_arrays(&pids, &agents, err))) {
			rc = cli_share_release(pids, agents, gsp.nprocs, err);
			free(pids);
			free(agents);
		}
	}
	if (rc)
		return rc;
	gsp.ck = calloc((size_t)gsp.nprocs, sizeof(*gsp.ck));
	if (!gsp.ck)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < gsp.nprocs; i++)
		gsp.ck[i].pid = gsp.procs[i].pid;
	/* every process locked before any is checkpointed; on failure all run on */
	if ((rc = gsp_driver_suspend(gsp.ck, gsp.nprocs, gsp.cfg.timeout_s, err)))
		return rc;
	gsp.driver_suspended = true;
	for (int i = 0; i < gsp.nprocs && !rc; i++)
		if (!gsp.procs[i].agent.present)
			rc = write_driver_manifest(&gsp.procs[i], err);
	return rc;
}

int gsp_pause_devices(int pid)
{
	struct gs_err err = { 0 };
	if (gsp.tree_seen) {
		/* taken off the GPU with the tree at the first call, or not a CUDA process */
		CUprocessState st;
		if (find_proc(pid) || gsp_driver_state(pid, &st, &err))
			return 0;
		gsp_err("CUDA process %d appeared in the tree after the dump began; dump again", pid);
		return -1;
	}
	gsp.tree_seen = true;
	/*
	 * CRIU's --timeout (10 s by default) is armed for freezing when this hook
	 * runs, and CRIU aborts hard 5 s after it fires: the GPU part (GiBs to
	 * stream or checkpoint) is bounded by the timeout setting instead, the
	 * timer paused meanwhile and armed again for the freezing after it.
	 */
	unsigned freeze_left = alarm(0);
	int rc = 0;
	if (gs_fault(GS_FI_PLUGIN_PAUSE))
		rc = gs_fail(&err, GS_E_FAILURE, "failed at '%s' (injected)", gs_fault_name(GS_FI_PLUGIN_PAUSE));
	if (!rc)
		rc = collect(pid, &err);
	/* a process holding the GPU's device files that is no CUDA process: CRIU would fail on it after the GPU part */
	pid_t *cuda;
	struct cli_agent *agents;
	if (!rc && !(rc = share_arrays(&cuda, &agents, &err))) {
		rc = cli_tree_check_device_files(pid, cuda, gsp.nprocs, &err);
		free(cuda);
		free(agents);
	}
	if (!rc && gsp.nprocs == 0) {
		alarm(freeze_left);
		return 0;
	}
	/*
	 * --leave-stopped: the tasks would stay stopped, and run once continued,
	 * without their GPU state (the agent cannot take its data back in a
	 * stopped process)
	 */
	if (!rc && gsp.leave_stopped)
		rc = gs_fail(&err, GS_E_USAGE, "criu --leave-stopped would leave CUDA process %d stopped without its GPU "
			     "state; dump with --leave-running, or without either", (int)gsp.procs[0].pid);
	/* CRIU would fail on it after the GPU part */
	if (!rc)
		rc = gs_criu_check_io_uring(pid, &err);
	gsp_add_inventory_plugin_t *add = (gsp_add_inventory_plugin_t *)gsp_criu_symbol("add_inventory_plugin");
	/* the image names this plugin as required: a CRIU restoring it without the plugin refuses */
	if (!rc)
		rc = check_no_cuda_plugin(&err);
	if (!rc && add && add(GSP_NAME))
		rc = gs_fail(&err, GS_E_CRIU, "cannot record the plugin in CRIU's inventory");
	if (!rc)
		rc = take_off_gpu(&err);
	if (rc) {
		undo_running();
		gsp_err("dump of the CUDA processes of tree %d failed: %s", pid, err.msg);
		gsp.nprocs = 0;
		alarm(freeze_left);
		return -1;
	}
	alarm(freeze_left);
	for (int i = 0; i < gsp.nprocs; i++)
		gsp_info("process %d (%s) is off the GPU: %s path, lock %.2f s, checkpoint %.2f s", (int)gsp.procs[i].pid,
			 gsp.procs[i].comm, gsp.procs[i].agent.present ? "agent" : "driver", gsp.ck[i].lock_s,
			 gsp.ck[i].checkpoint_s);
	return 0;
}

int gsp_checkpoint_devices(int pid)
{
	struct gs_err err = { 0 };
	CUprocessState st;
	if (gs_fault(GS_FI_PLUGIN_CHECKPOINT)) {
		gsp_err("dump of process %d failed at '%s' (injected)", pid, gs_fault_name(GS_FI_PLUGIN_CHECKPOINT));
		return -1;
	}
	if (find_proc(pid) || gsp_driver_state(pid, &st, &err))
		return 0;
	gsp_err("CUDA process %d was not taken off the GPU (it is %s); dump again", pid, gs_cuda_state_name(st));
	return -1;
}

/* In a helper: waits (up to 10 minutes) until CRIU let pid go; false when the process is gone (a zombie too). */
static bool wait_untraced(pid_t pid)
{
	/* CRIU detaches when it has finished with the whole tree */
	for (int i = 0; i < 60000; i++) {
		char path[64], line[256];
		if (!gs_proc_alive(pid))
			return false;
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
		FILE *f = fopen(path, "re");
		if (!f)
			return false;
		long tracer = -1;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "TracerPid:", 10))
				tracer = strtol(line + 10, NULL, 10);
		fclose(f);
		if (tracer == 0)
			break;
		usleep(10000);
	}
	return true;
}

/* The image of p at dir, published unsynced, made durable (once its process runs again, or will not). */
static void sync_published(const struct gsp_proc *p, const char *dir)
{
	if (!p->sync_later)
		return;
	struct gs_err e = { 0 };
	double t0 = gs_now();
	if (gs_image_sync(dir, &e))
		gsp_err("the GPU image of process %d at '%s' may not be on the disk: %s", (int)p->pid, dir, e.msg);
	else
		gsp_info("the GPU image of process %d is on the disk (synced in %.2f s after the dump)", (int)p->pid,
			 gs_now() - t0);
}

/*
 * The agent answers only once CRIU lets the process go: a child of the
 * plugin's waits for that, then has the agent load its data back from the
 * image (no CUDA call in the child: it only talks to the agent's socket).
 */
static void agent_resume_later(struct gsp_proc *p, const char *from)
{
	int forked = gsp_fork_detached();
	if (forked < 0) {
		gsp_err("cannot start the helper that resumes process %d: %s (gpusnap resume --image '%s' %d)", (int)p->pid,
			strerror(errno), from, (int)p->pid);
		sync_published(p, from);
	}
	if (forked)
		return;
	if (!wait_untraced(p->pid)) {
		/* CRIU ended it after all (a criu whose options the plugin could not read): its image is what is left */
		gsp_warn("process %d ended with the dump, not resumed; its GPU image stays at '%s'", (int)p->pid, from);
		sync_published(p, from);
		_exit(0);
	}
	struct gs_err e = { 0 };
	/* the agent keeps this image as where its data is: a plain resume retries from it */
	if (gsp_agent_resume(p->pid, &p->agent, from, &e))
		gsp_err("process %d did not resume after the dump: %s; its GPU data is in '%s' (gpusnap resume %d)",
			(int)p->pid, e.msg, from, (int)p->pid);
	sync_published(p, from);
	_exit(0);
}

/*
 * As agent_resume_later for the agents that share memory: one helper waits
 * until CRIU let each go, then they take their data back from images[i] as
 * one job (share_resume: no gate opens before all are back).
 */
static void shared_resume_later(const char *const *images)
{
	int forked = gsp_fork_detached();
	if (forked < 0)
		gsp_err("cannot start the helper that resumes the processes that share GPU memory: %s (gpusnap resume "
			"--tree %d)", strerror(errno), gsp.nprocs ? (int)gsp.procs[0].pid : 0);
	if (forked > 0)
		return;
	if (forked == 0) {
		for (int i = 0; i < gsp.nprocs; i++)
			if (images[i] && !wait_untraced(gsp.procs[i].pid))
				gsp_err("process %d ended before it resumed (it shared GPU memory with the others)",
					(int)gsp.procs[i].pid);
		struct gs_err e = { 0 };
		if (share_resume(images, &e))
			gsp_err("the processes that share GPU memory did not resume after the dump: %s", e.msg);
	}
	/* in the helper once they run again; without a helper, here */
	for (int i = 0; i < gsp.nprocs; i++)
		if (images[i])
			sync_published(&gsp.procs[i], images[i]);
	if (forked == 0)
		_exit(0);
}

void gsp_dump_fini(int ret)
{
	struct gs_err e = { 0 };
	bool back = ret != 0 || gsp.leave_running;
	for (int i = 0; i < gsp.nprocs; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		if (ret == 0 && p->tmp) {
			/* an agent's data comes back from the page cache: the disk's fsync can wait until it runs */
			p->sync_later = gsp.leave_running && p->agent_dumped;
			if ((p->sync_later ? gs_image_publish_unsynced : gs_image_publish)(p->tmp, &p->published, &e))
				gsp_err("the GPU image of process %d was not published: %s", (int)p->pid, e.msg);
			p->sync_later = p->sync_later && p->published;
		}
	}
	/* the driver part: CRIU still holds every task stopped; each restore thread runs alone for it */
	for (int i = 0; back && gsp.driver_suspended && i < gsp.nprocs; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		if (gsp_traced_restore(p->pid, NULL, 0, &e))
			gsp_err("could not put process %d back on the GPU: %s (gpusnap resume %d)", (int)p->pid, e.msg,
				(int)p->pid);
		else
			gsp_info("process %d is back on the GPU", (int)p->pid);
	}
	/* agents that share memory resume together: their image directories, kept until the helper started */
	char (*dirs)[sizeof(gsp.images_dir) + 64] = NULL;
	const char **images = NULL;
	if (back && gsp.shared && gsp.nprocs) {
		dirs = calloc((size_t)gsp.nprocs, sizeof(*dirs));
		images = calloc((size_t)gsp.nprocs, sizeof(*images));
		if (!dirs || !images)
			gsp_err("out of memory: the processes that share GPU memory stay suspended (gpusnap resume --tree %d)",
				(int)gsp.procs[0].pid);
	}
	for (int i = 0; i < gsp.nprocs; i++) {
		struct gsp_proc *p = &gsp.procs[i];
		if (back && p->agent_dumped) {
			/* the data is in the published image, or (failed dump) only in the temporary one: kept either way */
			char dir[sizeof(gsp.images_dir) + 64];
			if (p->published)
				snprintf(dir, sizeof(dir), "%s/%s/%d", gsp.images_dir, GSP_SUBDIR, (int)p->nspid);
			else
				snprintf(dir, sizeof(dir), "%s", gs_image_tmp_path(p->tmp));
			if (!gsp.shared) {
				agent_resume_later(p, dir);
			} else if (dirs && images) {
				memcpy(dirs[i], dir, sizeof(dir));
				images[i] = dirs[i];
			}
			if (p->tmp)
				gs_image_tmp_close(p->tmp);
		} else if (p->tmp) {
			if (p->published)
				gs_image_tmp_close(p->tmp);
			else
				gs_image_tmp_discard(p->tmp);
		}
		p->tmp = NULL;
	}
	if (dirs && images)
		shared_resume_later(images);
	free(dirs);
	free(images);
	free(gsp.procs);
	free(gsp.ck);
	gsp.procs = NULL;
	gsp.ck = NULL;
	gsp.nprocs = 0;
	gsp.shared = false;
}
