/*
 * plugin_restore.c - `criu restore` through gpusnap_criu.so: the gpusnap
 * images in CRIU's image directory (gpusnap/<pid>/) put their processes back
 * on the GPU.
 *
 * Everything that can refuse the restore runs in init, the one restore-time
 * call whose failure CRIU acts on before any process exists (CRIU only logs
 * what RESUME_DEVICES_LATE returns): each image is opened (trust checks:
 * owner, mode, links), its chunks' checksums are checked (a bad chunk: no
 * process is ever created), its GPUs are planned on this machine
 * (GPUSNAP_PLUGIN_MAP, the semantics of `gpusnap restore --map`). Then, per
 * task, RESUME_DEVICES_LATE runs the driver's restore (with the map) on the
 * driver's restore thread, let run alone while CRIU holds all the app's
 * threads stopped, and unlocks it; should that fail the task is killed
 * before it ran. For agent images the agent then loads the GPU data from
 * the image once CRIU lets the process go.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/util.h"
#include "criu_plugin/criu_plugin_abi.h"
#include "criu_plugin/plugin.h"
#include "cuda/gpus.h"

/* GPUSNAP_PLUGIN_MAP "0=1,1=0" (commas or spaces): the image's GPU pairs for the driver. */
static int plan_gpus(struct gsp_image *im, struct gs_err *err)
{
	size_t n = gs_image_gpu_count(im->img);
	CUuuid used[64];
	bool here = true;
	for (size_t k = 0; k < n && k < 64; k++) {
		memcpy(used[k].bytes, gs_image_gpu_at(im->img, k)->uuid, 16);
		here &= gs_gpus_find_uuid(gsp.s.gpus, gsp.s.ngpus, used[k].bytes) >= 0;
	}
	const char *map = getenv("GPUSNAP_PLUGIN_MAP");
	if (!map || !*map) {
		for (size_t k = 0; k < n; k++) {
			const struct gs_image_gpu *g = gs_image_gpu_at(im->img, k);
			if (gs_gpus_find_uuid(gsp.s.gpus, gsp.s.ngpus, g->uuid) < 0)
				return gs_fail(err, GS_E_GPU_MAP, "image GPU %u (%s) of process %d is not on this machine; map it "
					       "with GPUSNAP_PLUGIN_MAP=%u=TO", g->index, g->name, (int)im->nspid, g->index);
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
	if (rc)
		return gs_err_wrap(err, "GPUSNAP_PLUGIN_MAP");
	/* on the machine it was dumped on the process also saw GPUs it held no memory on: the driver wants those too */
	return here ? gs_gpu_pairs_complete(&im->pairs, &im->npairs, gsp.s.gpus, gsp.s.ngpus, err) : 0;
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
		const char *nv = getenv("GPUSNAP_PLUGIN_NO_VERIFY");
		if (!rc && !(nv && *nv && strcmp(nv, "0"))) {
			double t = gs_now();
			if ((rc = gs_image_verify(im->img, 0, err)))
				gs_err_wrap(err, "the GPU image of process %d", pid);
			else
				gsp_info("process %d: checksums of its GPU image good (%.2f s)", pid, gs_now() - t);
		}
	}
	closedir(d);
	return rc;
}

/* Reads exactly n bytes from fd; false on end of file or error. */
static bool read_exact(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

static bool write_exact(int fd, const void *buf, size_t n)
{
	for (size_t put = 0; put < n;) {
		ssize_t w = write(fd, (const char *)buf + put, n - put);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		put += (size_t)w;
	}
	return true;
}

/*
 * The GPU plan of every image, made in a child process: planning needs the
 * driver initialised (the GPU list), and criu clones the tasks it restores
 * from its own process after this: the driver is loaded into criu only at
 * RESUME_DEVICES_LATE, once every task exists. The child sends, per image,
 * its result, its error and its pairs through a pipe.
 */
static int plan_in_child(struct gs_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot plan the GPUs: pipe");
	pid_t child = fork();
	if (child < 0) {
		close(p[0]);
		close(p[1]);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot plan the GPUs: fork");
	}
	if (child == 0) {
		close(p[0]);
		struct gs_err e = { 0 };
		int rc = gsp_session_open(&e);
		for (int i = 0; i < gsp.nimages; i++) {
			struct gsp_image *im = &gsp.images[i];
			int r = rc ? rc : plan_gpus(im, &e);
			unsigned n = r ? 0 : im->npairs;
			if (!write_exact(p[1], &r, sizeof(r)) || !write_exact(p[1], &e, sizeof(e)) ||
			    !write_exact(p[1], &n, sizeof(n)) || (n && !write_exact(p[1], im->pairs, n * sizeof(*im->pairs))))
				_exit(1);
			if (r)
				break;
		}
		_exit(0);
	}
	close(p[1]);
	int rc = 0;
	for (int i = 0; i < gsp.nimages && !rc; i++) {
		struct gsp_image *im = &gsp.images[i];
		int r;
		unsigned n;
		struct gs_err e;
		if (!read_exact(p[0], &r, sizeof(r)) || !read_exact(p[0], &e, sizeof(e)) || !read_exact(p[0], &n, sizeof(n))) {
			rc = gs_fail(err, GS_E_FAILURE, "cannot plan the GPUs: the planning process ended early");
			break;
		}
		e.msg[sizeof(e.msg) - 1] = '\0';
		if (r) {
			*err = e;
			rc = r;
			break;
		}
		if (n) {
			im->pairs = calloc(n, sizeof(*im->pairs));
			if (!im->pairs || !read_exact(p[0], im->pairs, n * sizeof(*im->pairs))) {
				rc = gs_fail(err, GS_E_FAILURE, "cannot plan the GPUs: short answer");
				break;
			}
			im->npairs = n;
		}
	}
	close(p[0]);
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
		;
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
	if (!rc && gsp.nimages)
		rc = plan_in_child(&err);
	if (rc) {
		gsp_err("refusing the restore: %s", err.msg);
		return -1;
	}
	gsp.active = true;
	return 0;
}

/*
 * Like the dump's helper: once CRIU let the process go, its agent loads the
 * GPU data from the image. The helper holds gsp.loads_wr and writes its
 * result there before it ends, so criu (the exit hook) returns only once
 * every load ended: "restored" means the GPU data is back.
 */
static void agent_load_later(pid_t pid, const char *image)
{
	int p[2];
	if (gsp.loads_wr < 0 && !pipe2(p, O_CLOEXEC)) {
		gsp.loads_rd = p[0];
		gsp.loads_wr = p[1];
	}
	pid_t child = fork();
	if (child < 0) {
		gsp_err("cannot start the helper that loads process %d's GPU data: %s; killed", (int)pid, strerror(errno));
		kill(pid, SIGKILL);
		return;
	}
	if (child > 0) {
		gsp.nloads++;
		waitpid(child, NULL, 0);
		return;
	}
	if (fork() != 0)
		_exit(0);
	if (gsp.loads_rd >= 0)
		close(gsp.loads_rd);
	struct cli_agent ag;
	struct gs_err e = { 0 };
	int rc = GS_E_AGENT;
	/* the agent answers once CRIU detached (up to 10 minutes: CRIU restores the whole tree first) */
	for (int i = 0; i < 60000 && rc; i++) {
		if (kill(pid, 0))
			_exit(0);
		rc = cli_agent_probe(pid, &ag, &e);
		if (!rc && !ag.present)
			rc = GS_E_AGENT;
		if (rc)
			usleep(10000);
	}
	if (!rc) {
		struct gs_err pe = { 0 };
		cli_agent_prepare(pid, &ag, &pe);
		rc = gsp_agent_resume(pid, &ag, image, &e);
	}
	if (rc) {
		gsp_err("process %d could not load its GPU data: %s; killed", (int)pid, e.msg[0] ? e.msg : "no agent");
		kill(pid, SIGKILL);
	}
	char result = rc ? 1 : 0;
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
	/* the driver is loaded into criu only now, every task cloned (plan_in_child) */
	if (!gsp.session)
		rc = gsp_session_open(&err);
	if (!rc && gs_fault(GS_FI_PLUGIN_RESTORE))
		rc = gs_fail(&err, GS_E_FAILURE, "failed at '%s' (injected)", gs_fault_name(GS_FI_PLUGIN_RESTORE));
	if (rc || gsp_traced_restore(pid, im->pairs, im->npairs, &err)) {
		/* CRIU only logs this hook's failure: the task, which never ran, goes */
		gsp_err("process %d could not be put back on the GPU: %s; killed before it ran", pid, err.msg);
		kill(pid, SIGKILL);
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
		agent_load_later(pid, path);
	}
	return 0;
}

void gsp_restore_fini(int ret)
{
	wait_for_loads(ret);
	for (int i = 0; i < gsp.nimages; i++) {
		gs_image_close(gsp.images[i].img);
		free(gsp.images[i].pairs);
	}
	free(gsp.images);
	gsp.images = NULL;
	gsp.nimages = 0;
}
