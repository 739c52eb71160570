/*
 * image_fs.c - file system helpers of the image code (see image_fs.h).
 */
#include "image/image_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static int check_tree(int dir_fd, const char *name, const char *path, int depth, struct gs_err *err)
{
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot stat '%s'", path);
	int rc = gs_fs_check_trusted(&st, path, err);
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
