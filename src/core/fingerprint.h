/*
 * fingerprint.h - gpusnap's chunk fingerprint (docs/FORMAT.md section 4.8.2):
 * a 128-bit value of a chunk's bytes that a GPU computes at memory bandwidth
 * (the agent's kernel, agent_fingerprint.c) and the CPU computes identically
 * (here), so a chunk can be compared where it lies, before anything crosses
 * PCIe (incremental dumps, restore --verify-gpu).
 *
 * Each 16-byte word is mixed on its own, with its index, by two
 * multiply-xorshift lanes, and the words' results are added (mod 2^64) into
 * two sums: addition is associative and commutative, so any number of GPU
 * threads may add their words in any order and get the same sums, with no
 * sequential dependence between words. The sums and the length are then
 * finalized into the fingerprint. A change of one word always changes it
 * (the mixes are bijections); it is not a cryptographic hash.
 */
#ifndef GPUSNAP_CORE_FINGERPRINT_H
#define GPUSNAP_CORE_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gs_fp {
	uint64_t lo, hi; /* stored as 16 bytes: lo then hi, little-endian; both 0: none */
};

/* The running sums over words (what the GPU kernel adds into). */
struct gs_fp_sums {
	uint64_t a, b;
};

/*
 * Adds the words of len bytes at data to s, the first being word number
 * first_word of the chunk (data is at byte 16 * first_word of it; len a
 * multiple of 16 except for the chunk's last piece, whose tail is taken as
 * zero-padded to 16 bytes).
 */
void gs_fp_add(struct gs_fp_sums *s, const void *data, size_t len, uint64_t first_word);
/* The fingerprint of a chunk of len bytes whose words' sums are s. */
struct gs_fp gs_fp_final(struct gs_fp_sums s, uint64_t len);
/* Both in one: the fingerprint of len bytes. */
struct gs_fp gs_fp_of(const void *data, size_t len);
static inline bool gs_fp_equal(struct gs_fp x, struct gs_fp y)
{
	return x.lo == y.lo && x.hi == y.hi;
}
static inline bool gs_fp_none(struct gs_fp x)
{
	return !x.lo && !x.hi;
}

#endif
