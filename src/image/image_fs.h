/*
 * image_fs.h - file system helpers of the image code: the safety rule for
 * files restore may trust, recursive fsync and removal that never follow
 * symbolic links, and pread/pwrite loops.
 */
#ifndef GPUSNAP_IMAGE_IMAGE_FS_H
#define GPUSNAP_IMAGE_IMAGE_FS_H

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
/* gs_fs_check_trusted for dir_fd/name and everything below it (symlinks: owner only, never followed). */
int gs_fs_check_tree_trusted(int dir_fd, const char *name, const char *path, struct gs_err *err);
/* fsync of dir_fd/name and everything below it. 0 or -errno. */
int gs_fs_fsync_tree(int dir_fd, const char *name);
/* Removes dir_fd/name and everything below it, never following symlinks; ENOENT is success. 0 or -errno. */
int gs_fs_remove_tree(int dir_fd, const char *name);
/* fsync of a directory by path. 0 or -errno. */
int gs_fs_fsync_dir(const char *path);
/* pread/pwrite until done; EINTR retried. 0, or -errno (-EIO for an unexpected end of file on read). */
int gs_fs_pread_full(int fd, void *buf, size_t len, uint64_t off);
int gs_fs_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

#endif
