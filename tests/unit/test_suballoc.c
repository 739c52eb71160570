/*
 * test_suballoc.c - the small-allocation sub-allocator with a fake slab source:
 * random alloc/free checked against a shadow registry (no overlap, inside a
 * live slab, aligned), slab release and spares, slab_alloc failure, threads.
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/util.h"
#include "core/alloc_registry.h"
#include "core/suballoc.h"
#include "test.h"

/* A fake device: hands out slab-aligned address ranges and remembers which are live. */
struct fake_dev {
	pthread_mutex_t lock;
	uint64_t next_va;
	uint64_t misalign; /* added to every returned address */
	int fail_after;    /* slab_alloc fails once this many more calls succeeded; -1 never */
	uint64_t live, allocs, frees;
	struct gs_alloc_registry *slabs;
	int bad_frees;
	struct gs_suballoc_ops ops; /* the sub-allocator's slab source: this device */
};

static int fake_slab_alloc(void *ctx, uint64_t size, uint64_t *va)
{
	struct fake_dev *d = ctx;
	pthread_mutex_lock(&d->lock);
	if (d->fail_after == 0) {
		pthread_mutex_unlock(&d->lock);
		return 2; /* what CUDA_ERROR_OUT_OF_MEMORY is */
	}
	if (d->fail_after > 0)
		d->fail_after--;
	*va = d->next_va + d->misalign;
	d->next_va += size + size; /* leave holes so neighbours never touch */
	struct gs_alloc_rec rec = { *va, size, GS_ALLOC_DEVICE, 0, 0, 0, 0 };
	gs_alloc_registry_insert(d->slabs, &rec, NULL);
	d->live++;
	d->allocs++;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void fake_slab_free(void *ctx, uint64_t va, uint64_t size)
{
	struct fake_dev *d = ctx;
	pthread_mutex_lock(&d->lock);
	struct gs_alloc_rec rec;
	if (!gs_alloc_registry_remove(d->slabs, va, &rec) || rec.size != size)
		d->bad_frees++;
	d->live--;
	d->frees++;
	pthread_mutex_unlock(&d->lock);
}

static void fake_init(struct fake_dev *d)
{
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->lock, NULL);
	d->next_va = 0x7f0000000000ULL;
	d->fail_after = -1;
	d->slabs = gs_alloc_registry_new();
	d->ops = (struct gs_suballoc_ops){ fake_slab_alloc, fake_slab_free, d };
}

/* Where most tests start: a fresh fake device and a sub-allocator with the default configuration over it. */
static struct gs_suballoc *fake_suballoc(struct fake_dev *d)
{
	fake_init(d);
	struct gs_suballoc *sa = NULL;
	struct gs_err err = { 0 };
	CHECK_INT(gs_suballoc_new(NULL, &d->ops, &sa, &err), 0);
	return sa;
}

static void fake_fini(struct fake_dev *d)
{
	gs_alloc_registry_free(d->slabs);
	pthread_mutex_destroy(&d->lock);
}

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* A request size: mostly tiny, some around class edges, some near the threshold. */
static uint64_t random_size(uint64_t threshold)
{
	switch (rnd() % 4) {
	case 0: return 1 + rnd() % 256;
	case 1: return 1 + rnd() % 8192;
	case 2: return (1ULL << (rnd() % 21)) + (rnd() % 3) - 1; /* 2^k - 1, 2^k, 2^k + 1 */
	default: return 1 + rnd() % threshold;
	}
}

