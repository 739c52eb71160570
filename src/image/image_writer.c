/*
 * image_writer.c - writing an image: chunks from several threads into data
 * files, then the manifest, then the atomic commit (see image.h).
 *
 * Concurrency: one mutex guards the writer's tables and the offset
 * reservation in data files; checksums, zero detection and the payload
 * pwrite happen outside it, so writer threads only meet for a few
 * instructions per chunk. Data files live behind stable pointers so a thread
 * keeps using its file while another one appends the next.
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
#include "image/manifest.h"

#ifndef GPUSNAP_VERSION
#define GPUSNAP_VERSION "unknown"
#endif

/* Largest single pwrite (Linux caps one call at 2 GiB - 4 KiB anyway). */
#define MAX_IO (1ULL << 30)
/* How long a publish waits for the readers of the image it replaces (a restore of many GiB included). */
#define READERS_WAIT_S 600.0
/* Read size while checksumming CRIU's files for cpu-files.img. */
#define LIST_READ (8ULL << 20)

/* How long a writer waits for another one to finish claiming a directory next to the same parent. */
#define CLAIM_WAIT_S 2.0

struct data_file {
	int fd;           /* buffered writes, fsync */
	int direct_fd;    /* O_DIRECT writes, or -1 where the file system refuses them */
	atomic_bool direct_ok;
	uint64_t next;    /* first free aligned offset; reserved under the writer's lock */
	char name[GS_FMT_DATA_NAME_MAX];
};

/* A temporary image directory next to DIR, flock()ed for its owner's life (see image.h). */
struct gs_image_tmp {
	char *dir;      /* DIR as given, without trailing slashes */
	char *parent;   /* its parent directory */
	char *base;     /* its last component */
	char *tmp_path; /* parent/tmp_name */
	char *tmp_name; /* .base.tmp-PID-XXXXXX */
	int parent_fd;
	int fd;         /* holds the flock that marks the owner alive: DIR's writer lock */
	int cpu_fd;     /* cpu/ once gs_image_tmp_cpu_dir made it, else -1 */
	int32_t source_pid; /* the process the image is of (0: unknown), for the kept name */
	bool cpu_listed;    /* cpu-files.img was written for CRIU's files as they are now (gs_image_tmp_list_cpu) */
};

struct gs_image_writer {
	pthread_mutex_t lock;
	struct gs_image_tmp *own; /* the temporary directory this writer created (gs_image_writer_open), or NULL */
	char *dir;      /* for messages: DIR, or the directory given to gs_image_writer_open_in */
	char *tmp_path; /* where the files are written */
	int tmp_fd;

	struct gs_image_info info; /* strings owned */
	uint64_t max_file_size;
	bool no_direct_io, no_data_sync, store_zero_chunks;
	bool memory_fs; /* the image's file system keeps files in memory (tmpfs): O_DIRECT, if taken, is buffered there */

	struct data_file **files;
	size_t nfiles, cap_files;
	/* The files taking payloads now (indices into files): several where writes are buffered (parallel_data_files). */
	size_t *open_files;
	unsigned nopen, max_open, next_open;
	struct gs_image_gpu *gpus; /* names owned */
	size_t ngpus, cap_gpus;
	struct gs_image_allocation *allocs; /* blobs owned */
	size_t nallocs, cap_allocs;
	uint32_t *alloc_slots; /* open-addressing id -> index + 1; 0 is empty */
	size_t slot_mask;
	struct gs_image_chunk *chunks;
	size_t nchunks, cap_chunks;
	struct gs_image_kv *meta; /* strings owned */
	size_t nmeta, cap_meta;

	int failed; /* sticky: a write failed, the image can only be aborted */
	struct gs_err failure;

	atomic_uint_fast64_t payload_bytes, direct_bytes;
	uint64_t zero_chunks, zero_bytes;
};

/* -------------------------------------------------------------- helpers */

static int errno_code(int e)
{
	switch (e) {
	case ENOSPC:
	case EDQUOT:
	case ENOMEM: return GS_E_NO_SPACE;
	case EACCES:
	case EPERM:
	case EROFS: return GS_E_PERMISSION;
	default: return GS_E_FAILURE;
	}
}

/* An I/O error on file `name` of the image; ENOSPC names the file system by the image's path. */
static int io_fail(struct gs_image_writer *w, const char *what, const char *name, int e, struct gs_err *err)
{
	if (e == ENOSPC || e == EDQUOT)
		return gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s' (%s '%s'): %s", w->dir,
			       what, name, strerror(e));
	return gs_fail_errno(err, errno_code(e), e, "%s '%s/%s' failed", what, w->tmp_path, name);
}

static int oom(struct gs_err *err, const char *what)
{
	return gs_fail(err, GS_E_NO_SPACE, "out of memory (%s)", what);
}

/* Grows *arr (of *cap elements of size sz) to hold n + 1. */
static int grow(void **arr, size_t *cap, size_t n, size_t sz)
{
	return gs_grow_array(arr, cap, n, sz, 16);
}

/* A write of the image's files: 0 or -errno, through the fault point GS_FI_IMAGE_WRITE. */
static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	if (gs_fault(GS_FI_IMAGE_WRITE))
		return -gs_fault_errno(GS_FI_IMAGE_WRITE, EIO);
	return gs_fs_pwrite_full(fd, buf, len, off);
}

