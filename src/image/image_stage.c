/*
 * image_stage.c - the dump's own copy of a process's GPU data for dump
 * --leave-running (see image.h, "stage"): an agent image written into a
 * private directory of a memory file system while the process stands still,
 * read back from there by the process's resume, then written into the
 * temporary image on the real storage while the process runs.
 *
 * The stage is a directory, not a bare memfd, so that both ends are the
 * ones every image already has: the agent's image writer (checksums,
 * parallel data files on a memory file system) and its reader (the resume
 * checks the chunks it copies back). Once the process runs again its files
 * are opened and the directory removed: the memory lives only as long as
 * those descriptors, so a gpusnap killed while writing leaves nothing in
 * memory behind it, and the temporary image it was writing holds no
 * manifest (written last), which the next writer of DIR removes.
 *
 * A stage left by a gpusnap killed inside its pause holds a suspended
 * process's only copy of its data; once that process is gone it is memory
 * nobody frees (tmpfs). gs_image_stage_sweep removes such stages: its maker
 * holds a shared flock on the directory for the stage's life, and the same
 * open directory is what the agent is handed, so the lock lasts while
 * either writes into it; and its owner record (image_fs.h) names the maker
 * and the process whose data it holds: the manifest's PID is the agent's
 * own, which in a container is not the host's.
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "image/format.h"
#include "image/image_fs.h"
#include "image/image_tmp.h"
#include "image/manifest.h"

#define STAGE_MAX_FILES 256
/* A write's size: large enough for the disk's line rate, small enough to be cut by a kill between two. */
#define STAGE_IO_BYTES (64u << 20)
#define DIRECT_ALIGN 4096u

struct stage_file {
	char name[256];
	int fd;
	uint64_t size;
};

struct gs_image_stage {
	char path[4096];
	int lock_fd; /* the directory, flock()ed shared while it exists (gs_image_stage_sweep) */
	bool detached; /* the directory is removed; its files live in files[].fd */
	size_t nfiles;
	struct stage_file files[STAGE_MAX_FILES];
	char *parent_rec; /* the parent's path the published manifest records (gs_image_stage_set_parent_rec) */
};

int gs_image_stage_create(const char *mem_dir, uint64_t need, uint64_t total, bool cpu_state, pid_t owner,
			  struct gs_image_stage **out, struct gs_err *err)
{
	*out = NULL;
	if (mem_dir[0] != '/')
		return gs_fail(err, GS_E_USAGE, "'%s' is not an absolute path", mem_dir);
	struct statfs sfs;
	struct statvfs vfs;
	if (statfs(mem_dir, &sfs) < 0 || statvfs(mem_dir, &vfs) < 0)
		return gs_fail_errno(err, GS_E_NO_SPACE, errno, "cannot use '%s' for the dump's copy", mem_dir);
	if (sfs.f_type != TMPFS_MAGIC && sfs.f_type != RAMFS_MAGIC)
		return gs_fail(err, GS_E_NO_SPACE, "'%s' is not a memory file system (tmpfs)", mem_dir);
	uint64_t room = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* the manifest and each data file's header besides the data */
	if (total < need)
		total = need;
	if (sfs.f_type == TMPFS_MAGIC && room < total + (16u << 20))
		return gs_fail(err, GS_E_NO_SPACE, "'%s' has %llu MiB free, the GPU data needs %llu MiB", mem_dir,
			       (unsigned long long)(room >> 20), (unsigned long long)(total >> 20));
	struct gs_image_stage *s = calloc(1, sizeof(*s));
	if (!s)
		return gs_image_oom(err, "the dump's copy");
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/.gpusnap-live-%d-XXXXXX", mem_dir, (int)getpid()) >=
	    sizeof(s->path)) {
		free(s);
		return gs_fail(err, GS_E_USAGE, "'%s' is too long a path", mem_dir);
	}
	if (!mkdtemp(s->path)) {
		int e = errno;
		free(s);
		return gs_fail_errno(err, gs_image_errno_code(e), e, "cannot make the dump's copy in '%s'", mem_dir);
	}
	s->lock_fd = open(s->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_SH) < 0) {
		int e = errno;
		if (s->lock_fd >= 0)
			close(s->lock_fd);
		rmdir(s->path);
		free(s);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot lock the dump's copy in '%s'", mem_dir);
	}
	int oe = gs_fs_owner_write(s->lock_fd, owner);
	if (oe) {
		close(s->lock_fd);
		int pfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (pfd >= 0) {
			gs_fs_remove_tree(pfd, s->path + 1);
			close(pfd);
		}
		free(s);
		return gs_fail_errno(err, gs_image_errno_code(-oe), -oe, "cannot make the dump's copy in '%s'", mem_dir);
	}
	/*
	 * cpu/ marks the agent's manifest as one of an image with CPU state, which
	 * the temporary image will be (not a process's part of a tree's image:
	 * the tree's CPU state is the whole image's)
	 */
	if (!cpu_state) {
		*out = s;
		return 0;
	}
	char cpu[4200];
	snprintf(cpu, sizeof(cpu), "%s/%s", s->path, GS_FMT_CPU_DIR_NAME);
	if (mkdir(cpu, 0700) < 0) {
		int e = errno;
		close(s->lock_fd);
		rmdir(s->path);
		free(s);
		return gs_fail_errno(err, gs_image_errno_code(e), e, "cannot make '%s'", cpu);
	}
	*out = s;
	return 0;
}

