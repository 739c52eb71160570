/*
 * spill.c - the storage tier's folders and records, and the sweep of what processes that are gone left (see spill.h).
 */
#include "cli/spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/proc.h"
#include "common/settings.h"
#include "core/control_socket.h"
#include "image/image.h"
#include "image/image_fs.h" /* gs_fs_remove_tree, gs_fs_fsync_dir: never following a link */

#define FOLDER_PREFIX "gpusnap-"
#define RECORD_PREFIX "spill-"
#define IMAGE_NAME "image"
/* a folder no process needs any more, renamed for its removal in the background, and its record */
#define TRASH_PREFIX FOLDER_PREFIX "trash-"
#define TRASH_RECORD_PREFIX "spilltrash-"

extern char **environ;

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

/* A record at path, written whole: into path.tmp, then renamed (a reader never sees part of one). -1 on failure. */
static int write_whole(const char *path, const char *text)
{
	char tmp[PATH_MAX + 8];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -1;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	bool ok = fputs(text, f) >= 0;
	if (fclose(f) || !ok || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* spill-PID: the start time, the folder, the spill directory */
static int write_record(pid_t pid, unsigned long long start, const char *folder, const char *dir)
{
	char path[600], text[2 * PATH_MAX + 32];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	snprintf(text, sizeof(text), "%llu\n%s\n%s\n", start, folder, dir);
	return write_whole(path, text);
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

/*
 * Spill folders that are no longer needed go in the background: on a file
 * system mounted with discard (the lent machines' ext4), unlinking a large
 * spill takes seconds (docs/benchmarks.md), which a resume would otherwise
 * add after the process already runs. The folder is renamed at once (its name is free for
 * the process's next spill), a record spilltrash-ID in the runtime directory
 * names the renamed folder, and a detached `gpusnap _remove-spill RECORD`
 * removes it, holding the record's flock while it works. A remover that was
 * killed leaves its record: the next sweep starts another. A spill into a
 * directory first waits for the removals there (wait_trash_in), so the space
 * they free counts.
 */
static int trash_record_path(const char *id, char *buf, size_t n)
{
	char dir[512];
	if (gs_ctl_run_dir(dir, sizeof(dir), NULL))
		return -1;
	snprintf(buf, n, "%s/" TRASH_RECORD_PREFIX "%s", dir, id);
	return 0;
}

/* Starts the detached remover of the record at path: its own session, no descriptor of ours. */
static int spawn_remover(const char *record)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	if (posix_spawn_file_actions_init(&fa))
		return -1;
	if (posix_spawnattr_init(&at)) {
		posix_spawn_file_actions_destroy(&fa);
		return -1;
	}
	int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) ||
		 posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) ||
		 posix_spawn_file_actions_adddup2(&fa, 1, 2) || posix_spawn_file_actions_addclosefrom_np(&fa, 3) ||
		 posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) ||
		 posix_spawnattr_setsigmask(&at, &none) || posix_spawnattr_setsigdefault(&at, &all);
	pid_t child;
	char *argv[] = { "gpusnap", "_remove-spill", (char *)record, NULL };
	if (!rc)
		rc = posix_spawn(&child, "/proc/self/exe", &fa, &at, argv, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	return rc ? -1 : 0;
}

/*
 * The folder at path (a spill folder) out of the way now and removed in the
 * background; removed here when that cannot be arranged.
 */
static void trash_folder(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash || strncmp(slash + 1, FOLDER_PREFIX, strlen(FOLDER_PREFIX)))
		return; /* not one of ours */
	static unsigned serial;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char id[96], trash[PATH_MAX + 96], record[640], line[PATH_MAX + 98];
	snprintf(id, sizeof(id), "%d-%u-%lld%09ld", (int)getpid(), serial++, (long long)ts.tv_sec, ts.tv_nsec);
	snprintf(trash, sizeof(trash), "%.*s/" TRASH_PREFIX "%s", (int)(slash - path), path, id);
	snprintf(line, sizeof(line), "%s\n", trash);
	if (strlen(trash) >= PATH_MAX || trash_record_path(id, record, sizeof(record)) || write_whole(record, line)) {
		remove_folder(path);
		return;
	}
	if (rename(path, trash)) { /* gone already, or not renamable: removed in place */
		unlink(record);
		if (errno != ENOENT)
			remove_folder(path);
		return;
	}
	if (spawn_remover(record)) {
		remove_folder(trash);
		unlink(record);
	}
}

