/*
 * test_alloc_registry.c - the allocation registry against a slot-array model:
 * random inserts/removes/lookups, overlap rejection, range edges, iteration
 * order, a million records, concurrent readers and writers.
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/util.h"
#include "core/alloc_registry.h"
#include "test.h"

#define SLOTS 4096
#define SLOT_BYTES 4096ULL
#define BASE 0x7f0000000000ULL

/* The model: owner[s] is 1 + index of the record covering slot s, or 0. */
struct model {
	int owner[SLOTS];
	struct gs_alloc_rec recs[SLOTS];
	bool live[SLOTS];
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct collect {
	struct gs_alloc_rec recs[SLOTS];
	size_t n;
};

static int collect_fn(void *ctx, const struct gs_alloc_rec *rec)
{
	struct collect *c = ctx;
	c->recs[c->n++] = *rec;
	return 0;
}

static void test_random_against_model(void)
{
	static struct model m;
	static struct collect c;
	struct gs_alloc_registry *r = gs_alloc_registry_new();
	struct gs_err err = { 0 };
	uint64_t live_count = 0, live_bytes = 0;
	int mismatches = 0;

	for (int step = 0; step < 200000 && mismatches < 5; step++) {
		int op = (int)(rnd() % 10);
		if (op < 5) {
			int start = (int)(rnd() % SLOTS);
			int len = 1 + (int)(rnd() % 16);
			if (start + len > SLOTS)
				len = SLOTS - start;
			/* sizes that end inside a slot as well as on a slot edge */
			uint64_t size = (uint64_t)len * SLOT_BYTES - (rnd() % 2 ? rnd() % SLOT_BYTES : 0);
			bool overlap = false;
			for (int s = start; s < start + len; s++)
				overlap |= m.owner[s] != 0;
			struct gs_alloc_rec rec = { BASE + start * SLOT_BYTES, size, GS_ALLOC_DEVICE + (uint32_t)(rnd() % 4),
						    (int32_t)(rnd() % 2), rnd(), (uint64_t)step, 0 };
			int rc = gs_alloc_registry_insert(r, &rec, &err);
			if (rc != (overlap ? GS_E_STATE : 0)) {
				fprintf(stderr, "step %d: insert slot %d len %d returned %d, model overlap %d\n", step, start,
					len, rc, overlap);
				mismatches++;
				CHECK(0);
			}
			if (!rc) {
				for (int s = start; s < start + len; s++)
					m.owner[s] = start + 1;
				m.recs[start] = rec;
				m.live[start] = true;
				live_count++;
				live_bytes += size;
			}
		} else if (op < 8) {
			/* remove: a live base half the time, any slot address otherwise */
			int s = (int)(rnd() % SLOTS);
			if (rnd() % 2 && m.owner[s])
				s = m.owner[s] - 1;
			struct gs_alloc_rec out;
			bool removed = gs_alloc_registry_remove(r, BASE + s * SLOT_BYTES, &out);
			if (removed != m.live[s]) {
				mismatches++;
				CHECK(0);
			}
			if (removed) {
				CHECK(out.va == m.recs[s].va && out.size == m.recs[s].size && out.user == m.recs[s].user);
				int len = (int)((out.size + SLOT_BYTES - 1) / SLOT_BYTES);
				for (int k = s; k < s + len; k++)
					m.owner[k] = 0;
				m.live[s] = false;
				live_count--;
				live_bytes -= out.size;
			}
		} else {
			/* find an arbitrary pointer, including tails past a short record's end */
			int s = (int)(rnd() % SLOTS);
			uint64_t ptr = BASE + s * SLOT_BYTES + rnd() % SLOT_BYTES;
			struct gs_alloc_rec out;
			bool found = gs_alloc_registry_find(r, ptr, &out);
			bool expect = false;
			if (m.owner[s]) {
				const struct gs_alloc_rec *mr = &m.recs[m.owner[s] - 1];
				expect = ptr < mr->va + mr->size;
				if (found)
					CHECK(out.va == mr->va);
			}
			if (found != expect) {
				mismatches++;
				CHECK(0);
			}
		}
		if (step % 20000 == 0) {
			uint64_t n, b;
			gs_alloc_registry_stats(r, &n, &b);
			CHECK(n == live_count && b == live_bytes);
			c.n = 0;
			CHECK_INT(gs_alloc_registry_foreach(r, 0, UINT64_MAX, 0, collect_fn, &c), 0);
			CHECK(c.n == live_count);
			size_t k = 0;
			for (int s = 0; s < SLOTS && k < c.n; s++)
				if (m.live[s])
					CHECK(c.recs[k++].va == m.recs[s].va);
		}
	}
	gs_alloc_registry_free(r);
}

static void test_overlap_and_edges(void)
{
	struct gs_alloc_registry *r = gs_alloc_registry_new();
	struct gs_err err = { 0 };
	struct gs_alloc_rec a = { 0x10000, 0x1000, GS_ALLOC_DEVICE, 0, 1, 0, 0 };
	struct gs_alloc_rec out;
	CHECK_INT(gs_alloc_registry_insert(r, &a, &err), 0);
	/* exact duplicate, start inside, end inside, covering */
	struct gs_alloc_rec bad[] = {
		{ 0x10000, 0x1000, 1, 0, 0, 0, 0 }, { 0x10fff, 0x10, 1, 0, 0, 0, 0 },
		{ 0xf000, 0x1001, 1, 0, 0, 0, 0 },  { 0x0, 0x100000, 1, 0, 0, 0, 0 },
	};
	for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
		CHECK_INT(gs_alloc_registry_insert(r, &bad[i], &err), GS_E_STATE);
	CHECK_CONTAINS(err.msg, "overlaps recorded allocation 0x10000-0x11000");
	/* touching on both sides is fine */
	struct gs_alloc_rec left = { 0xf000, 0x1000, 1, 0, 2, 0, 0 }, right = { 0x11000, 0x1, 1, 0, 3, 0, 0 };
	CHECK_INT(gs_alloc_registry_insert(r, &left, &err), 0);
	CHECK_INT(gs_alloc_registry_insert(r, &right, &err), 0);
	struct gs_alloc_rec zero = { 0x20000, 0, 1, 0, 0, 0, 0 }, wrap = { UINT64_MAX - 10, 11, 1, 0, 0, 0, 0 };
	CHECK_INT(gs_alloc_registry_insert(r, &zero, &err), GS_E_USAGE);
	CHECK_INT(gs_alloc_registry_insert(r, &wrap, &err), GS_E_USAGE);

	CHECK(gs_alloc_registry_find(r, 0x10000, &out) && out.handle == 1);
	CHECK(gs_alloc_registry_find(r, 0x10fff, &out) && out.handle == 1);
	CHECK(gs_alloc_registry_find(r, 0x11000, &out) && out.handle == 3);
	CHECK(!gs_alloc_registry_find(r, 0x11001, &out));
	CHECK(gs_alloc_registry_find(r, 0xefff + 1, &out) && out.handle == 2);
	CHECK(!gs_alloc_registry_find(r, 0xefff, &out));
	CHECK(!gs_alloc_registry_find(r, 0, &out));
	CHECK(!gs_alloc_registry_find(r, UINT64_MAX, &out));
	CHECK(gs_alloc_registry_get(r, 0x10000, &out));
	CHECK(!gs_alloc_registry_get(r, 0x10001, &out));
	CHECK(gs_alloc_registry_update(r, 0x10000, 77, 88));
	CHECK(gs_alloc_registry_get(r, 0x10000, &out) && out.handle == 77 && out.user == 88);
	CHECK(!gs_alloc_registry_update(r, 0x10001, 1, 1));
	/* removing by an interior address is not removing */
	CHECK(!gs_alloc_registry_remove(r, 0x10800, NULL));
	CHECK(gs_alloc_registry_remove(r, 0x10000, NULL));
	CHECK(!gs_alloc_registry_find(r, 0x10000, &out));
	gs_alloc_registry_free(r);
}

static void test_range_walk_and_kinds(void)
{
	struct gs_alloc_registry *r = gs_alloc_registry_new();
	struct gs_err err = { 0 };
	static struct collect c;
	for (uint64_t i = 0; i < 100; i++) {
		struct gs_alloc_rec rec = { 0x1000 * (i + 1), 0x800, i % 2 ? GS_ALLOC_SUBALLOC : GS_ALLOC_DEVICE, 0, i, 0, 0 };
		CHECK_INT(gs_alloc_registry_insert(r, &rec, &err), 0);
	}
	/* [0x1400, 0x3001): record 1 (0x1000-0x1800) reaches in, 2 inside, 3 starts at 0x3000 */
	c.n = 0;
	gs_alloc_registry_foreach(r, 0x1400, 0x3001, 0, collect_fn, &c);
	CHECK_INT(c.n, 3);
	CHECK(c.recs[0].va == 0x1000 && c.recs[1].va == 0x2000 && c.recs[2].va == 0x3000);
	/* [0x1800, 0x3000): record 1 ends exactly at lo, record 3 starts exactly at hi */
	c.n = 0;
	gs_alloc_registry_foreach(r, 0x1800, 0x3000, 0, collect_fn, &c);
	CHECK_INT(c.n, 1);
	CHECK(c.recs[0].va == 0x2000);
	c.n = 0;
	gs_alloc_registry_foreach(r, 0, UINT64_MAX, GS_ALLOC_MASK(GS_ALLOC_SUBALLOC), collect_fn, &c);
	CHECK_INT(c.n, 50);
	for (size_t i = 0; i < c.n; i++)
		CHECK(c.recs[i].kind == GS_ALLOC_SUBALLOC && (i == 0 || c.recs[i].va > c.recs[i - 1].va));
	struct gs_alloc_rec *snap;
	size_t n;
	CHECK_INT(gs_alloc_registry_snapshot(r, GS_ALLOC_MASK(GS_ALLOC_DEVICE), &snap, &n, &err), 0);
	CHECK_INT(n, 50);
	CHECK(snap && snap[0].va == 0x1000 && snap[49].va == 0x63000);
	free(snap);
	gs_alloc_registry_free(r);
}

static int count_fn(void *ctx, const struct gs_alloc_rec *rec)
{
	uint64_t *prev = ctx;
	if (rec->va <= prev[0] && prev[1])
		return -1;
	prev[0] = rec->va;
	prev[1]++;
	return 0;
}

static void test_million_records(void)
{
	const uint64_t n = 1000000;
	struct gs_alloc_registry *r = gs_alloc_registry_new();
	struct gs_err err = { 0 };
	uint64_t *order = malloc(n * sizeof(*order));
	for (uint64_t i = 0; i < n; i++)
		order[i] = i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = rnd() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	double t0 = gs_now();
	int fails = 0;
	for (uint64_t i = 0; i < n; i++) {
		struct gs_alloc_rec rec = { BASE + order[i] * 1024, 512, GS_ALLOC_SUBALLOC, 0, order[i], 0, 0 };
		fails += gs_alloc_registry_insert(r, &rec, &err) != 0;
	}
	double t1 = gs_now();
	for (uint64_t i = 0; i < n; i++) {
		struct gs_alloc_rec out;
		fails += !gs_alloc_registry_find(r, BASE + i * 1024 + 511, &out) || out.handle != i;
		fails += gs_alloc_registry_find(r, BASE + i * 1024 + 512, &out);
	}
	double t2 = gs_now();
	for (uint64_t i = 0; i < n; i++) {
		struct gs_alloc_rec out;
		fails += !gs_alloc_registry_find(r, BASE + order[i] * 1024 + 7, &out) || out.handle != order[i];
	}
	double t2b = gs_now();
	CHECK_INT(fails, 0);
	uint64_t cnt, bytes;
	gs_alloc_registry_stats(r, &cnt, &bytes);
	CHECK(cnt == n && bytes == n * 512);
	uint64_t walk[2] = { 0, 0 };
	CHECK_INT(gs_alloc_registry_foreach(r, 0, UINT64_MAX, 0, count_fn, walk), 0);
	CHECK(walk[1] == n);
	for (uint64_t i = 0; i < n; i++)
		fails += !gs_alloc_registry_remove(r, BASE + order[i] * 1024, NULL);
	double t3 = gs_now();
	CHECK_INT(fails, 0);
	gs_alloc_registry_stats(r, &cnt, &bytes);
	CHECK(cnt == 0 && bytes == 0);
	printf("     1e6 records, random order: insert %.0f ns, find %.0f ns (in address order %.0f ns), remove %.0f ns\n",
	       (t1 - t0) * 1e9 / n, (t2b - t2) * 1e9 / n, (t2 - t1) * 1e9 / (2 * n), (t3 - t2b) * 1e9 / n);
	free(order);
	gs_alloc_registry_free(r);
}

struct thread_arg {
	struct gs_alloc_registry *r;
	int id;
	int errors;
};

static void *writer(void *p)
{
	struct thread_arg *a = p;
	struct gs_err err;
	for (int round = 0; round < 20; round++) {
		for (uint64_t i = 0; i < 2000; i++) {
			struct gs_alloc_rec rec = { ((uint64_t)a->id << 32) + i * 256, 256, 1, 0, i, 0, 0 };
			a->errors += gs_alloc_registry_insert(a->r, &rec, &err) != 0;
		}
		for (uint64_t i = 0; i < 2000; i++)
			a->errors += !gs_alloc_registry_remove(a->r, ((uint64_t)a->id << 32) + i * 256, NULL);
	}
	return NULL;
}

static void *reader(void *p)
{
	struct thread_arg *a = p;
	struct gs_alloc_rec out;
	for (int i = 0; i < 200000; i++) {
		/* the fixed record is always found and always intact */
		if (!gs_alloc_registry_find(a->r, 0x100 + (uint64_t)(i % 0x100), &out) || out.handle != 42)
			a->errors++;
	}
	return NULL;
}

static void test_threads(void)
{
	struct gs_alloc_registry *r = gs_alloc_registry_new();
	struct gs_err err;
	struct gs_alloc_rec fixed = { 0x100, 0x100, 1, 0, 42, 0, 0 };
	CHECK_INT(gs_alloc_registry_insert(r, &fixed, &err), 0);
	pthread_t t[4];
	struct thread_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){ r, i + 1, 0 };
		pthread_create(&t[i], NULL, i < 2 ? writer : reader, &args[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_INT(args[i].errors, 0);
	}
	uint64_t cnt;
	gs_alloc_registry_stats(r, &cnt, NULL);
	CHECK(cnt == 1);
	gs_alloc_registry_free(r);
}

/* Ids: set by insert whatever the caller passed, never given twice (also across registries), kept by update. */
static void test_ids(void)
{
	struct gs_alloc_registry *r = gs_alloc_registry_new(), *r2 = gs_alloc_registry_new();
	struct gs_alloc_rec rec = { .va = 0x1000, .size = 0x100, .kind = 1, .id = 7 }, a, b, c, d;
	CHECK_INT(gs_alloc_registry_insert(r, &rec, NULL), 0);
	CHECK(gs_alloc_registry_get(r, 0x1000, &a));
	CHECK(a.id != 0 && a.id != 7);
	CHECK(gs_alloc_registry_update(r, 0x1000, 5, 6));
	CHECK(gs_alloc_registry_find(r, 0x10ff, &b));
	CHECK(b.id == a.id && b.handle == 5);
	/* the same address again after a free: another allocation, another id */
	CHECK(gs_alloc_registry_remove(r, 0x1000, NULL));
	CHECK_INT(gs_alloc_registry_insert(r, &rec, NULL), 0);
	CHECK(gs_alloc_registry_get(r, 0x1000, &c));
	CHECK(c.id != a.id);
	CHECK_INT(gs_alloc_registry_insert(r2, &rec, NULL), 0);
	CHECK(gs_alloc_registry_get(r2, 0x1000, &d));
	CHECK(d.id != a.id && d.id != c.id);
	gs_alloc_registry_free(r);
	gs_alloc_registry_free(r2);
}

int main(void)
{
	RUN(test_ids);
	RUN(test_overlap_and_edges);
	RUN(test_range_walk_and_kinds);
	RUN(test_random_against_model);
	RUN(test_million_records);
	RUN(test_threads);
	return TEST_SUMMARY();
}
