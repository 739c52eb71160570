/*
 * first_err.h - the first failure among worker threads: any thread may
 * report one, the first report is kept, and workers poll whether any came
 * so they stop early. Used by the agent's copy ring and image workers.
 */
#ifndef GPUSNAP_COMMON_FIRST_ERR_H
#define GPUSNAP_COMMON_FIRST_ERR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/err.h"

struct gs_first_err {
	atomic_int failed;
	pthread_mutex_t lock;
	struct gs_err err;
};

void gs_first_err_init(struct gs_first_err *f);
void gs_first_err_destroy(struct gs_first_err *f);
/* Keeps e if it is the first failure reported. */
void gs_first_err_set(struct gs_first_err *f, const struct gs_err *e);
bool gs_first_err_any(struct gs_first_err *f);
/* 0 if none was reported, else the first one's code (copied into err). */
int gs_first_err_take(struct gs_first_err *f, struct gs_err *err);

#endif
