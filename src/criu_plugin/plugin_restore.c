/*
 * plugin_restore.c - `criu restore` through gpusnap_criu.so: the gpusnap
 * images in CRIU's image directory (gpusnap/<pid>/) put their processes back
 * on the GPU.
 *
 * What can refuse the restore before any process exists runs in init, the
 * one restore-time call whose failure CRIU acts on that early (it only logs
 * what RESUME_DEVICES_LATE returns): each image is opened (trust checks:
 * owner, mode, links) and its GPUs are planned on this machine (the map
 * setting, the semantics of `gpusnap restore --map`). The checksum pass over
 * the images' chunks starts there too, in a process of its own (the
 * verifier), and runs while CRIU restores the tasks; its result is taken at
 * the first RESUME_DEVICES_LATE, before any GPU data is put back and before
 * any task runs: on a bad chunk every restored task is killed there. The
 * driver work runs in a second process of its own, the driver helper
 * (plugin_driver.c), forked in init too: it opens the driver and lists the
 * GPUs, which init plans with (libcuda is never loaded into criu), and then,
 * per task at RESUME_DEVICES_LATE, runs the driver's restore (with the map)
 * and unlock while criu, the tracer, lets the driver's restore thread run
 * alone (CRIU holds all the app's threads stopped); should that fail the
 * task is killed before it ran. For agent images the agent then loads the
 * GPU data from the image once CRIU lets the process go. Images that record GPU memory
 * shared between the tree's processes (share.export / share.import,
 * docs/FORMAT.md) load as one job: init refuses an import whose export no
 * image of the dump holds; once every sharing task is back on the GPU, one
 * helper has the exporters create and export their memory again, hands the
 * descriptors to the importers, and lets every agent load with its gate
 * held until all are back (cli_share_resume).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/share_tree.h"
#include "common/fault.h"
#include "common/proc.h"
#include "common/util.h"
#include "criu_plugin/criu_plugin_abi.h"
#include "core/share_plan.h"
#include "criu_plugin/plugin.h"
#include "cuda/gpus.h"

/* The map setting "0=1,1=0" (commas or spaces): the image's GPU pairs for the driver. */
static int plan_gpus(struct gsp_image *im, struct gs_err *err)
{
	size_t n = gs_image_gpu_count(im->img);
	CUuuid used[64];
	bool here = true;
	for (size_t k = 0; k < n && k < 64; k++) {
		memcpy(used[k].bytes, gs_image_gpu_at(im->img, k)->uuid, 16);
		here &= gs_gpus_find_uuid(gsp.s.gpus, gsp.s.ngpus, used[k].bytes) >= 0;
	}
	const char *map = gsp.cfg.map;
	if (!*map) {
		for (size_t k = 0; k < n; k++) {
			const struct gs_image_gpu *g = gs_image_gpu_at(im->img, k);
			if (gs_gpus_find_uuid(gsp.s.gpus, gsp.s.ngpus, g->uuid) < 0)
				return gs_fail(err, GS_E_GPU_MAP, "image GPU %u (%s) of process %d is not on this machine; map it "
					       "with the map setting (map = %u=TO, or GPUSNAP_PLUGIN_MAP=%u=TO)", g->index,
					       g->name, (int)im->nspid, g->index, g->index);
		}
		return 0;
	}
	char copy[1024];
	snprintf(copy, sizeof(copy), "%s", map);
	const char *specs[64];
	int nspecs = 0;
	char *save = NULL;
	for (char *t = strtok_r(copy, ", \t", &save); t && nspecs < 64; t = strtok_r(NULL, ", \t", &save))
		specs[nspecs++] = t;
	int rc = gs_gpu_map_parse(specs, nspecs, gsp.s.gpus, gsp.s.ngpus, used, (int)(n < 64 ? n : 64), &im->pairs,
				  &im->npairs, err);
	if (rc) {
		char origin[4200];
		return gs_err_wrap(err, "%s", gs_plugin_config_origin(&gsp.cfg, GS_PK_MAP, origin, sizeof(origin)));
	}
	/* on the machine it was dumped on the process also saw GPUs it held no memory on: the driver wants those too */
	return here ? gs_gpu_pairs_complete(&im->pairs, &im->npairs, gsp.s.gpus, gsp.s.ngpus, err) : 0;
}

