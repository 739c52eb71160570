/*
 * vmm_handles.c - the table of the app's virtual VMM handles (see
 * vmm_handles.h).
 *
 * Records sit in an array sorted by virtual value: values come from a counter,
 * so a new record is appended and a lookup is a binary search. Mappings are
 * found by address through an allocation registry (core/alloc_registry.c)
 * whose records point at them (user field).
 */
#include "core/vmm_handles.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "core/alloc_registry.h"

struct gs_vh_table {
	struct gs_vh_handle **h; /* sorted by vh */
	size_t n, cap;
	uint64_t next; /* counter of the next virtual value */
	struct gs_alloc_registry *maps;
};

struct gs_vh_table *gs_vh_table_new(void)
{
	struct gs_vh_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->maps = gs_alloc_registry_new();
	if (!t->maps) {
		free(t);
		return NULL;
	}
	t->next = 1;
	return t;
}

static void free_mapping(struct gs_vh_mapping *m)
{
	for (size_t i = 0; i < m->nops; i++)
		free(m->ops[i].desc);
	free(m->ops);
	free(m);
}

static void free_handle(struct gs_vh_handle *h)
{
	for (size_t i = 0; i < h->nmaps; i++)
		free_mapping(h->maps[i]);
	free(h->maps);
	free(h);
}

void gs_vh_table_free(struct gs_vh_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free_handle(t->h[i]);
	free(t->h);
	gs_alloc_registry_free(t->maps);
	free(t);
}

/* Index of vh, or the index where it would go. */
static size_t find_index(const struct gs_vh_table *t, uint64_t vh)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->h[mid]->vh < vh)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int gs_vh_add(struct gs_vh_table *t, const struct gs_vh_handle *init, uint64_t *vh, struct gs_err *err)
{
	if (init->prop_len > GS_VH_PROP_MAX)
		return gs_fail(err, GS_E_USAGE, "allocation properties of %zu bytes (at most %d kept)", init->prop_len,
			       GS_VH_PROP_MAX);
	if (t->next & GS_VH_TAG_MASK)
		return gs_fail(err, GS_E_FAILURE, "virtual allocation handles exhausted");
	if (gs_grow_array((void **)&t->h, &t->cap, t->n, sizeof(*t->h), 64))
		return gs_fail(err, GS_E_FAILURE, "out of memory recording an allocation handle");
	struct gs_vh_handle *h = malloc(sizeof(*h));
	if (!h)
		return gs_fail(err, GS_E_FAILURE, "out of memory recording an allocation handle");
	*h = *init;
	h->vh = GS_VH_TAG | t->next++;
	h->refs = 1;
	h->maps = NULL;
	h->nmaps = h->maps_cap = 0;
	h->window_va = 0;
	h->window_own = false;
	t->h[t->n++] = h; /* the largest value yet: stays sorted */
	*vh = h->vh;
	return 0;
}

struct gs_vh_handle *gs_vh_get(struct gs_vh_table *t, uint64_t vh)
{
	if (!gs_vh_is_virtual(vh))
		return NULL;
	size_t i = find_index(t, vh);
	return i < t->n && t->h[i]->vh == vh ? t->h[i] : NULL;
}

void gs_vh_remove(struct gs_vh_table *t, uint64_t vh)
{
	size_t i = find_index(t, vh);
	if (i >= t->n || t->h[i]->vh != vh)
		return;
	struct gs_vh_handle *h = t->h[i];
	for (size_t k = 0; k < h->nmaps; k++)
		gs_alloc_registry_remove(t->maps, h->maps[k]->va, NULL);
	free_handle(h);
	memmove(&t->h[i], &t->h[i + 1], (t->n - i - 1) * sizeof(*t->h));
	t->n--;
}

void gs_vh_retain(struct gs_vh_handle *h) { h->refs++; }

bool gs_vh_release(struct gs_vh_handle *h)
{
	if (h->refs)
		h->refs--;
	return h->refs == 0 && h->nmaps == 0;
}