static void test_random_shadow(void)
{
	struct fake_dev d;
	struct gs_suballoc *sa = fake_suballoc(&d);
	struct gs_err err = { 0 };
	struct gs_alloc_registry *shadow = gs_alloc_registry_new();
	enum { MAXLIVE = 20000 };
	uint64_t *live = malloc(MAXLIVE * sizeof(*live));
	size_t nlive = 0;
	int bad = 0;
	uint64_t requested = 0;

	for (int step = 0; step < 100000 && bad < 5; step++) {
		bool do_alloc = nlive == 0 || (nlive < MAXLIVE && rnd() % 100 < 55);
		if (do_alloc) {
			uint64_t size = random_size(GS_MiB);
			if (size == 0 || size > GS_MiB)
				size = 1;
			uint64_t va = 0, bsize = gs_suballoc_block_size(sa, size);
			if (gs_suballoc_alloc(sa, size, &va, &err)) {
				fprintf(stderr, "alloc %llu: %s\n", (unsigned long long)size, err.msg);
				bad++;
				continue;
			}
			struct gs_alloc_rec slab, rec = { va, size, GS_ALLOC_SUBALLOC, 0, bsize, 0, 0 };
			/* inside one live slab, aligned, not overlapping any live block */
			if (va % GS_SUBALLOC_DEFAULT_ALIGN || bsize < size || !gs_alloc_registry_find(d.slabs, va, &slab) ||
			    va + bsize > slab.va + slab.size || gs_alloc_registry_insert(shadow, &rec, &err)) {
				fprintf(stderr, "bad block 0x%llx size %llu: %s\n", (unsigned long long)va,
					(unsigned long long)size, err.msg);
				bad++;
				continue;
			}
			/* power-of-two classes are naturally aligned (the fake's slabs are 2 MiB-aligned) */
			if ((bsize & (bsize - 1)) == 0 && va % bsize)
				bad++;
			live[nlive++] = va;
			requested += size;
		} else {
			size_t i = rnd() % nlive;
			struct gs_alloc_rec rec;
			uint64_t bsize = 0;
			CHECK(gs_alloc_registry_remove(shadow, live[i], &rec));
			/* an interior pointer is found but cannot be freed */
			uint64_t bva = 0, fsize = 0;
			CHECK(gs_suballoc_find(sa, live[i] + rec.size - 1, &bva, &fsize) && bva == live[i] &&
			      fsize == rec.handle);
			if (rec.handle > 256)
				CHECK_INT(gs_suballoc_free(sa, live[i] + 256, NULL, &err), GS_E_STATE);
			CHECK_INT(gs_suballoc_free(sa, live[i], &bsize, &err), 0);
			CHECK(bsize == rec.handle);
			CHECK_INT(gs_suballoc_free(sa, live[i], NULL, &err), GS_E_STATE); /* double free */
			CHECK(!gs_suballoc_find(sa, live[i], NULL, NULL));
			requested -= rec.size;
			live[i] = live[--nlive];
		}
	}
	CHECK_INT(bad, 0);
	struct gs_suballoc_stats st;
	gs_suballoc_get_stats(sa, &st);
	CHECK(st.blocks == nlive);
	CHECK(st.slabs == d.live);
	/* rounding to classes wastes at most a third (plus the 512-byte minimum) */
	CHECK(st.block_bytes <= requested + requested / 2 + GS_SUBALLOC_DEFAULT_ALIGN * nlive);
	printf("     %zu live, %llu requested bytes in %llu slabs (%.1f%% of slab bytes used)\n", nlive,
	       (unsigned long long)requested, (unsigned long long)st.slabs, 100.0 * requested / st.slab_bytes);

	while (nlive)
		CHECK_INT(gs_suballoc_free(sa, live[--nlive], NULL, &err), 0);
	gs_suballoc_get_stats(sa, &st);
	CHECK(st.blocks == 0 && st.block_bytes == 0);
	CHECK_INT(st.slabs, 1); /* one spare kept */
	CHECK_INT(d.live, 1);
	gs_suballoc_trim(sa);
	CHECK_INT(d.live, 0);
	gs_suballoc_destroy(sa);
	CHECK_INT(d.bad_frees, 0);
	gs_alloc_registry_free(shadow);
	free(live);
	fake_fini(&d);
}

static void test_many_tiny(void)
{
	struct fake_dev d;
	struct gs_suballoc *sa = fake_suballoc(&d);
	struct gs_err err = { 0 };
	static uint64_t va[10000];
	for (int i = 0; i < 10000; i++)
		CHECK_INT(gs_suballoc_alloc(sa, 1, &va[i], &err), 0);
	/* 10,000 x 512 bytes = 4.9 MiB: three slabs, not 10,000 granules */
	CHECK_INT(d.live, 3);
	CHECK(!gs_suballoc_serves(sa, 0) && gs_suballoc_serves(sa, 1) && gs_suballoc_serves(sa, GS_MiB) &&
	      !gs_suballoc_serves(sa, GS_MiB + 1));
	CHECK_INT(gs_suballoc_alloc(sa, GS_MiB + 1, &va[0], &err), GS_E_USAGE);
	CHECK_INT(gs_suballoc_alloc(sa, 0, &va[0], &err), GS_E_USAGE);
	gs_suballoc_destroy(sa); /* with live blocks: every slab goes back */
	CHECK_INT(d.live, 0);
	CHECK_INT(d.bad_frees, 0);
	fake_fini(&d);
}