/* Whether im records an export with handle vh (share.export.N). */
static bool image_exports(const struct gsp_image *im, uint64_t vh)
{
	for (size_t k = 0; k < gs_image_metadata_count(im->img); k++) {
		const struct gs_image_kv *kv = gs_image_metadata_at(im->img, k);
		uint64_t v;
		struct gs_err e = { 0 };
		if (!strncmp(kv->key, GS_SHARE_META_EXPORT, strlen(GS_SHARE_META_EXPORT)) &&
		    !gs_share_parse_export_meta(kv->key, kv->value, &v, &e) && v == vh)
			return true;
	}
	return false;
}

/*
 * GPU memory shared between the dumped processes: each image that records
 * some is marked, and every import must come from an export another image
 * of this dump records (its exporter makes it again and hands it over),
 * else nothing is restored.
 */
static int check_shares(struct gs_err *err)
{
	for (int i = 0; i < gsp.nimages; i++) {
		struct gsp_image *im = &gsp.images[i];
		for (size_t k = 0; k < gs_image_metadata_count(im->img); k++) {
			const struct gs_image_kv *kv = gs_image_metadata_at(im->img, k);
			if (!strncmp(kv->key, GS_SHARE_META_EXPORT, strlen(GS_SHARE_META_EXPORT)))
				im->shares = true;
			if (strncmp(kv->key, GS_SHARE_META_IMPORT, strlen(GS_SHARE_META_IMPORT)))
				continue;
			im->shares = true;
			pid_t exporter;
			uint64_t export_vh;
			int rc = gs_share_parse_import_meta(kv->key, kv->value, &exporter, &export_vh, err);
			if (rc) {
				gs_err_wrap(err, "the GPU image of process %d", (int)im->nspid);
				return rc;
			}
			bool found = false;
			for (int j = 0; j < gsp.nimages && !found; j++)
				found = gsp.images[j].nspid == exporter && gsp.images[j].agent &&
					image_exports(&gsp.images[j], export_vh);
			if (!found)
				return gs_fail(err, GS_E_IMAGE, "the GPU image of process %d imported GPU memory that process %d "
					       "exported (%#llx), and no GPU image of this dump holds that export: not a whole "
					       "image of the tree", (int)im->nspid, (int)exporter, (unsigned long long)export_vh);
		}
		if (im->shares && !im->agent)
			return gs_fail(err, GS_E_IMAGE, "the GPU image of process %d records shared GPU memory but was not "
				       "taken by the agent", (int)im->nspid);
		gsp.nshared += im->shares;
	}
	return 0;
}

static int open_images(struct gs_err *err)
{
	int fd = openat(gsp.images_fd, GSP_SUBDIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot open the image's %s/ folder", GSP_SUBDIR);
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot read the image's %s/ folder", GSP_SUBDIR);
	}
	int rc = 0, cap = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		int pid;
		if (de->d_name[0] == '.' || gs_parse_pid(de->d_name, &pid))
			continue; /* temporary and kept images of dumps that did not finish are not restored */
		if (gsp.nimages == cap) {
			cap = cap ? cap * 2 : 8;
			struct gsp_image *m = realloc(gsp.images, (size_t)cap * sizeof(*m));
			if (!m) {
				rc = gs_fail(err, GS_E_FAILURE, "out of memory");
				break;
			}
			gsp.images = m;
		}
		struct gsp_image *im = &gsp.images[gsp.nimages];
		memset(im, 0, sizeof(*im));
		im->nspid = pid;
		/* through our descriptor: the images are those CRIU reads */
		char path[128];
		snprintf(path, sizeof(path), "/proc/self/fd/%d/%s/%s", gsp.images_fd, GSP_SUBDIR, de->d_name);
		if ((rc = gs_image_open(path, &im->img, err)))
			break;
		gsp.nimages++;
		const struct gs_image_info *info = gs_image_get_info(im->img);
		im->agent = !strcmp(info->how, "agent");
		if (!im->agent && strcmp(info->how, "driver"))
			rc = gs_fail(err, GS_E_IMAGE, "the GPU image of process %d was taken in a way this plugin does not "
				     "restore ('%s')", pid, info->how);
	}
	closedir(d);
	return rc;
}

