/*
 * suballoc.c - size-class slabs with a bitmap each (see suballoc.h).
 *
 * Per class, a list of slabs that still have a free block; full slabs are on
 * no list and empty ones move to the spare list or are released. Slabs are
 * found by address through an allocation registry (an AVL tree), so free and
 * find are O(log slabs) plus a bitmap word.
 */
#include "core/suballoc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "core/alloc_registry.h"

#define NO_CLASS UINT32_MAX

struct slab {
	uint64_t va;
	uint32_t cls; /* index into sa->class_size, NO_CLASS when spare */
	uint32_t used, total;
	uint32_t hint; /* no free bit in words below this one */
	struct slab *prev, *next;
	uint64_t bits[]; /* 1 = block in use; bits at and past total are set */
};

struct slab_list {
	struct slab *head;
	uint64_t count;
};

struct gs_suballoc {
	pthread_mutex_t lock;
	struct gs_suballoc_ops ops;
	uint64_t slab_size, threshold, align;
	uint32_t spare_max;
	uint32_t nwords; /* bitmap words per slab, enough for the smallest class */
	uint32_t nclasses;
	uint64_t *class_size;
	struct slab_list *partial; /* per class */
	struct slab_list spares;
	struct gs_alloc_registry *slabs; /* va -> struct slab * (in user) */
	uint64_t nslabs, blocks, block_bytes;
};

static void list_push(struct slab_list *l, struct slab *s)
{
	s->prev = NULL;
	s->next = l->head;
	if (l->head)
		l->head->prev = s;
	l->head = s;
	l->count++;
}

static void list_del(struct slab_list *l, struct slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		l->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	l->count--;
}