/* Records the first failure; later calls get it back. */
static int set_failed(struct gs_image_writer *w, const struct gs_err *err, int code)
{
	pthread_mutex_lock(&w->lock);
	if (!w->failed) {
		w->failed = code;
		if (err)
			w->failure = *err;
		else
			gs_fail(&w->failure, code, "writing the image failed");
	}
	pthread_mutex_unlock(&w->lock);
	return code;
}

static int get_failed_locked(struct gs_image_writer *w, struct gs_err *err)
{
	if (err)
		*err = w->failure;
	return w->failed;
}

static uint64_t hash_id(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static ptrdiff_t find_alloc_locked(const struct gs_image_writer *w, uint64_t id)
{
	if (!w->alloc_slots)
		return -1;
	for (size_t s = hash_id(id) & w->slot_mask;; s = (s + 1) & w->slot_mask) {
		uint32_t v = w->alloc_slots[s];
		if (!v)
			return -1;
		if (w->allocs[v - 1].id == id)
			return (ptrdiff_t)(v - 1);
	}
}

static int rehash_locked(struct gs_image_writer *w, size_t want)
{
	size_t cap = 64;
	while (cap < want * 2)
		cap *= 2;
	uint32_t *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -1;
	for (size_t i = 0; i < w->nallocs; i++) {
		size_t s = hash_id(w->allocs[i].id) & (cap - 1);
		while (slots[s])
			s = (s + 1) & (cap - 1);
		slots[s] = (uint32_t)(i + 1);
	}
	free(w->alloc_slots);
	w->alloc_slots = slots;
	w->slot_mask = cap - 1;
	return 0;
}

static void random_id(uint8_t id[16])
{
	if (getrandom(id, 16, GRND_NONBLOCK) == 16)
		return;
	/* No entropy yet (early boot): uniqueness is all the id needs. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t a = hash_id((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
	uint64_t b = hash_id(((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)id ^ a);
	memcpy(id, &a, 8);
	memcpy(id + 8, &b, 8);
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

/* --------------------------------------------------- temporary directories */

/* ".<base>.tmp-" into buf: the prefix of every temporary directory of DIR. */
static void tmp_prefix(const char *base, char *buf, size_t n)
{
	snprintf(buf, n, ".%s.tmp-", base);
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
	for (int i = 1; i < 1000; i++) {
		if (i == 1)
			snprintf(kept, n, "%s.kept-%d-%s", base, (int)pid, stamp);
		else
			snprintf(kept, n, "%s.kept-%d-%s-%d", base, (int)pid, stamp, i);
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
	if (m.info.source_pid && (m.info.source_pid != o->source_pid || strcmp(m.info.source_comm, comm))) {
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
		return gs_fail_errno(err, errno_code(errno), errno, "cannot stat '%s'", t->dir);
	}
	*exists = true;
	if (S_ISLNK(st.st_mode))
		return gs_fail(err, GS_E_USAGE, "'%s' is a symbolic link; give the directory itself", t->dir);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_USAGE, "'%s' exists and is not a directory", t->dir);
	int fd = openat(t->parent_fd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, errno_code(errno), errno, "cannot open '%s'", t->dir);
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
		return oom(err, "path");
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
		return oom(err, "path");
	return 0;
}

static void tmp_free(struct gs_image_tmp *t)
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
		return gs_fail_errno(err, e == ENOENT || e == ENOTDIR ? GS_E_USAGE : errno_code(e), e,
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
		random_id(id);
		char sfx[7];
		for (int i = 0; i < 6; i++)
			sfx[i] = chars[id[i] % (sizeof(chars) - 1)];
		sfx[6] = '\0';
		free(t->tmp_name);
		if (asprintf(&t->tmp_name, "%s%ld-%s", prefix, (long)getpid(), sfx) < 0) {
			t->tmp_name = NULL;
			return oom(err, "path");
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
			       : gs_fail_errno(err, errno_code(e), e, "cannot create a temporary directory next to '%s'", t->dir);
	}
	if (asprintf(&t->tmp_path, "%s/%s", t->parent, t->tmp_name) < 0) {
		t->tmp_path = NULL;
		return oom(err, "path");
	}
	t->fd = openat(t->parent_fd, t->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t->fd < 0 || flock(t->fd, LOCK_EX | LOCK_NB) < 0)
		return gs_fail_errno(err, errno_code(errno), errno, "cannot open and lock '%s'", t->tmp_path);
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
		return oom(err, "image directory");
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
	tmp_free(t);
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
		return gs_fail_errno(err, errno_code(errno), errno, "cannot create '%s/%s'", t->tmp_path,
				     GS_FMT_CPU_DIR_NAME);
	if (t->cpu_fd < 0) {
		t->cpu_fd = openat(t->fd, GS_FMT_CPU_DIR_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (t->cpu_fd < 0)
			return gs_fail_errno(err, errno_code(errno), errno, "cannot open '%s/%s'", t->tmp_path,
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
		rc = gs_fail_errno(err, errno_code(-e), -e, "cannot give '%s' a name of its own (it stays there; the next "
				   "dump to '%s' renames it)", t->tmp_path, t->dir);
	} else {
		snprintf(path, n, "%s/%s", t->parent, kept);
	}
	tmp_free(t);
	return rc;
}

void gs_image_tmp_discard(struct gs_image_tmp *t)
{
	if (!t)
		return;
	int e = remove_image_dir(t->parent_fd, t->tmp_name);
	if (e)
		pr_warn("cannot remove '%s': %s", t->tmp_path, strerror(-e));
	tmp_free(t);
}

/* ----------------------------------------------------------------- open */

static void writer_free(struct gs_image_writer *w)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		if (w->files[i]->fd >= 0)
			close(w->files[i]->fd);
		if (w->files[i]->direct_fd >= 0)
			close(w->files[i]->direct_fd);
		free(w->files[i]);
	}
	free(w->files);
	free(w->open_files);
	for (size_t i = 0; i < w->ngpus; i++)
		free((char *)w->gpus[i].name);
	free(w->gpus);
	for (size_t i = 0; i < w->nallocs; i++)
		free((void *)w->allocs[i].blob);
	free(w->allocs);
	free(w->alloc_slots);
	free(w->chunks);
	for (size_t i = 0; i < w->nmeta; i++) {
		free((char *)w->meta[i].key);
		free((char *)w->meta[i].value);
	}
	free(w->meta);
	free((char *)w->info.gpusnap_version);
	free((char *)w->info.hostname);
	free((char *)w->info.source_comm);
	free((char *)w->info.how);
	if (w->tmp_fd >= 0)
		close(w->tmp_fd);
	free(w->dir);
	free(w->tmp_path);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

/* A writer over the directory tmp_path (already created, empty, 0700); dir names it in messages. */
static int writer_new(const char *tmp_path, const char *dir, const struct gs_image_writer_opts *opts,
		      struct gs_image_writer **wp, struct gs_err *err)
{
	static const struct gs_image_writer_opts no_opts;
	if (!opts)
		opts = &no_opts;
	*wp = NULL;
	struct gs_image_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return oom(err, "writer");
	pthread_mutex_init(&w->lock, NULL);
	w->tmp_fd = -1;
	int rc = 0;
	w->dir = strdup(dir);
	w->tmp_path = strdup(tmp_path);
	if (!w->dir || !w->tmp_path) {
		rc = oom(err, "path");
		goto fail;
	}
	w->tmp_fd = open(w->tmp_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w->tmp_fd < 0) {
		int e = errno;
		rc = gs_fail_errno(err, e == ENOENT ? GS_E_USAGE : errno_code(e), e, "cannot open '%s'", w->tmp_path);
		goto fail;
	}

	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1) < 0)
		host[0] = '\0';
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	w->info.format_version = GS_FMT_VERSION;
	random_id(w->info.image_id);
	w->info.created_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	w->info.gpusnap_version = strdup(GPUSNAP_VERSION);
	w->info.hostname = strdup(host);
	w->info.source_pid = opts->source_pid;
	w->info.source_comm = dup_or_empty(opts->source_comm);
	w->info.how = dup_or_empty(opts->how);
	w->info.checksum_algo = GS_CSUM_CRC32C;
	if (!w->info.gpusnap_version || !w->info.hostname || !w->info.source_comm || !w->info.how) {
		rc = oom(err, "image info");
		goto fail;
	}
	if (strlen(w->info.source_comm) > GS_FMT_STRING_MAX || strlen(w->info.how) > GS_FMT_STRING_MAX) {
		rc = gs_fail(err, GS_E_USAGE, "command name or 'how' longer than %u bytes", GS_FMT_STRING_MAX);
		goto fail;
	}
	w->max_file_size = opts->max_data_file_size;
	w->no_direct_io = opts->no_direct_io;
	w->no_data_sync = opts->no_data_sync;
	w->store_zero_chunks = opts->store_zero_chunks;
	w->max_open = opts->parallel_data_files > 1 ? opts->parallel_data_files : 1;
	if (w->max_open > GS_FMT_DATA_FILES_MAX / 4)
		w->max_open = GS_FMT_DATA_FILES_MAX / 4; /* leaves room for rotation by max_data_file_size */
	w->open_files = calloc(w->max_open, sizeof(*w->open_files));
	if (!w->open_files) {
		rc = oom(err, "data files");
		goto fail;
	}
	struct statfs sfs;
	w->memory_fs = fstatfs(w->tmp_fd, &sfs) == 0 && (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC);
	*wp = w;
	return 0;
fail:
	writer_free(w);
	return rc;
}

int gs_image_writer_open(const char *dir, const struct gs_image_writer_opts *opts, struct gs_image_writer **wp,
			 struct gs_err *err)
{
	*wp = NULL;
	struct gs_image_tmp *t;
	struct gs_image_tmp_opts to = { 0 };
	if (opts)
		to = (struct gs_image_tmp_opts){ .source_pid = opts->source_pid, .source_comm = opts->source_comm,
						 .replace = opts->replace };
	int rc = gs_image_tmp_create(dir, &to, &t, err);
	if (rc)
		return rc;
	if ((rc = writer_new(t->tmp_path, t->dir, opts, wp, err))) {
		gs_image_tmp_discard(t);
		return rc;
	}
	(*wp)->own = t;
	pr_debug("writing image '%s' in '%s'", t->dir, t->tmp_path);
	return 0;
}

int gs_image_writer_open_in(const char *tmp_path, const struct gs_image_writer_opts *opts,
			    struct gs_image_writer **wp, struct gs_err *err)
{
	*wp = NULL;
	if (!tmp_path || !*tmp_path)
		return gs_fail(err, GS_E_USAGE, "no image directory given");
	int rc = writer_new(tmp_path, tmp_path, opts, wp, err);
	if (rc)
		return rc;
	struct gs_image_writer *w = *wp;
	struct stat st;
	if (fstat(w->tmp_fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		rc = gs_fail(err, GS_E_PERMISSION, "'%s' must be a directory of this user with mode 0700", tmp_path);
	} else if (faccessat(w->tmp_fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = gs_fail(err, GS_E_USAGE, "'%s' already holds an image", tmp_path);
	} else if (faccessat(w->tmp_fd, GS_FMT_CPU_DIR_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		/* the owner made room for CRIU's images: the manifest says the image holds CPU state */
		w->info.cpu_state = true;
	}
	if (rc) {
		writer_free(w);
		*wp = NULL;
		return rc;
	}
	pr_debug("writing image in '%s'", tmp_path);
	return 0;
}

const char *gs_image_writer_tmp_path(const struct gs_image_writer *w)
{
	return w->tmp_path;
}

/* ------------------------------------------------------ describing calls */

int gs_image_writer_add_gpu(struct gs_image_writer *w, const struct gs_image_gpu *gpu, struct gs_err *err)
{
	if (gpu->name && strlen(gpu->name) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_FAILURE, "gpu %" PRIu32 ": name longer than %u bytes", gpu->index, GS_FMT_STRING_MAX);
	char *name = dup_or_empty(gpu->name);
	if (!name)
		return oom(err, "gpu");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->ngpus; i++)
		if (w->gpus[i].index == gpu->index) {
			rc = gs_fail(err, GS_E_FAILURE, "gpu %" PRIu32 " added twice", gpu->index);
			goto out;
		}
	if (grow((void **)&w->gpus, &w->cap_gpus, w->ngpus, sizeof(*w->gpus))) {
		rc = oom(err, "gpu");
		goto out;
	}
	w->gpus[w->ngpus] = *gpu;
	w->gpus[w->ngpus++].name = name;
	name = NULL;
out:
	pthread_mutex_unlock(&w->lock);
	free(name);
	return rc;
}

int gs_image_writer_add_allocation(struct gs_image_writer *w, const struct gs_image_allocation *a, struct gs_err *err)
{
	if (a->blob_len > GS_FMT_BLOB_MAX || (a->blob_len && !a->blob))
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": blob of %zu bytes (limit %u)", a->id, a->blob_len,
			       GS_FMT_BLOB_MAX);
	if (a->flags & ~GS_ALLOC_F_KNOWN)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": unknown flags 0x%" PRIx32, a->id, a->flags);
	if (a->size > UINT64_MAX - a->va)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": wraps around the address space", a->id);
	void *blob = NULL;
	if (a->blob_len) {
		blob = malloc(a->blob_len);
		if (!blob)
			return oom(err, "allocation blob");
		memcpy(blob, a->blob, a->blob_len);
	}
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (find_alloc_locked(w, a->id) >= 0) {
		rc = gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 " added twice", a->id);
		goto out;
	}
	if (w->nallocs >= UINT32_MAX - 1) {
		rc = gs_fail(err, GS_E_FAILURE, "more than %u allocations", UINT32_MAX - 1);
		goto out;
	}
	if (grow((void **)&w->allocs, &w->cap_allocs, w->nallocs, sizeof(*w->allocs)) ||
	    ((w->nallocs + 1) * 2 > w->slot_mask + 1 && rehash_locked(w, w->nallocs + 1))) {
		rc = oom(err, "allocations");
		goto out;
	}
	w->allocs[w->nallocs] = *a;
	w->allocs[w->nallocs].blob = blob;
	blob = NULL;
	size_t s = hash_id(a->id) & w->slot_mask;
	while (w->alloc_slots[s])
		s = (s + 1) & w->slot_mask;
	w->alloc_slots[s] = (uint32_t)(++w->nallocs);
