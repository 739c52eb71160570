/*
 * image_fs.c - file system helpers of the image code and its thread pool
 * (see image_fs.h).
 */
#include "image/image_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/proc.h"

int gs_fs_check_trusted(const struct stat *st, const char *path, struct gs_err *err)
{
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': owned by uid %u, not by you or root (another user"
			       " could have changed it)", path, (unsigned)st->st_uid);
	if (!S_ISLNK(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)))
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': writable by %s (mode %04o); chmod go-w it if you trust"
			       " its contents", path, (st->st_mode & S_IWOTH) ? "others" : "its group",
			       (unsigned)(st->st_mode & 07777));
	return 0;
}

static const char *file_kind(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISDIR(m))
		return "a directory";
	return "not a file";
}

int gs_fs_check_entry(const struct stat *st, const char *path, struct gs_err *err)
{
	if (S_ISLNK(st->st_mode))
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': a symbolic link (nothing in an image is one: it could "
			       "point at a file anyone controls)", path);
	if (!S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode))
		return gs_fail(err, GS_E_IMAGE, "'%s' is %s, not a regular file", path, file_kind(st->st_mode));
	int rc = gs_fs_check_trusted(st, path, err);
	if (rc)
		return rc;
	if (S_ISREG(st->st_mode) && st->st_nlink > 1)
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': it has %lu hard links (a file of an image has one; "
			       "through another name it could change after it was checked)", path,
			       (unsigned long)st->st_nlink);
	return 0;
}

int gs_fs_check_ancestor(const struct stat *st, const char *dir, const char *image, struct gs_err *err)
{
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': the directory '%s' above it is owned by uid %u, not by"
			       " you or root, who could swap the image after it was checked", image, dir,
			       (unsigned)st->st_uid);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s': the directory '%s' above it is writable by %s (mode "
			       "%04o, not sticky), who could swap the image after it was checked", image, dir,
			       (st->st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st->st_mode & 07777));
	return 0;
}

/* N of "/proc/self/fd/N", "/proc/self/fd/N/" or "/proc/self/fd/N/."; -1 for any other path */
static int passed_descriptor(const char *path)
{
	static const char prefix[] = "/proc/self/fd/";
	if (strncmp(path, prefix, sizeof(prefix) - 1))
		return -1;
	const char *p = path + sizeof(prefix) - 1;
	long n = 0;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((n = n * 10 + (*p - '0')) > INT32_MAX)
			return -1;
	return !*p || !strcmp(p, "/") || !strcmp(p, "/.") ? (int)n : -1;
}

int gs_fs_open_dir_checked(const char *path, const char *image, int *fd, struct stat *st, struct gs_err *err)
{
	*fd = -1;
	int passed = passed_descriptor(path);
	if (passed >= 0) {
		int d = openat(passed, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d < 0)
			return -errno;
		if (fstat(d, st) < 0) {
			int e = errno;
			close(d);
			return -e;
		}
		*fd = d;
		return 0;
	}
	char *real = realpath(path, NULL);
	if (!real)
		return -errno;
	int rc = 0;
	int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0) {
		rc = -errno;
		goto out;
	}
	/* real is absolute, without "." or ".." or repeated slashes: walk it one component at a time */
	char *p = real + 1;
	for (;;) {
		struct stat ast;
		/* the directory cur is real[0, p - 1) ("/" for the root) */
		char saved = p > real + 1 ? p[-1] : '\0';
		if (p > real + 1)
			p[-1] = '\0';
		if (fstat(cur, &ast) < 0)
			rc = -errno;
		else
			rc = gs_fs_check_ancestor(&ast, p > real + 1 ? real : "/", image, err);
		if (p > real + 1)
			p[-1] = saved;
		if (rc)
			goto out;
		char *slash = strchr(p, '/');
		bool last = !slash;
		if (slash)
			*slash = '\0';
		int next;
		if (!*p) /* the path is "/" itself */
			next = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		else
			next = openat(cur, p, (last ? O_RDONLY : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (slash)
			*slash = '/';
		if (next < 0) {
			rc = -errno;
			goto out;
		}
		close(cur);
		cur = next;
		if (last)
			break;
		p = slash + 1;
	}
	if (fstat(cur, st) < 0) {
		rc = -errno;
		goto out;
	}
	*fd = cur;
	cur = -1;
out:
	if (cur >= 0)
		close(cur);
	free(real);
	return rc;
}

static int open_code(int e)
{
	return e == EACCES || e == EPERM ? GS_E_PERMISSION : e == ENOENT ? GS_E_IMAGE : GS_E_FAILURE;
}

int gs_fs_open_file(int dir_fd, const char *name, const char *path, int *fd, struct stat *st, bool *missing,
		    struct gs_err *err)
{
	*fd = -1;
	if (missing)
		*missing = false;
	struct stat lst;
	if (fstatat(dir_fd, name, &lst, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT && missing)
			*missing = true;
		return gs_fail_errno(err, open_code(errno), errno, "cannot open '%s'", path);
	}
	int rc = gs_fs_check_entry(&lst, path, err);
	if (rc)
		return rc;
	if (!S_ISREG(lst.st_mode))
		return gs_fail(err, GS_E_IMAGE, "'%s' is %s, not a regular file", path, file_kind(lst.st_mode));
	/* O_NONBLOCK: should a FIFO take the file's place after the check, the open does not wait for a writer */
	int f = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (f < 0) {
		int e = errno;
		if (e == ENOENT && missing)
			*missing = true;
		if (e == ELOOP)
			return gs_fail(err, GS_E_PERMISSION, "refusing '%s': a symbolic link", path);
		return gs_fail_errno(err, open_code(e), e, "cannot open '%s'", path);
	}
	if (fstat(f, st) < 0) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", path);
	} else if (st->st_dev != lst.st_dev || st->st_ino != lst.st_ino) {
		rc = gs_fail(err, GS_E_IMAGE, "'%s' was replaced while it was being opened", path);
	} else {
		rc = gs_fs_check_entry(st, path, err);
	}
	if (rc) {
		close(f);
		return rc;
	}
	*fd = f;
	return 0;
}

