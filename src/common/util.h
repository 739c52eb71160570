/*
 * util.h - small helpers shared by every part: clocks, byte formatting,
 * checked arithmetic, private directories, threads of our own.
 */
#ifndef GPUSNAP_COMMON_UTIL_H
#define GPUSNAP_COMMON_UTIL_H

#include <stddef.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

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
/*
 * Makes the array *arr of *cap elements of elem_size bytes hold at least n + 1
 * (call it before storing element n): doubles the capacity, or starts at
 * first_cap. 0, or -1 when out of memory or the size would overflow (*arr and
 * *cap unchanged then).
 */
int gs_grow_array(void **arr, size_t *cap, size_t n, size_t elem_size, size_t first_cap);
/*
 * pthread_create with every signal blocked in the new thread: gpusnap's
 * threads live in the app's process (the agent) or beside CRIU (the
 * plugin), and the app's signal handlers must never run on them. The
 * caller's own mask is as before when it returns. 0, or pthread_create's error.
 */
int gs_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);
/* Parses a PID ("1234", > 0). Returns 0 or -1. */
int gs_parse_pid(const char *s, int *pid);
/*
 * Reads a small file (procfs, cgroupfs) whole into buf, NUL-terminated
 * (inner NULs, as in /proc/PID/environ, are kept); at most n - 1 bytes.
 * Returns the length, or -1 if it cannot be opened.
 */
ssize_t gs_read_small_file(const char *path, char *buf, size_t n);
/* Whether all n bytes at p are zero (stops at the first that is not). */
bool gs_all_zero(const void *p, size_t n);
/*
 * dir as a private directory of uid: created 0700 if missing, otherwise
 * checked (a directory, not a symbolic link, owned by uid) and made 0700 if
 * group or others had access. Messages call it "<whose> <noun>" ("socket"
 * "directory", "criu's" "folder"). 0, GS_E_PERMISSION (not uid's, not a
 * directory, cannot be created for lack of permission or made private) or
 * GS_E_FAILURE.
 */
int gs_private_dir(const char *dir, uid_t uid, const char *whose, const char *noun, struct gs_err *err);

#endif