out:
	pthread_mutex_unlock(&w->lock);
	free(blob);
	return rc;
}

int gs_image_writer_set_metadata(struct gs_image_writer *w, const char *key, const char *value, struct gs_err *err)
{
	if (!key || !*key || strlen(key) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_FAILURE, "metadata key must be 1 to %u bytes", GS_FMT_STRING_MAX);
	if (!value)
		value = "";
	if (strlen(value) > GS_FMT_META_VALUE_MAX)
		return gs_fail(err, GS_E_FAILURE, "metadata value of '%s' is longer than %u bytes", key,
			       GS_FMT_META_VALUE_MAX);
	char *v = strdup(value), *k = NULL;
	if (!v)
		return oom(err, "metadata");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nmeta; i++)
		if (!strcmp(w->meta[i].key, key)) {
			free((char *)w->meta[i].value);
			w->meta[i].value = v;
			v = NULL;
			goto out;
		}
	if (w->nmeta >= GS_FMT_META_COUNT_MAX) {
		rc = gs_fail(err, GS_E_FAILURE, "more than %u metadata entries", GS_FMT_META_COUNT_MAX);
		goto out;
	}
	k = strdup(key);
	if (!k || grow((void **)&w->meta, &w->cap_meta, w->nmeta, sizeof(*w->meta))) {
		rc = oom(err, "metadata");
		goto out;
	}
	w->meta[w->nmeta].key = k;
	w->meta[w->nmeta++].value = v;
	k = v = NULL;
