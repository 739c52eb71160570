/*
 * criu_driver.c - a test driver over the src/criu library, so shell tests can dump
 * and restore real processes through gpusnap's CRIU driving before the gpusnap
 * command has `dump`/`restore` of its own.
 *
 *   criu_driver find                       prints "VERSION PATH"
 *   criu_driver check
 *   criu_driver dump PID DIR [--leave-running]
 *   criu_driver restore DIR [WORKDIR [IMAGE_PID]]
 *                                          prints the restored PID; IMAGE_PID: the PID
 *                                          a failed restore's leftover is killed at
 *
 * Exit status: 0, or the gpusnap exit code of the error (printed on stderr).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "core/control_socket.h"
#include "criu/criu.h"

static int fail(const struct gs_err *err)
{
	fprintf(stderr, "criu_driver: %s\n", err->msg);
	return err->code ? err->code : 1;
}

int main(int argc, char **argv)
{
	gs_log_init_from_env();
	if (argc < 2) {
		fprintf(stderr, "usage: criu_driver find|check|dump PID DIR [--leave-running]|restore DIR [WORKDIR [IMAGE_PID]]\n");
		return GS_E_USAGE;
	}
	struct gs_err err = { 0 };
	struct gs_criu criu;
	char run[PATH_MAX], home[PATH_MAX + 8];
	if (gs_criu_find(&criu, &err) || gs_ctl_run_dir(run, sizeof(run), &err))
		return fail(&err);
	snprintf(home, sizeof(home), "%s/criu", run);
	if (gs_criu_set_home(&criu, home, &err))
		return fail(&err);
	const char *cmd = argv[1];
	if (!strcmp(cmd, "find") && argc == 2) {
		printf("%s %s\n", criu.version, criu.path);
		return 0;
	}
	if (!strcmp(cmd, "check") && argc == 2)
		return gs_criu_check(&criu, &err) ? fail(&err) : 0;
	if (!strcmp(cmd, "dump") && (argc == 4 || (argc == 5 && !strcmp(argv[4], "--leave-running")))) {
		int pid;
		if (gs_parse_pid(argv[2], &pid)) {
			fprintf(stderr, "criu_driver: bad pid '%s'\n", argv[2]);
			return GS_E_USAGE;
		}
		struct gs_criu_dump_opts o = { .leave_running = argc == 5 };
		return gs_criu_dump(&criu, pid, argv[3], &o, &err) ? fail(&err) : 0;
	}
	if (!strcmp(cmd, "restore") && argc >= 3 && argc <= 5) {
		int image_pid = 0;
		if (argc == 5 && gs_parse_pid(argv[4], &image_pid)) {
			fprintf(stderr, "criu_driver: bad pid '%s'\n", argv[4]);
			return GS_E_USAGE;
		}
		/* the time limit is the criu's: GPUSNAP_CRIU_TIMEOUT, else gpusnap's default */
		struct gs_criu_restore_opts o = { .work_dir = argc >= 4 && *argv[3] ? argv[3] : NULL,
						  .image_pid = image_pid };
		pid_t pid;
		if (gs_criu_restore(&criu, argv[2], &o, &pid, &err))
			return fail(&err);
		printf("%d\n", (int)pid);
		return 0;
	}
	fprintf(stderr, "criu_driver: bad arguments\n");
	return GS_E_USAGE;
}
