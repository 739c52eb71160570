/*
 * image_tmp.c - the temporary directory an image is written in, and its
 * publishing at DIR (see image.h): claiming DIR, the one-writer lock, dead
 * writers' leftovers, the CPU files' list, the rename into place. The data
 * and the manifest inside it are image_writer.c's.
 *
 * Crash safety: everything is written under <parent>/.<name>.tmp-<pid>-XXXXXX,
 * which holds no manifest until every payload is on disk, and which is never
 * at DIR's name until commit renames it there. The temporary directory is
 * flock()ed for the writer's life: that lock is DIR's one-writer lock (a
 * second writer finding it held refuses at once), and it tells a dead
 * writer's leftovers (lock free) from a live one's. Writers claim DIR (look
 * for a live writer, clean up, create their directory) under a short flock of
 * the parent directory, so two of them cannot both find the name free. A
 * leftover that holds a manifest may be the only copy of a process's state:
 * it is renamed to <name>.kept-<pid>-<time>, never deleted.
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/printable.h"
#include "common/util.h"
#include "image/cpu_list.h"
#include "image/crc32c.h"
#include "image/image_fs.h"
#include "image/image_tmp.h"
#include "image/manifest.h"

/* How long a publish waits for the readers of the image it replaces (a restore of many GiB included). */
#define READERS_WAIT_S 600.0
/* Read size while checksumming CRIU's files for cpu-files.img. */
#define LIST_READ (8ULL << 20)

/* How long a writer waits for another one to finish claiming a directory next to the same parent. */
#define CLAIM_WAIT_S 2.0

/* --------------------------------------------------- temporary directories */

/* ".<base>.tmp-" into buf: the prefix of every temporary directory of DIR. */
static void tmp_prefix(const char *base, char *buf, size_t n)
{
	snprintf(buf, n, ".%s.tmp-", base);
}

/* "<base>.kept-" into buf: the prefix of every kept image of DIR (keep_dir). */
static void kept_prefix(const char *base, char *buf, size_t n)
{
	snprintf(buf, n, "%s.kept-", base);
}

enum gs_image_leftover gs_image_leftover_of(const char *base, const char *name)
{
	char prefix[NAME_MAX + 16];
	tmp_prefix(base, prefix, sizeof(prefix));
	if (!strncmp(name, prefix, strlen(prefix)))
		return GS_LEFTOVER_TMP;
	kept_prefix(base, prefix, sizeof(prefix));
	return strncmp(name, prefix, strlen(prefix)) ? GS_LEFTOVER_NONE : GS_LEFTOVER_KEPT;
}

static bool pid_alive(long pid)
{
	return pid > 0 && pid <= 0x7fffffff && gs_proc_alive((pid_t)pid);
}

/* Deletes an image directory that is not at DIR: its manifest first, so a half-deleted one never looks valid. */
static int remove_image_dir(int parent_fd, const char *name)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		if (unlinkat(fd, GS_FMT_MANIFEST_NAME, 0) == 0)
			fsync(fd);
		close(fd);
	}
	return gs_fs_remove_tree(parent_fd, name);
}

/* The process an unpublished image is of, from its manifest; fallback where it says none or cannot be read. */
static int32_t image_source_pid(int dir_fd, const char *path, int32_t fallback)
{
	struct gs_manifest m;
	struct gs_err e = { 0 };
	if (gs_manifest_read_at(dir_fd, path, &m, &e))
		return fallback;
	int32_t pid = m.info.source_pid ? m.info.source_pid : fallback;
	gs_manifest_free(&m);
	return pid;
}

/*
 * Renames parent_fd/name, an image that will not be published, to
 * <base>.kept-<pid>-<UTC time>[-N] next to it: a name no cleanup touches and a
 * user can find. The new name goes to kept (n bytes). 0 or -errno.
 */