out:
	pthread_mutex_unlock(&w->lock);
	free(k);
	free(v);
	return rc;
}

int gs_image_writer_cpu_dir(struct gs_image_writer *w, char *path, size_t n, struct gs_err *err)
{
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (!w->info.cpu_state) {
		if (mkdirat(w->tmp_fd, GS_FMT_CPU_DIR_NAME, 0700) < 0 && errno != EEXIST) {
			rc = io_fail(w, "creating", GS_FMT_CPU_DIR_NAME, errno, err);
			goto out;
		}
		w->info.cpu_state = true;
	}
	if ((size_t)snprintf(path, n, "%s/%s", w->tmp_path, GS_FMT_CPU_DIR_NAME) >= n)
		rc = gs_fail(err, GS_E_FAILURE, "path of '%s/%s' does not fit in %zu bytes", w->tmp_path,
			     GS_FMT_CPU_DIR_NAME, n);
out:
	pthread_mutex_unlock(&w->lock);
	return rc;
}

void gs_image_writer_stats(struct gs_image_writer *w, struct gs_image_writer_stats *st)
{
	pthread_mutex_lock(&w->lock);
	st->chunks = w->nchunks;
	st->zero_chunks = w->zero_chunks;
	st->zero_bytes = w->zero_bytes;
	st->data_files = (uint32_t)w->nfiles;
	pthread_mutex_unlock(&w->lock);
	st->payload_bytes = atomic_load(&w->payload_bytes);
	st->direct_bytes = atomic_load(&w->direct_bytes);
}

