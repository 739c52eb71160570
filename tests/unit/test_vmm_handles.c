/*
 * test_vmm_handles.c - the table of the app's virtual VMM handles
 * (core/vmm_handles.c): values, references and mapping lifetime as the driver
 * defines them, access records and their pruning, export marking.
 */
#include <stdlib.h>

#include "core/vmm_handles.h"
#include "test.h"

#define MiB (1ULL << 20)

static uint64_t add(struct gs_vh_table *t, uint64_t size, int32_t device)
{
	struct gs_vh_handle init = { .real = 0x1000 + size, .size = size, .device = device, .releasable = true,
				     .prop_len = 4 };
	memcpy(init.prop, "prop", 4);
	uint64_t vh = 0;
	struct gs_err err = { 0 };
	CHECK_INT(gs_vh_add(t, &init, &vh, &err), 0);
	return vh;
}

static void test_values(void)
{
	struct gs_vh_table *t = gs_vh_table_new();
	uint64_t a = add(t, 2 * MiB, 0), b = add(t, 4 * MiB, 1);
	CHECK(gs_vh_is_virtual(a) && gs_vh_is_virtual(b));
	CHECK(a != b);
	CHECK(!gs_vh_is_virtual(0x7f0012345678ULL));
	CHECK(gs_vh_get(t, a) && gs_vh_get(t, a)->size == 2 * MiB && gs_vh_get(t, a)->refs == 1);
	CHECK(gs_vh_get(t, b) && gs_vh_get(t, b)->device == 1 && !memcmp(gs_vh_get(t, b)->prop, "prop", 4));
	CHECK(gs_vh_get(t, 0x1000 + 2 * MiB) == NULL); /* a real handle is not ours */
	gs_vh_remove(t, a);
	CHECK(gs_vh_get(t, a) == NULL);
	uint64_t c = add(t, 2 * MiB, 0);
	CHECK(c != a && c > b); /* never reused */
	CHECK(gs_vh_get(t, b) && gs_vh_get(t, c));

	struct gs_vh_handle big = { .prop_len = GS_VH_PROP_MAX + 1 };
	struct gs_err err = { 0 };
	uint64_t v;
	CHECK_INT(gs_vh_add(t, &big, &v, &err), GS_E_USAGE);
	gs_vh_table_free(t);
}

static void test_many(void)
{
	struct gs_vh_table *t = gs_vh_table_new();
	enum { N = 5000 };
	uint64_t *v = malloc(N * sizeof(*v));
	for (int i = 0; i < N; i++)
		v[i] = add(t, 2 * MiB, 0);
	for (int i = 0; i < N; i += 2)
		gs_vh_remove(t, v[i]);
	int found = 0;
	for (int i = 0; i < N; i++)
		found += gs_vh_get(t, v[i]) != NULL;
	CHECK_INT(found, N / 2);
	uint64_t count, bytes;
	gs_vh_stats(t, &count, &bytes);
	CHECK_INT(count, N / 2);
	CHECK_INT(bytes, (N / 2) * 2 * MiB);
	free(v);
	gs_vh_table_free(t);
}

/* Driver semantics: physical memory lives until every reference is released and every mapping unmapped. */
static void test_lifetime(void)
{
	struct gs_vh_table *t = gs_vh_table_new();
	struct gs_err err = { 0 };
	uint64_t h = add(t, 4 * MiB, 0);
	uint64_t va1 = 0x10000000, va2 = 0x20000000;
	CHECK_INT(gs_vh_map(t, h, va1, 4 * MiB, 0, &err), 0);
	CHECK_INT(gs_vh_map(t, h, va2, 2 * MiB, 2 * MiB, &err), 0);
	CHECK_INT(gs_vh_map(t, h, va2 + MiB, 2 * MiB, 0, &err), GS_E_STATE); /* overlaps */
	CHECK_INT(gs_vh_map(t, h, 0x30000000, 4 * MiB, 2 * MiB, &err), GS_E_STATE); /* beyond the handle */
	CHECK_INT(gs_vh_map(t, 0x1234, 0x30000000, MiB, 0, &err), GS_E_STATE);       /* not ours */
	CHECK(gs_vh_mapping_at(t, va2 + MiB + 5) && gs_vh_mapping_at(t, va2 + MiB + 5)->offset == 2 * MiB);
	CHECK(gs_vh_mapping_at(t, va2 + 2 * MiB) == NULL);
	CHECK(gs_vh_range_known(t, va1 - MiB, 2 * MiB));
	CHECK(!gs_vh_range_known(t, va1 - MiB, MiB));

	/* a retain, then two releases: the last one leaves the mappings alive */
	gs_vh_retain(gs_vh_get(t, h));
	CHECK(!gs_vh_release(gs_vh_get(t, h)));
	CHECK(!gs_vh_release(gs_vh_get(t, h)));
	CHECK(gs_vh_get(t, h) && gs_vh_get(t, h)->refs == 0);

	uint64_t *dead;
	size_t ndead;
	CHECK_INT(gs_vh_unmap(t, va1, 4 * MiB, &dead, &ndead, &err), 0);
	CHECK_INT(ndead, 0);
	CHECK_INT(gs_vh_get(t, h)->nmaps, 1);
	CHECK_INT(gs_vh_unmap(t, va2, 2 * MiB, &dead, &ndead, &err), 0);
	CHECK_INT(ndead, 1);
	CHECK(ndead == 1 && dead[0] == h);
	free(dead);
	CHECK(gs_vh_mapping_at(t, va2) == NULL);
	gs_vh_remove(t, h);
	CHECK(gs_vh_get(t, h) == NULL);

	/* unmapped first, released after: the release kills it */
	uint64_t g = add(t, 2 * MiB, 0);
	CHECK_INT(gs_vh_map(t, g, va1, 2 * MiB, 0, &err), 0);
	CHECK_INT(gs_vh_unmap(t, va1, 2 * MiB, &dead, &ndead, &err), 0);
	CHECK_INT(ndead, 0);
	CHECK(gs_vh_release(gs_vh_get(t, g)));

	/* one unmap over mappings of two handles, both released: both die, listed once each */
	uint64_t x = add(t, 2 * MiB, 0), y = add(t, 2 * MiB, 0);
	CHECK_INT(gs_vh_map(t, x, va1, 2 * MiB, 0, &err), 0);
	CHECK_INT(gs_vh_map(t, y, va1 + 2 * MiB, 2 * MiB, 0, &err), 0);
	CHECK_INT(gs_vh_map(t, x, va1 + 4 * MiB, 2 * MiB, 0, &err), 0);
	gs_vh_release(gs_vh_get(t, x));
	gs_vh_release(gs_vh_get(t, y));
	CHECK_INT(gs_vh_unmap(t, va1, 6 * MiB, &dead, &ndead, &err), 0);
	CHECK_INT(ndead, 2);
	free(dead);
	gs_vh_table_free(t);
}