static uint32_t class_of(const struct gs_suballoc *sa, uint64_t size)
{
	if (size == 0 || size > sa->threshold)
		return NO_CLASS;
	uint32_t lo = 0, hi = sa->nclasses - 1;
	while (lo < hi) { /* smallest class >= size */
		uint32_t mid = (lo + hi) / 2;
		if (sa->class_size[mid] >= size)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void slab_set_class(struct gs_suballoc *sa, struct slab *s, uint32_t cls)
{
	s->cls = cls;
	s->used = 0;
	s->hint = 0;
	s->total = (uint32_t)(sa->slab_size / sa->class_size[cls]);
	memset(s->bits, 0, sa->nwords * sizeof(uint64_t));
	for (uint32_t b = s->total; b < sa->nwords * 64u; b++)
		s->bits[b / 64] |= 1ULL << (b % 64);
}

int gs_suballoc_new(const struct gs_suballoc_config *cfg, const struct gs_suballoc_ops *ops,
		    struct gs_suballoc **out, struct gs_err *err)
{
	struct gs_suballoc_config c = cfg ? *cfg : (struct gs_suballoc_config){ 0, 0, 0, GS_SUBALLOC_DEFAULT_SPARES };
	if (!c.slab_size)
		c.slab_size = 2 * GS_MiB;
	if (!c.threshold)
		c.threshold = GS_MiB;
	if (!c.align)
		c.align = GS_SUBALLOC_DEFAULT_ALIGN;
	if (c.spare_slabs == GS_SUBALLOC_DEFAULT_SPARES)
		c.spare_slabs = 1;
	*out = NULL;
	if (!ops || !ops->slab_alloc || !ops->slab_free)
		return gs_fail(err, GS_E_USAGE, "sub-allocator needs slab_alloc and slab_free callbacks");
	if (c.align < 256 || (c.align & (c.align - 1)))
		return gs_fail(err, GS_E_USAGE, "sub-allocator alignment %llu is not a power of two >= 256",
			       (unsigned long long)c.align);
	if (c.slab_size % c.align || c.threshold > c.slab_size || c.slab_size / c.align > UINT32_MAX)
		return gs_fail(err, GS_E_USAGE,
			       "sub-allocator slab size %llu must be a multiple of %llu and at least the threshold %llu",
			       (unsigned long long)c.slab_size, (unsigned long long)c.align,
			       (unsigned long long)c.threshold);

	struct gs_suballoc *sa = calloc(1, sizeof(*sa));
	if (!sa)
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the sub-allocator");
	sa->ops = *ops;
	sa->slab_size = c.slab_size;
	sa->threshold = c.threshold;
	sa->align = c.align;
	sa->spare_max = c.spare_slabs;
	sa->nwords = (uint32_t)((c.slab_size / c.align + 63) / 64);
	/* at most two classes per power of two up to 2^64 */
	sa->class_size = calloc(130, sizeof(uint64_t));
	sa->slabs = gs_alloc_registry_new();
	if (!sa->class_size || !sa->slabs || pthread_mutex_init(&sa->lock, NULL)) {
		gs_alloc_registry_free(sa->slabs);
		free(sa->class_size);
		free(sa);
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the sub-allocator");
	}
	for (uint64_t p = c.align; p < c.threshold; p *= 2) {
		sa->class_size[sa->nclasses++] = p;
		uint64_t mid = p + p / 2;
		if (mid < c.threshold && mid % c.align == 0)
			sa->class_size[sa->nclasses++] = mid;
		if (p > UINT64_MAX / 2)
			break;
	}
	/* the last class is the threshold itself, rounded to the alignment */
	sa->class_size[sa->nclasses++] = gs_round_up(c.threshold, c.align);
	sa->partial = calloc(sa->nclasses, sizeof(*sa->partial));
	if (!sa->partial) {
		gs_suballoc_destroy(sa);
		return gs_fail(err, GS_E_FAILURE, "out of memory creating the sub-allocator");
	}
	*out = sa;
	return 0;
}

static int free_all_visit(void *ctx, const struct gs_alloc_rec *rec)
{
	struct gs_suballoc *sa = ctx;
	sa->ops.slab_free(sa->ops.ctx, rec->va, rec->size);
	free((struct slab *)(uintptr_t)rec->user);
	return 0;
}

void gs_suballoc_destroy(struct gs_suballoc *sa)
{
	if (!sa)
		return;
	gs_alloc_registry_foreach(sa->slabs, 0, UINT64_MAX, 0, free_all_visit, sa);
	gs_alloc_registry_free(sa->slabs);
	pthread_mutex_destroy(&sa->lock);
	free(sa->partial);
	free(sa->class_size);
	free(sa);
}

bool gs_suballoc_serves(const struct gs_suballoc *sa, uint64_t size)
{
	return size > 0 && size <= sa->threshold;
}

uint64_t gs_suballoc_block_size(const struct gs_suballoc *sa, uint64_t size)
{
	uint32_t cls = class_of(sa, size);
	return cls == NO_CLASS ? 0 : sa->class_size[cls];
}

/* Takes a block from a slab on the class's partial list. Lock held. */
static uint64_t take_block(struct gs_suballoc *sa, struct slab *s)
{
	uint32_t w = s->hint;
	while (s->bits[w] == UINT64_MAX)
		w++; /* a partial slab has a free bit at or after the hint */
	uint32_t b = (uint32_t)__builtin_ctzll(~s->bits[w]);
	s->bits[w] |= 1ULL << b;
	s->hint = w;
	s->used++;
	if (s->used == s->total)
		list_del(&sa->partial[s->cls], s);
	sa->blocks++;
	sa->block_bytes += sa->class_size[s->cls];
	return s->va + (uint64_t)(w * 64u + b) * sa->class_size[s->cls];
}

int gs_suballoc_alloc(struct gs_suballoc *sa, uint64_t size, uint64_t *va, struct gs_err *err)
{
	uint32_t cls = class_of(sa, size);
	if (cls == NO_CLASS)
		return gs_fail(err, GS_E_USAGE, "sub-allocator does not serve %llu byte allocations (limit %llu)",
			       (unsigned long long)size, (unsigned long long)sa->threshold);
	pthread_mutex_lock(&sa->lock);
	struct slab *s = sa->partial[cls].head;
	if (!s && sa->spares.head) {
		s = sa->spares.head;
		list_del(&sa->spares, s);
		slab_set_class(sa, s, cls);
		list_push(&sa->partial[cls], s);
	}
	if (s) {
		*va = take_block(sa, s);
		pthread_mutex_unlock(&sa->lock);
		return 0;
	}
	pthread_mutex_unlock(&sa->lock);

	/* A new slab, mapped without the lock: mapping device memory is slow. */
	uint64_t slab_va = 0;
	int rc = sa->ops.slab_alloc(sa->ops.ctx, sa->slab_size, &slab_va);
	if (rc)
		return gs_fail(err, GS_E_NO_VRAM, "cannot map a %llu byte slab for a %llu byte allocation (error %d)",
			       (unsigned long long)sa->slab_size, (unsigned long long)size, rc);
	if (slab_va % sa->align) {
		sa->ops.slab_free(sa->ops.ctx, slab_va, sa->slab_size);
		return gs_fail(err, GS_E_FAILURE, "slab at 0x%llx is not aligned to %llu bytes",
			       (unsigned long long)slab_va, (unsigned long long)sa->align);
	}
	s = malloc(sizeof(*s) + sa->nwords * sizeof(uint64_t));
	if (!s) {
		sa->ops.slab_free(sa->ops.ctx, slab_va, sa->slab_size);
		return gs_fail(err, GS_E_FAILURE, "out of memory tracking a slab");
	}
	s->va = slab_va;
	slab_set_class(sa, s, cls);
	struct gs_alloc_rec rec = { slab_va, sa->slab_size, GS_ALLOC_POOL, 0, 0, (uint64_t)(uintptr_t)s, 0 };
	pthread_mutex_lock(&sa->lock);
	rc = gs_alloc_registry_insert(sa->slabs, &rec, err);
	if (rc) {
		pthread_mutex_unlock(&sa->lock);
		free(s);
		sa->ops.slab_free(sa->ops.ctx, slab_va, sa->slab_size);
		return gs_err_wrap(err, "new slab");
	}
	sa->nslabs++;
	list_push(&sa->partial[cls], s);
	*va = take_block(sa, s);
	pthread_mutex_unlock(&sa->lock);
	return 0;
}

/* The slab containing ptr. Lock held. */
static struct slab *slab_at(struct gs_suballoc *sa, uint64_t ptr)
{
	struct gs_alloc_rec rec;
	if (!gs_alloc_registry_find(sa->slabs, ptr, &rec))
		return NULL;
	return (struct slab *)(uintptr_t)rec.user;
}

int gs_suballoc_free(struct gs_suballoc *sa, uint64_t va, uint64_t *block_size, struct gs_err *err)
{
	pthread_mutex_lock(&sa->lock);
	struct slab *s = slab_at(sa, va);
	uint64_t off = s ? va - s->va : 0;
	uint64_t bsize = s && s->cls != NO_CLASS ? sa->class_size[s->cls] : 0;
	uint64_t idx = bsize ? off / bsize : 0;
	if (!bsize || off % bsize || idx >= s->total || !(s->bits[idx / 64] & (1ULL << (idx % 64)))) {
		pthread_mutex_unlock(&sa->lock);
		return gs_fail(err, GS_E_STATE, "0x%llx is not a live small allocation", (unsigned long long)va);
	}
	if (s->used == s->total)
		list_push(&sa->partial[s->cls], s);
	s->bits[idx / 64] &= ~(1ULL << (idx % 64));
	if (idx / 64 < s->hint)
		s->hint = (uint32_t)(idx / 64);
	s->used--;
	sa->blocks--;
	sa->block_bytes -= bsize;
	if (block_size)
		*block_size = bsize;

	struct slab *release = NULL;
	if (s->used == 0) {
		list_del(&sa->partial[s->cls], s);
		s->cls = NO_CLASS;
		s->total = 0;
		if (sa->spares.count < sa->spare_max) {
			list_push(&sa->spares, s);
		} else {
			gs_alloc_registry_remove(sa->slabs, s->va, NULL);
			sa->nslabs--;
			release = s;
		}
	}
	pthread_mutex_unlock(&sa->lock);
	if (release) {
		sa->ops.slab_free(sa->ops.ctx, release->va, sa->slab_size);
		free(release);
	}
	return 0;
}

bool gs_suballoc_find(struct gs_suballoc *sa, uint64_t ptr, uint64_t *block_va, uint64_t *block_size)
{
	bool found = false;
	pthread_mutex_lock(&sa->lock);
	struct slab *s = slab_at(sa, ptr);
	if (s && s->cls != NO_CLASS) {
		uint64_t bsize = sa->class_size[s->cls];
		uint64_t idx = (ptr - s->va) / bsize;
		if (idx < s->total && (s->bits[idx / 64] & (1ULL << (idx % 64)))) {
			found = true;
			if (block_va)
				*block_va = s->va + idx * bsize;
			if (block_size)
				*block_size = bsize;
		}
	}
	pthread_mutex_unlock(&sa->lock);
	return found;
}

struct slab_walk {
	struct gs_suballoc *sa;
	gs_slab_visit_fn fn;
	void *ctx;
};

static int slab_visit(void *ctx, const struct gs_alloc_rec *rec)
{
	struct slab_walk *w = ctx;
	const struct slab *s = (const struct slab *)(uintptr_t)rec->user;
	struct gs_slab_info info = {
		.va = s->va,
		.size = w->sa->slab_size,
		.block_size = s->cls == NO_CLASS ? 0 : w->sa->class_size[s->cls],
		.blocks_used = s->used,
		.blocks_total = s->total,
	};
	return w->fn(w->ctx, &info);
}

int gs_suballoc_foreach_slab(struct gs_suballoc *sa, gs_slab_visit_fn fn, void *ctx)
{
	struct slab_walk w = { sa, fn, ctx };
	pthread_mutex_lock(&sa->lock);
	int rc = gs_alloc_registry_foreach(sa->slabs, 0, UINT64_MAX, 0, slab_visit, &w);
	pthread_mutex_unlock(&sa->lock);
	return rc;
}

void gs_suballoc_trim(struct gs_suballoc *sa)
{
	pthread_mutex_lock(&sa->lock);
	struct slab *list = sa->spares.head;
	for (struct slab *s = list; s; s = s->next) {
		gs_alloc_registry_remove(sa->slabs, s->va, NULL);
		sa->nslabs--;
	}
	sa->spares.head = NULL;
	sa->spares.count = 0;
	pthread_mutex_unlock(&sa->lock);
	while (list) {
		struct slab *next = list->next;
		sa->ops.slab_free(sa->ops.ctx, list->va, sa->slab_size);
		free(list);
		list = next;
	}
}

void gs_suballoc_get_stats(struct gs_suballoc *sa, struct gs_suballoc_stats *st)
{
	pthread_mutex_lock(&sa->lock);
	st->slabs = sa->nslabs;
	st->slab_bytes = sa->nslabs * sa->slab_size;
	st->spare_slabs = sa->spares.count;
	st->blocks = sa->blocks;
	st->block_bytes = sa->block_bytes;
	pthread_mutex_unlock(&sa->lock);
}