const char *gs_image_stage_path(const struct gs_image_stage *s)
{
	return s->path;
}

int gs_image_stage_fd(const struct gs_image_stage *s)
{
	return s->lock_fd;
}

int gs_image_stage_detach(struct gs_image_stage *s, struct gs_err *err)
{
	int dfd = open(s->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot open the dump's copy '%s'", s->path);
	}
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, GS_FMT_CPU_DIR_NAME))
			continue;
		if (s->nfiles == STAGE_MAX_FILES) {
			rc = gs_fail(err, GS_E_FAILURE, "the dump's copy '%s' holds more than %d files", s->path,
				     STAGE_MAX_FILES);
			break;
		}
		struct stage_file *f = &s->files[s->nfiles];
		struct stat st;
		f->fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (f->fd < 0 || fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			rc = gs_fail_errno(err, GS_E_FAILURE, f->fd < 0 ? errno : EINVAL, "cannot open '%s/%s'", s->path,
					   de->d_name);
			if (f->fd >= 0)
				close(f->fd);
			break;
		}
		snprintf(f->name, sizeof(f->name), "%s", de->d_name);
		f->size = (uint64_t)st.st_size;
		s->nfiles++;
	}
	closedir(d);
	if (rc)
		return rc;
	/* the manifest last: a temporary image without one is a dead writer's leftover, removed by the next */
	for (size_t i = 0; i + 1 < s->nfiles; i++) {
		if (!strcmp(s->files[i].name, GS_FMT_MANIFEST_NAME)) {
			struct stage_file m = s->files[i];
			s->files[i] = s->files[s->nfiles - 1];
			s->files[s->nfiles - 1] = m;
			break;
		}
	}
	if (!s->nfiles || strcmp(s->files[s->nfiles - 1].name, GS_FMT_MANIFEST_NAME))
		return gs_fail(err, GS_E_FAILURE, "the dump's copy '%s' holds no manifest", s->path);
	int pfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd >= 0) {
		gs_fs_remove_tree(pfd, s->path + 1);
		close(pfd);
	}
	s->detached = true;
	close(s->lock_fd); /* nothing is left to sweep */
	s->lock_fd = -1;
	return 0;
}

