/*
 * pid_names.c - the processes of one operation in their own PID namespace
 * and in ours (pid_names.h): NSpid's last field from /proc/PID/status, and
 * /proc/PID/ns/pid to see whether they share one namespace.
 */
#include "common/pid_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/proc.h"

int gs_pid_names_make(const pid_t *pids, int n, struct gs_pid_names *t, struct gs_err *err)
{
	t->pids = pids;
	t->n = n;
	t->mixed = false;
	t->own = calloc(n > 0 ? (size_t)n : 1, sizeof(*t->own));
	if (!t->own)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	ino_t first = 0;
	for (int i = 0; i < n; i++) {
		uid_t uid;
		if (gs_proc_status_ids(pids[i], &uid, &t->own[i]))
			t->own[i] = pids[i];
		char path[64];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pids[i]);
		if (stat(path, &st))
			continue;
		if (!first)
			first = st.st_ino;
		else if (st.st_ino != first)
			t->mixed = true;
	}
	return 0;
}

void gs_pid_names_free(struct gs_pid_names *t)
{
	free(t->own);
	t->own = NULL;
	t->n = 0;
}

pid_t gs_pid_names_own(const struct gs_pid_names *t, pid_t pid)
{
	for (int i = 0; t && i < t->n; i++)
		if (t->pids[i] == pid)
			return t->own[i];
	return pid;
}

pid_t gs_pid_names_ours(const struct gs_pid_names *t, pid_t own)
{
	for (int i = 0; t && i < t->n; i++)
		if (t->own[i] == own)
			return t->pids[i];
	return own;
}
