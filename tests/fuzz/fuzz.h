/*
 * fuzz.h - what every fuzz harness in tests/fuzz shares: the entry point a
 * harness writes (fuzz_one; libFuzzer's own two are in fuzz_common.c), a
 * check that crashes (so libFuzzer reports it) when a property of the code
 * under test does not hold, copies of the input the code under test may
 * own or change, and the little-endian reader that splits one fuzz input
 * into several files or arguments.
 *
 * Each harness is built twice, both times with fuzz_common.c: with clang's
 * libFuzzer (GPUSNAP_FUZZ=ON, the fuzzing build) and with replay_main.c
 * (every build), which runs it over its seed corpus and the saved crash
 * inputs as a regression test.
 */
#ifndef GPUSNAP_TESTS_FUZZ_H
#define GPUSNAP_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* libFuzzer's entry points, defined once for every harness in fuzz_common.c. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * What each harness defines: one input of at least one byte, split into its
 * first byte (flags, or a setting: see each harness's comment) and the rest,
 * len bytes that stay owned by the caller.
 */
void fuzz_one(uint8_t first, const uint8_t *rest, size_t len);
/* Optional per-harness setup, run once before the first input (the log of the code under test is quiet by then). */
void fuzz_setup(void) __attribute__((weak));

/* A broken property is a crash: libFuzzer saves the input that caused it. */
#define FUZZ_ASSERT(cond)                                                                            \
	do {                                                                                         \
		if (!(cond)) {                                                                       \
			fprintf(stderr, "fuzz: %s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                     \
		}                                                                                    \
	} while (0)

/* An exact-size copy of data (ASan sees a read past its end), the caller's to change and free. */
uint8_t *fuzz_copy(const uint8_t *data, size_t len);
/*
 * data as a C string: a copy with a NUL after it (a NUL inside ends the
 * string early, as it would for the real callers' strings). The caller frees it.
 */
char *fuzz_text(const uint8_t *data, size_t len);
/*
 * Makes a manifest.img's framing agree with its bytes (the size in the
 * header, the trailer magic, the CRC), so that mutated inputs reach the
 * section parser instead of stopping at the checksum nearly every time.
 * Too short to hold a header and a trailer: left as it is.
 */
void fuzz_fix_manifest_framing(uint8_t *buf, size_t len);

/* A cursor over the fuzz input. */
struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

/* Next little-endian u32, or 0 past the end. */
static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t v = 0;
	for (int i = 0; i < 4 && in->left; i++, in->p++, in->left--)
		v |= (uint32_t)in->p[0] << (8 * i);
	return v;
}

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

/*
 * Next record: a u32 length, then that many bytes (fewer where the input
 * ends). Returns false when nothing is left.
 */
static inline int fuzz_record(struct fuzz_in *in, const uint8_t **data, size_t *len)
{
	if (!in->left)
		return 0;
	uint32_t n = fuzz_u32(in);
	if (n > in->left)
		n = (uint32_t)in->left;
	*data = in->p;
	*len = n;
	in->p += n;
	in->left -= n;
	return 1;
}

#endif