/*
 * The checksum pass alongside CRIU. Not a thread: CRIU's process, which
 * clones the restored tasks after init, must stay single-threaded (setns
 * into a mount namespace, which CRIU does while restoring a container, is
 * refused to a process whose threads share its fs; a clone taken while a
 * thread holds a lock leaves the lock held in the task). So a process: it
 * checks every image, sends one record per image (stopping at the first
 * bad one), then waits to be ended by the plugin. It must not end by
 * itself: until RESUME_DEVICES_LATE CRIU takes the end of any child of its
 * for a restored task that died and fails the restore. It dies with criu
 * (PR_SET_PDEATHSIG). No CUDA in it.
 */
struct verify_record {
	int rc;
	double secs;
	struct gs_err err;
};

static void verifier_main(int out)
{
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGKILL);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (gs_fault(GS_FI_PLUGIN_VERIFY)) {
		struct verify_record r = { .rc = GS_E_FAILURE };
		gs_fail(&r.err, GS_E_FAILURE, "failed at '%s' (injected)", gs_fault_name(GS_FI_PLUGIN_VERIFY));
		if (!gsp_write_exact(out, &r, sizeof(r)))
			_exit(1);
	} else {
		for (int i = 0; i < gsp.nimages; i++) {
			struct verify_record r = { 0 };
			double t = gs_now();
			r.rc = gs_image_verify(gsp.images[i].img, 0, &r.err);
			r.secs = gs_now() - t;
			if (!gsp_write_exact(out, &r, sizeof(r)) || r.rc)
				break;
		}
	}
	close(out);
	for (;;)
		pause();
}

