/*
 * image_fs.h - file system helpers of the image code: the trust rules for
 * an image, its files and the directories above it, opening files so that
 * nothing (a symlink, a FIFO, a device) can redirect or block the reader,
 * recursive fsync and removal that never follow symbolic links, pread/pwrite
 * loops, and the one thread pool of the image code (gs_fs_parallel).
 */
#ifndef GPUSNAP_IMAGE_IMAGE_FS_H
#define GPUSNAP_IMAGE_IMAGE_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/err.h"

/* Directory levels the recursive helpers descend (CRIU's images are flat; deeper is refused). */
#define GS_FS_MAX_DEPTH 16

/*
 * The trust rule for an image: owned by the current user or root, not
 * writable by group or others. GS_E_PERMISSION naming path otherwise.
 */
int gs_fs_check_trusted(const struct stat *st, const char *path, struct gs_err *err);
/*
 * The rule for every entry of an image (st from lstat/fstatat without
 * following): a directory or a regular file with a single link, trusted as
 * above. A symbolic link or a hard-linked file is GS_E_PERMISSION (it can
 * point at what someone else controls); a FIFO, socket or device GS_E_IMAGE.
 */
int gs_fs_check_entry(const struct stat *st, const char *path, struct gs_err *err);
/* gs_fs_check_entry for dir_fd/name and everything below it (nothing followed, at most GS_FS_MAX_DEPTH levels). */
int gs_fs_check_tree_trusted(int dir_fd, const char *name, const char *path, struct gs_err *err);
/*
 * The rule for a directory above an image (sshd's StrictModes): owned by root
 * or the current user, and not writable by group or others unless sticky
 * (like /tmp, where only an entry's owner may rename it). Otherwise someone
 * else could swap the image after it was checked: GS_E_PERMISSION naming
 * the directory (dir) and what it holds (image).
 */
int gs_fs_check_ancestor(const struct stat *st, const char *dir, const char *image, struct gs_err *err);
/*
 * Opens the directory `path` (O_RDONLY | O_DIRECTORY) through a walk from
 * '/' over the components of its real path, each opened without following
 * symlinks and checked with gs_fs_check_ancestor before the next one is
 * looked up. The last directory itself is not checked (the caller applies
 * its own rule to *st). image names what the walk is for in messages (the
 * image, or the image a dump will create). 0 with *fd (close it) and *st; a GS_E_* code with
 * err for an unsafe ancestor; -errno (nothing in err) when the path cannot
 * be resolved or opened (ENOENT, ENOTDIR, EACCES, ...).
 *
 * A path of the form /proc/self/fd/N (optionally followed by "/" or "/.")
 * is a directory someone handed this process as descriptor N (the CRIU
 * plugin and the CLI pass the image directory to an agent that way): it is
 * opened through that descriptor and its ancestors are not walked. The
 * sender checked them where the path means something; in another mount
 * namespace (an agent in a container) the descriptor's real path does not
 * even exist.
 */
int gs_fs_open_dir_checked(const char *path, const char *image, int *fd, struct stat *st, struct gs_err *err);
/*
 * Opens dir_fd/name for reading without following symlinks and without
 * blocking (O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC): checked with
 * gs_fs_check_entry before the open (a device is never opened) and with
 * fstat after it (a regular file, the one checked). path names it in
 * messages. A missing file is GS_E_IMAGE with *missing set (if non-NULL).
 */
int gs_fs_open_file(int dir_fd, const char *name, const char *path, int *fd, struct stat *st, bool *missing,
		    struct gs_err *err);

/*
 * Calls fn(ctx, i, buf, err) for every i in [0, n) on up to nthreads threads
 * (0: one per CPU; at most GS_FS_MAX_THREADS; the caller's thread works too),
 * each with its own buffer of buf_size bytes aligned to 4096. Items are
 * handed out in order and the pool stops at the first failure; the error of
 * the lowest failing i is returned (so reports do not depend on timing).
 */
#define GS_FS_MAX_THREADS 16
typedef int (*gs_fs_work_fn)(void *ctx, size_t i, void *buf, struct gs_err *err);
int gs_fs_parallel(size_t n, unsigned nthreads, size_t buf_size, gs_fs_work_fn fn, void *ctx, struct gs_err *err);
/*
 * Who holds a flock() on the file open at fd, for messages: "gpusnap restore
 * (pid 12)" where /proc/locks names a gpusnap process (its subcommand from
 * its command line, only a word gpusnap has), "process 12" for another one,
 * "another process" where none is found (a file system whose device numbers
 * /proc/locks does not show). *exclusive (if non-NULL): a LOCK_EX.
 */
void gs_fs_flock_holder(int fd, char *out, size_t n, bool *exclusive);
/* fsync of dir_fd/name and everything below it. 0 or -errno. */
int gs_fs_fsync_tree(int dir_fd, const char *name);
/* Removes dir_fd/name and everything below it, never following symlinks; ENOENT is success. 0 or -errno. */
int gs_fs_remove_tree(int dir_fd, const char *name);
/* fsync of a directory by path. 0 or -errno. */
int gs_fs_fsync_dir(const char *path);
/* pread/pwrite until done; EINTR retried. 0, or -errno (-EIO for an unexpected end of file on read). */
int gs_fs_pread_full(int fd, void *buf, size_t len, uint64_t off);
int gs_fs_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/*
 * The owner record of a directory gpusnap leaves while it works (a stage, a
 * temporary image): who made it and the process whose data it is for, as
 * its maker saw them (PIDs with their start times, its PID namespace).
 * What a sweep or gc reads to tell whether that process still runs: the
 * PID in a manifest is the agent's own, another in a container. One line,
 * "<pid ns> <maker> <start> <owner> <start>", in GS_FS_OWNER_NAME.
 */
#define GS_FS_OWNER_NAME ".owner"
struct gs_fs_owner {
	unsigned long long ns, maker_start, owner_start;
	pid_t maker, owner;
};
/* Writes dir_fd's record: made by this process for owner. 0 or -errno. */
int gs_fs_owner_write(int dir_fd, pid_t owner);
/* dir_fd's record into o: true where it is there, well formed and of this process's PID namespace. */
bool gs_fs_owner_read(int dir_fd, struct gs_fs_owner *o);
/* Whether pid runs and is the process that started at start (0: any process with that PID). */
bool gs_fs_owner_runs(pid_t pid, unsigned long long start);

#endif
