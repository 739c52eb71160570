/*
 * util.h - small helpers shared by every part: clocks, byte formatting,
 * checked arithmetic.
 */
#ifndef GPUSNAP_COMMON_UTIL_H
#define GPUSNAP_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define GS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GS_KiB (1024ULL)
#define GS_MiB (1024ULL * 1024ULL)
#define GS_GiB (1024ULL * 1024ULL * 1024ULL)

/* Monotonic clock in seconds. */
double gs_now(void);
/* Wall clock as seconds since the epoch (for timestamps in images and JSON). */
double gs_wall_now(void);
/* "1.50 GiB", "512 MiB", "3 B" into buf; returns buf. */
const char *gs_format_bytes(uint64_t bytes, char *buf, size_t n);
/* a + b without overflow: returns -1 on overflow. */
int gs_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);
/* Rounds v up to a multiple of align (a power of two or any non-zero value). */
uint64_t gs_round_up(uint64_t v, uint64_t align);
/* Parses a PID ("1234", > 0). Returns 0 or -1. */
int gs_parse_pid(const char *s, int *pid);

#endif
