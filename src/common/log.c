/*
 * log.c - the logger behind pr_err/pr_warn/pr_info/pr_debug.
 *
 * One line per call, written with a single write(2) so lines from several
 * threads never interleave mid-line, made printable first (printable.h): a
 * line that quotes a process's name or an agent's words stays one line.
 */
#include "common/log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/printable.h"
#include "common/settings.h"

static enum gs_log_level current_level = GS_LOG_WARN;
static int log_fd = 2; /* atomic: -1 once a file of our own was found gone */
/* The log file's identity when it is one of our own (not stderr): checked before each line. */
static bool log_is_own;
static dev_t log_dev;
static ino_t log_ino;

void gs_log_set_level(enum gs_log_level level) { current_level = level; }
enum gs_log_level gs_log_get_level(void) { return current_level; }

void gs_log_set_fd(int fd)
{
	struct stat st;
	log_is_own = fd != 2 && !fstat(fd, &st);
	if (log_is_own) {
		log_dev = st.st_dev;
		log_ino = st.st_ino;
	}
	__atomic_store_n(&log_fd, fd, __ATOMIC_RELEASE);
}

/*
 * The descriptor to write a line to, -1 for none: an app that closes every
 * descriptor closes the agent's log file too, and the number may be the
 * app's file by now, which must never get our lines.
 */
static int line_fd(void)
{
	int fd = __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE);
	if (fd < 0 || !log_is_own)
		return fd;
	struct stat st;
	if (!fstat(fd, &st) && st.st_dev == log_dev && st.st_ino == log_ino)
		return fd;
	__atomic_store_n(&log_fd, -1, __ATOMIC_RELEASE);
	return -1;
}

void gs_log_init_from_env(void)
{
	/* the row's choices, error|warn|info|debug */
	static const enum gs_log_level levels[] = { GS_LOG_ERROR, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG };
	if (gs_setting_is_set(GS_S_LOG))
		current_level = levels[gs_setting_choice(GS_S_LOG)];
}

static const char *level_name(enum gs_log_level level)
{
	switch (level) {
	case GS_LOG_ERROR: return "error";
	case GS_LOG_WARN: return "warning";
	case GS_LOG_INFO: return "info";
	default: return "debug";
	}
}

/*
 * line[0..n) made printable and ended by a newline (line has room for n + 1
 * bytes), in one write(2), errno kept (a caller may read it after logging);
 * async-signal-safe.
 */
static void put_line(char *line, size_t n)
{
	int saved = errno;
	line[n] = '\0';
	gs_printable(line, n + 1, line);
	n = strlen(line);
	line[n++] = '\n';
	int fd = line_fd();
	if (fd >= 0) {
		ssize_t w = write(fd, line, n);
		(void)w;
	}
	errno = saved;
}

static void emit(enum gs_log_level level, const char *prefix, const char *fmt, va_list ap, int errnum)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "gpusnap: %s: %s", level_name(level), prefix);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (m > 0)
		n = (size_t)(n + m) >= sizeof(line) ? (int)sizeof(line) - 1 : n + m;
	if (errnum && (size_t)n < sizeof(line) - 2) {
		int k = snprintf(line + n, sizeof(line) - (size_t)n, ": %s", strerror(errnum));
		if (k > 0)
			n = (size_t)(n + k) >= sizeof(line) ? (int)sizeof(line) - 1 : n + k;
	}
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	put_line(line, (size_t)n);
}

void gs_log_fixed(enum gs_log_level level, const char *prefix, const char *msg)
{
	if (level > current_level)
		return;
	char line[1024];
	size_t n = 0;
	const char *parts[] = { "gpusnap: ", level_name(level), ": ", prefix, msg };
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		for (const char *c = parts[i]; *c && n < sizeof(line) - 1; c++)
			line[n++] = *c;
	put_line(line, n);
}

void gs_log(enum gs_log_level level, const char *prefix, const char *fmt, ...)
{
	if (level > current_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	emit(level, prefix, fmt, ap, 0);
	va_end(ap);
}

void gs_log_errno(const char *prefix, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	emit(GS_LOG_ERROR, prefix, fmt, ap, saved);
	va_end(ap);
	errno = saved;
}
