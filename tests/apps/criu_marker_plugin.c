/*
 * criu_marker_plugin.c - a stand-in CRIU plugin for tests/cli/t5003-criu-plugin.sh
 * (built there against CRIU's criu-plugin.h, not by CMake: the header comes with
 * scripts/get-criu.sh). When a criu run loads it, it appends "init STAGE PID" to
 * the file $GPUSNAP_TEST_PLUGIN_MARKER names, so the test sees which runs loaded
 * the plugins of CRIU's default folder. Without that variable it does nothing.
 *
 * It declares no hooks (max_hooks 0): CRIU refuses a plugin declaring more hooks
 * than it knows, and that number differs between CRIU versions.
 */
#include <criu-plugin.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int marker_init(int stage)
{
	const char *path = getenv("GPUSNAP_TEST_PLUGIN_MARKER");
	if (!path || !*path)
		return 0;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return 0;
	char line[64];
	int n = snprintf(line, sizeof(line), "init %d %d\n", stage, (int)getpid());
	if (n > 0 && write(fd, line, (size_t)n) != n)
		n = -1;
	close(fd);
	return 0;
}

static void marker_exit(int stage, int ret)
{
	(void)stage;
	(void)ret;
}

cr_plugin_desc_t CR_PLUGIN_DESC = {
	.name = "gpusnap-test-marker",
	.init = marker_init,
	.exit = marker_exit,
	.version = CRIU_PLUGIN_VERSION,
	.max_hooks = 0,
};
