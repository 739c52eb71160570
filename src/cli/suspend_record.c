/*
 * suspend_record.c - remembers which GPUs a process used when gpusnap
 * suspended it, so `resume --map` can tell the user that a map leaves one out
 * before the driver refuses it. The record holds the process start time, so a
 * reused PID never inherits an old record; each suspend removes the records
 * of processes that are gone (sweep_gone). A driver-path resume that failed
 * adds a line saying why, so `state` can tell a process the driver cannot
 * give back from one merely suspended.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/printable.h"
#include "common/proc.h"
#include "core/control_socket.h"

static int record_path(pid_t pid, char *buf, size_t n)
{
	char dir[512];
	struct gs_err err = { 0 };
	if (gs_ctl_run_dir(dir, sizeof(dir), &err))
		return -1;
	snprintf(buf, n, "%s/suspended-%d", dir, (int)pid);
	return 0;
}

/*
 * Removes suspended-PID records (and their killed writers' .tmp files) whose
 * process is gone: none runs with that PID and the start time the record
 * holds. Plain files only, by name in the directory (a link is never
 * followed); a record is read through a descriptor and removed only if the
 * name still is that file, so one a concurrent suspend just renamed into
 * place stays. The run directory is this user's alone (control_socket.h).
 */
static void sweep_gone(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid = 0, used = 0;
		if (sscanf(de->d_name, "suspended-%d%n", &pid, &used) != 1 || pid <= 0 ||
		    de->d_name[10] < '1' || de->d_name[10] > '9')
			continue;
		const char *rest = de->d_name + used;
		bool tmp = !strcmp(rest, ".tmp");
		if (*rest && !tmp)
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st, again;
		if (fd < 0)
			continue;
		char line[64] = "";
		ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, line, sizeof(line) - 1) : -1;
		close(fd);
		if (n < 0)
			continue;
		line[n] = '\0';
		unsigned long long recorded = strtoull(line, NULL, 10);
		unsigned long long now = gs_proc_start_time(pid);
		/* a .tmp is being written by a suspend of a live PID or was left by a killed one: gone PIDs only */
		bool gone = tmp ? now == 0 : (now == 0 || now != recorded);
		if (gone && fstatat(dirfd(d), de->d_name, &again, AT_SYMLINK_NOFOLLOW) == 0 && again.st_ino == st.st_ino &&
		    again.st_dev == st.st_dev)
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

int cli_record_suspend(struct cli_session *s, pid_t pid, uint64_t gpu_mask)
{
	char path[600], tmp[640];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	char dir[512];
	if (gs_ctl_run_dir(dir, sizeof(dir), NULL) == 0)
		sweep_gone(dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%llu\n", gs_proc_start_time(pid));
	for (int i = 0; i < s->ngpus && i < 64; i++)
		if (gpu_mask & (1ULL << i))
			fprintf(f, "%s\n", s->gpus[i].uuid_str);
	if (fclose(f) || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

int cli_recorded_gpus(pid_t pid, CUuuid *used, int max)
{
	char path[600], line[128];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	unsigned long long st = 0;
	int n = -1;
	if (fgets(line, sizeof(line), f) && sscanf(line, "%llu", &st) == 1 && st == gs_proc_start_time(pid)) {
		n = 0;
		while (n < max && fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			if (gs_cuda_uuid_parse(line, &used[n]) == 0)
				n++;
		}
	}
	fclose(f);
	return n > 0 ? n : -1;
}

void cli_forget_suspend(pid_t pid)
{
	char path[600];
	if (record_path(pid, path, sizeof(path)) == 0)
		unlink(path);
}

/* The line that marks a failed resume in a record; the last one is what `state` says. */
#define RESUME_FAILED "resume-failed "

int cli_record_resume_failure(pid_t pid, const char *msg)
{
	char path[600], shown[GS_ERR_MSG_MAX];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	/* a record exists only for a process gpusnap suspended: no record, nothing to add to */
	int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char line[GS_ERR_MSG_MAX + 32];
	int len = snprintf(line, sizeof(line), RESUME_FAILED "%s\n", gs_printable(shown, sizeof(shown), msg));
	bool ok = len > 0 && write(fd, line, (size_t)len) == len;
	close(fd);
	return ok ? 0 : -1;
}

bool cli_recorded_resume_failure(pid_t pid, char *msg, size_t n)
{
	char path[600], line[GS_ERR_MSG_MAX + 32];
	if (record_path(pid, path, sizeof(path)))
		return false;
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	unsigned long long st = 0;
	bool found = false;
	if (fgets(line, sizeof(line), f) && sscanf(line, "%llu", &st) == 1 && st == gs_proc_start_time(pid)) {
		while (fgets(line, sizeof(line), f)) {
			if (strncmp(line, RESUME_FAILED, strlen(RESUME_FAILED)))
				continue;
			line[strcspn(line, "\n")] = '\0';
			snprintf(msg, n, "%s", line + strlen(RESUME_FAILED));
			found = true;
		}
	}
	fclose(f);
	return found;
}