/* ------------------------------------------------------- who holds a lock */

/* "gpusnap WORD" for a gpusnap process running subcommand WORD; "" for any other (nothing it controls is shown). */
static void gpusnap_command(pid_t pid, char *out, size_t n)
{
	static const char *const words[] = { "dump", "restore", "inspect", "state", "suspend", "resume", "run" };
	char path[64], cmd[512];
	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t len = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (len <= 0)
		return;
	cmd[len] = '\0';
	const char *argv0 = cmd, *base = strrchr(argv0, '/');
	base = base ? base + 1 : argv0;
	size_t l0 = strlen(argv0);
	if (strcmp(base, "gpusnap") || (ssize_t)l0 + 1 >= len)
		return;
	const char *sub = argv0 + l0 + 1;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(sub, words[i])) {
			snprintf(out, n, "gpusnap %s", words[i]);
			return;
		}
	snprintf(out, n, "gpusnap");
}

void gs_fs_flock_holder(int fd, char *out, size_t n, bool *exclusive)
{
	snprintf(out, n, "another process");
	if (exclusive)
		*exclusive = false;
	struct stat st;
	FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		/* "1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF"; a waiter's line has "->" after the number */
		char kind[16], mode[16], rw[16];
		int pid;
		unsigned maj, min;
		unsigned long long ino;
		const char *p = strchr(line, ':');
		if (!p || strstr(line, "->") ||
		    sscanf(p + 1, "%15s %15s %15s %d %x:%x:%llu", kind, mode, rw, &pid, &maj, &min, &ino) != 7 ||
		    strcmp(kind, "FLOCK") || ino != (unsigned long long)st.st_ino || maj != major(st.st_dev) ||
		    min != minor(st.st_dev))
			continue;
		char cmd[64];
		gpusnap_command(pid, cmd, sizeof(cmd));
		if (cmd[0])
			snprintf(out, n, "%s (pid %d)", cmd, pid);
		else
			snprintf(out, n, "process %d", pid);
		if (exclusive)
			*exclusive = !strcmp(rw, "WRITE");
		break;
	}
	fclose(f);
}

/* ---------------------------------------------------------------- the pool */

struct parallel_job {
	size_t n;
	size_t buf_size;
	gs_fs_work_fn fn;
	void *ctx;
	atomic_size_t next;
	atomic_bool stop;
	pthread_mutex_t lock;
	size_t bad_index; /* lowest failing item so far, SIZE_MAX if none */
	struct gs_err bad;
	int bad_code;
};

static void parallel_fail(struct parallel_job *job, size_t i, int code, const struct gs_err *e)
{
	pthread_mutex_lock(&job->lock);
	if (i < job->bad_index) {
		job->bad_index = i;
		job->bad = *e;
		job->bad_code = code;
	}
	pthread_mutex_unlock(&job->lock);
	atomic_store(&job->stop, true);
}

static void *parallel_worker(void *arg)
{
	struct parallel_job *job = arg;
	void *buf = NULL;
	struct gs_err e = { 0 };
	if (job->buf_size && posix_memalign(&buf, 4096, job->buf_size)) {
		gs_fail(&e, GS_E_NO_SPACE, "out of memory (a %zu-byte read buffer)", job->buf_size);
		parallel_fail(job, 0, GS_E_NO_SPACE, &e);
		return NULL;
	}
	/*
	 * Items are handed out in order, so when item k fails every item below
	 * k was already taken by some thread and is finished before the result
	 * is read: the lowest failing item is the one reported.
	 */
	while (!atomic_load(&job->stop)) {
		size_t i = atomic_fetch_add(&job->next, 1);
		if (i >= job->n)
			break;
		int rc = job->fn(job->ctx, i, buf, &e);
		if (rc)
			parallel_fail(job, i, rc, &e);
	}
	free(buf);
	return NULL;
}