int gs_vh_map(struct gs_vh_table *t, uint64_t vh, uint64_t va, uint64_t size, uint64_t offset, struct gs_err *err)
{
	struct gs_vh_handle *h = gs_vh_get(t, vh);
	if (!h)
		return gs_fail(err, GS_E_STATE, "unknown allocation handle %#llx", (unsigned long long)vh);
	if (size == 0 || offset > h->size || size > h->size - offset)
		return gs_fail(err, GS_E_STATE, "mapping of %llu bytes at offset %llu exceeds the allocation of %llu bytes",
			       (unsigned long long)size, (unsigned long long)offset, (unsigned long long)h->size);
	if (gs_grow_array((void **)&h->maps, &h->maps_cap, h->nmaps, sizeof(*h->maps), 2))
		return gs_fail(err, GS_E_FAILURE, "out of memory recording a mapping");
	struct gs_vh_mapping *m = calloc(1, sizeof(*m));
	if (!m)
		return gs_fail(err, GS_E_FAILURE, "out of memory recording a mapping");
	m->va = va;
	m->size = size;
	m->offset = offset;
	m->vh = vh;
	struct gs_alloc_rec rec = { .va = va, .size = size, .kind = GS_ALLOC_APP_VMM, .device = h->device, .handle = vh,
				    .user = (uint64_t)(uintptr_t)m };
	int rc = gs_alloc_registry_insert(t->maps, &rec, err);
	if (rc) {
		free(m);
		return rc;
	}
	h->maps[h->nmaps++] = m;
	return 0;
}

struct gs_vh_mapping *gs_vh_mapping_at(struct gs_vh_table *t, uint64_t addr)
{
	struct gs_alloc_rec rec;
	if (!gs_alloc_registry_find(t->maps, addr, &rec))
		return NULL;
	return (struct gs_vh_mapping *)(uintptr_t)rec.user;
}

struct collect {
	struct gs_vh_mapping **m;
	size_t n, cap;
};

static int collect_mapping(void *ctx, const struct gs_alloc_rec *rec)
{
	struct collect *c = ctx;
	if (gs_grow_array((void **)&c->m, &c->cap, c->n, sizeof(*c->m), 8))
		return -1;
	c->m[c->n++] = (struct gs_vh_mapping *)(uintptr_t)rec->user;
	return 0;
}

/* The mappings intersecting [va, va+size), in address order. */
static int mappings_in(struct gs_vh_table *t, uint64_t va, uint64_t size, struct collect *c, struct gs_err *err)
{
	memset(c, 0, sizeof(*c));
	uint64_t hi = va + size < va ? UINT64_MAX : va + size;
	if (gs_alloc_registry_foreach(t->maps, va, hi, 0, collect_mapping, c)) {
		free(c->m);
		c->m = NULL;
		return gs_fail(err, GS_E_FAILURE, "out of memory listing mappings");
	}
	return 0;
}

bool gs_vh_range_known(struct gs_vh_table *t, uint64_t va, uint64_t size)
{
	struct collect c;
	struct gs_err err = { 0 };
	if (mappings_in(t, va, size, &c, &err))
		return true; /* cannot tell: treat as ours, the caller then looks closer */
	free(c.m);
	return c.n > 0;
}

int gs_vh_unmap(struct gs_vh_table *t, uint64_t va, uint64_t size, uint64_t **dead, size_t *ndead, struct gs_err *err)
{
	*dead = NULL;
	*ndead = 0;
	struct collect c;
	int rc = mappings_in(t, va, size, &c, err);
	if (rc || c.n == 0) {
		free(c.m);
		return rc;
	}
	uint64_t *d = malloc(c.n * sizeof(*d));
	if (!d) {
		free(c.m);
		return gs_fail(err, GS_E_FAILURE, "out of memory forgetting mappings");
	}
	size_t nd = 0;
	for (size_t i = 0; i < c.n; i++) {
		struct gs_vh_mapping *m = c.m[i];
		struct gs_vh_handle *h = gs_vh_get(t, m->vh);
		gs_alloc_registry_remove(t->maps, m->va, NULL);
		if (h) {
			for (size_t k = 0; k < h->nmaps; k++)
				if (h->maps[k] == m) {
					h->maps[k] = h->maps[--h->nmaps];
					break;
				}
			if (h->refs == 0 && h->nmaps == 0) {
				bool listed = false;
				for (size_t k = 0; k < nd && !listed; k++)
					listed = d[k] == h->vh;
				if (!listed)
					d[nd++] = h->vh;
			}
		}
		free_mapping(m);
	}
	free(c.m);
	if (nd) {
		*dead = d;
		*ndead = nd;
	} else {
		free(d);
	}
	return 0;
}

