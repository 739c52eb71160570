/*
 * rundir.c - the runtime directory (see rundir.h).
 */
#include "common/rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int gs_run_dir(char *buf, size_t n, struct gs_err *err)
{
	const char *env = getenv("GPUSNAP_RUN_DIR");
	if (env && *env)
		snprintf(buf, n, "%s", env);
	else if (geteuid() == 0)
		snprintf(buf, n, "/run/gpusnap");
	else
		snprintf(buf, n, "/tmp/gpusnap-%u", (unsigned)geteuid());
	if (mkdir(buf, 0700) && errno != EEXIST)
		return gs_fail_errno(err, gs_exit_from_errno(errno), errno, "cannot create runtime directory '%s'", buf);
	struct stat st;
	if (lstat(buf, &st))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat runtime directory '%s'", buf);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_FAILURE, "runtime path '%s' is not a directory", buf);
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return gs_fail(err, GS_E_PERMISSION, "runtime directory '%s' is owned by another user or writable by others", buf);
	return 0;
}
