/*
 * util.c - see util.h.
 */
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double gs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double gs_wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *gs_format_bytes(uint64_t bytes, char *buf, size_t n)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	size_t u = 0;
	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, n, "%.2f %s", v, units[u]);
	return buf;
}

int gs_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	if (a > UINT64_MAX - b)
		return -1;
	*out = a + b;
	return 0;
}

uint64_t gs_round_up(uint64_t v, uint64_t align)
{
	if (align == 0)
		return v;
	return (v + align - 1) / align * align;
}

int gs_parse_pid(const char *s, int *pid)
{
	char *end;
	if (*s < '0' || *s > '9') /* strtol would take white space and a sign in front */
		return -1;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > 0x7fffffff)
		return -1;
	*pid = (int)v;
	return 0;
}

int gs_grow_array(void **arr, size_t *cap, size_t n, size_t elem_size, size_t first_cap)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : first_cap;
	if (ncap <= n)
		ncap = n + 1;
	if (ncap < *cap || (elem_size && ncap > SIZE_MAX / elem_size))
		return -1;
	void *p = realloc(*arr, ncap * elem_size);
	if (!p)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

ssize_t gs_read_small_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	while (len + 1 < n) {
		ssize_t r = read(fd, buf + len, n - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

bool gs_all_zero(const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t head = len < 16 ? len : 16;
	for (size_t i = 0; i < head; i++)
		if (p[i])
			return false;
	/* p[0..16) is zero and p[i] == p[i + 16] for every i: all of it is zero */
	return len <= 16 || memcmp(p, p + 16, len - 16) == 0;
}

int gs_private_dir(const char *dir, uid_t uid, const char *whose, const char *noun, struct gs_err *err)
{
	if (mkdir(dir, 0700) && errno != EEXIST)
		return gs_fail_errno(err, errno == EACCES ? GS_E_PERMISSION : GS_E_FAILURE, errno,
				     "cannot create %s %s '%s'", whose, noun, dir);
	struct stat st;
	if (lstat(dir, &st))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot check %s %s '%s'", whose, noun, dir);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_PERMISSION, "%s %s '%s' is not a %s", whose, noun, dir, noun);
	if (st.st_uid != uid)
		return gs_fail(err, GS_E_PERMISSION, "%s %s '%s' belongs to uid %u, not %u", whose, noun, dir,
			       (unsigned)st.st_uid, (unsigned)uid);
	if ((st.st_mode & 077) && chmod(dir, 0700))
		return gs_fail_errno(err, GS_E_PERMISSION, errno, "cannot make %s %s '%s' private", whose, noun, dir);
	return 0;
}

int gs_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits this mask */
	int e = pthread_create(thread, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
