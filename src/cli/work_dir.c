/*
 * work_dir.c - work folders in the runtime directory, and the removal of
 * those a killed gpusnap left (see work_dir.h).
 */
#include "cli/work_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proc.h"
#include "core/control_socket.h"

/* Empties the folder name in dir of everything but folders, without following links, and removes it. */
static bool remove_folder(int dir, const char *name)
{
	int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return false;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
			unlinkat(fd, de->d_name, 0); /* a link goes, not what it points to */
	}
	closedir(d);
	return unlinkat(dir, name, AT_REMOVEDIR) == 0;
}

int cli_work_dir_sweep(const char *run_dir, const char *kind)
{
	DIR *d = opendir(run_dir);
	if (!d)
		return 0;
	char prefix[64];
	int plen = snprintf(prefix, sizeof(prefix), "%s-", kind);
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, (size_t)plen))
			continue;
		int pid = 0, used = 0;
		unsigned long long start = 0;
		const char *rest = de->d_name + plen;
		/* PID-START-XXXXXX: a name of another form is not one of these folders */
		if (rest[0] < '1' || rest[0] > '9' || sscanf(rest, "%d-%llu-%n", &pid, &start, &used) != 2 || !used ||
		    pid <= 0 || strlen(rest + used) != 6)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid())
			continue;
		if (gs_proc_start_time(pid) == start)
			continue; /* its gpusnap still runs */
		removed += remove_folder(dirfd(d), de->d_name);
	}
	closedir(d);
	return removed;
}

int cli_work_dir_make(const char *kind, char *out, size_t n, struct gs_err *err)
{
	char run[PATH_MAX - 96];
	int rc = gs_ctl_run_dir(run, sizeof(run), err);
	if (rc)
		return rc;
	cli_work_dir_sweep(run, kind);
	pid_t self = getpid();
	int w = snprintf(out, n, "%s/%s-%d-%llu-XXXXXX", run, kind, (int)self, gs_proc_start_time(self));
	if (w < 0 || (size_t)w >= n)
		return gs_fail(err, GS_E_FAILURE, "the work folder's path in '%s' is too long", run);
	if (!mkdtemp(out))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create a work folder in '%s'", run);
	return 0;
}