static bool has_location(const struct gs_vh_access *d, size_t n, const struct gs_vh_access *x)
{
	for (size_t i = 0; i < n; i++)
		if (d[i].loc_type == x->loc_type && d[i].loc_id == x->loc_id)
			return true;
	return false;
}

/* Appends op (taking its desc) to m, dropping earlier records it overrides entirely. */
static int add_op(struct gs_vh_mapping *m, struct gs_vh_access_op *op)
{
	size_t k = 0;
	for (size_t i = 0; i < m->nops; i++) {
		struct gs_vh_access_op *o = &m->ops[i];
		bool inside = o->offset >= op->offset && o->offset + o->size <= op->offset + op->size;
		bool covered = inside;
		for (size_t j = 0; covered && j < o->n; j++)
			covered = has_location(op->desc, op->n, &o->desc[j]);
		if (covered)
			free(o->desc);
		else
			m->ops[k++] = *o;
	}
	m->nops = k;
	if (gs_grow_array((void **)&m->ops, &m->cap, m->nops, sizeof(*m->ops), 2))
		return -1;
	m->ops[m->nops++] = *op;
	return 0;
}

int gs_vh_set_access(struct gs_vh_table *t, uint64_t va, uint64_t size, const struct gs_vh_access *desc, size_t n,
		     struct gs_err *err)
{
	struct collect c;
	int rc = mappings_in(t, va, size, &c, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < c.n && !rc; i++) {
		struct gs_vh_mapping *m = c.m[i];
		uint64_t lo = va > m->va ? va : m->va;
		uint64_t end = va + size, mend = m->va + m->size;
		uint64_t hi = end < mend ? end : mend;
		struct gs_vh_access_op op = { .offset = lo - m->va, .size = hi - lo, .n = n };
		op.desc = malloc((n ? n : 1) * sizeof(*op.desc));
		if (op.desc && n)
			memcpy(op.desc, desc, n * sizeof(*desc));
		if (!op.desc || add_op(m, &op)) {
			free(op.desc);
			rc = gs_fail(err, GS_E_FAILURE, "out of memory recording access to %#llx", (unsigned long long)m->va);
			break;
		}
	}
	free(c.m);
	return rc;
}

bool gs_vh_mapping_writable_by(const struct gs_vh_mapping *m, int32_t loc_type, int32_t loc_id, int32_t rw_flags)
{
	/* the last record that sets this location over the whole mapping decides */
	for (size_t i = m->nops; i-- > 0;) {
		const struct gs_vh_access_op *o = &m->ops[i];
		for (size_t j = 0; j < o->n; j++) {
			const struct gs_vh_access *d = &o->desc[j];
			if (d->loc_type != loc_type || d->loc_id != loc_id)
				continue;
			if (o->offset != 0 || o->size != m->size)
				return false; /* a part set differently after: not one access for all of it */
			return d->flags == rw_flags;
		}
	}
	return false;
}

size_t gs_vh_mark_exported(struct gs_vh_handle *h, uint64_t *bytes)
{
	h->exported = true;
	if (!h->releasable)
		return 0;
	h->releasable = false;
	*bytes += h->size;
	return 1;
}

size_t gs_vh_mark_range_exported(struct gs_vh_table *t, uint64_t va, uint64_t size, uint64_t *bytes)
{
	struct collect c;
	struct gs_err err = { 0 };
	size_t n = 0;
	if (mappings_in(t, va, size, &c, &err)) {
		/* cannot list them: mark every handle, the safe side */
		for (size_t i = 0; i < t->n; i++)
			n += gs_vh_mark_exported(t->h[i], bytes);
		return n;
	}
	for (size_t i = 0; i < c.n; i++) {
		struct gs_vh_handle *h = gs_vh_get(t, c.m[i]->vh);
		if (h)
			n += gs_vh_mark_exported(h, bytes);
	}
	free(c.m);
	return n;
}

int gs_vh_foreach(struct gs_vh_table *t, gs_vh_visit_fn fn, void *ctx)
{
	for (size_t i = 0; i < t->n; i++) {
		int rc = fn(ctx, t->h[i]);
		if (rc)
			return rc;
	}
	return 0;
}

void gs_vh_stats(struct gs_vh_table *t, uint64_t *count, uint64_t *bytes)
{
	*count = 0;
	*bytes = 0;
	for (size_t i = 0; i < t->n; i++)
		if (t->h[i]->releasable) {
			(*count)++;
			*bytes += t->h[i]->size;
		}
}
