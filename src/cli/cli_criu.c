/*
 * cli_criu.c - the criu the gpusnap command runs, with its home in the run
 * directory (see cli_criu.h; docs/CRIU.md says why gpusnap has its own plugin folder).
 */
#include "cli/cli_criu.h"

#include <limits.h>
#include <stdio.h>

#include "core/control_socket.h"

int cli_criu_find(struct gs_criu *c, struct gs_err *err)
{
	int rc = gs_criu_find(c, err);
	/* a criu that cannot work as this user is refused before anything of the process is touched */
	if (rc || (rc = gs_criu_check_rights(c, err)))
		return rc;
	char run[PATH_MAX], home[PATH_MAX];
	if ((rc = gs_ctl_run_dir(run, sizeof(run), err)))
		return rc;
	if ((size_t)snprintf(home, sizeof(home), "%s/criu", run) >= sizeof(home))
		return gs_fail(err, GS_E_FAILURE, "run directory '%s' is too long", run);
	return gs_criu_set_home(c, home, err);
}
