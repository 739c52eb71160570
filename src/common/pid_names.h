/*
 * pid_names.h - the processes of one operation as they name one another:
 * each PID as this process sees it and as the process itself does, in its
 * own (innermost) PID namespace. A container's processes say 1, 2, ...
 * where the host says 4711; what they record (an exporter's PID in an
 * image) is in their names, which CRIU gives back on restore while the
 * host's change. The same numbers outside containers.
 */
#ifndef GPUSNAP_PID_NAMES_H
#define GPUSNAP_PID_NAMES_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/err.h"

struct gs_pid_names {
	const pid_t *pids; /* the caller's, not copied: they must outlive this */
	pid_t *own;        /* own[i]: pids[i] in its own PID namespace */
	int n;
	bool mixed; /* not all in one PID namespace */
};

/* The names of pids[0..n): 0, or GS_E_FAILURE out of memory. A PID /proc cannot tell keeps its own number. */
int gs_pid_names_make(const pid_t *pids, int n, struct gs_pid_names *t, struct gs_err *err);
void gs_pid_names_free(struct gs_pid_names *t);
/* pid (the caller's view) as it names itself; pid itself when it is none of t's (or t is NULL) */
pid_t gs_pid_names_own(const struct gs_pid_names *t, pid_t pid);
/* the process of t that names itself own, in the caller's view; own itself when none does (or t is NULL) */
pid_t gs_pid_names_ours(const struct gs_pid_names *t, pid_t own);

#endif