static int keep_dir(int parent_fd, const char *name, const char *base, int32_t pid, char *kept, size_t n)
{
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	if (!gmtime_r(&now, &tm) || !strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm))
		snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
	char prefix[NAME_MAX + 16];
	kept_prefix(base, prefix, sizeof(prefix));
	for (int i = 1; i < 1000; i++) {
		if (i == 1)
			snprintf(kept, n, "%s%d-%s", prefix, (int)pid, stamp);
		else
			snprintf(kept, n, "%s%d-%s-%d", prefix, (int)pid, stamp, i);
		int rc = renameat2(parent_fd, name, parent_fd, kept, RENAME_NOREPLACE);
		if (rc < 0 && (errno == EINVAL || errno == ENOSYS)) {
			/* no RENAME_NOREPLACE here: rename would replace an empty directory of that name, so look first */
			struct stat st;
			if (fstatat(parent_fd, kept, &st, AT_SYMLINK_NOFOLLOW) == 0)
				continue;
			rc = renameat(parent_fd, name, parent_fd, kept);
		}
		if (rc == 0) {
			fsync(parent_fd);
			return 0;
		}
		if (errno != EEXIST && errno != ENOTEMPTY)
			return -errno;
	}
	return -EEXIST;
}

/*
 * A listing of DIR's temporary directories (names starting with tmp_prefix)
 * in t's parent: list_tmp_dirs opens it at its start, next_tmp_dir steps
 * (NULL at the end), closedir(l.d) ends it.
 */
struct tmp_listing {
	DIR *d;
	char prefix[300];
	size_t plen;
};

static bool list_tmp_dirs(const struct gs_image_tmp *t, struct tmp_listing *l)
{
	tmp_prefix(t->base, l->prefix, sizeof(l->prefix));
	l->plen = strlen(l->prefix);
	int fd = dup(t->parent_fd);
	l->d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!l->d) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	rewinddir(l->d); /* the duplicate shares parent_fd's position */
	return true;
}

/* The next temporary directory's name (valid until the next call); *pid gets the PID in it. */
static const char *next_tmp_dir(struct tmp_listing *l, long *pid)
{
	struct dirent *de;
	while ((de = readdir(l->d)))
		if (!strncmp(de->d_name, l->prefix, l->plen)) {
			*pid = strtol(de->d_name + l->plen, NULL, 10);
			return de->d_name;
		}
	return NULL;
}

/*
 * A live writer of DIR: a temporary directory of DIR, owned by this user or
 * root (others' cannot be ours: in a shared directory anyone could make
 * one), whose flock is held (its writer runs, maybe in another PID namespace).
 * One that cannot be opened counts if the PID in its name runs. Our own
 * (t->tmp_name, once made) is skipped. *pid gets the PID in its name.
 */
