/*
 * first_err.c - the first failure among worker threads (see first_err.h).
 */
#include "common/first_err.h"

void gs_first_err_init(struct gs_first_err *f)
{
	atomic_init(&f->failed, 0);
	pthread_mutex_init(&f->lock, NULL);
	f->err = (struct gs_err){ 0 };
}

void gs_first_err_destroy(struct gs_first_err *f)
{
	pthread_mutex_destroy(&f->lock);
}

void gs_first_err_set(struct gs_first_err *f, const struct gs_err *e)
{
	pthread_mutex_lock(&f->lock);
	if (!atomic_load(&f->failed)) {
		f->err = *e;
		atomic_store(&f->failed, 1);
	}
	pthread_mutex_unlock(&f->lock);
}

bool gs_first_err_any(struct gs_first_err *f)
{
	return atomic_load(&f->failed) != 0;
}

int gs_first_err_take(struct gs_first_err *f, struct gs_err *err)
{
	if (!atomic_load(&f->failed))
		return 0;
	pthread_mutex_lock(&f->lock);
	if (err)
		*err = f->err;
	int code = f->err.code ? f->err.code : GS_E_FAILURE;
	pthread_mutex_unlock(&f->lock);
	return code;
}
