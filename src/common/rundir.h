/*
 * rundir.h - where gpusnap keeps small per-host runtime files (agent sockets,
 * records of suspended processes): $GPUSNAP_RUN_DIR if set, else /run/gpusnap
 * for root, else /tmp/gpusnap-<uid>. Created 0700 and refused if another user
 * owns it or others can write to it.
 */
#ifndef GPUSNAP_COMMON_RUNDIR_H
#define GPUSNAP_COMMON_RUNDIR_H

#include <stddef.h>

#include "common/err.h"

/* Writes the directory path into buf, creating it if needed. */
int gs_run_dir(char *buf, size_t n, struct gs_err *err);

#endif
