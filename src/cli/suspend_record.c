/*
 * suspend_record.c - remembers which GPUs a process used when gpusnap
 * suspended it, so `resume --map` can tell the user that a map leaves one out
 * before the driver refuses it. The record holds the process start time, so a
 * reused PID never inherits an old record.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/proc.h"
#include "core/control_socket.h"

static unsigned long long start_time(pid_t pid)
{
	struct gs_proc_stat st;
	return gs_proc_read_stat(pid, &st) ? 0 : st.start_time;
}

static int record_path(pid_t pid, char *buf, size_t n)
{
	char dir[512];
	struct gs_err err = { 0 };
	if (gs_ctl_run_dir(dir, sizeof(dir), &err))
		return -1;
	snprintf(buf, n, "%s/suspended-%d", dir, (int)pid);
	return 0;
}

int cli_record_suspend(struct cli_session *s, pid_t pid, uint64_t gpu_mask)
{
	char path[600], tmp[640];
	if (record_path(pid, path, sizeof(path)))
		return -1;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%llu\n", start_time(pid));
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
	if (fgets(line, sizeof(line), f) && sscanf(line, "%llu", &st) == 1 && st == start_time(pid)) {
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
