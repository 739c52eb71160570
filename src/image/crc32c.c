/*
 * crc32c.c - CRC-32C in software (slicing by 8) and with the SSE4.2 crc32
 * instruction (see crc32c.h).
 *
 * The crc32 instruction has a latency of 3 cycles and a throughput of one per
 * cycle, so one dependent stream runs at a third of its speed. The hardware
 * path therefore checksums three adjacent blocks at once and joins the three
 * partial CRCs: the CRC register is linear over GF(2), so the register after
 * A|B equals "A's register advanced over len(B) zero bytes" XOR "B's register
 * started from zero". Advancing over a fixed number of zero bytes is a
 * 32x32 bit matrix, kept as four 256-entry tables per block size.
 */
#include "image/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define GS_CRC32C_HAVE_X86 1
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define HW_LONG 8192u           /* bytes per stream in the main loop */
#define HW_SHORT 256u           /* bytes per stream for the remainder */

static uint32_t sw_table[8][256];
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
static bool hw_available;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Register after `len` zero bytes, starting from `crc` (one byte at a time; only used to build tables). */
static uint32_t advance_zeros(uint32_t crc, size_t len)
{
	while (len--)
		crc = sw_table[0][crc & 0xff] ^ (crc >> 8);
	return crc;
}

static void build_shift_table(uint32_t table[4][256], size_t len)
{
	uint32_t basis[32];
	for (int bit = 0; bit < 32; bit++)
		basis[bit] = advance_zeros(1u << bit, len);
	for (int byte = 0; byte < 4; byte++) {
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t r = 0;
			for (int bit = 0; bit < 8; bit++)
				if (v & (1u << bit))
					r ^= basis[byte * 8 + bit];
			table[byte][v] = r;
		}
	}
}

static void init_tables(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		sw_table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 1; k < 8; k++)
			sw_table[k][n] = sw_table[0][sw_table[k - 1][n] & 0xff] ^ (sw_table[k - 1][n] >> 8);
	build_shift_table(shift_long, HW_LONG);
	build_shift_table(shift_short, HW_SHORT);
#ifdef GS_CRC32C_HAVE_X86
	__builtin_cpu_init();
	hw_available = __builtin_cpu_supports("sse4.2");
#endif
}

static inline void ensure_tables(void)
{
	pthread_once(&tables_once, init_tables);
}

static inline uint64_t load_le64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

/* `crc` is the raw register (already inverted). */
static uint32_t sw_update(uint32_t crc, const unsigned char *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		len--;
	}
	while (len >= 8) {
		uint64_t w = load_le64(p) ^ crc;
		crc = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^ sw_table[5][(w >> 16) & 0xff] ^
		      sw_table[4][(w >> 24) & 0xff] ^ sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
		      sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

uint32_t gs_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	ensure_tables();
	return ~sw_update(~crc, buf, len);
}

#ifdef GS_CRC32C_HAVE_X86
static inline uint32_t shift(const uint32_t table[4][256], uint32_t crc)
{
	return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

/* Consumes as many runs of 3 x block bytes as fit, three streams at once; block is a constant after inlining. */
__attribute__((target("sse4.2"), always_inline)) static inline uint64_t
hw_three_way(uint64_t crc, const unsigned char **pp, size_t *lenp, size_t block, const uint32_t table[4][256])
{
	const unsigned char *p = *pp;
	size_t len = *lenp;
	while (len >= 3 * block) {
		uint64_t crc1 = 0, crc2 = 0;
		const unsigned char *end = p + block;
		do {
			crc = _mm_crc32_u64(crc, load_le64(p));
			crc1 = _mm_crc32_u64(crc1, load_le64(p + block));
			crc2 = _mm_crc32_u64(crc2, load_le64(p + 2 * block));
			p += 8;
		} while (p < end);
		crc = shift(table, (uint32_t)crc) ^ crc1;
		crc = shift(table, (uint32_t)crc) ^ crc2;
		p += 2 * block;
		len -= 3 * block;
	}
	*pp = p;
	*lenp = len;
	return crc;
}

__attribute__((target("sse4.2"))) static uint32_t hw_update(uint32_t crc32, const unsigned char *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		crc32 = _mm_crc32_u8(crc32, *p++);
		len--;
	}
	uint64_t crc = hw_three_way(crc32, &p, &len, HW_LONG, shift_long);
	crc = hw_three_way(crc, &p, &len, HW_SHORT, shift_short);
	while (len >= 8) {
		crc = _mm_crc32_u64(crc, load_le64(p));
		p += 8;
		len -= 8;
	}
	crc32 = (uint32_t)crc;
	while (len--)
		crc32 = _mm_crc32_u8(crc32, *p++);
	return crc32;
}
#endif

uint32_t gs_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	ensure_tables();
#ifdef GS_CRC32C_HAVE_X86
	if (hw_available)
		return ~hw_update(~crc, buf, len);
#endif
	return ~sw_update(~crc, buf, len);
}

uint32_t gs_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return gs_crc32c_hw(crc, buf, len);
}

bool gs_crc32c_hw_available(void)
{
	ensure_tables();
	return hw_available;
}

const char *gs_crc32c_impl_name(void)
{
	return gs_crc32c_hw_available() ? "sse4.2" : "table";
}
