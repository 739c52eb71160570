/*
 * trampolines.c - making the per-function entry stubs (see trampolines.h).
 *
 * Stubs live in blocks of BLOCK_SIZE bytes of code followed by BLOCK_SIZE
 * bytes of data. Stub i is the same 16 bytes in every slot:
 *
 *     mov  BLOCK_SIZE-7(%rip), %r11     # data[i].target (the real function)
 *     jmp  *BLOCK_SIZE-5(%rip)          # data[i].gate   (gs_gate_common)
 *
 * so a block's code is written once, before it is made executable, and a new
 * stub is only two words of data. Nothing is ever writable and executable at
 * once, and no page is flipped between the two while another thread may run
 * it. Blocks are added as needed and never freed (the app may keep a pointer
 * for ever). x86-64 only, like the gate itself.
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/trampolines.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/log.h"

#define BLOCK_SIZE (64 * 1024)
#define STUB_SIZE 16
#define STUBS_PER_BLOCK (BLOCK_SIZE / STUB_SIZE)

struct stub_data {
	void *_Atomic target;
	void *gate;
};

struct block {
	unsigned char *code; /* BLOCK_SIZE of stubs, then BLOCK_SIZE of struct stub_data */
	unsigned used;
};

struct map_entry {
	void *target; /* key: the real function the stub was made for */
	unsigned char *stub;
};

void gs_gate_common(void); /* gate_x86_64.S */

static pthread_mutex_t tramp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static struct block *blocks;
static size_t nblocks, blocks_cap;
static struct map_entry *map; /* open addressing, power-of-two size */
static size_t map_cap, map_count;
static int exec_refused;

static void lock_for_fork(void) { pthread_mutex_lock(&tramp_lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&tramp_lock); }
static void register_atfork(void) { pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork); }

static size_t hash_ptr(const void *p, size_t cap)
{
	return (size_t)(((uint64_t)(uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & (cap - 1);
}

static struct map_entry *map_find(const void *target)
{
	if (!map_cap)
		return NULL;
	for (size_t i = hash_ptr(target, map_cap);; i = (i + 1) & (map_cap - 1)) {
		if (map[i].target == target)
			return &map[i];
		if (!map[i].target)
			return NULL;
	}
}

static int map_insert(void *target, unsigned char *stub)
{
	if ((map_count + 1) * 2 > map_cap) {
		size_t cap = map_cap ? map_cap * 2 : 1024;
		struct map_entry *m = calloc(cap, sizeof(*m));
		if (!m)
			return -1;
		for (size_t j = 0; j < map_cap; j++) {
			if (!map[j].target)
				continue;
			size_t i = hash_ptr(map[j].target, cap);
			while (m[i].target)
				i = (i + 1) & (cap - 1);
			m[i] = map[j];
		}
		free(map);
		map = m;
		map_cap = cap;
	}
	size_t i = hash_ptr(target, map_cap);
	while (map[i].target)
		i = (i + 1) & (map_cap - 1);
	map[i].target = target;
	map[i].stub = stub;
	map_count++;
	return 0;
}

static struct stub_data *stub_data(unsigned char *stub)
{
	return (struct stub_data *)(void *)(stub + BLOCK_SIZE);
}

static struct block *new_block(void)
{
	if (exec_refused)
		return NULL;
	if (nblocks == blocks_cap) {
		size_t cap = blocks_cap ? blocks_cap * 2 : 4;
		struct block *b = realloc(blocks, cap * sizeof(*b));
		if (!b)
			return NULL;
		blocks = b;
		blocks_cap = cap;
	}
	unsigned char *code = mmap(NULL, 2 * BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		pr_perror("cannot map a block of CUDA gate stubs");
		return NULL;
	}
	static const unsigned char stub[STUB_SIZE] = {
		0x4c, 0x8b, 0x1d, 0, 0, 0, 0, /* mov disp32(%rip), %r11 */
		0xff, 0x25, 0, 0, 0, 0,       /* jmp *disp32(%rip) */
		0xcc, 0xcc, 0xcc,             /* int3: never reached */
	};
	int32_t load_disp = BLOCK_SIZE - 7, jump_disp = BLOCK_SIZE + 8 - 13;
	for (unsigned i = 0; i < STUBS_PER_BLOCK; i++) {
		unsigned char *s = code + (size_t)i * STUB_SIZE;
		memcpy(s, stub, STUB_SIZE);
		memcpy(s + 3, &load_disp, 4);
		memcpy(s + 9, &jump_disp, 4);
	}
	if (mprotect(code, BLOCK_SIZE, PROT_READ | PROT_EXEC)) {
		pr_perror("cannot make CUDA gate stubs executable; driver entry points stay ungated");
		exec_refused = 1;
		munmap(code, 2 * BLOCK_SIZE);
		return NULL;
	}
	blocks[nblocks].code = code;
	blocks[nblocks].used = 0;
	return &blocks[nblocks++];
}

void *gs_tramp_for(void *target)
{
	if (!target)
		return NULL;
	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&tramp_lock);
	struct map_entry *e = map_find(target);
	if (e) {
		pthread_mutex_unlock(&tramp_lock);
		return e->stub;
	}
	struct block *b = nblocks ? &blocks[nblocks - 1] : NULL;
	if (!b || b->used == STUBS_PER_BLOCK)
		b = new_block();
	unsigned char *stub = NULL;
	if (b) {
		stub = b->code + (size_t)b->used * STUB_SIZE;
		struct stub_data *d = stub_data(stub);
		d->gate = (void *)gs_gate_common;
		atomic_store_explicit(&d->target, target, memory_order_release);
		if (map_insert(target, stub))
			stub = NULL;
		else
			b->used++;
	}
	pthread_mutex_unlock(&tramp_lock);
	return stub;
}

bool gs_tramp_retarget(void *target, void *new_target)
{
	pthread_mutex_lock(&tramp_lock);
	struct map_entry *e = map_find(target);
	if (e)
		atomic_store_explicit(&stub_data(e->stub)->target, new_target, memory_order_release);
	pthread_mutex_unlock(&tramp_lock);
	return e != NULL;
}

bool gs_tramp_owns(const void *p)
{
	bool owns = false;
	pthread_mutex_lock(&tramp_lock);
	for (size_t i = 0; i < nblocks && !owns; i++) {
		uintptr_t off = (uintptr_t)p - (uintptr_t)blocks[i].code;
		owns = off < (uintptr_t)blocks[i].used * STUB_SIZE && off % STUB_SIZE == 0;
	}
	pthread_mutex_unlock(&tramp_lock);
	return owns;
}

size_t gs_tramp_count(void)
{
	pthread_mutex_lock(&tramp_lock);
	size_t n = map_count;
	pthread_mutex_unlock(&tramp_lock);
	return n;
}
