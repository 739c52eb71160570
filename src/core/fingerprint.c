/*
 * fingerprint.c - the chunk fingerprint on the CPU (see fingerprint.h; the
 * definition is docs/FORMAT.md section 4.8.2, the GPU's twin
 * src/agent/movement/agent_fingerprint.c). Written here rather than taken
 * from a library because it must equal, bit for bit, what the agent's PTX
 * kernel computes, and no packaged hash is defined that way.
 */
#include "core/fingerprint.h"

#include <string.h>

#define FP_G 0x9E3779B97F4A7C15ULL
#define FP_M1 0xBF58476D1CE4E5B9ULL
#define FP_M2 0x94D049BB133111EBULL
#define FP_M3 0xFF51AFD7ED558CCDULL
#define FP_M4 0xC4CEB9FE1A85EC53ULL

static inline uint64_t rotl(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t mix_a(uint64_t z)
{
	z ^= z >> 30;
	z *= FP_M1;
	z ^= z >> 27;
	z *= FP_M2;
	return z ^ (z >> 31);
}

static inline uint64_t mix_b(uint64_t z)
{
	z ^= z >> 33;
	z *= FP_M3;
	z ^= z >> 33;
	z *= FP_M4;
	return z ^ (z >> 33);
}

static inline void word(struct gs_fp_sums *s, uint64_t x, uint64_t y, uint64_t i)
{
	uint64_t k = (i + 1) * FP_G;
	uint64_t p = mix_a(x ^ k), q = mix_b(y ^ rotl(k, 32));
	s->a += p + q;
	s->b += p ^ rotl(q, 23);
}

void gs_fp_add(struct gs_fp_sums *s, const void *data, size_t len, uint64_t first_word)
{
	const unsigned char *p = data;
	uint64_t i = first_word;
	struct gs_fp_sums t = *s;
	for (; len >= 16; len -= 16, p += 16, i++) {
		uint64_t x, y;
		memcpy(&x, p, 8);
		memcpy(&y, p + 8, 8);
		word(&t, x, y, i);
	}
	if (len) {
		unsigned char last[16] = { 0 };
		memcpy(last, p, len);
		uint64_t x, y;
		memcpy(&x, last, 8);
		memcpy(&y, last + 8, 8);
		word(&t, x, y, i);
	}
	*s = t;
}

struct gs_fp gs_fp_final(struct gs_fp_sums s, uint64_t len)
{
	struct gs_fp f;
	f.lo = mix_b(s.a + len * FP_G);
	f.hi = mix_a(s.b ^ f.lo ^ rotl(len, 32));
	if (!f.lo && !f.hi)
		f.lo = 1; /* 0 means "no fingerprint" in the manifest */
	return f;
}

struct gs_fp gs_fp_of(const void *data, size_t len)
{
	struct gs_fp_sums s = { 0, 0 };
	gs_fp_add(&s, data, len, 0);
	return gs_fp_final(s, len);
}
