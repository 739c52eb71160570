/*
 * cmd_run.c - `gpusnap run [--reserve SIZE] [--] CMD ARGS...`: starts CMD
 * with the gpusnap agent preloaded (LD_PRELOAD=libgpusnap.so), so that
 * suspend and resume take the fast path. Replaces itself with CMD (exec), so
 * CMD keeps gpusnap's PID, parent, terminal and signals. A --reserve the
 * host cannot hold is refused (exit 13) before CMD starts.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "core/hostmem.h"
#include "common/settings.h"

static const char *const run_usage[] = {
	"gpusnap run [--reserve SIZE] [--] COMMAND [ARGS...]",
	NULL,
};

const struct cli_doc run_doc = {
	.args = "PROGRAM",
	.description =
		"Runs COMMAND with the gpusnap agent, libgpusnap.so, preloaded (LD_PRELOAD), so its suspends, "
		"resumes and dumps take the fast path: the agent moves the GPU data itself, in parallel and without "
		"the driver's copy of every allocation. Nothing else changes for the app.\n\n"
		"The agent is GPUSNAP_AGENT if set, else libgpusnap.so beside the gpusnap binary (a build tree), "
		"in ../lib or in ../lib/x86_64-linux-gnu (an installed gpusnap). The variables marked \"in the "
		"app\" below are read by the agent in the app; README.md lists them all.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "bad options, or COMMAND not found" },
						{ GS_E_NO_SPACE, "--reserve is more than the host memory available" },
						{ GS_E_AGENT, "the agent cannot be found or read" }, { 0, NULL } },
	.env = "GPUSNAP_AGENT GPUSNAP_RESERVE GPUSNAP_AGENT_HOOKS GPUSNAP_AGENT_LOG GPUSNAP_STAGING_MODE "
	       "GPUSNAP_STAGING_THREADS GPUSNAP_IO_THREADS GPUSNAP_HOST_MEMORY_LIMIT GPUSNAP_ALLOW_IO_URING "
	       "GPUSNAP_FORK_DROP_DEVICE GPUSNAP_RUN_DIR GPUSNAP_LOG",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap run python serve.py", "Start a server with the agent." },
		{ "gpusnap run --reserve 40G torchrun --nproc-per-node 8 train.py",
		  "Keep 40 GiB of host memory ready, so suspends run at line rate." },
		{ NULL, NULL } },
};

int cli_find_agent(char *buf, size_t n, struct gs_err *err)
{
	const char *env = gs_setting_str(GS_S_AGENT);
	if (env) {
		if (access(env, R_OK))
			return gs_fail_errno(err, GS_E_AGENT, errno, "GPUSNAP_AGENT='%s' cannot be read", env);
		snprintf(buf, n, "%s", env);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return gs_fail_errno(err, GS_E_AGENT, errno, "cannot find gpusnap's own location");
	self[len] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	static const char *const candidates[] = { "%s/libgpusnap.so", "%s/../lib/libgpusnap.so",
						  "%s/../lib/x86_64-linux-gnu/libgpusnap.so" };
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
		char path[PATH_MAX + 64], real[PATH_MAX];
		snprintf(path, sizeof(path), candidates[i], self);
		if (access(path, R_OK) == 0 && realpath(path, real)) {
			snprintf(buf, n, "%s", real);
			return 0;
		}
	}
	return gs_fail(err, GS_E_AGENT, "cannot find libgpusnap.so next to %s or in ../lib (set GPUSNAP_AGENT)", self);
}

/*
 * The reserved pool is taken in full when the app first uses a GPU: more than
 * the host (or the memory cgroup gpusnap and so the app run in) has available
 * would end in swap or the OOM killer, so it is refused before the app starts.
 */
static int check_reserve(uint64_t reserve, struct gs_err *err)
{
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	if (m.avail == UINT64_MAX || reserve <= m.avail)
		return 0;
	char want[32], have[32];
	return gs_fail(err, GS_E_NO_SPACE, "--reserve %s is more than the host memory available (%s, %s)",
		       gs_format_bytes(reserve, want, sizeof(want)), gs_format_bytes(m.avail, have, sizeof(have)), m.limit);
}

int cmd_run(int argc, char **argv)
{
	uint64_t reserve = 0;
	const struct gs_option opts[] = {
		GS_OPT_SIZE_(0, "reserve", &reserve, "SIZE",
			     "keep SIZE of host memory ready for suspends (e.g. 40G): line-rate suspend at that cost"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, run_usage, GS_PARSE_STOP_AT_NON_OPTION, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs < 1)
		return cli_usage_error("run", "CMD is required");
	argv[nargs] = NULL; /* the parser moved the command to the front; end it there for exec */
	struct gs_err err = { 0 };
	if (reserve && (rc = check_reserve(reserve, &err)))
		return cli_report_error(&err);
	char agent[PATH_MAX];
	if ((rc = cli_find_agent(agent, sizeof(agent), &err)))
		return cli_report_error(&err);
	const char *old = getenv("LD_PRELOAD");
	char *preload = NULL;
	if (old && *old) {
		size_t len = strlen(agent) + strlen(old) + 2;
		preload = malloc(len);
		if (!preload)
			return cli_report_error(&(struct gs_err){ GS_E_FAILURE, "out of memory" });
		snprintf(preload, len, "%s:%s", agent, old);
	}
	setenv("LD_PRELOAD", preload ? preload : agent, 1);
	free(preload);
	if (reserve) {
		char v[32];
		snprintf(v, sizeof(v), "%llu", (unsigned long long)reserve);
		setenv("GPUSNAP_RESERVE", v, 1);
	}
	execvp(argv[0], argv);
	int e = errno;
	gs_fail_errno(&err, e == ENOENT ? GS_E_USAGE : GS_E_FAILURE, e, "cannot run '%s'", argv[0]);
	return cli_report_error(&err);
}
