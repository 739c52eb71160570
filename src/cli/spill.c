/*
 * spill.c - the storage tier's folders and records, and the sweep of what processes that are gone left (see spill.h).
 */
#include "cli/spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proc.h"
#include "common/settings.h"
#include "core/control_socket.h"
#include "image/image.h"
#include "image/image_fs.h" /* gs_fs_remove_tree, gs_fs_fsync_dir: never following a link */

#define FOLDER_PREFIX "gpusnap-"
#define RECORD_PREFIX "spill-"
#define IMAGE_NAME "image"

int cli_spill_check_dir(const char *dir, struct gs_err *err)
{
	struct stat st;
	if (!dir || !*dir)
		return gs_fail(err, GS_E_USAGE, "no spill directory given");
	if (stat(dir, &st))
		return gs_fail_errno(err, GS_E_USAGE, errno, "spill directory '%s'", dir);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_USAGE, "spill directory '%s' is not a directory", dir);
	/* the process's owner must not reach another's spill, nor swap a folder under gpusnap */
	if (st.st_uid != geteuid())
		return gs_fail(err, GS_E_PERMISSION, "spill directory '%s' belongs to uid %u, not to the user running "
			       "gpusnap (uid %u)", dir, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return gs_fail(err, GS_E_PERMISSION, "spill directory '%s' is writable by %s (mode %04o): it must be "
			       "this user's alone (chmod go-w)", dir, st.st_mode & S_IWOTH ? "others" : "its group",
			       (unsigned)(st.st_mode & 07777));
	if (access(dir, W_OK | X_OK))
		return gs_fail_errno(err, GS_E_PERMISSION, errno, "spill directory '%s' cannot be written", dir);
	return 0;
}

static int record_path(pid_t pid, char *buf, size_t n)
{
	char dir[512];
	if (gs_ctl_run_dir(dir, sizeof(dir), NULL))
		return -1;
	snprintf(buf, n, "%s/" RECORD_PREFIX "%d", dir, (int)pid);
	return 0;
}

/* spill-PID: the start time, the folder, the spill directory; written whole (rename) */
static int write_record(pid_t pid, unsigned long long start, const char *folder, const char *dir)
{
	char path[600], tmp[640];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%llu\n%s\n%s\n", start, folder, dir);
	if (fclose(f) || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* The record at path: false if unreadable or not of that form. */
static bool read_record(const char *path, unsigned long long *start, char *folder, size_t nf, char *dir, size_t nd)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return false;
	FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
	if (!f) {
		close(fd);
		return false;
	}
	char line[PATH_MAX + 2];
	bool ok = fgets(line, sizeof(line), f) && sscanf(line, "%llu", start) == 1;
	if (ok && (ok = fgets(line, sizeof(line), f) && line[0] == '/')) {
		line[strcspn(line, "\n")] = '\0';
		snprintf(folder, nf, "%s", line);
	}
	if (ok && (ok = fgets(line, sizeof(line), f) != NULL)) {
		line[strcspn(line, "\n")] = '\0';
		snprintf(dir, nd, "%s", line);
	}
	fclose(f);
	return ok;
}

/* Removes the folder at path (a spill folder: gpusnap-PID-START, a real directory) and all below it. */
static void remove_folder(const char *path)
{
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	if (!slash || strncmp(slash + 1, FOLDER_PREFIX, strlen(FOLDER_PREFIX)))
		return; /* not one of ours: a record of another form is never followed */
	*slash = '\0';
	int fd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	gs_fs_remove_tree(fd, slash + 1);
	close(fd);
}

static uid_t process_owner(pid_t pid)
{
	uid_t uid = (uid_t)-1;
	pid_t nspid;
	if (gs_proc_status_ids(pid, &uid, &nspid))
		return (uid_t)-1;
	return uid;
}

int cli_spill_begin(const char *dir, pid_t pid, struct cli_spill *sp, struct gs_err *err)
{
	memset(sp, 0, sizeof(*sp));
	sp->fd = -1;
	int rc = cli_spill_check_dir(dir, err);
	if (rc)
		return rc;
	unsigned long long start = gs_proc_start_time(pid);
	uid_t owner = process_owner(pid);
	if (!start || owner == (uid_t)-1)
		return gs_fail(err, GS_E_NO_PROCESS, "no such process: %d", (int)pid);
	char real[PATH_MAX];
	if (!realpath(dir, real))
		return gs_fail_errno(err, GS_E_USAGE, errno, "spill directory '%s'", dir);
	if ((size_t)snprintf(sp->folder, sizeof(sp->folder), "%s/" FOLDER_PREFIX "%d-%llu", real, (int)pid, start) >=
	    sizeof(sp->folder))
		return gs_fail(err, GS_E_USAGE, "spill directory '%s': its path is too long", dir);
	snprintf(sp->image, sizeof(sp->image), "%s/" IMAGE_NAME, sp->folder);
	/* a folder this process's earlier spill left (a killed gpusnap): the process is not suspended now, it goes */
	remove_folder(sp->folder);
	if (mkdir(sp->folder, 0700))
		return gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_PERMISSION, errno,
				     "cannot make a folder in spill directory '%s'", dir);
	sp->pid = pid;
	sp->active = true;
	char comm[64];
	gs_proc_comm(pid, comm, sizeof(comm));
	struct gs_image_tmp_opts to = { .source_pid = pid, .source_comm = comm };
	if ((rc = gs_image_tmp_create(sp->image, &to, &sp->tmp, err)))
		goto fail;
	/* the agent runs as the process's owner and writes as it: the temporary directory is that user's */
	const char *tmp = gs_image_tmp_path(sp->tmp);
	if (owner != geteuid() && lchown(tmp, owner, (gid_t)-1)) {
		rc = gs_fail_errno(err, GS_E_PERMISSION, errno, "cannot hand '%s' to uid %u", tmp, (unsigned)owner);
		goto fail;
	}
	if ((sp->fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot open '%s'", tmp);
		goto fail;
	}
	/* recorded before the agent writes: a gpusnap killed meanwhile leaves data the next resume finds */
	if (write_record(pid, start, sp->folder, real)) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot record the spill of process %d", (int)pid);
		goto fail;
	}
	return 0;
fail:
	cli_spill_end(sp, false, NULL);
	return rc;
}

