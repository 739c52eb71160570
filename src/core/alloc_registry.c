/*
 * alloc_registry.c - the allocation table as an AVL tree under a rwlock (see
 * alloc_registry.h). Recursion depth is bounded by the tree height, at most
 * 1.44 * log2(n) (about 29 for a million records).
 */
#include "core/alloc_registry.h"

#include <pthread.h>
#include <stdlib.h>

struct node {
	struct gs_alloc_rec rec;
	struct node *left, *right;
	int height;
};

struct gs_alloc_registry {
	pthread_rwlock_t lock;
	struct node *root;
	uint64_t count, bytes;
};

static int height(const struct node *n)
{
	return n ? n->height : 0;
}

static void fix_height(struct node *n)
{
	int hl = height(n->left), hr = height(n->right);
	n->height = (hl > hr ? hl : hr) + 1;
}

static struct node *rotate_right(struct node *n)
{
	struct node *l = n->left;
	n->left = l->right;
	l->right = n;
	fix_height(n);
	fix_height(l);
	return l;
}

static struct node *rotate_left(struct node *n)
{
	struct node *r = n->right;
	n->right = r->left;
	r->left = n;
	fix_height(n);
	fix_height(r);
	return r;
}

/* Restores the AVL property at n after one of its subtrees changed height by one. */
static struct node *rebalance(struct node *n)
{
	fix_height(n);
	int bal = height(n->left) - height(n->right);
	if (bal > 1) {
		if (height(n->left->left) < height(n->left->right))
			n->left = rotate_left(n->left);
		return rotate_right(n);
	}
	if (bal < -1) {
		if (height(n->right->right) < height(n->right->left))
			n->right = rotate_right(n->right);
		return rotate_left(n);
	}
	return n;
}

/* The caller has checked that no record overlaps nn, so keys are unique. */
static struct node *insert_node(struct node *n, struct node *nn)
{
	if (!n)
		return nn;
	if (nn->rec.va < n->rec.va)
		n->left = insert_node(n->left, nn);
	else
		n->right = insert_node(n->right, nn);
	return rebalance(n);
}

static struct node *detach_min(struct node *n, struct node **min)
{
	if (!n->left) {
		*min = n;
		return n->right;
	}
	n->left = detach_min(n->left, min);
	return rebalance(n);
}

static struct node *remove_node(struct node *n, uint64_t va, struct node **removed)
{
	if (!n)
		return NULL;
	if (va < n->rec.va) {
		n->left = remove_node(n->left, va, removed);
	} else if (va > n->rec.va) {
		n->right = remove_node(n->right, va, removed);
	} else {
		*removed = n;
		if (!n->left)
			return n->right;
		if (!n->right)
			return n->left;
		struct node *succ;
		struct node *right = detach_min(n->right, &succ);
		succ->left = n->left;
		succ->right = right;
		return rebalance(succ);
	}
	return rebalance(n);
}

/* The record with the greatest base <= key, or NULL. */
static struct node *floor_node(struct node *n, uint64_t key)
{
	struct node *best = NULL;
	while (n) {
		if (n->rec.va == key)
			return n;
		if (n->rec.va < key) {
			best = n;
			n = n->right;
		} else {
			n = n->left;
		}
	}
	return best;
}

/* The neighbours of key in one descent: greatest base <= key, smallest base > key. */
static void neighbours(struct node *n, uint64_t key, struct node **lo, struct node **hi)
{
	*lo = *hi = NULL;
	while (n) {
		if (n->rec.va <= key) {
			*lo = n;
			n = n->right;
		} else {
			*hi = n;
			n = n->left;
		}
	}
}

static void free_nodes(struct node *n)
{
	while (n) {
		free_nodes(n->left);
		struct node *right = n->right;
		free(n);
		n = right;
	}
}

struct gs_alloc_registry *gs_alloc_registry_new(void)
{
	struct gs_alloc_registry *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	if (pthread_rwlock_init(&r->lock, NULL)) {
		free(r);
		return NULL;
	}
	return r;
}

void gs_alloc_registry_free(struct gs_alloc_registry *r)
{
	if (!r)
		return;
	free_nodes(r->root);
	pthread_rwlock_destroy(&r->lock);
	free(r);
}

int gs_alloc_registry_insert(struct gs_alloc_registry *r, const struct gs_alloc_rec *rec, struct gs_err *err)
{
	if (rec->size == 0)
		return gs_fail(err, GS_E_USAGE, "allocation record at 0x%llx has size 0", (unsigned long long)rec->va);
	if (rec->va + rec->size < rec->va)
		return gs_fail(err, GS_E_USAGE, "allocation record 0x%llx + %llu wraps around the address space",
			       (unsigned long long)rec->va, (unsigned long long)rec->size);
	struct node *nn = malloc(sizeof(*nn));
	if (!nn)
		return gs_fail(err, GS_E_FAILURE, "out of memory recording an allocation");
	static uint64_t last_id; /* atomic */
	nn->rec = *rec;
	nn->rec.id = __atomic_add_fetch(&last_id, 1, __ATOMIC_RELAXED);
	nn->left = nn->right = NULL;
	nn->height = 1;

	pthread_rwlock_wrlock(&r->lock);
	struct node *lo, *hi;
	neighbours(r->root, rec->va, &lo, &hi);
	struct node *clash = NULL;
	if (lo && lo->rec.va + lo->rec.size > rec->va)
		clash = lo;
	else if (hi && hi->rec.va < rec->va + rec->size)
		clash = hi;
	if (clash) {
		struct gs_alloc_rec c = clash->rec;
		pthread_rwlock_unlock(&r->lock);
		free(nn);
		return gs_fail(err, GS_E_STATE,
			       "allocation 0x%llx-0x%llx overlaps recorded allocation 0x%llx-0x%llx",
			       (unsigned long long)rec->va, (unsigned long long)(rec->va + rec->size),
			       (unsigned long long)c.va, (unsigned long long)(c.va + c.size));
	}
	r->root = insert_node(r->root, nn);
	r->count++;
	r->bytes += rec->size;
	pthread_rwlock_unlock(&r->lock);
	return 0;
}

