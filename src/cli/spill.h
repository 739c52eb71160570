/*
 * spill.h - the storage tier of suspend: where a suspend's GPU
 * data goes when host memory would not hold it (suspend --spill DIR,
 * GPUSNAP_SPILL_DIR, --spill-only), and where resume finds it again.
 *
 * DIR must be a directory of the user running gpusnap that neither group nor
 * others may write. In it each suspended process has a folder of its own,
 * gpusnap-PID-START (0700, this user's), holding the image (image/, made as a
 * temporary image directory, gs_image_tmp_create, renamed once sealed). Only the
 * temporary image directory inside belongs to the process's owner: its agent
 * writes into it through a descriptor passed with the SUSPEND_FD request,
 * never by path, which the 0700 folder above it closes to that user.
 *
 * A record in the runtime directory, spill-PID (the process's start time and
 * the folder), says where a suspended process's data is: resume reads it,
 * state shows it, and a process that is gone has its folder removed by the
 * next gpusnap command that sweeps (cli_spill_sweep).
 *
 * A folder no longer needed (read back by a resume, or left by a process that
 * is gone) is renamed gpusnap-trash-ID at once and removed by a detached
 * `gpusnap _remove-spill` (spill.c says why); its record spilltrash-ID lets
 * the next sweep finish a removal whose remover was killed.
 */
#ifndef GPUSNAP_CLI_SPILL_H
#define GPUSNAP_CLI_SPILL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

struct gs_image_tmp;

/* One suspend's spill, from cli_spill_begin to cli_spill_end. */
struct cli_spill {
	bool active;
	pid_t pid;
	char folder[PATH_MAX - 16]; /* DIR/gpusnap-PID-START */
	char image[PATH_MAX];       /* folder/image, where the published image is */
	struct gs_image_tmp *tmp;
	int fd;                     /* the temporary image directory, passed to the agent; -1 when closed */
};

/*
 * Checks that dir can take spills: GS_E_USAGE when it is missing or not a
 * directory, GS_E_PERMISSION when another user owns it, group or others may
 * write it, or it cannot be written (a read-only file system). One line.
 */
int cli_spill_check_dir(const char *dir, struct gs_err *err);
/*
 * Makes pid's folder in dir and a temporary image directory in it owned by
 * the process's owner (sp->fd opened on it), and records it (spill-PID).
 */
int cli_spill_begin(const char *dir, pid_t pid, struct cli_spill *sp, struct gs_err *err);
/*
 * After the agent's reply. spilled: the agent wrote and sealed its data in
 * the temporary directory: renamed to sp->image (if that fails the data
 * stays at the temporary name, which lookup finds, and the error says so:
 * nothing is lost).
 * Otherwise (the agent took host memory, or the suspend failed) the folder
 * and the record go.
 */
int cli_spill_end(struct cli_spill *sp, bool spilled, struct gs_err *err);
/*
 * Where pid's spilled data is (the image, or the temporary directory a
 * killed suspend left), into image; the spill directory into dir (either may
 * be NULL). false when there is no record for this process.
 */
bool cli_spill_lookup(pid_t pid, char *image, size_t n, char *dir, size_t ndir);
/* After a resume from it: pid's spill record goes, its folder is removed in the background. */
void cli_spill_forget(pid_t pid);
/* The hidden `gpusnap _remove-spill RECORD`: removes the trash folder a record of the runtime directory names. */
int cli_spill_remove_trash(const char *record);
/* Removes the folders and records of spilled processes that are gone; returns how many. */
int cli_spill_sweep(void);
/*
 * What processes that are gone left in host memory or on storage, removed:
 * their spills (cli_spill_sweep) and the stages of live dumps killed in
 * their pause (GPUSNAP_STAGE_DIR's memory, image.h gs_image_stage_sweep).
 */
void cli_sweep_leftovers(void);

#endif
