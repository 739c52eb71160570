/*
 * dl_bootstrap.c - finding the real dlsym and dlvsym without calling either.
 *
 * We export dlsym and dlvsym ourselves, and the dynamic linker lets an
 * unversioned definition satisfy versioned references: even our own
 * reference to "dlvsym@GLIBC_2.34" would bind to our interposer. So the real
 * functions are looked up by hand in the dynamic symbol tables of the loaded
 * objects (the list rooted at _r_debug, set up by ld.so before any code runs):
 * first the objects after ours (what RTLD_NEXT would search), then the rest.
 * We want the default-version definition (dlsym@@GLIBC_2.34 in libc.so.6
 * since glibc 2.34; dlsym@@GLIBC_2.2.5 in libdl.so.2 before).
 *
 * This runs before the sanitizer runtime is initialized when that runtime
 * calls dlsym during its own start-up, so it calls no library function and
 * is not instrumented.
 */
#include "agent/intercept/dl_bootstrap.h"

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#define NO_SANITIZE __attribute__((no_sanitize_address, no_sanitize_undefined))

void *gs_real_dlsym_fn;  /* read by gate_x86_64.S */
void *gs_real_dlvsym_fn;

extern ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden"))); /* ours */

struct dyn_tables {
	const ElfW(Sym) *symtab;
	const char *strtab;
	const uint32_t *gnu_hash;
	const uint32_t *sysv_hash;
	const ElfW(Half) *versym;
};

NO_SANITIZE static int name_eq(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

/* ld.so relocates these entries in place on x86-64, but not everywhere: accept both. */
NO_SANITIZE static const void *dyn_ptr(const struct link_map *l, ElfW(Addr) v)
{
	return (const void *)(v < l->l_addr ? v + l->l_addr : v);
}

NO_SANITIZE static int read_tables(const struct link_map *l, struct dyn_tables *t)
{
	*t = (struct dyn_tables){ 0 };
	if (!l->l_ld)
		return -1;
	for (const ElfW(Dyn) *d = l->l_ld; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: t->symtab = dyn_ptr(l, d->d_un.d_ptr); break;
		case DT_STRTAB: t->strtab = dyn_ptr(l, d->d_un.d_ptr); break;
		case DT_GNU_HASH: t->gnu_hash = dyn_ptr(l, d->d_un.d_ptr); break;
		case DT_HASH: t->sysv_hash = dyn_ptr(l, d->d_un.d_ptr); break;
		case DT_VERSYM: t->versym = dyn_ptr(l, d->d_un.d_ptr); break;
		default: break;
		}
	}
	return t->symtab && t->strtab && (t->gnu_hash || t->sysv_hash) ? 0 : -1;
}

/* A defined function named name, in its default (not hidden) version. */
NO_SANITIZE static void *match(const struct link_map *l, const struct dyn_tables *t, uint32_t idx, const char *name)
{
	const ElfW(Sym) *s = &t->symtab[idx];
	int type = ELF64_ST_TYPE(s->st_info);
	if (s->st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_value == 0)
		return NULL;
	if (t->versym && (t->versym[idx] & 0x8000))
		return NULL;
	if (!name_eq(t->strtab + s->st_name, name))
		return NULL;
	if (type == STT_GNU_IFUNC)
		return NULL; /* resolving it would mean calling it; dlsym is a plain function */
	return (void *)(l->l_addr + s->st_value);
}

NO_SANITIZE static void *lookup(const struct link_map *l, const char *name)
{
	struct dyn_tables t;
	if (read_tables(l, &t))
		return NULL;
	if (t.gnu_hash) {
		uint32_t h = 5381;
		for (const unsigned char *p = (const unsigned char *)name; *p; p++)
			h = h * 33 + *p;
		uint32_t nbuckets = t.gnu_hash[0], symoffset = t.gnu_hash[1], bloom_size = t.gnu_hash[2];
		if (!nbuckets)
			return NULL;
		const uint32_t *buckets = t.gnu_hash + 4 + bloom_size * (sizeof(ElfW(Addr)) / 4);
		const uint32_t *chain = buckets + nbuckets;
		uint32_t idx = buckets[h % nbuckets];
		if (idx < symoffset)
			return NULL;
		for (;; idx++) {
			uint32_t h2 = chain[idx - symoffset];
			if ((h2 | 1) == (h | 1)) {
				void *f = match(l, &t, idx, name);
				if (f)
					return f;
			}
			if (h2 & 1)
				return NULL;
		}
	}
	uint32_t h = 0;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h = (h << 4) + *p;
		uint32_t g = h & 0xf0000000;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	uint32_t nbucket = t.sysv_hash[0];
	if (!nbucket)
		return NULL;
	const uint32_t *bucket = t.sysv_hash + 2, *chain = bucket + nbucket;
	for (uint32_t idx = bucket[h % nbucket]; idx; idx = chain[idx]) {
		void *f = match(l, &t, idx, name);
		if (f)
			return f;
	}
	return NULL;
}

NO_SANITIZE static void *find_real(const char *name)
{
	const struct link_map *head = _r_debug.r_map, *self = NULL;
	for (const struct link_map *l = head; l; l = l->l_next)
		if (l->l_ld == _DYNAMIC)
			self = l;
	if (self)
		for (const struct link_map *l = self->l_next; l; l = l->l_next) {
			void *f = lookup(l, name);
			if (f)
				return f;
		}
	for (const struct link_map *l = head; l && l != self; l = l->l_next) {
		void *f = lookup(l, name);
		if (f)
			return f;
	}
	return NULL;
}

NO_SANITIZE int gs_dl_bootstrap(void)
{
	if (__atomic_load_n(&gs_real_dlsym_fn, __ATOMIC_ACQUIRE) && __atomic_load_n(&gs_real_dlvsym_fn, __ATOMIC_ACQUIRE))
		return 1;
	void *s = find_real("dlsym"), *v = find_real("dlvsym");
	if (!s || !v)
		return 0;
	/* Racing threads find the same addresses; dlvsym first so dlsym's flag covers both. */
	__atomic_store_n(&gs_real_dlvsym_fn, v, __ATOMIC_RELEASE);
	__atomic_store_n(&gs_real_dlsym_fn, s, __ATOMIC_RELEASE);
	return 1;
}