int gs_fs_parallel(size_t n, unsigned nthreads, size_t buf_size, gs_fs_work_fn fn, void *ctx, struct gs_err *err)
{
	if (nthreads == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = cpus > 0 ? (unsigned)cpus : 1;
	}
	if (nthreads > GS_FS_MAX_THREADS)
		nthreads = GS_FS_MAX_THREADS;
	if (nthreads > n)
		nthreads = n ? (unsigned)n : 1;
	struct parallel_job job = { .n = n, .buf_size = buf_size, .fn = fn, .ctx = ctx, .bad_index = SIZE_MAX };
	atomic_init(&job.next, 0);
	atomic_init(&job.stop, false);
	pthread_mutex_init(&job.lock, NULL);
	pthread_t threads[GS_FS_MAX_THREADS];
	unsigned started = 0;
	for (unsigned t = 1; t < nthreads; t++) {
		if (pthread_create(&threads[started], NULL, parallel_worker, &job) != 0)
			break; /* fewer threads is slower, not wrong */
		started++;
	}
	parallel_worker(&job); /* this thread works too */
	for (unsigned t = 0; t < started; t++)
		pthread_join(threads[t], NULL);
	pthread_mutex_destroy(&job.lock);
	if (job.bad_index != SIZE_MAX) {
		if (err)
			*err = job.bad;
		return job.bad_code;
	}
	return 0;
}

static int check_tree(int dir_fd, const char *name, const char *path, int depth, struct gs_err *err)
{
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot stat '%s'", path);
	int rc = gs_fs_check_entry(&st, path, err);
	if (rc || !S_ISDIR(st.st_mode))
		return rc;
	if (depth >= GS_FS_MAX_DEPTH)
		return gs_fail(err, GS_E_IMAGE, "'%s' is nested deeper than %d levels", path, GS_FS_MAX_DEPTH);
	int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot open '%s'", path);
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read '%s'", path);
	}
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char sub[4096];
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		rc = check_tree(dirfd(d), de->d_name, sub, depth + 1, err);
	}
	closedir(d);
	return rc;
}

int gs_fs_check_tree_trusted(int dir_fd, const char *name, const char *path, struct gs_err *err)
{
	return check_tree(dir_fd, name, path, 0, err);
}

static int fsync_tree(int dir_fd, const char *name, int depth)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? 0 : -errno; /* a symlink: nothing of ours to sync */
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (S_ISDIR(st.st_mode) && depth < GS_FS_MAX_DEPTH) {
		int dfd = dup(fd);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			rc = -errno;
			if (dfd >= 0)
				close(dfd);
		} else {
			struct dirent *de;
			while (!rc && (de = readdir(d)))
				if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
					rc = fsync_tree(dirfd(d), de->d_name, depth + 1);
			closedir(d);
		}
	}
	if (!rc && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int gs_fs_fsync_tree(int dir_fd, const char *name)
{
	return fsync_tree(dir_fd, name, 0);
}

static int remove_tree(int dir_fd, const char *name, int depth)
{
	if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth >= GS_FS_MAX_DEPTH)
		return -ELOOP;
	int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return -e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int r = remove_tree(dirfd(d), de->d_name, depth + 1);
		if (r && !rc)
			rc = r;
	}
	closedir(d);
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !rc)
		rc = -errno;
	return rc;
}

int gs_fs_remove_tree(int dir_fd, const char *name)
{
	return remove_tree(dir_fd, name, 0);
}

int gs_fs_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

int gs_fs_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int gs_fs_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* The inode of this process's PID namespace (0 where unknown): PIDs compare only within one. */
static unsigned long long pid_ns(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

int gs_fs_owner_write(int dir_fd, pid_t owner)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "%llu %d %llu %d %llu\n", pid_ns(), (int)getpid(), gs_proc_start_time(getpid()),
			 (int)owner, gs_proc_start_time(owner));
	int fd = openat(dir_fd, GS_FS_OWNER_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = gs_fs_pwrite_full(fd, line, (size_t)n, 0);
	close(fd);
	return rc;
}

bool gs_fs_owner_read(int dir_fd, struct gs_fs_owner *o)
{
	char line[160] = "";
	int fd = openat(dir_fd, GS_FS_OWNER_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, line, sizeof(line) - 1, 0) : -1;
	if (fd >= 0)
		close(fd);
	int maker = 0, owner = 0;
	memset(o, 0, sizeof(*o));
	if (n <= 0 || sscanf(line, "%llu %d %llu %d %llu", &o->ns, &maker, &o->maker_start, &owner, &o->owner_start) != 5)
		return false;
	o->maker = maker;
	o->owner = owner;
	return o->ns && o->ns == pid_ns() && maker > 0 && owner > 0;
}

bool gs_fs_owner_runs(pid_t pid, unsigned long long start)
{
	unsigned long long now = gs_proc_start_time(pid);
	return now && (!start || now == start);
}