bool gs_alloc_registry_remove(struct gs_alloc_registry *r, uint64_t va, struct gs_alloc_rec *out)
{
	struct node *removed = NULL;
	pthread_rwlock_wrlock(&r->lock);
	r->root = remove_node(r->root, va, &removed);
	if (removed) {
		r->count--;
		r->bytes -= removed->rec.size;
	}
	pthread_rwlock_unlock(&r->lock);
	if (!removed)
		return false;
	if (out)
		*out = removed->rec;
	free(removed);
	return true;
}

bool gs_alloc_registry_get(struct gs_alloc_registry *r, uint64_t va, struct gs_alloc_rec *out)
{
	pthread_rwlock_rdlock(&r->lock);
	struct node *n = floor_node(r->root, va);
	bool found = n && n->rec.va == va;
	if (found && out)
		*out = n->rec;
	pthread_rwlock_unlock(&r->lock);
	return found;
}

bool gs_alloc_registry_find(struct gs_alloc_registry *r, uint64_t ptr, struct gs_alloc_rec *out)
{
	pthread_rwlock_rdlock(&r->lock);
	struct node *n = floor_node(r->root, ptr);
	bool found = n && ptr - n->rec.va < n->rec.size;
	if (found && out)
		*out = n->rec;
	pthread_rwlock_unlock(&r->lock);
	return found;
}

bool gs_alloc_registry_update(struct gs_alloc_registry *r, uint64_t va, uint64_t handle, uint64_t user)
{
	pthread_rwlock_wrlock(&r->lock);
	struct node *n = floor_node(r->root, va);
	bool found = n && n->rec.va == va;
	if (found) {
		n->rec.handle = handle;
		n->rec.user = user;
	}
	pthread_rwlock_unlock(&r->lock);
	return found;
}

void gs_alloc_registry_stats(struct gs_alloc_registry *r, uint64_t *count, uint64_t *bytes)
{
	pthread_rwlock_rdlock(&r->lock);
	if (count)
		*count = r->count;
	if (bytes)
		*bytes = r->bytes;
	pthread_rwlock_unlock(&r->lock);
}

struct walk {
	uint64_t lo, hi;
	uint32_t kind_mask;
	gs_alloc_visit_fn fn;
	void *ctx;
};

/*
 * In-order walk pruned to [lo, hi). Records do not overlap, so everything in
 * the left subtree of a node based below lo also ends at or below that base
 * and cannot reach lo: only nodes based at or above lo need their left side.
 */
static int walk(const struct node *n, const struct walk *w)
{
	while (n) {
		if (n->rec.va >= w->lo) {
			int rc = walk(n->left, w);
			if (rc)
				return rc;
		}
		if (n->rec.va >= w->hi)
			return 0;
		if (n->rec.va + n->rec.size > w->lo && (!w->kind_mask || (w->kind_mask & GS_ALLOC_MASK(n->rec.kind)))) {
			int rc = w->fn(w->ctx, &n->rec);
			if (rc)
				return rc;
		}
		n = n->right;
	}
	return 0;
}

int gs_alloc_registry_foreach(struct gs_alloc_registry *r, uint64_t lo, uint64_t hi, uint32_t kind_mask,
			      gs_alloc_visit_fn fn, void *ctx)
{
	struct walk w = { lo, hi, kind_mask, fn, ctx };
	pthread_rwlock_rdlock(&r->lock);
	int rc = lo < hi ? walk(r->root, &w) : 0;
	pthread_rwlock_unlock(&r->lock);
	return rc;
}

struct snap {
	struct gs_alloc_rec *recs;
	size_t n, cap;
};

static int snap_add(void *ctx, const struct gs_alloc_rec *rec)
{
	struct snap *s = ctx;
	if (s->n == s->cap)
		return -1; /* cannot happen: cap is the record count under the same lock */
	s->recs[s->n++] = *rec;
	return 0;
}

int gs_alloc_registry_snapshot(struct gs_alloc_registry *r, uint32_t kind_mask, struct gs_alloc_rec **out,
			       size_t *count, struct gs_err *err)
{
	struct snap s = { 0 };
	*out = NULL;
	*count = 0;
	/* Sized under the same read lock as the walk, so the array always fits. */
	pthread_rwlock_rdlock(&r->lock);
	s.cap = r->count;
	if (s.cap) {
		s.recs = malloc(s.cap * sizeof(*s.recs));
		if (!s.recs) {
			pthread_rwlock_unlock(&r->lock);
			return gs_fail(err, GS_E_FAILURE, "out of memory copying %llu allocation records",
				       (unsigned long long)s.cap);
		}
		struct walk w = { 0, UINT64_MAX, kind_mask, snap_add, &s };
		walk(r->root, &w);
	}
	pthread_rwlock_unlock(&r->lock);
	if (s.n == 0) {
		free(s.recs);
		return 0;
	}
	*out = s.recs;
	*count = s.n;
	return 0;
}