/* Writes f into dir_fd under its name: O_DIRECT for the 4096-aligned part where the file system takes it. */
static int write_file(const struct stage_file *f, int dir_fd, const char *dir, struct gs_err *err)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s", dir, f->name);
	int fd = openat(dir_fd, f->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot create '%s'", path);
	int dfd = openat(dir_fd, f->name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT); /* -1: buffered */
	void *map = NULL;
	int rc = 0;
	if (f->size) {
		map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
		if (map == MAP_FAILED) {
			map = NULL;
			rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot map the dump's copy of '%s'", f->name);
		}
	}
	for (uint64_t off = 0; !rc && off < f->size;) {
		uint64_t n = f->size - off < STAGE_IO_BYTES ? f->size - off : STAGE_IO_BYTES;
		bool direct = dfd >= 0 && n >= DIRECT_ALIGN;
		if (direct)
			n &= ~(uint64_t)(DIRECT_ALIGN - 1); /* the mapping and off are page-aligned */
		int e = gs_fault(GS_FI_DUMP_STAGE_WRITE) ? gs_fault_errno(GS_FI_DUMP_STAGE_WRITE, EIO)
							  : -gs_fs_pwrite_full(direct ? dfd : fd, (char *)map + off, n, off);
		if (e == EINVAL && direct) { /* O_DIRECT refused for this write: buffered from here */
			close(dfd);
			dfd = -1;
			continue;
		}
		if (e)
			rc = gs_fail_errno(err, gs_image_errno_code(e), e, "cannot write '%s'", path);
		off += n;
	}
	if (!rc && fdatasync(fd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot sync '%s'", path);
	if (map)
		munmap(map, f->size);
	if (dfd >= 0)
		close(dfd);
	close(fd);
	return rc;
}

int gs_image_stage_set_parent_rec(struct gs_image_stage *s, const char *rec, struct gs_err *err)
{
	char *copy = rec ? strdup(rec) : NULL;
	if (rec && !copy)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	free(s->parent_rec);
	s->parent_rec = copy;
	return 0;
}

/*
 * The staged manifest with its parent recorded as rec: decoded, the path
 * replaced, encoded again (its CRC with it; cpu-files.img, which names the
 * manifest by its CRC, is written from the published one). *buf malloc'd.
 */
static int manifest_with_parent(const struct stage_file *f, const char *rec, void **buf, size_t *len,
				struct gs_err *err)
{
	void *raw = malloc(f->size ? f->size : 1);
	if (!raw)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int e = -gs_fs_pread_full(f->fd, raw, f->size, 0);
	if (e) {
		free(raw);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot read the dump's copy of '%s'", f->name);
	}
	struct gs_manifest m;
	int rc = gs_manifest_decode(raw, f->size, &m, err); /* raw is m's now, or freed */
	if (rc)
		return gs_err_wrap(err, "the dump's copy of '%s'", f->name);
	if (!m.has_parent) {
		gs_manifest_free(&m);
		return gs_fail(err, GS_E_FAILURE, "the dump's copy of '%s' names no parent to record as '%s'", f->name, rec);
	}
	m.parent.path = rec;
	rc = gs_manifest_encode(&m, buf, len, err);
	gs_manifest_free(&m);
	return rc;
}

/* The manifest, its parent recorded as rec, into dir_fd: written whole and fdatasync'ed. */
static int write_manifest_as(const struct stage_file *f, const char *rec, int dir_fd, const char *dir,
			     struct gs_err *err)
{
	void *buf = NULL;
	size_t len = 0;
	int rc = manifest_with_parent(f, rec, &buf, &len, err);
	if (rc)
		return rc;
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s", dir, f->name);
	int fd = openat(dir_fd, f->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = fd < 0 ? errno : gs_fault(GS_FI_DUMP_STAGE_WRITE) ? gs_fault_errno(GS_FI_DUMP_STAGE_WRITE, EIO)
								   : -gs_image_write_all(fd, buf, len, 0);
	if (!e && fdatasync(fd) < 0)
		e = errno;
	if (fd >= 0)
		close(fd);
	free(buf);
	return e ? gs_fail_errno(err, gs_image_errno_code(e), e, "cannot write '%s'", path) : 0;
}

int gs_image_stage_write(struct gs_image_stage *s, struct gs_image_tmp *t, const char *subdir, uint64_t *bytes,
			 struct gs_err *err)
{
	*bytes = 0;
	if (!s->detached)
		return gs_fail(err, GS_E_FAILURE, "the dump's copy '%s' was not opened", s->path);
	char dir[4096];
	int dfd = t->fd;
	snprintf(dir, sizeof(dir), "%s", t->tmp_path);
	if (subdir) {
		if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", t->tmp_path, subdir) >= sizeof(dir))
			return gs_fail(err, GS_E_FAILURE, "'%s/%s' is too long a path", t->tmp_path, subdir);
		if ((dfd = openat(t->fd, subdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot open '%s'", dir);
	}
	int rc = 0;
	for (size_t i = 0; !rc && i < s->nfiles; i++) {
		bool manifest = !strcmp(s->files[i].name, GS_FMT_MANIFEST_NAME);
		if ((rc = manifest && s->parent_rec ? write_manifest_as(&s->files[i], s->parent_rec, dfd, dir, err)
						    : write_file(&s->files[i], dfd, dir, err)))
			break;
		*bytes += s->files[i].size;
		/* the data is on the disk now: the memory can go, file by file (the whole copy may be most of it) */
		if (strcmp(s->files[i].name, GS_FMT_MANIFEST_NAME)) {
			close(s->files[i].fd);
			s->files[i].fd = -1;
		}
	}
	if (!rc && fsync(dfd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot sync '%s'", dir);
	if (!rc && subdir && fsync(t->fd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot sync '%s'", t->tmp_path);
	if (subdir)
		close(dfd);
	return rc;
}

void gs_image_stage_free(struct gs_image_stage *s, bool keep)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nfiles; i++)
		if (s->files[i].fd >= 0)
			close(s->files[i].fd);
	if (!s->detached && !keep) {
		int pfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (pfd >= 0) {
			gs_fs_remove_tree(pfd, s->path + 1);
			close(pfd);
		}
	}
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s->parent_rec);
	free(s);
}

bool gs_image_stage_is_left(const char *path)
{
	const char *base = strrchr(path, '/');
	struct stat st;
	return path[0] == '/' && base && !strncmp(base + 1, ".gpusnap-live-", 14) && lstat(path, &st) == 0 &&
	       S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

int gs_image_stage_discard(const char *path)
{
	if (!gs_image_stage_is_left(path)) {
		errno = EINVAL;
		return -1;
	}
	int pfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return -1;
	int rc = gs_fs_remove_tree(pfd, path + 1);
	close(pfd);
	return rc;
}

/*
 * A stage of this user in mem_dir whose maker is gone and which no one
 * writes: kept while the process whose data it holds runs and its manifest
 * is there (its only copy: gpusnap resume reads it back); else of no use,
 * and removed. One without a manifest was never finished (the agent walked
 * back, the data stayed on the GPU). Without a readable .owner from this
 * PID namespace nothing is known: kept.
 */
static bool stage_is_garbage(int mem_fd, const char *name)
{
	int maker = 0, used = 0;
	if (sscanf(name, ".gpusnap-live-%d-%n", &maker, &used) != 1 || maker <= 0 || strlen(name + used) != 6)
		return false;
	int fd = openat(mem_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != geteuid() || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	struct gs_fs_owner ow;
	bool known = gs_fs_owner_read(fd, &ow) && ow.maker == maker;
	bool garbage = known && !gs_fs_owner_runs(ow.maker, ow.maker_start) &&
		       !(gs_fs_owner_runs(ow.owner, ow.owner_start) &&
			 faccessat(fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0);
	close(fd); /* the lock with it */
	return garbage;
}

int gs_image_stage_sweep(const char *mem_dir)
{
	DIR *d = opendir(mem_dir);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".gpusnap-live-", 14) || !stage_is_garbage(dirfd(d), de->d_name))
			continue;
		if (gs_fs_remove_tree(dirfd(d), de->d_name) == 0) {
			removed++;
			pr_info("removed '%s/%s', the dump's copy of a process that is gone", mem_dir, de->d_name);
		}
	}
	closedir(d);
	return removed;
}