struct slab_count {
	uint64_t slabs, used, prev_va;
	bool ordered;
};

static int count_slab(void *ctx, const struct gs_slab_info *s)
{
	struct slab_count *c = ctx;
	c->ordered &= s->va > c->prev_va;
	c->prev_va = s->va;
	c->slabs++;
	c->used += s->blocks_used;
	return 0;
}

static void test_slab_release_and_iteration(void)
{
	struct fake_dev d;
	fake_init(&d);
	struct gs_suballoc *sa;
	struct gs_err err = { 0 };
	struct gs_suballoc_config cfg = { 2 * GS_MiB, GS_MiB, 256, 0 }; /* no spares */
	CHECK_INT(gs_suballoc_new(&cfg, &d.ops, &sa, &err), 0);
	uint64_t a, b, c;
	/* 1 MiB blocks: two per slab */
	CHECK_INT(gs_suballoc_alloc(sa, GS_MiB, &a, &err), 0);
	CHECK_INT(gs_suballoc_alloc(sa, GS_MiB - 5, &b, &err), 0);
	CHECK_INT(gs_suballoc_alloc(sa, 700 * GS_KiB, &c, &err), 0); /* 768 KiB class: its own slab */
	CHECK_INT(d.live, 2);
	CHECK(b == a + GS_MiB || a == b + GS_MiB);
	struct slab_count cnt = { 0, 0, 0, true };
	gs_suballoc_foreach_slab(sa, count_slab, &cnt);
	CHECK(cnt.slabs == 2 && cnt.used == 3 && cnt.ordered);
	CHECK_INT(gs_suballoc_free(sa, a, NULL, &err), 0);
	CHECK_INT(d.live, 2);
	CHECK_INT(gs_suballoc_free(sa, b, NULL, &err), 0);
	CHECK_INT(d.live, 1); /* empty and no spares allowed: released at once */
	CHECK_INT(gs_suballoc_free(sa, c, NULL, &err), 0);
	CHECK_INT(d.live, 0);
	CHECK_INT(d.bad_frees, 0);
	gs_suballoc_destroy(sa);

	/* with a spare, a free/alloc cycle maps nothing new, and the spare serves any class */
	cfg.spare_slabs = 1;
	CHECK_INT(gs_suballoc_new(&cfg, &d.ops, &sa, &err), 0);
	uint64_t allocs = d.allocs;
	for (int i = 0; i < 100; i++) {
		CHECK_INT(gs_suballoc_alloc(sa, i % 2 ? 100 : 300000, &a, &err), 0);
		CHECK_INT(gs_suballoc_free(sa, a, NULL, &err), 0);
	}
	CHECK(d.allocs == allocs + 1);
	cnt = (struct slab_count){ 0, 0, 0, true };
	gs_suballoc_foreach_slab(sa, count_slab, &cnt);
	CHECK(cnt.slabs == 1 && cnt.used == 0);
	gs_suballoc_destroy(sa);
	CHECK_INT(d.live, 0);
	fake_fini(&d);
}

