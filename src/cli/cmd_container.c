/*
 * cmd_container.c - `gpusnap container-spec`: prints what puts the agent
 * (libgpusnap.so) into containers, so that a container engine's checkpoint
 * (runc or crun running CRIU, with gpusnap's CRIU plugin) takes the agent
 * path: the library bind-mounted read-only and LD_PRELOAD naming it.
 *   --cdi (default): a CDI spec (the Container Device Interface, which
 *     nvidia-container-toolkit uses for the GPUs), kind gpusnap.io/agent,
 *     device "agent", to save as /etc/cdi/gpusnap.json and request with
 *     `--device gpusnap.io/agent=agent` (Podman, CRI-O, containerd >= 1.7);
 *   --run-args: the same as `podman run` / `docker run` arguments, one per
 *     line, for engines without CDI.
 * It only prints: nothing is installed and no engine is called
 * (docs/CONTAINERS.md).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/json.h"

#define CDI_VERSION "0.5.0" /* the newest CDI version Podman 4.3 reads; nothing newer is used */
#define CDI_KIND "gpusnap.io/agent"
#define CDI_DEVICE "agent"
#define DEFAULT_CONTAINER_PATH "/usr/lib/gpusnap/libgpusnap.so"

static const char *const container_usage[] = {
	"gpusnap container-spec [--cdi | --run-args] [--agent PATH] [--container-path PATH]",
	NULL,
};

const struct cli_doc container_spec_doc = {
	.args = NULL,
	.description =
		"Prints what puts the gpusnap agent into containers: a CDI spec (the default, --cdi), to save as "
		"/etc/cdi/gpusnap.json and use as podman run --device gpusnap.io/agent=agent, or with --run-args "
		"the same as podman or docker run arguments (a read-only volume of libgpusnap.so and LD_PRELOAD).\n\n"
		"With the CRIU plugin in CRIU's plugin folder, a checkpoint of such a container (podman container "
		"checkpoint, CRI-O, containerd) carries its GPU state; docs/CONTAINERS.md has the engines' commands.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_USAGE, "bad options; a path the output cannot carry" },
						{ GS_E_AGENT, "the agent cannot be found or read" }, { 0, NULL } },
	.env = "GPUSNAP_AGENT",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap container-spec > /etc/cdi/gpusnap.json", "Install the CDI spec." },
		{ "podman run $(gpusnap container-spec --run-args) IMAGE", "Or give the engine the flags." },
		{ NULL, NULL } },
};

static int print_cdi(const char *host, const char *inside, struct gs_err *err)
{
	char preload[PATH_MAX + 16];
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", inside);
	struct gs_json j;
	gs_json_init(&j);
	gs_json_object_begin(&j);
	gs_json_kv_string(&j, "cdiVersion", CDI_VERSION);
	gs_json_kv_string(&j, "kind", CDI_KIND);
	gs_json_key(&j, "devices");
	gs_json_array_begin(&j);
	gs_json_object_begin(&j);
	gs_json_kv_string(&j, "name", CDI_DEVICE);
	/* the edits belong to the device: CDI refuses a device without edits of its own */
	gs_json_key(&j, "containerEdits");
	gs_json_object_begin(&j);
	gs_json_key(&j, "env");
	gs_json_array_begin(&j);
	gs_json_string(&j, preload);
	gs_json_array_end(&j);
	gs_json_key(&j, "mounts");
	gs_json_array_begin(&j);
	gs_json_object_begin(&j);
	gs_json_kv_string(&j, "hostPath", host);
	gs_json_kv_string(&j, "containerPath", inside);
	gs_json_key(&j, "options");
	gs_json_array_begin(&j);
	static const char *const options[] = { "ro", "nosuid", "nodev", "bind" };
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
		gs_json_string(&j, options[i]);
	gs_json_array_end(&j);
	gs_json_object_end(&j);
	gs_json_array_end(&j);
	gs_json_object_end(&j);
	gs_json_object_end(&j);
	gs_json_array_end(&j);
	gs_json_object_end(&j);
	const char *text = gs_json_finish(&j);
	if (!text) {
		gs_json_free(&j);
		return gs_fail(err, GS_E_FAILURE, "cannot build the cdi spec (out of memory)");
	}
	printf("%s\n", text);
	gs_json_free(&j);
	return 0;
}

/* A path passes unquoted through a shell, -v's HOST:CONTAINER[:OPTIONS] and LD_PRELOAD's list. */
static bool plain_path(const char *p)
{
	for (; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+", *p))
			return false;
	return true;
}

int cmd_container_spec(int argc, char **argv)
{
	bool cdi = false, run_args = false;
	const char *agent_opt = NULL, *inside = DEFAULT_CONTAINER_PATH;
	const struct gs_option opts[] = {
		GS_OPT_BOOL_(0, "cdi", &cdi, "print a CDI spec (JSON) for /etc/cdi (the default)"),
		GS_OPT_BOOL_(0, "run-args", &run_args, "print podman/docker run arguments instead, one per line"),
		GS_OPT_STRING_(0, "agent", &agent_opt, "PATH",
			       "libgpusnap.so on the host (default: the one `gpusnap run` uses)"),
		GS_OPT_STRING_(0, "container-path", &inside, "PATH",
			       "where the container sees it (default " DEFAULT_CONTAINER_PATH ")"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, container_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("container-spec", argv, nargs, 0, "")))
		return rc;
	if (cdi && run_args)
		return cli_usage_error("container-spec", "--cdi and --run-args exclude each other");
	if (inside[0] != '/' || !plain_path(inside))
		return cli_usage_error("container-spec",
				       "--container-path '%s' must be absolute, of letters, digits and / . _ - + only", inside);
	struct gs_err err = { 0 };
	char found[PATH_MAX], host[PATH_MAX];
	if (agent_opt) {
		if (!realpath(agent_opt, host)) {
			gs_fail_errno(&err, GS_E_AGENT, errno, "--agent '%s' cannot be found", agent_opt);
			return cli_report_error(&err);
		}
	} else {
		if ((rc = cli_find_agent(found, sizeof(found), &err)))
			return cli_report_error(&err);
		if (!realpath(found, host)) {
			gs_fail_errno(&err, GS_E_AGENT, errno, "the agent '%s' cannot be found", found);
			return cli_report_error(&err);
		}
	}
	if (access(host, R_OK)) {
		gs_fail_errno(&err, GS_E_AGENT, errno, "the agent '%s' cannot be read", host);
		return cli_report_error(&err);
	}
	if (run_args) {
		if (!plain_path(host)) {
			gs_fail(&err, GS_E_USAGE, "the agent's path '%s' needs quoting in run arguments: use --cdi", host);
			return cli_report_error(&err);
		}
		printf("--volume=%s:%s:ro\n--env=LD_PRELOAD=%s\n", host, inside, inside);
		return 0;
	}
	if ((rc = print_cdi(host, inside, &err)))
		return cli_report_error(&err);
	return 0;
}