static int start_verifier(struct gs_err *err)
{
	if (gsp.cfg.no_verify || !gsp.nimages) {
		gsp.verified = true;
		if (gsp.nimages)
			gsp_info("no checksum pass (the no_verify setting): a bad chunk is found while the data is loaded");
		return 0;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot start the checksum pass: pipe");
	pid_t criu = getpid();
	pid_t child = fork();
	if (child < 0) {
		close(p[0]);
		close(p[1]);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot start the checksum pass: fork");
	}
	if (child == 0) {
		close(p[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != criu)
			_exit(1);
		verifier_main(p[1]);
	}
	close(p[1]);
	gsp.verifier = child;
	gsp.verify_rd = p[0];
	return 0;
}

/* Ends the verifier (gsp_end_helper). */
static void stop_verifier(void)
{
	if (gsp.verify_rd >= 0)
		close(gsp.verify_rd);
	gsp.verify_rd = -1;
	gsp_end_helper(&gsp.verifier);
}

/* The checksum pass's result, waiting for it where it still runs; 0 when every image is good. */
static int verify_result(void)
{
	if (gsp.verified)
		return gsp.verify_rc;
	gsp.verified = true;
	double t = gs_now();
	int rc = 0;
	for (int i = 0; i < gsp.nimages && !rc; i++) {
		struct verify_record r;
		if (!gsp_read_exact(gsp.verify_rd, &r, sizeof(r))) {
			rc = gs_fail(&gsp.verify_err, GS_E_FAILURE, "the checksum pass ended before it checked every image");
			break;
		}
		r.err.msg[sizeof(r.err.msg) - 1] = '\0';
		if (r.rc) {
			gsp.verify_err = r.err;
			rc = r.rc;
			gs_err_wrap(&gsp.verify_err, "the GPU image of process %d", (int)gsp.images[i].nspid);
		} else {
			gsp_info("process %d: checksums of its GPU image good (%.2f s, alongside CRIU)",
				 (int)gsp.images[i].nspid, r.secs);
		}
	}
	if (!rc)
		gsp_info("the checksum pass is done (waited %.2f s for it)", gs_now() - t);
	stop_verifier();
	gsp.verify_rc = rc;
	return rc;
}

int gsp_restore_init(void)
{
	gsp_check_and_remove_inventory_plugin_t *needed =
		(gsp_check_and_remove_inventory_plugin_t *)gsp_criu_symbol("check_and_remove_inventory_plugin");
	/* an image dumped without this plugin, or with no CUDA process: nothing to do */
	if (needed && !needed(GSP_NAME, strlen(GSP_NAME)))
		return 0;
	if (gsp.images_fd < 0 || faccessat(gsp.images_fd, GSP_SUBDIR, F_OK, 0))
		return 0;
	struct gs_err err = { 0 };
	int rc = open_images(&err);
	if (!rc)
		rc = check_shares(&err);
	/* the checksum pass first: it overlaps the planning too */
	if (!rc)
		rc = start_verifier(&err);
	if (!rc && gsp.nimages)
		rc = gsp_driver_start(&err);
	for (int i = 0; i < gsp.nimages && !rc; i++)
		rc = plan_gpus(&gsp.images[i], &err);
	if (rc) {
		stop_verifier();
		gsp_driver_stop();
		gsp_err("refusing the restore: %s", err.msg);
		return -1;
	}
	gsp.active = true;
	return 0;
}

/* The pipe the load helpers write their results to (one byte per process), made at the first helper. */
static void open_loads_pipe(void)
{
	int p[2];
	if (gsp.loads_wr < 0 && !pipe2(p, O_CLOEXEC)) {
		gsp.loads_rd = p[0];
		gsp.loads_wr = p[1];
	}
}

/*
 * In a load helper: waits until pid's agent answers, which it does once
 * CRIU detached (up to 10 minutes: CRIU restores the whole tree first), and
 * has it prepare its load. 0, or GS_E_NO_PROCESS when the process is gone,
 * else the last error (no agent answering).
 */
static int await_agent(pid_t pid, struct cli_agent *ag, struct gs_err *err)
{
	int rc = GS_E_AGENT;
	for (int t = 0; t < 60000 && rc; t++) {
		if (!gs_proc_alive(pid))
			return gs_fail(err, GS_E_NO_PROCESS, "process %d is gone", (int)pid);
		rc = cli_agent_probe(pid, ag, err);
		if (!rc && !ag->present)
			rc = gs_fail(err, GS_E_AGENT, "process %d has no gpusnap agent answering", (int)pid);
		if (rc)
			usleep(10000);
	}
	if (!rc) {
		struct gs_err pe = { 0 };
		cli_agent_prepare(pid, ag, &pe);
	}
	return rc;
}

/*
 * Like the dump's helper: once CRIU let the process go, its agent loads the
 * GPU data from the image. The helper holds gsp.loads_wr and writes its
 * result there before it ends, so criu (the exit hook) returns only once
 * every load ended: "restored" means the GPU data is back.
 */
static void agent_load_later(pid_t pid, const char *image)
{
	open_loads_pipe();
	int forked = gsp_fork_detached();
	if (forked < 0) {
		gsp_err("cannot start the helper that loads process %d's GPU data: %s; killed", (int)pid, strerror(errno));
		kill(pid, SIGKILL);
		return;
	}
	if (forked) {
		gsp.nloads++;
		return;
	}
	if (gsp.loads_rd >= 0)
		close(gsp.loads_rd);
	struct cli_agent ag;
	struct gs_err e = { 0 };
	int rc = await_agent(pid, &ag, &e);
	if (rc == GS_E_NO_PROCESS)
		_exit(0); /* gone meanwhile (killed): nothing to load, nothing to report */
	if (!rc)
		rc = gsp_agent_resume(pid, &ag, image, &e);
	if (rc) {
		gsp_err("process %d could not load its GPU data: %s; killed", (int)pid, e.msg[0] ? e.msg : "no agent");
		kill(pid, SIGKILL);
	}
	char result = rc ? 1 : 0;
	if (gsp.loads_wr >= 0 && write(gsp.loads_wr, &result, 1) < 0)
		_exit(1);
	_exit(0);
}

/* The tasks of the images that share memory and were put back on the GPU are killed: they cannot load alone. */
static void kill_shared(const char *why)
{
	for (int i = 0; i < gsp.nimages; i++) {
		struct gsp_image *im = &gsp.images[i];
		if (!im->shares || !im->pid)
			continue;
		gsp_err("process %d shares GPU memory with %s; killed", (int)im->pid, why);
		kill(im->pid, SIGKILL);
		im->pid = 0;
	}
}

/*
 * Every task whose image shares memory is back on the GPU: one helper (as
 * agent_load_later's, one result byte per process on loads_wr) waits until
 * each agent answers, then they load as one job (cli_share_resume: the
 * exporters create and export their memory again, the importers get the
 * descriptors, every gate held until all are back). On failure every one
 * of them is killed: none can run without the others' memory.
 */
static void shared_load_later(void)
{
	open_loads_pipe();
	gsp.shared_loading = true;
	int forked = gsp_fork_detached();
	if (forked < 0) {
		gsp_err("cannot start the helper that loads the GPU data of the processes that share GPU memory: %s",
			strerror(errno));
		kill_shared("the others (no helper to load them)");
		return;
	}
	if (forked) {
		gsp.nloads += gsp.nshared;
		return;
	}
	if (gsp.loads_rd >= 0)
		close(gsp.loads_rd);
	int n = gsp.nshared, k = 0, rc = 0;
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	struct cli_agent *agents = calloc((size_t)n, sizeof(*agents));
	const char **images = calloc((size_t)n, sizeof(*images));
	struct gs_err e = { 0 };
	if (!pids || !agents || !images)
		rc = gs_fail(&e, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < gsp.nimages && !rc; i++) {
		struct gsp_image *im = &gsp.images[i];
		if (!im->shares)
			continue;
		pids[k] = im->pid;
		images[k] = im->path;
		rc = await_agent(im->pid, &agents[k++], &e);
	}
	if (!rc)
		rc = cli_share_resume(pids, agents, n, images, false, &e);
	if (rc) {
		gsp_err("the %d processes that share GPU memory could not load their GPU data: %s; killed", n, e.msg);
		for (int i = 0; i < gsp.nimages; i++)
			if (gsp.images[i].shares && gsp.images[i].pid)
				kill(gsp.images[i].pid, SIGKILL);
	} else {
		gsp_info("the %d processes that share GPU memory loaded their GPU data together", n);
	}
	char result = rc ? 1 : 0;
	for (int i = 0; i < n; i++)
		if (gsp.loads_wr >= 0 && write(gsp.loads_wr, &result, 1) < 0)
			_exit(1);
	_exit(0);
}

/*
 * After a restore that succeeded, CRIU has let every task go (this hook
 * comes after it detached): wait until each agent loaded its GPU data, so
 * that criu, and runc or Podman above it, return only once the restored
 * processes hold their data. Bounded: each helper bounds its own wait for
 * the agent and the agent's load.
 */
static void wait_for_loads(int ret)
{
	if (gsp.loads_wr >= 0)
		close(gsp.loads_wr);
	gsp.loads_wr = -1;
	if (gsp.loads_rd < 0)
		return;
	int failed = 0, ended = 0;
	double t = gs_now();
	/* a failed restore killed the tasks: their helpers end by themselves, nothing to wait for */
	if (!ret && gsp.nloads)
		gsp_info("waiting for the agents of %d process%s to load their GPU data", gsp.nloads,
			 gsp.nloads == 1 ? "" : "es");
	while (!ret) {
		char result;
		ssize_t n = read(gsp.loads_rd, &result, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		ended++;
		failed += result != 0;
	}
	close(gsp.loads_rd);
	gsp.loads_rd = -1;
	if (ret)
		return;
	if (failed)
		gsp_err("%d of %d restored process%s could not load its GPU data and was killed (see above)", failed,
			gsp.nloads, gsp.nloads == 1 ? "" : "es");
	else
		gsp_info("the agents of %d process%s loaded their GPU data (%.2f s after the restore)", ended,
			 ended == 1 ? "" : "es", gs_now() - t);
}

int gsp_resume_devices_late(int pid)
{
	/*
	 * Every task is restored and held by CRIU: the checksum pass's result
	 * is needed now, before any GPU data goes back. A bad image fails the
	 * whole restore: each task is killed here, before it ran (CRIU then
	 * fails, as it cannot let a dead task go).
	 */
	if (verify_result()) {
		gsp_err("refusing the restore: %s; task %d killed before it ran", gsp.verify_err.msg, pid);
		kill(pid, SIGKILL);
		return -1;
	}
	pid_t ns = gsp_ns_pid(pid);
	struct gsp_image *im = NULL;
	for (int i = 0; i < gsp.nimages; i++)
		if (gsp.images[i].nspid == ns && !gsp.images[i].done)
			im = &gsp.images[i];
	if (!im)
		return -ENOTSUP;
	im->done = true;
	struct gs_err err = { 0 };
	double t = gs_now();
	int rc = 0;
	if (gs_fault(GS_FI_PLUGIN_RESTORE))
		rc = gs_fail(&err, GS_E_FAILURE, "failed at '%s' (injected)", gs_fault_name(GS_FI_PLUGIN_RESTORE));
	if (rc || gsp_traced_restore(pid, im->pairs, im->npairs, &err)) {
		/* CRIU only logs this hook's failure: the task, which never ran, goes */
		gsp_err("process %d could not be put back on the GPU: %s; killed before it ran", pid, err.msg);
		kill(pid, SIGKILL);
		if (im->shares)
			kill_shared("a process that could not be restored");
		return -1;
	}
	gsp_info("process %d is back on the GPU (%.2f s)", pid, gs_now() - t);
	if (im->agent) {
		char path[4200];
		snprintf(path, sizeof(path), "%s", gs_image_path(im->img));
		/* the helper outlives CRIU's descriptors: give it the directory's real path */
		char real[4096];
		if (realpath(path, real))
			snprintf(path, sizeof(path), "%s", real);
		if (!im->shares) {
			agent_load_later(pid, path);
			return 0;
		}
		/* shared memory: its agent loads with the others', once all are back on the GPU */
		im->pid = pid;
		im->path = strdup(path);
		if (!im->path) {
			gsp_err("out of memory; process %d killed", pid);
			kill(pid, SIGKILL);
			im->pid = 0;
			kill_shared("a process that could not be restored");
			return -1;
		}
		if (++gsp.nready == gsp.nshared)
			shared_load_later();
	}
	return 0;
}

void gsp_restore_fini(int ret)
{
	/* a restore that failed before RESUME_DEVICES_LATE: the checksum pass may still run */
	stop_verifier();
	gsp_driver_stop();
	/* sharing tasks put back while another of them never was: they cannot load alone */
	if (gsp.nshared && !gsp.shared_loading)
		kill_shared("a process that was not restored");
	wait_for_loads(ret);
	for (int i = 0; i < gsp.nimages; i++) {
		gs_image_close(gsp.images[i].img);
		free(gsp.images[i].pairs);
		free(gsp.images[i].path);
	}
	free(gsp.images);
	gsp.images = NULL;
	gsp.nimages = 0;
	gsp.nshared = gsp.nready = 0;
	gsp.shared_loading = false;
}
