/*
 * fuzz.h - what every fuzz harness in tests/fuzz shares: the libFuzzer entry
 * point, a check that crashes (so libFuzzer reports it) when a property of
 * the code under test does not hold, and the little-endian reader that
 * splits one fuzz input into several files or arguments.
 *
 * Each harness is built twice: with clang's libFuzzer (GPUSNAP_FUZZ=ON, the
 * fuzzing build) and with replay_main.c (every build), which runs it over
 * its seed corpus and the saved crash inputs as a regression test.
 */
#ifndef GPUSNAP_TESTS_FUZZ_H
#define GPUSNAP_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>

#include "common/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional per-harness setup, called once before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* A broken property is a crash: libFuzzer saves the input that caused it. */
#define FUZZ_ASSERT(cond)                                                                            \
	do {                                                                                         \
		if (!(cond)) {                                                                       \
			fprintf(stderr, "fuzz: %s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                     \
		}                                                                                    \
	} while (0)

/* Log lines of the code under test go to /dev/null: formatted, not printed millions of times. */
static inline void fuzz_quiet_log(void)
{
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		gs_log_set_fd(fd);
}

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