static void test_access(void)
{
	struct gs_vh_table *t = gs_vh_table_new();
	struct gs_err err = { 0 };
	uint64_t h = add(t, 4 * MiB, 0), g = add(t, 4 * MiB, 0);
	uint64_t va = 0x10000000;
	CHECK_INT(gs_vh_map(t, h, va, 4 * MiB, 0, &err), 0);
	CHECK_INT(gs_vh_map(t, g, va + 4 * MiB, 4 * MiB, 0, &err), 0);
	struct gs_vh_mapping *mh = gs_vh_mapping_at(t, va), *mg = gs_vh_mapping_at(t, va + 4 * MiB);
	CHECK(!gs_vh_mapping_writable_by(mh, 1, 0, 3));

	/* one call over both mappings (as PyTorch's expandable segments do) */
	struct gs_vh_access rw0[2] = { { 1, 0, 3 }, { 1, 1, 1 } };
	CHECK_INT(gs_vh_set_access(t, va, 8 * MiB, rw0, 2, &err), 0);
	CHECK_INT(mh->nops, 1);
	CHECK_INT(mg->nops, 1);
	CHECK(mh->ops[0].offset == 0 && mh->ops[0].size == 4 * MiB && mh->ops[0].n == 2);
	CHECK(gs_vh_mapping_writable_by(mh, 1, 0, 3));
	CHECK(!gs_vh_mapping_writable_by(mh, 1, 1, 3)); /* device 1 only reads */

	/* a part of g made read-only: kept after the first, and g no longer writable as a whole */
	struct gs_vh_access ro0 = { 1, 0, 1 };
	CHECK_INT(gs_vh_set_access(t, va + 5 * MiB, 2 * MiB, &ro0, 1, &err), 0);
	CHECK_INT(mg->nops, 2);
	CHECK(mg->ops[1].offset == MiB && mg->ops[1].size == 2 * MiB);
	CHECK(!gs_vh_mapping_writable_by(mg, 1, 0, 3));

	/* the same full-range access again and again does not grow the list */
	for (int i = 0; i < 100; i++)
		CHECK_INT(gs_vh_set_access(t, va, 4 * MiB, rw0, 2, &err), 0);
	CHECK_INT(mh->nops, 1);
	/* a later full-range record for device 0 only: the earlier one (device 1 too) stays */
	CHECK_INT(gs_vh_set_access(t, va, 4 * MiB, rw0, 1, &err), 0);
	CHECK_INT(mh->nops, 2);
	CHECK(gs_vh_mapping_writable_by(mh, 1, 0, 3));
	/* g made writable again over its whole range: both earlier records are covered */
	CHECK_INT(gs_vh_set_access(t, va + 4 * MiB, 4 * MiB, rw0, 2, &err), 0);
	CHECK_INT(mg->nops, 1);
	CHECK(gs_vh_mapping_writable_by(mg, 1, 0, 3));
	gs_vh_table_free(t);
}

static void test_export(void)
{
	struct gs_vh_table *t = gs_vh_table_new();
	struct gs_err err = { 0 };
	uint64_t h = add(t, 4 * MiB, 0), g = add(t, 2 * MiB, 0);
	uint64_t bytes = 0;
	CHECK_INT(gs_vh_mark_exported(gs_vh_get(t, h), &bytes), 1);
	CHECK_INT(gs_vh_mark_exported(gs_vh_get(t, h), &bytes), 0); /* counted once */
	CHECK_INT(bytes, 4 * MiB);
	CHECK(!gs_vh_get(t, h)->releasable && gs_vh_get(t, h)->exported);
	CHECK_INT(gs_vh_map(t, g, 0x10000000, 2 * MiB, 0, &err), 0);
	bytes = 0;
	CHECK_INT(gs_vh_mark_range_exported(t, 0x10000000 + MiB, 4096, &bytes), 1);
	CHECK_INT(bytes, 2 * MiB);
	uint64_t count;
	gs_vh_stats(t, &count, &bytes);
	CHECK_INT(count, 0);
	gs_vh_table_free(t);
}

int main(void)
{
	RUN(test_values);
	RUN(test_many);
	RUN(test_lifetime);
	RUN(test_access);
	RUN(test_export);
	return TEST_SUMMARY();
}