static bool find_live_writer(struct gs_image_tmp *t, long *pid)
{
	struct tmp_listing l;
	if (!list_tmp_dirs(t, &l))
		return false;
	bool live = false;
	const char *name;
	long p;
	while (!live && (name = next_tmp_dir(&l, &p))) {
		if (t->tmp_name && !strcmp(name, t->tmp_name))
			continue;
		struct stat st;
		if (fstatat(t->parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
		    (st.st_uid != geteuid() && st.st_uid != 0))
			continue;
		int dfd = openat(t->parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0) {
			live = (errno == EACCES || errno == EPERM) && pid_alive(p);
		} else {
			live = flock(dfd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
			close(dfd);
		}
		if (live)
			*pid = p;
	}
	closedir(l.d);
	return live;
}

/*
 * Deals with temporary directories of DIR left by writers that died: ours
 * (same owner), whose PID in the name is gone and whose flock is free. One
 * without a manifest is an unfinished image: removed. One with a manifest is
 * complete, maybe the only copy of a process CRIU already took: renamed to a
 * kept name (keep_dir) and reported, never deleted.
 */
static void clean_up_dead_writers(struct gs_image_tmp *t)
{
	struct tmp_listing l;
	if (!list_tmp_dirs(t, &l))
		return;
	const char *name;
	long pid;
	while ((name = next_tmp_dir(&l, &pid))) {
		if (pid_alive(pid))
			continue;
		int dfd = openat(t->parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			continue;
		struct stat st;
		if (fstat(dfd, &st) == 0 && st.st_uid == geteuid() && flock(dfd, LOCK_EX | LOCK_NB) == 0) {
			if (faccessat(dfd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
				char path[900], kept[600];
				snprintf(path, sizeof(path), "%s/%s", t->parent, name);
				int32_t src = image_source_pid(dfd, path, (int32_t)pid);
				int e = keep_dir(t->parent_fd, name, t->base, src, kept, sizeof(kept));
				if (e)
					pr_warn("'%s' holds an image a dump did not publish; left there (cannot rename it: %s)", path,
						strerror(-e));
				else
					pr_warn("'%s' held an image a dump did not publish (of process %d; maybe its only copy): kept"
						" as '%s/%s'", path, (int)src, t->parent, kept);
			} else {
				pr_info("removing '%s/%s', left by a dump that did not finish", t->parent, name);
				int rc = remove_image_dir(t->parent_fd, name);
				if (rc)
					pr_warn("cannot remove '%s/%s': %s", t->parent, name, strerror(-rc));
			}
		}
		close(dfd);
	}
	closedir(l.d);
}

/* Refuses to replace an image of another process (source PID and command name differ) unless opts->replace. */
static int check_same_process(struct gs_image_tmp *t, int dir_fd, const struct gs_image_tmp_opts *o, struct gs_err *err)
{
	struct gs_manifest m;
	struct gs_err e = { 0 };
	if (gs_manifest_read_at(dir_fd, t->dir, &m, &e))
		return gs_fail(err, GS_E_USAGE, "cannot tell whose image '%s' is, so not replacing it (gpusnap dump "
			       "--replace does): %s", t->dir, e.msg);
	const char *comm = o->source_comm ? o->source_comm : "";
	int rc = 0;
	bool same_pid = m.info.source_pid == o->source_pid || (o->source_pid_own && m.info.source_pid == o->source_pid_own);
	if (m.info.source_pid && (!same_pid || strcmp(m.info.source_comm, comm))) {
		char a[64], b[64];
		rc = gs_fail(err, GS_E_USAGE, "'%s' holds the image of another process, %d (%s); not replacing it with one"
			     " of %d (%s) (gpusnap dump --replace does)", t->dir, (int)m.info.source_pid,
			     gs_printable(a, sizeof(a), m.info.source_comm), (int)o->source_pid,
			     gs_printable(b, sizeof(b), comm));
	}
	gs_manifest_free(&m);
	return rc;
}

/*
 * 0 if DIR may be replaced: absent, an empty directory, or a gpusnap image
 * (with o: of the same process, unless o->replace).
 */
static int check_replaceable(struct gs_image_tmp *t, const struct gs_image_tmp_opts *o, bool *exists,
			     struct gs_err *err)
{
	struct stat st;
	*exists = false;
	if (fstatat(t->parent_fd, t->base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return 0;
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot stat '%s'", t->dir);
	}
	*exists = true;
	if (S_ISLNK(st.st_mode))
		return gs_fail(err, GS_E_USAGE, "'%s' is a symbolic link; give the directory itself", t->dir);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_USAGE, "'%s' exists and is not a directory", t->dir);
	int fd = openat(t->parent_fd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot open '%s'", t->dir);
	bool image = faccessat(fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	bool empty = true;
	if (!image) {
		int dfd = dup(fd);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		struct dirent *de;
		if (!d) {
			empty = false; /* cannot tell: do not replace it */
			if (dfd >= 0)
				close(dfd);
		}
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				empty = false;
		if (d)
			closedir(d);
	}
	int rc = 0;
	if (!image && !empty)
		rc = gs_fail(err, GS_E_USAGE, "'%s' exists and is not a gpusnap image; refusing to replace it", t->dir);
	else if (image && o && o->source_pid && !o->replace)
		rc = check_same_process(t, fd, o, err);
	close(fd);
	return rc;
}

/*
 * DIR is not held by a reader (gs_image_open_held: a restore, an inspect
 * --verify) nor by a publish ending: a dump that would replace it refuses
 * at once, before it touches any process, rather than find it at publish.
 */
static int check_not_held(struct gs_image_tmp *t, struct gs_err *err)
{
	int fd = openat(t->parent_fd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0; /* gone meanwhile: nothing to replace */
	int rc = 0;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
	} else if (errno == EWOULDBLOCK) {
		char who[128];
		bool exclusive;
		gs_fs_flock_holder(fd, who, sizeof(who), &exclusive);
		rc = gs_fail(err, GS_E_STATE, "image '%s' is being %s by %s; not replacing it now: try again when it has "
			     "finished", t->dir, exclusive ? "published" : "read", who);
	}
	close(fd);
	return rc;
}

static int split_path(struct gs_image_tmp *t, const char *dir, struct gs_err *err)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	t->dir = strndup(dir, n);
	if (!t->dir)
		return gs_image_oom(err, "path");
	char *slash = strrchr(t->dir, '/');
	const char *base = slash ? slash + 1 : t->dir;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return gs_fail(err, GS_E_USAGE, "'%s' cannot be an image directory: name a directory to create or replace",
			       dir);
	t->base = strdup(base);
	if (!slash)
		t->parent = strdup(".");
	else if (slash == t->dir)
		t->parent = strdup("/");
	else
		t->parent = strndup(t->dir, (size_t)(slash - t->dir));
	if (!t->base || !t->parent)
		return gs_image_oom(err, "path");
	return 0;
}

void gs_image_tmp_free(struct gs_image_tmp *t)
{
	if (t->cpu_fd >= 0)
		close(t->cpu_fd);
	if (t->fd >= 0)
		close(t->fd);
	if (t->parent_fd >= 0)
		close(t->parent_fd);
	free(t->dir);
	free(t->parent);
	free(t->base);
	free(t->tmp_path);
	free(t->tmp_name);
	free(t);
}

/* Opens DIR's parent through checked directories (image_fs.h); it must be safe itself, as one above an image. */
static int open_parent(struct gs_image_tmp *t, struct gs_err *err)
{
	struct stat st;
	int rc = gs_fs_open_dir_checked(t->parent, t->dir, &t->parent_fd, &st, err);
	if (rc < 0) {
		int e = -rc;
		return gs_fail_errno(err, e == ENOENT || e == ENOTDIR ? GS_E_USAGE : gs_image_errno_code(e), e,
				     "cannot open '%s', the parent of the image directory", t->parent);
	}
	return rc ? rc : gs_fs_check_ancestor(&st, t->parent, t->dir, err);
}

/*
 * Takes the parent's flock for the claim (look, clean up, create), which
 * other writers hold only a moment. False where it cannot be had (a file
 * system without flock, or someone else holding it: in a shared directory
 * anyone can): the claim then checks again after making its directory.
 */
static bool lock_parent(struct gs_image_tmp *t)
{
	double t0 = gs_now();
	while (flock(t->parent_fd, LOCK_EX | LOCK_NB) < 0) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || gs_now() - t0 > CLAIM_WAIT_S) {
			pr_debug("'%s': claiming '%s' without the parent's lock (%s)", t->parent, t->base, strerror(errno));
			return false;
		}
		usleep(10000);
	}
	return true;
}

static int busy(struct gs_image_tmp *t, long holder, struct gs_err *err)
{
	char comm[64] = "";
	if (pid_alive(holder))
		gs_proc_comm((pid_t)holder, comm, sizeof(comm));
	return gs_fail(err, GS_E_STATE, "another gpusnap (pid %ld%s%s) is writing an image to '%s' right now; wait for it,"
		       " or dump to another directory", holder, *comm ? ", " : "", comm, t->dir);
}

/* Creates .<base>.tmp-<pid>-XXXXXX (0700) in the parent and takes its flock. */
static int make_tmp_dir(struct gs_image_tmp *t, struct gs_err *err)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	char prefix[300];
	tmp_prefix(t->base, prefix, sizeof(prefix));
	for (int attempt = 0;; attempt++) {
		uint8_t id[16];
		gs_image_random_id(id);
		char sfx[7];
		for (int i = 0; i < 6; i++)
			sfx[i] = chars[id[i] % (sizeof(chars) - 1)];
		sfx[6] = '\0';
		free(t->tmp_name);
		if (asprintf(&t->tmp_name, "%s%ld-%s", prefix, (long)getpid(), sfx) < 0) {
			t->tmp_name = NULL;
			return gs_image_oom(err, "path");
		}
		if (mkdirat(t->parent_fd, t->tmp_name, 0700) == 0)
			break;
		int e = errno;
		if (e == EEXIST && attempt < 100)
			continue;
		free(t->tmp_name);
		t->tmp_name = NULL;
		return e == ENOSPC || e == EDQUOT
			       ? gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s'", t->dir)
			       : gs_fail_errno(err, gs_image_errno_code(e), e, "cannot create a temporary directory next to '%s'", t->dir);
	}
	if (asprintf(&t->tmp_path, "%s/%s", t->parent, t->tmp_name) < 0) {
		t->tmp_path = NULL;
		return gs_image_oom(err, "path");
	}
	t->fd = openat(t->parent_fd, t->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t->fd < 0 || flock(t->fd, LOCK_EX | LOCK_NB) < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot open and lock '%s'", t->tmp_path);
	return 0;
}

int gs_image_tmp_create(const char *dir, const struct gs_image_tmp_opts *opts, struct gs_image_tmp **out,
			struct gs_err *err)
{
	*out = NULL;
	if (!dir || !*dir)
		return gs_fail(err, GS_E_USAGE, "no image directory given");
	struct gs_image_tmp *t = calloc(1, sizeof(*t));
	if (!t)
		return gs_image_oom(err, "image directory");
	t->parent_fd = t->fd = t->cpu_fd = -1;
	t->source_pid = opts ? opts->source_pid : 0;
	int rc = split_path(t, dir, err);
	if (rc || (rc = open_parent(t, err)))
		goto fail;
	bool locked = lock_parent(t);
	long holder;
	bool exists;
	if (find_live_writer(t, &holder)) {
		rc = busy(t, holder, err);
	} else if (!(rc = check_replaceable(t, opts, &exists, err)) && !(exists && (rc = check_not_held(t, err)))) {
		clean_up_dead_writers(t);
		rc = make_tmp_dir(t, err);
		/*
		 * whose it is, as this process sees it (a container's agent records
		 * its own PID in the manifest): what gc reads should the image stay
		 * behind (store.c); gone with the publish
		 */
		int oe = !rc && opts && opts->source_pid_own ? gs_fs_owner_write(t->fd, opts->source_pid) : 0;
		if (oe)
			rc = gs_fail_errno(err, gs_image_errno_code(-oe), -oe, "cannot write into '%s'", t->tmp_path);
		/* without the parent's lock another writer may have claimed DIR meanwhile: then both give way */
		if (!rc && !locked && find_live_writer(t, &holder))
			rc = busy(t, holder, err);
	}
	if (locked)
		flock(t->parent_fd, LOCK_UN); /* the claim is made (or refused): DIR's lock is the temporary directory's */
	if (rc)
		goto fail;
	*out = t;
	return 0;
fail:
	if (t->tmp_name && t->parent_fd >= 0)
		gs_fs_remove_tree(t->parent_fd, t->tmp_name);
	gs_image_tmp_free(t);
	return rc;
}

const char *gs_image_tmp_path(const struct gs_image_tmp *t)
{
	return t->tmp_path;
}

const char *gs_image_tmp_target(const struct gs_image_tmp *t)
{
	return t->dir;
}

int gs_image_tmp_cpu_dir(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err)
{
	if (mkdirat(t->fd, GS_FMT_CPU_DIR_NAME, 0700) < 0 && errno != EEXIST)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot create '%s/%s'", t->tmp_path,
				     GS_FMT_CPU_DIR_NAME);
	if (t->cpu_fd < 0) {
		t->cpu_fd = openat(t->fd, GS_FMT_CPU_DIR_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (t->cpu_fd < 0)
			return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot open '%s/%s'", t->tmp_path,
					     GS_FMT_CPU_DIR_NAME);
	}
	if ((size_t)snprintf(path, n, "%s/%s", t->tmp_path, GS_FMT_CPU_DIR_NAME) >= n)
		return gs_fail(err, GS_E_FAILURE, "path of '%s/%s' does not fit in %zu bytes", t->tmp_path,
			       GS_FMT_CPU_DIR_NAME, n);
	return 0;
}

int gs_image_tmp_cpu_fd_path(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err)
{
	char real[4200];
	int rc = gs_image_tmp_cpu_dir(t, real, sizeof(real), err);
	if (rc)
		return rc;
	if ((size_t)snprintf(path, n, "/proc/%d/fd/%d", (int)getpid(), t->cpu_fd) >= n)
		return gs_fail(err, GS_E_FAILURE, "no room for the path of '%s'", real);
	return 0;
}

int gs_image_tmp_keep(struct gs_image_tmp *t, char *path, size_t n, struct gs_err *err)
{
	int32_t pid = image_source_pid(t->fd, t->tmp_path, t->source_pid ? t->source_pid : (int32_t)getpid());
	char kept[600];
	int e = keep_dir(t->parent_fd, t->tmp_name, t->base, pid, kept, sizeof(kept));
	int rc = 0;
	if (e) {
		snprintf(path, n, "%s", t->tmp_path);
		rc = gs_fail_errno(err, gs_image_errno_code(-e), -e, "cannot give '%s' a name of its own (it stays there; the next "
				   "dump to '%s' renames it)", t->tmp_path, t->dir);
	} else {
		snprintf(path, n, "%s/%s", t->parent, kept);
	}
	gs_image_tmp_free(t);
	return rc;
}

void gs_image_tmp_discard(struct gs_image_tmp *t)
{
	if (!t)
		return;
	int e = remove_image_dir(t->parent_fd, t->tmp_name);
	if (e)
		pr_warn("cannot remove '%s': %s", t->tmp_path, strerror(-e));
	gs_image_tmp_free(t);
}


/*
 * Puts the sealed temporary directory at DIR. With an old image there,
 * RENAME_EXCHANGE swaps the two in one step (DIR is never missing) and the
 * old one, now under the temporary name, is deleted afterwards. *old_fd keeps
 * the old directory flock()ed so no other writer takes it for stale meanwhile.
 */
/*
 * Takes the old image's lock exclusively before it is replaced: a reader
 * that began after the claim (a restore, an inspect --verify) is waited for,
 * said once on stderr, up to READERS_WAIT_S; its files are removed only once
 * no one reads them.
 */
static int wait_readers(struct gs_image_tmp *t, int old_fd, struct gs_err *err)
{
	double t0 = gs_now();
	bool said = false;
	char who[128] = "";
	while (flock(old_fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot lock '%s'", t->dir);
		if (!said) {
			gs_fs_flock_holder(old_fd, who, sizeof(who), NULL);
			pr_warn("'%s' is being read by %s: replacing it once that has finished", t->dir, who);
			said = true;
		}
		if (gs_now() - t0 > READERS_WAIT_S)
			return gs_fail(err, GS_E_STATE, "'%s' was still being read by %s after %.0f s; not replacing it",
				       t->dir, who, READERS_WAIT_S);
		usleep(50000);
	}
	return 0;
}

static int put_in_place(struct gs_image_tmp *t, bool *exchanged, int *old_fd, struct gs_err *err)
{
	bool exists;
	int rc = check_replaceable(t, NULL, &exists, err); /* whose image it is was checked when DIR was claimed */
	if (rc)
		return rc;
	*exchanged = false;
	if (gs_fault(GS_FI_IMAGE_PUBLISH)) {
		int e = gs_fault_errno(GS_FI_IMAGE_PUBLISH, EIO);
		return gs_fail_errno(err, gs_image_errno_code(e), e, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
	}
	if (!exists) {
		if (renameat2(t->parent_fd, t->tmp_name, t->parent_fd, t->base, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EINVAL && errno != ENOSYS)
			return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
		/* No RENAME_NOREPLACE here (some network file systems): rename never replaces a non-empty directory. */
		if (renameat(t->parent_fd, t->tmp_name, t->parent_fd, t->base) < 0)
			return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
		return 0;
	}
	*old_fd = openat(t->parent_fd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*old_fd < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot open '%s'", t->dir);
	if ((rc = wait_readers(t, *old_fd, err)))
		return rc;
	if (renameat2(t->parent_fd, t->tmp_name, t->parent_fd, t->base, RENAME_EXCHANGE) == 0) {
		*exchanged = true;
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot exchange '%s' with '%s'", t->tmp_path, t->dir);
	/*
	 * No atomic exchange on this file system: move the old image aside under a
	 * temporary name (so it is cleaned up as stale if we die), then rename.
	 * DIR is missing for a moment; the old image exists throughout.
	 */
	pr_warn("'%s': the file system cannot exchange directories atomically; replacing in two renames", t->parent);
	char aside[600];
	snprintf(aside, sizeof(aside), "%s-old", t->tmp_name);
	if (renameat(t->parent_fd, t->base, t->parent_fd, aside) < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot move '%s' aside", t->dir);
	if (renameat(t->parent_fd, t->tmp_name, t->parent_fd, t->base) < 0) {
		int e = errno;
		renameat(t->parent_fd, aside, t->parent_fd, t->base); /* put the old one back */
		return gs_fail_errno(err, gs_image_errno_code(e), e, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
	}
	/* Delete the old image from its aside name, as after an exchange. */
	if (renameat(t->parent_fd, aside, t->parent_fd, t->tmp_name) < 0)
		pr_warn("old image left at '%s/%s': %s", t->parent, aside, strerror(errno));
	*exchanged = true;
	return 0;
}

struct cpu_list_job {
	struct gs_cpu_list *list;
	int cpu_fd;
	const char *image;
};

/* Checksums one piece of a CPU file while the list is built. */
static int list_piece(void *ctx, size_t i, void *buf, struct gs_err *err)
{
	struct cpu_list_job *job = ctx;
	struct gs_cpu_piece *p = &job->list->pieces[i];
	return gs_cpu_piece_crc(job->cpu_fd, job->image, p, buf, LIST_READ, &p->crc32c, err);
}

/*
 * Writes cpu-files.img into the temporary directory: every file CRIU left in
 * cpu/ (checked as a reader will check it), cut into pieces, each with its
 * CRC-32C (read back on all CPUs), tied to manifest m. fsync'ed.
 */
static int write_cpu_list(struct gs_image_tmp *t, const struct gs_manifest *m, struct gs_err *err)
{
	char cpu_path[4200];
	int rc = gs_image_tmp_cpu_dir(t, cpu_path, sizeof(cpu_path), err);
	if (rc)
		return rc;
	struct gs_cpu_scan scan;
	struct gs_cpu_list list = { 0 };
	void *buf = NULL;
	size_t len = 0;
	rc = gs_cpu_scan(t->cpu_fd, cpu_path, &scan, err);
	if (!rc)
		rc = gs_cpu_list_from_scan(&scan, m->info.image_id, gs_manifest_crc32c(m), GS_FMT_CPU_PIECE, &list, err);
	gs_cpu_scan_free(&scan);
	if (!rc) {
		struct cpu_list_job job = { .list = &list, .cpu_fd = t->cpu_fd, .image = t->tmp_path };
		rc = gs_fs_parallel(list.npieces, 0, LIST_READ, list_piece, &job, err);
	}
	if (!rc)
		rc = gs_cpu_list_encode(&list, &buf, &len, err);
	gs_cpu_list_free(&list);
	if (rc)
		return gs_err_wrap(err, "listing the CPU files of '%s'", t->tmp_path);
	unlinkat(t->fd, GS_FMT_CPU_LIST_NAME, 0); /* from an earlier try to publish */
	int fd = openat(t->fd, GS_FMT_CPU_LIST_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = fd < 0 ? -errno : gs_image_write_all(fd, buf, len, 0);
	if (!e && fsync(fd) < 0)
		e = -errno;
	if (fd >= 0 && close(fd) < 0 && !e)
		e = -errno;
	free(buf);
	if (!e)
		return 0;
	unlinkat(t->fd, GS_FMT_CPU_LIST_NAME, 0);
	if (e == -ENOSPC || e == -EDQUOT)
		return gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s' (writing '%s')", t->dir,
			       GS_FMT_CPU_LIST_NAME);
	return gs_fail_errno(err, gs_image_errno_code(-e), -e, "writing '%s/%s' failed", t->tmp_path, GS_FMT_CPU_LIST_NAME);
}

/* A failed fsync of the image's files, by its cause. */
static int sync_failed(int synced, const char *dir, const char *path, struct gs_err *err)
{
	return synced == -ENOSPC || synced == -EDQUOT
		       ? gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s' (syncing the image)",
				 dir)
		       : gs_fail_errno(err, gs_image_errno_code(-synced), -synced, "syncing '%s' failed", path);
}

/* The sealed manifest's cpu-files.img, unless written already (gs_image_tmp_list_cpu). */
static int list_cpu(struct gs_image_tmp *t, const char *what, struct gs_err *err)
{
	if (t->cpu_listed)
		return 0;
	struct gs_manifest m;
	struct gs_err e = { 0 };
	if (gs_manifest_read_at(t->fd, t->tmp_path, &m, &e))
		return gs_fail(err, GS_E_FAILURE, "'%s' holds no sealed image; not %s it (%s)", t->tmp_path, what, e.msg);
	/* CRIU wrote cpu/ after the manifest was sealed: list and checksum its files for the readers */
	int rc = m.info.cpu_state ? write_cpu_list(t, &m, err) : 0;
	t->cpu_listed = rc == 0 && m.info.cpu_state;
	gs_manifest_free(&m);
	return rc;
}

int gs_image_tmp_list_cpu(struct gs_image_tmp *t, struct gs_err *err)
{
	return list_cpu(t, "listing", err);
}

bool gs_image_tmp_cpu_listed(const struct gs_image_tmp *t)
{
	return t && t->fd >= 0 && faccessat(t->fd, GS_FMT_CPU_LIST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static int publish(struct gs_image_tmp *t, bool sync_first, bool *published, struct gs_err *err)
{
	*published = false;
	int rc = list_cpu(t, "publishing", err);
	if (rc)
		return rc;
	/*
	 * and make everything durable before the image gets its name: CRIU's
	 * files, and data that a writer sealed with no_data_sync left (dump
	 * --leave-running, whose process runs meanwhile; a tree's images of its
	 * processes too). Files synced already cost a call each.
	 */
	int synced = sync_first ? gs_fs_fsync_tree(t->fd, ".") : 0;
	if (synced)
		return sync_failed(synced, t->dir, t->tmp_path, err);

	bool exchanged = false;
	int old_fd = -1;
	rc = put_in_place(t, &exchanged, &old_fd, err);
	if (rc) {
		if (old_fd >= 0)
			close(old_fd);
		return rc;
	}
	*published = true;
	/* the owner record is for what is left behind (to the last moment): the published image has none */
	if (unlinkat(t->fd, GS_FS_OWNER_NAME, 0) < 0 && errno != ENOENT)
		pr_warn("cannot remove '%s/%s': %s", t->dir, GS_FS_OWNER_NAME, strerror(errno));
	/* the second hit of the fault point: as if the parent's fsync failed (kill: a crash right after the rename) */
	int se = gs_fault(GS_FI_IMAGE_PUBLISH) ? gs_fault_errno(GS_FI_IMAGE_PUBLISH, EIO)
					       : fsync(t->parent_fd) < 0 ? errno : 0;
	if (se)
		rc = gs_fail_errno(err, gs_image_errno_code(se), se, "the image is at '%s' but syncing '%s' failed", t->dir,
				   t->parent);
	if (exchanged) {
		int e = remove_image_dir(t->parent_fd, t->tmp_name);
		if (e)
			pr_warn("cannot remove the replaced image at '%s': %s", t->tmp_path, strerror(-e));
	}
	if (old_fd >= 0)
		close(old_fd);
	pr_debug("published image '%s'", t->dir);
	return rc;
}

int gs_image_publish(struct gs_image_tmp *t, bool *published, struct gs_err *err)
{
	return publish(t, true, published, err);
}

int gs_image_publish_unsynced(struct gs_image_tmp *t, bool *published, struct gs_err *err)
{
	return publish(t, false, published, err);
}

int gs_image_sync(const char *dir, struct gs_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, errno == ENOENT ? GS_E_USAGE : gs_image_errno_code(errno), errno, "cannot open '%s'", dir);
	int synced = gs_fault(GS_FI_IMAGE_SYNC) ? -gs_fault_errno(GS_FI_IMAGE_SYNC, EIO) : gs_fs_fsync_tree(fd, ".");
	close(fd);
	return synced ? sync_failed(synced, dir, dir, err) : 0;
}

void gs_image_tmp_close(struct gs_image_tmp *t)
{
	if (t)
		gs_image_tmp_free(t);
}