/* --------------------------------------------------------------- chunks */

static int create_data_file_locked(struct gs_image_writer *w, struct data_file **out, struct gs_err *err)
{
	if (w->nfiles >= GS_FMT_DATA_FILES_MAX)
		return gs_fail(err, GS_E_FAILURE, "the image would need more than %u data files; raise the data file size",
			       GS_FMT_DATA_FILES_MAX);
	if (grow((void **)&w->files, &w->cap_files, w->nfiles, sizeof(*w->files)))
		return oom(err, "data files");
	struct data_file *f = calloc(1, sizeof(*f));
	void *block = NULL;
	if (!f || posix_memalign(&block, GS_FMT_ALIGN, GS_FMT_ALIGN)) {
		free(f);
		return oom(err, "data file");
	}
	gs_fmt_data_file_name((uint32_t)w->nfiles, f->name);
	f->direct_fd = -1;
	f->fd = openat(w->tmp_fd, f->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int rc = 0;
	if (f->fd < 0) {
		rc = io_fail(w, "creating", f->name, errno, err);
		goto fail;
	}
	gs_fmt_data_header_build(block, w->info.image_id, (uint32_t)w->nfiles);
	int e = write_all(f->fd, block, GS_FMT_ALIGN, 0);
	if (e) {
		rc = io_fail(w, "writing", f->name, -e, err);
		goto fail;
	}
	if (!w->no_direct_io) {
		f->direct_fd = openat(w->tmp_fd, f->name, O_WRONLY | O_DIRECT | O_CLOEXEC);
		if (f->direct_fd < 0)
			pr_debug("'%s': no O_DIRECT on this file system (%s), writing through the page cache", f->name,
				 strerror(errno));
	}
	atomic_init(&f->direct_ok, f->direct_fd >= 0);
	f->next = GS_FMT_ALIGN;
	w->files[w->nfiles++] = f;
	free(block);
	*out = f;
	return 0;
fail:
	if (f->fd >= 0) {
		close(f->fd);
		unlinkat(w->tmp_fd, f->name, 0);
	}
	free(f);
	free(block);
	return rc;
}

/* Whether payloads go through memory: then one file serializes its writers (see parallel_data_files). */
static bool buffered_locked(const struct gs_image_writer *w)
{
	return w->no_direct_io || w->memory_fs || (w->nfiles && w->files[0]->direct_fd < 0);
}

/*
 * The data file the next payload of len bytes goes to, by index: the open
 * files take payloads in turn, a new one is opened while there are fewer than
 * the writer may use, and a full one (max_data_file_size) is replaced.
 */
static int pick_data_file_locked(struct gs_image_writer *w, uint64_t len, size_t *index, struct gs_err *err)
{
	struct data_file *f;
	unsigned want = buffered_locked(w) ? w->max_open : 1;
	if (w->nopen < want) {
		int rc = create_data_file_locked(w, &f, err);
		if (rc)
			return rc;
		w->open_files[w->nopen++] = *index = w->nfiles - 1;
		return 0;
	}
	unsigned k = w->next_open++ % w->nopen;
	f = w->files[w->open_files[k]];
	if (w->max_file_size && f->next > GS_FMT_ALIGN && f->next + len > w->max_file_size) {
		int rc = create_data_file_locked(w, &f, err);
		if (rc)
			return rc;
		w->open_files[k] = w->nfiles - 1;
	}
	*index = w->open_files[k];
	return 0;
}

/* Writes a payload at its reserved offset: O_DIRECT for the aligned part where possible, buffered for the rest. */
static int write_payload(struct gs_image_writer *w, struct data_file *f, const void *data, size_t len, uint64_t off,
			 struct gs_err *err)
{
	const char *p = data;
	while (len) {
		bool direct = f->direct_fd >= 0 && atomic_load(&f->direct_ok) && (uintptr_t)p % GS_FMT_ALIGN == 0 &&
			      off % GS_FMT_ALIGN == 0 && len >= GS_FMT_ALIGN;
		size_t n = direct ? len / GS_FMT_ALIGN * GS_FMT_ALIGN : len;
		if (n > MAX_IO)
			n = MAX_IO;
		ssize_t r;
		if (gs_fault(GS_FI_IMAGE_WRITE)) {
			errno = gs_fault_errno(GS_FI_IMAGE_WRITE, EIO);
			r = -1;
		} else {
			r = pwrite(direct ? f->direct_fd : f->fd, p, n, (off_t)off);
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (direct && errno == EINVAL) {
				/* The device wants a larger alignment than 4096: write through the page cache instead. */
				pr_debug("'%s': O_DIRECT write refused, writing through the page cache", f->name);
				atomic_store(&f->direct_ok, false);
				continue;
			}
			return io_fail(w, "writing", f->name, errno, err);
		}
		if (r == 0)
			return io_fail(w, "writing", f->name, EIO, err);
		atomic_fetch_add(&w->payload_bytes, (uint64_t)r);
		if (direct)
			atomic_fetch_add(&w->direct_bytes, (uint64_t)r);
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int write_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data, uint64_t len,
		       bool known_zero, bool have_crc, uint32_t crc, struct gs_err *err)
{
	if (len == 0)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": empty chunk at offset %" PRIu64, alloc_id, offset);
	bool zero = known_zero || (!w->store_zero_chunks && gs_all_zero(data, len));
	if (!zero && len > GS_FMT_CHUNK_DATA_MAX)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": chunk of %" PRIu64 " bytes, more than %llu MiB",
			       alloc_id, len, GS_FMT_CHUNK_DATA_MAX / GS_MiB);
	if (!zero && !have_crc)
		crc = gs_crc32c(0, data, len);

	struct data_file *f = NULL;
	uint64_t file_offset = 0;
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->failed) {
		rc = get_failed_locked(w, err);
		goto out;
	}
	ptrdiff_t ai = find_alloc_locked(w, alloc_id);
	if (ai < 0) {
		rc = gs_fail(err, GS_E_FAILURE, "chunk for allocation %" PRIu64 ", which was not added", alloc_id);
		goto out;
	}
	const struct gs_image_allocation *a = &w->allocs[ai];
	if (a->flags & GS_ALLOC_F_NO_DATA) {
		rc = gs_fail(err, GS_E_FAILURE, "chunk for allocation %" PRIu64 ", which is marked as holding no data",
			     alloc_id);
		goto out;
	}
	if (offset > a->size || len > a->size - offset) {
		rc = gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": chunk %" PRIu64 "+%" PRIu64 " is outside its %"
			     PRIu64 " bytes", alloc_id, offset, len, a->size);
		goto out;
	}
	if (grow((void **)&w->chunks, &w->cap_chunks, w->nchunks, sizeof(*w->chunks))) {
		rc = oom(err, "chunks");
		goto out;
	}
	struct gs_image_chunk *c = &w->chunks[w->nchunks];
	*c = (struct gs_image_chunk){ .alloc_id = alloc_id, .offset = offset, .length = len };
	if (zero) {
		c->flags = GS_CHUNK_F_ZERO;
		w->nchunks++;
		w->zero_chunks++;
		w->zero_bytes += len;
		goto out;
	}
	size_t file_index;
	if ((rc = pick_data_file_locked(w, len, &file_index, err))) {
		pthread_mutex_unlock(&w->lock);
		return set_failed(w, err, rc);
	}
	f = w->files[file_index];
	file_offset = f->next;
	f->next = gs_round_up(file_offset + len, GS_FMT_ALIGN);
	c->file_index = (uint32_t)file_index;
	c->file_offset = file_offset;
	c->crc32c = crc;
	w->nchunks++;
