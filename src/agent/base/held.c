/*
 * held.c - the region list the memory kinds fill for a plan (held.h).
 */
#include "agent/base/held.h"

#include "common/util.h"

int gs_held_add(struct gs_region_list *l, const struct held_region *r)
{
	if (gs_grow_array((void **)&l->r, &l->cap, l->n, sizeof(*l->r), 256))
		return -1;
	l->r[l->n++] = *r;
	return 0;
}
