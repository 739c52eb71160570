/*
 * test_image_crc32c.c - CRC-32C: known vectors, table and SSE4.2 paths agree
 * on every length and alignment, chaining, and a rough speed of each.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common/util.h"
#include "image/crc32c.h"
#include "test.h"

static void test_known_vectors(void)
{
	CHECK_INT(gs_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	CHECK_INT(gs_crc32c_hw(0, "123456789", 9), 0xE3069283u);
	CHECK_INT(gs_crc32c(0, "123456789", 9), 0xE3069283u);
	CHECK_INT(gs_crc32c(0, "", 0), 0);

	/* RFC 3720 (iSCSI) B.4 test patterns. */
	unsigned char buf[32];
	memset(buf, 0, sizeof(buf));
	CHECK_INT(gs_crc32c_sw(0, buf, 32), 0x8A9136AAu);
	CHECK_INT(gs_crc32c_hw(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, sizeof(buf));
	CHECK_INT(gs_crc32c_sw(0, buf, 32), 0x62A8AB43u);
	CHECK_INT(gs_crc32c_hw(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	CHECK_INT(gs_crc32c_sw(0, buf, 32), 0x46DD794Eu);
	CHECK_INT(gs_crc32c_hw(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	CHECK_INT(gs_crc32c_sw(0, buf, 32), 0x113FDB5Cu);
	CHECK_INT(gs_crc32c_hw(0, buf, 32), 0x113FDB5Cu);
	printf("     crc32c implementation on this CPU: %s\n", gs_crc32c_impl_name());
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint8_t rnd8(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint8_t)(rng_state >> 24);
}

static void test_paths_agree(void)
{
	/* Long enough for several 3 x 8 KiB blocks, the 3 x 256 B blocks and every tail length. */
	size_t cap = 3 * 8192 * 3 + 3 * 256 * 2 + 64;
	unsigned char *buf = malloc(cap + 16);
	for (size_t i = 0; i < cap + 16; i++)
		buf[i] = rnd8();
	int mismatches = 0;
	for (size_t align = 0; align < 8; align++) {
		for (size_t len = 0; len <= 2100; len++)
			if (gs_crc32c_sw(0, buf + align, len) != gs_crc32c_hw(0, buf + align, len))
				mismatches++;
		for (size_t len = 2100; len <= cap; len += 997)
			if (gs_crc32c_sw(0, buf + align, len) != gs_crc32c_hw(0, buf + align, len))
				mismatches++;
		if (gs_crc32c_sw(0, buf + align, cap) != gs_crc32c_hw(0, buf + align, cap))
			mismatches++;
	}
	CHECK_INT(mismatches, 0);
	/* A non-zero starting value continues a previous CRC on both paths. */
	CHECK_INT(gs_crc32c_hw(0x12345678u, buf, cap), gs_crc32c_sw(0x12345678u, buf, cap));
	if (!gs_crc32c_hw_available())
		printf("     note: no SSE4.2 on this CPU; both calls used the tables\n");
	free(buf);
}

static void test_chaining(void)
{
	size_t n = 100000;
	unsigned char *buf = malloc(n);
	for (size_t i = 0; i < n; i++)
		buf[i] = rnd8();
	uint32_t whole = gs_crc32c(0, buf, n);
	for (size_t cut = 0; cut <= n; cut += 9973) {
		CHECK_INT(gs_crc32c(gs_crc32c(0, buf, cut), buf + cut, n - cut), whole);
		CHECK_INT(gs_crc32c_sw(gs_crc32c_sw(0, buf, cut), buf + cut, n - cut), whole);
	}
	/* One flipped bit changes the CRC. */
	buf[n / 2] ^= 0x10;
	CHECK(gs_crc32c(0, buf, n) != whole);
	free(buf);
}

static double rate_mb_s(uint32_t (*fn)(uint32_t, const void *, size_t), const void *buf, size_t len, uint32_t *out)
{
	double t0 = gs_now(), t;
	size_t bytes = 0;
	uint32_t acc = 0;
	do {
		acc ^= fn(0, buf, len);
		bytes += len;
		t = gs_now() - t0;
	} while (t < 0.25);
	*out = acc;
	return (double)bytes / t / 1e6;
}

static void test_speed(void)
{
	size_t len = 16 * GS_MiB;
	unsigned char *buf = malloc(len);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	uint32_t a, b;
	double hw = rate_mb_s(gs_crc32c_hw, buf, len, &a);
	double sw = rate_mb_s(gs_crc32c_sw, buf, len, &b);
	printf("     crc32c speed: %s %.0f MB/s, table %.0f MB/s (16 MiB buffer, one thread)\n",
	       gs_crc32c_hw_available() ? "sse4.2" : "(no sse4.2) table", hw, sw);
	CHECK(hw > 0 && sw > 0);
	CHECK_INT(gs_crc32c_hw(0, buf, len), gs_crc32c_sw(0, buf, len));
	free(buf);
}

int main(void)
{
	RUN(test_known_vectors);
	RUN(test_paths_agree);
	RUN(test_chaining);
	RUN(test_speed);
	return TEST_SUMMARY();
}