out:
	pthread_mutex_unlock(&w->lock);
	if (rc || !f)
		return rc;
	rc = write_payload(w, f, data, len, file_offset, err);
	if (rc)
		set_failed(w, err, rc);
	return rc;
}

int gs_image_write_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data, size_t len,
			 struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, data, len, false, false, 0, err);
}

int gs_image_write_chunk_crc(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data,
			     size_t len, uint32_t crc32c, struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, data, len, false, true, crc32c, err);
}

int gs_image_write_zero_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
			      struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, NULL, len, true, false, 0, err);
}

/* --------------------------------------------------------------- commit */

static int cmp_gpu(const void *a, const void *b)
{
	uint32_t x = ((const struct gs_image_gpu *)a)->index, y = ((const struct gs_image_gpu *)b)->index;
	return x < y ? -1 : x > y;
}

static int cmp_alloc(const void *a, const void *b)
{
	uint64_t x = ((const struct gs_image_allocation *)a)->id, y = ((const struct gs_image_allocation *)b)->id;
	return x < y ? -1 : x > y;
}

static int cmp_chunk(const void *a, const void *b)
{
	const struct gs_image_chunk *x = a, *y = b;
	if (x->alloc_id != y->alloc_id)
		return x->alloc_id < y->alloc_id ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Builds the manifest model from the writer's tables (sorted in place) and checks it. */
static int build_manifest(struct gs_image_writer *w, struct gs_manifest *m, struct gs_image_data_file *files,
			  struct gs_err *err)
{
	if (w->ngpus)
		qsort(w->gpus, w->ngpus, sizeof(*w->gpus), cmp_gpu);
	if (w->nallocs)
		qsort(w->allocs, w->nallocs, sizeof(*w->allocs), cmp_alloc);
	if (w->nchunks)
		qsort(w->chunks, w->nchunks, sizeof(*w->chunks), cmp_chunk);
	free(w->alloc_slots); /* ids moved; no lookups after this point */
	w->alloc_slots = NULL;
	for (size_t i = 0; i < w->nfiles; i++)
		files[i] = (struct gs_image_data_file){ .index = (uint32_t)i, .size = w->files[i]->next,
							.name = w->files[i]->name };
	memset(m, 0, sizeof(*m));
	m->info = w->info;
	m->files = files;
	m->nfiles = w->nfiles;
	m->gpus = w->gpus;
	m->ngpus = w->ngpus;
	m->allocs = w->allocs;
	m->nallocs = w->nallocs;
	m->chunks = w->chunks;
	m->nchunks = w->nchunks;
	m->meta = w->meta;
	m->nmeta = w->nmeta;
	int rc = gs_manifest_validate(m, err);
	if (rc) {
		gs_err_wrap(err, "refusing to commit an inconsistent image");
		if (err)
			err->code = GS_E_FAILURE;
		return GS_E_FAILURE;
	}
	return 0;
}

static int sync_data_files(struct gs_image_writer *w, struct gs_err *err)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		struct data_file *f = w->files[i];
		/* The size is a multiple of 4096 (the last payload's padding is a hole), so readers may read whole blocks. */
		if (ftruncate(f->fd, (off_t)f->next) < 0 || (!w->no_data_sync && fsync(f->fd) < 0))
			return io_fail(w, "syncing", f->name, errno, err);
		if (f->direct_fd >= 0) {
			close(f->direct_fd);
			f->direct_fd = -1;
		}
	}
	return 0;
}