/* A trash record's name in the runtime directory (not its .tmp while it is written). */
static bool is_trash_record(const char *name)
{
	return !strncmp(name, TRASH_RECORD_PREFIX, strlen(TRASH_RECORD_PREFIX)) && !strstr(name, ".tmp");
}

/* The folder a trash record at fd names, checked to be a trash folder; false if not of that form. */
static bool read_trash_record(int fd, char *folder, size_t n)
{
	char buf[PATH_MAX + 2];
	ssize_t got = pread(fd, buf, sizeof(buf) - 1, 0);
	if (got <= 1 || buf[0] != '/')
		return false;
	buf[got] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	const char *slash = strrchr(buf, '/');
	if (!slash || strncmp(slash + 1, TRASH_PREFIX, strlen(TRASH_PREFIX)) || strstr(buf, "/../"))
		return false;
	snprintf(folder, n, "%s", buf);
	return true;
}

/*
 * A trash record's folder removed and the record with it, if no remover
 * holds it (wait: until it is done). A record not of that form names nothing
 * to remove: it goes alone, so that no sweep takes it up again.
 */
static void finish_trash(int dir_fd, const char *name, bool wait)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	char folder[PATH_MAX];
	if (flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) == 0) {
		if (read_trash_record(fd, folder, sizeof(folder)))
			remove_folder(folder);
		unlinkat(dir_fd, name, 0);
	}
	close(fd);
}

int cli_spill_remove_trash(const char *record)
{
	char run[512], real[PATH_MAX], in[PATH_MAX], at[PATH_MAX];
	const char *base = strrchr(record, '/');
	if (base)
		snprintf(in, sizeof(in), "%.*s", (int)(base - record), record);
	/* only a trash record of this user's runtime directory */
	if (!base || strncmp(base + 1, TRASH_RECORD_PREFIX, strlen(TRASH_RECORD_PREFIX)) ||
	    gs_ctl_run_dir(run, sizeof(run), NULL) || !realpath(run, real) || !realpath(in[0] ? in : "/", at) ||
	    strcmp(real, at)) {
		fprintf(stderr, "gpusnap: '%s' is not a spill removal record\n", record);
		return GS_E_USAGE;
	}
	int dir_fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd < 0)
		return 0;
	finish_trash(dir_fd, base + 1, true);
	close(dir_fd);
	return 0;
}

/*
 * Before a spill into dir: the removals of earlier spills there finish first,
 * so that the space they free is free (a switch's IN, read back from its
 * spill, may be followed at once by OUT's spill into the same directory).
 */
static void wait_trash_in(const char *dir)
{
	char run[512];
	if (gs_ctl_run_dir(run, sizeof(run), NULL))
		return;
	DIR *d = opendir(run);
	if (!d)
		return;
	size_t len = strlen(dir);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!is_trash_record(de->d_name))
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		char folder[PATH_MAX];
		bool here = fd >= 0 && read_trash_record(fd, folder, sizeof(folder)) && !strncmp(folder, dir, len) &&
			    folder[len] == '/' && !strchr(folder + len + 1, '/');
		if (fd >= 0)
			close(fd);
		if (here)
			finish_trash(dirfd(d), de->d_name, true);
	}
	closedir(d);
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
	wait_trash_in(real);
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
		trash_folder(folder);
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
		if (is_trash_record(de->d_name)) {
			/* a removal whose remover is gone (killed): another one takes it */
			int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			bool orphan = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
			if (fd >= 0)
				close(fd);
			char path[1024];
			snprintf(path, sizeof(path), "%s/%s", run, de->d_name);
			if (orphan && spawn_remover(path))
				finish_trash(dirfd(d), de->d_name, false);
			continue;
		}
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
		trash_folder(folder);
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
