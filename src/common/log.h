/*
 * log.h - the one logger of gpusnap.
 *
 * Every file defines LOG_PREFIX before including this header so each line says
 * where it came from ("criu: ", "agent: "). pr_perror appends strerror(errno).
 * Not async-signal-safe (gs_log_fixed is): never call them from a signal handler.
 */
#ifndef GPUSNAP_COMMON_LOG_H
#define GPUSNAP_COMMON_LOG_H

#include <stdarg.h>

#ifndef LOG_PREFIX
#define LOG_PREFIX ""
#endif

enum gs_log_level {
	GS_LOG_ERROR = 0,
	GS_LOG_WARN = 1,
	GS_LOG_INFO = 2,
	GS_LOG_DEBUG = 3,
};

/* Messages above this level are dropped. Default: GS_LOG_WARN, or GPUSNAP_LOG=debug|info|warn|error. */
void gs_log_set_level(enum gs_log_level level);
enum gs_log_level gs_log_get_level(void);
/* Reads GPUSNAP_LOG from the environment; called once by main() and by the agent. */
void gs_log_init_from_env(void);
/* Send log lines to fd instead of stderr (the agent logs to its own file). */
void gs_log_set_fd(int fd);

void gs_log(enum gs_log_level level, const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void gs_log_errno(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * One fixed line (no formatting), async-signal-safe: for code that may run
 * in a signal handler or a fork child of a threaded process. Long lines are cut.
 */
void gs_log_fixed(enum gs_log_level level, const char *prefix, const char *msg);

#define pr_err(fmt, ...) gs_log(GS_LOG_ERROR, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_warn(fmt, ...) gs_log(GS_LOG_WARN, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_info(fmt, ...) gs_log(GS_LOG_INFO, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_debug(fmt, ...) gs_log(GS_LOG_DEBUG, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_perror(fmt, ...) gs_log_errno(LOG_PREFIX, fmt, ##__VA_ARGS__)

#endif
