/*
 * image_test_writer.c - an image written and published in one process, for
 * the tests (see image_test_writer.h). The temporary directory of each open
 * writer is kept in a small table, looked up by writer on commit and abort.
 */
#include "image_test_writer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct open_writer {
	struct gs_image_writer *w;
	struct gs_image_tmp *t;
	struct open_writer *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_writer *open_writers;

/* Removes w's entry and returns its temporary directory, or NULL if w is not from image_test_writer_open. */
static struct gs_image_tmp *take_tmp(struct gs_image_writer *w)
{
	struct gs_image_tmp *t = NULL;
	pthread_mutex_lock(&lock);
	for (struct open_writer **p = &open_writers; *p; p = &(*p)->next) {
		if ((*p)->w != w)
			continue;
		struct open_writer *e = *p;
		*p = e->next;
		t = e->t;
		free(e);
		break;
	}
	pthread_mutex_unlock(&lock);
	return t;
}

int image_test_writer_open(const char *dir, const struct gs_image_writer_opts *opts, struct gs_image_writer **wp,
			   struct gs_err *err)
{
	*wp = NULL;
	struct gs_image_tmp *t;
	struct gs_image_tmp_opts to = { 0 };
	if (opts)
		to = (struct gs_image_tmp_opts){ .source_pid = opts->source_pid, .source_comm = opts->source_comm,
						 .replace = opts->replace };
	int rc = gs_image_tmp_create(dir, &to, &t, err);
	if (rc)
		return rc;
	struct open_writer *e = calloc(1, sizeof(*e));
	if (!e) {
		gs_image_tmp_discard(t);
		return gs_fail(err, GS_E_NO_SPACE, "out of memory");
	}
	struct gs_image_writer_opts wo = { 0 };
	if (opts)
		wo = *opts;
	wo.target = gs_image_tmp_target(t); /* messages name DIR, as the tool's do */
	if ((rc = gs_image_writer_open_in(gs_image_tmp_path(t), &wo, wp, err))) {
		free(e);
		gs_image_tmp_discard(t);
		return rc;
	}
	e->w = *wp;
	e->t = t;
	pthread_mutex_lock(&lock);
	e->next = open_writers;
	open_writers = e;
	pthread_mutex_unlock(&lock);
	return 0;
}

int image_test_writer_commit(struct gs_image_writer *w, struct gs_err *err)
{
	struct gs_image_tmp *t = take_tmp(w);
	if (!t) {
		gs_image_writer_abort(w);
		return gs_fail(err, GS_E_USAGE, "commit of a writer not from image_test_writer_open");
	}
	int rc = gs_image_writer_seal(w, err);
	bool published = false;
	if (!rc)
		rc = gs_image_publish(t, &published, err);
	if (rc && !published)
		gs_image_tmp_discard(t);
	else
		gs_image_tmp_close(t);
	return rc;
}

void image_test_writer_abort(struct gs_image_writer *w)
{
	if (!w)
		return;
	struct gs_image_tmp *t = take_tmp(w);
	gs_image_writer_abort(w);
	if (t)
		gs_image_tmp_discard(t);
}