static int write_manifest(struct gs_image_writer *w, const struct gs_manifest *m, struct gs_err *err)
{
	void *buf;
	size_t len;
	int rc = gs_manifest_encode(m, &buf, &len, err);
	if (rc)
		return rc;
	int fd = openat(w->tmp_fd, GS_FMT_MANIFEST_NAME, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = io_fail(w, "creating", GS_FMT_MANIFEST_NAME, errno, err);
	} else {
		int e = write_all(fd, buf, len, 0);
		if (!e && fsync(fd) < 0)
			e = -errno;
		if (e)
			rc = io_fail(w, "writing", GS_FMT_MANIFEST_NAME, -e, err);
		if (close(fd) < 0 && !rc)
			rc = io_fail(w, "closing", GS_FMT_MANIFEST_NAME, errno, err);
	}
	free(buf);
	return rc;
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
			return gs_fail_errno(err, errno_code(errno), errno, "cannot lock '%s'", t->dir);
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
		return gs_fail_errno(err, errno_code(e), e, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
	}
	if (!exists) {
		if (renameat2(t->parent_fd, t->tmp_name, t->parent_fd, t->base, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EINVAL && errno != ENOSYS)
			return gs_fail_errno(err, errno_code(errno), errno, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
		/* No RENAME_NOREPLACE here (some network file systems): rename never replaces a non-empty directory. */
		if (renameat(t->parent_fd, t->tmp_name, t->parent_fd, t->base) < 0)
			return gs_fail_errno(err, errno_code(errno), errno, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
		return 0;
	}
	*old_fd = openat(t->parent_fd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*old_fd < 0)
		return gs_fail_errno(err, errno_code(errno), errno, "cannot open '%s'", t->dir);
	if ((rc = wait_readers(t, *old_fd, err)))
		return rc;
	if (renameat2(t->parent_fd, t->tmp_name, t->parent_fd, t->base, RENAME_EXCHANGE) == 0) {
		*exchanged = true;
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS)
		return gs_fail_errno(err, errno_code(errno), errno, "cannot exchange '%s' with '%s'", t->tmp_path, t->dir);
	/*
	 * No atomic exchange on this file system: move the old image aside under a
	 * temporary name (so it is cleaned up as stale if we die), then rename.
	 * DIR is missing for a moment; the old image exists throughout.
	 */
	pr_warn("'%s': the file system cannot exchange directories atomically; replacing in two renames", t->parent);
	char aside[600];
	snprintf(aside, sizeof(aside), "%s-old", t->tmp_name);
	if (renameat(t->parent_fd, t->base, t->parent_fd, aside) < 0)
		return gs_fail_errno(err, errno_code(errno), errno, "cannot move '%s' aside", t->dir);
	if (renameat(t->parent_fd, t->tmp_name, t->parent_fd, t->base) < 0) {
		int e = errno;
		renameat(t->parent_fd, aside, t->parent_fd, t->base); /* put the old one back */
		return gs_fail_errno(err, errno_code(e), e, "cannot rename '%s' to '%s'", t->tmp_path, t->dir);
	}
	/* Delete the old image from its aside name, as after an exchange. */
	if (renameat(t->parent_fd, aside, t->parent_fd, t->tmp_name) < 0)
		pr_warn("old image left at '%s/%s': %s", t->parent, aside, strerror(errno));
	*exchanged = true;
	return 0;
}

/* Steps 4-6 of the commit protocol (docs/FORMAT.md): validate, sync the data files, write and sync the manifest. */
static int seal(struct gs_image_writer *w, struct gs_err *err)
{
	pthread_mutex_lock(&w->lock);
	int rc = w->failed ? get_failed_locked(w, err) : 0;
	pthread_mutex_unlock(&w->lock);
	if (rc)
		return rc;

	struct gs_image_data_file *files = calloc(w->nfiles ? w->nfiles : 1, sizeof(*files));
	if (!files)
		return oom(err, "manifest");
	struct gs_manifest m;
	if (!(rc = build_manifest(w, &m, files, err)) && !(rc = sync_data_files(w, err))) {
		rc = write_manifest(w, &m, err);
		if (!rc && fsync(w->tmp_fd) < 0)
			rc = io_fail(w, "syncing", ".", errno, err);
	}
	free(m.alloc_chunk_start);
	free(files);
	return rc;
}

/* Removes what an open_in writer made (manifest first), leaving the directory itself to its owner. */
static void remove_own_files(struct gs_image_writer *w)
{
	if (unlinkat(w->tmp_fd, GS_FMT_MANIFEST_NAME, 0) == 0)
		fsync(w->tmp_fd);
	for (size_t i = 0; i < w->nfiles; i++)
		unlinkat(w->tmp_fd, w->files[i]->name, 0);
}

int gs_image_writer_seal(struct gs_image_writer *w, struct gs_err *err)
{
	if (w->own) {
		gs_image_writer_abort(w);
		return gs_fail(err, GS_E_USAGE, "seal of a writer that owns its directory; commit it instead");
	}
	int rc = seal(w, err);
	if (rc)
		remove_own_files(w);
	writer_free(w);
	return rc;
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
	int e = fd < 0 ? -errno : write_all(fd, buf, len, 0);
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
	return gs_fail_errno(err, errno_code(-e), -e, "writing '%s/%s' failed", t->tmp_path, GS_FMT_CPU_LIST_NAME);
}

/* A failed fsync of the image's files, by its cause. */
static int sync_failed(int synced, const char *dir, const char *path, struct gs_err *err)
{
	return synced == -ENOSPC || synced == -EDQUOT
		       ? gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s' (syncing the image)",
				 dir)
		       : gs_fail_errno(err, errno_code(-synced), -synced, "syncing '%s' failed", path);
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
	/* the second hit of the fault point: as if the parent's fsync failed (kill: a crash right after the rename) */
	int se = gs_fault(GS_FI_IMAGE_PUBLISH) ? gs_fault_errno(GS_FI_IMAGE_PUBLISH, EIO)
					       : fsync(t->parent_fd) < 0 ? errno : 0;
	if (se)
		rc = gs_fail_errno(err, errno_code(se), se, "the image is at '%s' but syncing '%s' failed", t->dir,
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
		return gs_fail_errno(err, errno == ENOENT ? GS_E_USAGE : errno_code(errno), errno, "cannot open '%s'", dir);
	int synced = gs_fault(GS_FI_IMAGE_SYNC) ? -gs_fault_errno(GS_FI_IMAGE_SYNC, EIO) : gs_fs_fsync_tree(fd, ".");
	close(fd);
	return synced ? sync_failed(synced, dir, dir, err) : 0;
}

void gs_image_tmp_close(struct gs_image_tmp *t)
{
	if (t)
		tmp_free(t);
}

int gs_image_writer_commit(struct gs_image_writer *w, struct gs_err *err)
{
	struct gs_image_tmp *t = w->own;
	if (!t) {
		gs_image_writer_abort(w);
		return gs_fail(err, GS_E_USAGE, "commit of a writer opened with gs_image_writer_open_in; seal it and let "
			       "the directory's owner publish it");
	}
	w->own = NULL;
	size_t nallocs = w->nallocs, nchunks = w->nchunks, nfiles = w->nfiles;
	int rc = seal(w, err);
	writer_free(w);
	bool published = false;
	if (!rc)
		rc = gs_image_publish(t, &published, err);
	if (rc && !published)
		gs_image_tmp_discard(t);
	else
		tmp_free(t);
	if (!rc)
		pr_debug("committed (%zu allocations, %zu chunks, %zu data files)", nallocs, nchunks, nfiles);
	return rc;
}

void gs_image_writer_abort(struct gs_image_writer *w)
{
	if (!w)
		return;
	if (w->own)
		gs_image_tmp_discard(w->own);
	else
		remove_own_files(w);
	writer_free(w);
}
