/*
 * memkind.c - the registry of memory kinds (memkind.h) and its walks.
 */
#include "agent/memory/memkind.h"

static const struct gs_memkind *kinds[GS_MEMKIND_MAX];
static int nkinds;

int gs_memkind_register(const struct gs_memkind *k)
{
	if (nkinds == GS_MEMKIND_MAX)
		return -1;
	kinds[nkinds++] = k;
	return 0;
}

#define EACH(k, member) \
	for (int i_ = 0; i_ < nkinds; i_++) \
		if (((k) = kinds[i_])->member)

int gs_memkind_install_hooks(struct gs_err *err)
{
	const struct gs_memkind *k;
	EACH(k, install_hooks) {
		int rc = k->install_hooks(err);
		if (rc)
			return rc;
	}
	return 0;
}

void gs_memkind_forget_after_fork(void)
{
	const struct gs_memkind *k;
	EACH(k, forget_after_fork) k->forget_after_fork();
}

void gs_memkind_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes)
{
	const struct gs_memkind *k;
	*count = *bytes = 0;
	EACH(k, refresh) k->refresh();
	EACH(k, stats) {
		uint64_t c = 0, b = 0;
		k->stats(a, &c, &b);
		*count += c;
		*bytes += b;
	}
}

void gs_memkind_quiesce(struct gs_agent *a)
{
	const struct gs_memkind *k;
	EACH(k, quiesce) k->quiesce(a);
}

int gs_memkind_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	const struct gs_memkind *k;
	EACH(k, describe) {
		size_t from = out->n;
		int rc = k->describe(a, out, err);
		for (size_t j = from; j < out->n; j++)
			out->r[j].kind = k;
		if (rc)
			return rc;
	}
	return 0;
}

void gs_memkind_finish(struct gs_agent *a)
{
	const struct gs_memkind *k;
	EACH(k, finish) k->finish(a);
}

int gs_memkind_before_suspend(struct gs_agent *a, struct gs_err *err)
{
	const struct gs_memkind *k;
	EACH(k, before_suspend) {
		int rc = k->before_suspend(a, err);
		if (rc)
			return rc;
	}
	return 0;
}

int gs_memkind_bring_back(struct gs_agent *a, struct gs_err *err)
{
	const struct gs_memkind *k;
	EACH(k, bring_back) {
		int rc = k->bring_back(a, err);
		if (rc)
			return rc;
	}
	return 0;
}

void gs_memkind_after_resume(void)
{
	const struct gs_memkind *k;
	EACH(k, after_resume) k->after_resume();
}

int gs_memkind_save_image(struct gs_image_writer *w, struct gs_err *err)
{
	const struct gs_memkind *k;
	EACH(k, save_image) {
		int rc = k->save_image(w, err);
		if (rc)
			return rc;
	}
	return 0;
}

bool gs_memkind_handle_request(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply)
{
	const struct gs_memkind *k;
	EACH(k, handle_request) {
		if (k->handle_request(a, req, reply))
			return true;
	}
	return false;
}
