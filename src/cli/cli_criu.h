/*
 * cli_criu.h - the criu the gpusnap command runs: found as the library finds it
 * (criu/criu.h), with its home in gpusnap's run directory (RUN/criu: the plugin
 * folder every dump and restore names, and the kept logs of failed runs).
 */
#ifndef GPUSNAP_CLI_CLI_CRIU_H
#define GPUSNAP_CLI_CLI_CRIU_H

#include "common/err.h"
#include "criu/criu.h"

/*
 * gs_criu_find, gs_criu_check_rights (GS_E_PERMISSION where criu cannot work
 * as this user), then gs_criu_set_home(RUN/criu). 0 or an error code with err set.
 */
int cli_criu_find(struct gs_criu *c, struct gs_err *err);

#endif
