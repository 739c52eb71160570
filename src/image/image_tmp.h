/*
 * image_tmp.h - inside src/image only: the temporary image directory
 * (image_tmp.c) as the writer (image_writer.c) sees it.
 */
#ifndef GPUSNAP_IMAGE_IMAGE_TMP_H
#define GPUSNAP_IMAGE_IMAGE_TMP_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

/* A temporary image directory next to DIR, flock()ed for its owner's life (see image.h). */
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

/* The writer's helpers (image_writer.c) the temporary directory's code shares. */
int gs_image_errno_code(int e);                     /* an errno as an exit code (err.h) */
int gs_image_oom(struct gs_err *err, const char *what); /* GS_E_NO_SPACE, "out of memory (what)" */
/* A write of the image's files: 0 or -errno, through the fault point GS_FI_IMAGE_WRITE. */
int gs_image_write_all(int fd, const void *buf, size_t len, uint64_t off);
void gs_image_random_id(uint8_t id[16]);            /* an id unique enough for an image */

/* Closes and frees t, leaving its directory as it is. */
void gs_image_tmp_free(struct gs_image_tmp *t);

#endif
