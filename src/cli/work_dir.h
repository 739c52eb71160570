/*
 * work_dir.h - folders of the runtime directory a command works in (a
 * restore's CRIU log, pidfile and statistics), named for the gpusnap that
 * made them, so that what a killed one left is known as such and removed.
 *
 * A folder is <run dir>/<kind>-<gpusnap pid>-<its start time>-XXXXXX (mode
 * 0700). cli_work_dir_make first removes the folders of the same kind whose
 * gpusnap is gone: no process runs with that PID and start time (a reused PID
 * is another start time). Only real folders (never a symbolic link) owned by
 * this user are touched, and inside them only what is not a folder, by name,
 * never through a link; a folder that holds a folder stays.
 */
#ifndef GPUSNAP_CLI_WORK_DIR_H
#define GPUSNAP_CLI_WORK_DIR_H

#include <stddef.h>

#include "common/err.h"

/* Makes a work folder of kind ("restore") into out; GS_E_FAILURE when it cannot. */
int cli_work_dir_make(const char *kind, char *out, size_t n, struct gs_err *err);
/* Removes the folders of kind in run_dir whose gpusnap is gone; returns how many. */
int cli_work_dir_sweep(const char *run_dir, const char *kind);

#endif