static void test_failures_and_config(void)
{
	struct fake_dev d;
	struct gs_suballoc *sa = fake_suballoc(&d);
	struct gs_err err = { 0 };
	uint64_t va;
	d.fail_after = 1;
	CHECK_INT(gs_suballoc_alloc(sa, 4096, &va, &err), 0);
	/* the first slab serves 512 blocks of 4 KiB; the next slab cannot be had */
	for (int i = 1; i < 512; i++)
		CHECK_INT(gs_suballoc_alloc(sa, 4096, &va, &err), 0);
	CHECK_INT(gs_suballoc_alloc(sa, 4096, &va, &err), GS_E_NO_VRAM);
	CHECK_CONTAINS(err.msg, "cannot map a 2097152 byte slab for a 4096 byte allocation (error 2)");
	d.fail_after = -1;
	CHECK_INT(gs_suballoc_alloc(sa, 4096, &va, &err), 0);
	gs_suballoc_destroy(sa);

	d.misalign = 128;
	CHECK_INT(gs_suballoc_new(NULL, &d.ops, &sa, &err), 0);
	CHECK_INT(gs_suballoc_alloc(sa, 1, &va, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "not aligned to 512 bytes");
	CHECK_INT(d.live, 0);
	gs_suballoc_destroy(sa);
	CHECK_INT(d.bad_frees, 0);

	struct gs_suballoc_config bad1 = { 2 * GS_MiB, 4 * GS_MiB, 256, 1 };
	struct gs_suballoc_config bad2 = { 2 * GS_MiB, GS_MiB, 384, 1 };
	struct gs_suballoc_config odd = { 3 * GS_MiB, 1000, 512, 1 };
	CHECK_INT(gs_suballoc_new(&bad1, &d.ops, &sa, &err), GS_E_USAGE);
	CHECK_INT(gs_suballoc_new(&bad2, &d.ops, &sa, &err), GS_E_USAGE);
	CHECK_INT(gs_suballoc_new(&odd, &d.ops, &sa, &err), 0);
	CHECK(gs_suballoc_block_size(sa, 1) == 512 && gs_suballoc_block_size(sa, 513) == 1024 &&
	      gs_suballoc_block_size(sa, 1000) == 1024 && gs_suballoc_block_size(sa, 1001) == 0);
	d.misalign = 0;
	CHECK_INT(gs_suballoc_alloc(sa, 600, &va, &err), 0);
	CHECK(va % 512 == 0);
	gs_suballoc_destroy(sa);
	fake_fini(&d);
}

/*
 * By default every block is aligned as cudaMalloc's pointers are (512 bytes),
 * for every size: the 513-768 byte requests once got a 768-byte class, so
 * every other block was only 256-aligned.
 */
static void test_cudamalloc_alignment(void)
{
	struct fake_dev d;
	struct gs_suballoc *sa = fake_suballoc(&d);
	struct gs_err err = { 0 };
	int misaligned = 0, first_bad = 0;
	for (uint64_t size = 1; size <= 4096; size++) {
		uint64_t va[4];
		for (int i = 0; i < 4; i++) { /* several, so blocks after the first of a slab count too */
			CHECK_INT(gs_suballoc_alloc(sa, size, &va[i], &err), 0);
			if (va[i] % 512 || gs_suballoc_block_size(sa, size) % 512) {
				misaligned++;
				first_bad = first_bad ? first_bad : (int)size;
			}
		}
		for (int i = 0; i < 4; i++)
			CHECK_INT(gs_suballoc_free(sa, va[i], NULL, &err), 0);
	}
	CHECK_INT(misaligned, 0);
	CHECK_INT(first_bad, 0);
	CHECK_INT(gs_suballoc_block_size(sa, 513), 1024);
	CHECK_INT(gs_suballoc_block_size(sa, 768), 1024);
	CHECK_INT(gs_suballoc_block_size(sa, 1025), 1536);
	uint64_t va;
	CHECK_INT(gs_suballoc_alloc(sa, GS_MiB, &va, &err), 0);
	CHECK(va % GS_MiB == 0); /* the largest class is a power of two: aligned to itself */
	gs_suballoc_destroy(sa);
	fake_fini(&d);
}

struct worker_arg {
	struct gs_suballoc *sa;
	int errors;
};

static void *churn(void *p)
{
	struct worker_arg *a = p;
	uint64_t va[64];
	struct gs_err err;
	for (int round = 0; round < 2000; round++) {
		for (int i = 0; i < 64; i++)
			a->errors += gs_suballoc_alloc(a->sa, 1 + (uint64_t)(round * 64 + i) % 70000, &va[i], &err) != 0;
		for (int i = 0; i < 64; i++)
			a->errors += gs_suballoc_free(a->sa, va[i], NULL, &err) != 0;
	}
	return NULL;
}

static void test_threads(void)
{
	struct fake_dev d;
	struct gs_suballoc *sa = fake_suballoc(&d);
	pthread_t t[3];
	struct worker_arg args[3];
	for (int i = 0; i < 3; i++) {
		args[i] = (struct worker_arg){ sa, 0 };
		pthread_create(&t[i], NULL, churn, &args[i]);
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		CHECK_INT(args[i].errors, 0);
	}
	struct gs_suballoc_stats st;
	gs_suballoc_get_stats(sa, &st);
	CHECK(st.blocks == 0);
	gs_suballoc_destroy(sa);
	CHECK_INT(d.live, 0);
	CHECK_INT(d.bad_frees, 0);
	fake_fini(&d);
}

int main(void)
{
	RUN(test_many_tiny);
	RUN(test_cudamalloc_alignment);
	RUN(test_slab_release_and_iteration);
	RUN(test_failures_and_config);
	RUN(test_random_shadow);
	RUN(test_threads);
	return TEST_SUMMARY();
}