int cli_spill_end(struct cli_spill *sp, bool spilled, struct gs_err *err)
{
	if (!sp->active)
		return 0;
	if (sp->fd >= 0)
		close(sp->fd);
	sp->fd = -1;
	sp->active = false;
	if (!spilled) {
		gs_image_tmp_discard(sp->tmp);
		sp->tmp = NULL;
		remove_folder(sp->folder);
		char path[600];
		if (record_path(sp->pid, path, sizeof(path)) == 0)
			unlink(path);
		return 0;
	}
	/*
	 * The agent sealed the image (its data files synced by its writer); it is
	 * put at its name with a rename. Not gs_image_publish: that reads the
	 * image back under the trust rules of a user's image directory, which
	 * refuse files of another user, and these are the process owner's by
	 * design, in a folder nobody else reaches.
	 */
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", gs_image_tmp_path(sp->tmp));
	gs_image_tmp_close(sp->tmp); /* its lock goes; the directory stays */
	sp->tmp = NULL;
	if (rename(tmp, sp->image)) /* the data stays in the temporary directory, which cli_spill_lookup finds too */
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot put the spilled image at '%s' (it stays at '%s')",
				     sp->image, tmp);
	int e = -gs_fs_fsync_dir(sp->folder);
	if (e > 0)
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot sync '%s'", sp->folder);
	return 0;
}

bool cli_spill_lookup(pid_t pid, char *image, size_t n, char *dir, size_t ndir)
{
	char path[600], folder[PATH_MAX], sdir[PATH_MAX];
	unsigned long long start;
	if (record_path(pid, path, sizeof(path)) || !read_record(path, &start, folder, sizeof(folder), sdir, sizeof(sdir)) ||
	    start != gs_proc_start_time(pid))
		return false;
	if (dir)
		snprintf(dir, ndir, "%s", sdir);
	if (!image)
		return true;
	/* the published image, else the temporary directory a publish that failed (or a killed gpusnap) left */
	snprintf(image, n, "%s/" IMAGE_NAME, folder);
	struct stat st;
	if (lstat(image, &st) == 0 && S_ISDIR(st.st_mode))
		return true;
	DIR *d = opendir(folder);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "." IMAGE_NAME ".tmp-", strlen(IMAGE_NAME) + 6)) {
			snprintf(image, n, "%s/%s", folder, de->d_name);
			break;
		}
	if (d)
		closedir(d);
	return true;
}

void cli_spill_forget(pid_t pid)
{
	char path[600], folder[PATH_MAX], dir[PATH_MAX];
	unsigned long long start;
	if (record_path(pid, path, sizeof(path)))
		return;
	if (read_record(path, &start, folder, sizeof(folder), dir, sizeof(dir)))
		remove_folder(folder);
	unlink(path);
}

int cli_spill_sweep(void)
{
	char run[512];
	if (gs_ctl_run_dir(run, sizeof(run), NULL))
		return 0;
	DIR *d = opendir(run);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid = 0, used = 0;
		if (sscanf(de->d_name, RECORD_PREFIX "%d%n", &pid, &used) != 1 || pid <= 0 || de->d_name[used] ||
		    de->d_name[strlen(RECORD_PREFIX)] < '1' || de->d_name[strlen(RECORD_PREFIX)] > '9')
			continue;
		char path[1024], folder[PATH_MAX], dir[PATH_MAX];
		unsigned long long start = 0;
		snprintf(path, sizeof(path), "%s/%s", run, de->d_name);
		if (!read_record(path, &start, folder, sizeof(folder), dir, sizeof(dir)))
			continue;
		unsigned long long now = gs_proc_start_time(pid);
		if (now && now == start)
			continue; /* it runs: its data is its own */
		remove_folder(folder);
		unlinkat(dirfd(d), de->d_name, 0);
		removed++;
	}
	closedir(d);
	return removed;
}

void cli_sweep_leftovers(void)
{
	cli_spill_sweep();
	gs_image_stage_sweep(gs_setting_str(GS_S_STAGE_DIR)); /* its default where unset or empty */
}
