/*
 * cmd_state.c - `gpusnap state PID`: is the process running, locked,
 * suspended or failed (as the driver sees it), and what GPU memory it holds.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "core/protocol.h"
#include "common/proc.h"
#include "common/util.h"
#include "cuda/checkpoint.h"

static const char *const state_usage[] = {
	"gpusnap state [--json] [-v] PID",
	NULL,
};

int cmd_state(int argc, char **argv)
{
	bool json = false, verbose = false;
	const struct gs_option opts[] = {
		GS_OPT_BOOL_(0, "json", &json, "print the state as JSON"),
		GS_OPT_BOOL_('v', "verbose", &verbose, "also say what the agent holds and what it cannot release"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, state_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs != 1) {
		gs_print_usage(stderr, state_usage, opts);
		return GS_E_USAGE;
	}
	struct gs_err err = { 0 };
	struct cli_session s;
	int pid;
	if (gs_parse_pid(argv[0], &pid)) {
		gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", argv[0]);
		return cli_report_error(&err);
	}
	CUprocessState st;
	rc = gs_proc_check(pid, &err);
	if (rc)
		return cli_report_error(&err);
	rc = cli_session_open(&s, &err);
	if (!rc)
		rc = gs_ckpt_get_state(&s.cu, pid, &st, &err);
	if (rc) {
		cli_session_close(&s);
		return cli_report_error(&err);
	}
	uint64_t mask = 0;
	uint64_t vram = cli_process_vram(&s, pid, &mask);
	struct cli_agent ag;
	if ((rc = cli_agent_probe(pid, &ag, &err))) {
		cli_session_close(&s);
		return cli_report_error(&err);
	}
	/* with --keep-context the driver sees a running process while the agent holds its data */
	const char *state = gs_cuda_state_name(st);
	if (ag.present && ag.state == GS_AGENT_DATA_RELEASED && st == CU_PROCESS_STATE_RUNNING)
		state = "suspended";
	else if (ag.present && ag.state == GS_AGENT_GATED && st == CU_PROCESS_STATE_RUNNING)
		state = "gated"; /* between the two steps of a --tree suspend */
	else if (ag.present && ag.state != GS_AGENT_RUNNING && st == CU_PROCESS_STATE_RUNNING)
		state = "suspended";
	char comm[64];
	gs_proc_comm(pid, comm, sizeof(comm));
	if (json) {
		struct gs_json j;
		gs_json_init(&j);
		gs_json_object_begin(&j);
		gs_json_kv_int(&j, "pid", pid);
		gs_json_kv_string(&j, "comm", comm);
		gs_json_kv_string(&j, "state", state);
		if (ag.present && ag.fault[0]) /* an undo of the agent failed: why it stays suspended */
			gs_json_kv_string(&j, "fault", ag.fault);
		gs_json_kv_string(&j, "driver_state", gs_cuda_state_name(st));
		gs_json_kv_string(&j, "path", ag.present ? "agent" : "driver");
		if (ag.present) {
			gs_json_key(&j, "agent");
			gs_json_object_begin(&j);
			gs_json_kv_string(&j, "state", gs_agent_state_name(ag.state));
			gs_json_kv_uint(&j, "allocations", ag.alloc_count);
			gs_json_kv_uint(&j, "bytes", ag.alloc_bytes);
			gs_json_kv_uint(&j, "unmanaged_allocations", ag.unmanaged_count);
			gs_json_kv_uint(&j, "unmanaged_bytes", ag.unmanaged_bytes);
			gs_json_object_end(&j);
		}
		if (s.nvml)
			gs_json_kv_uint(&j, "vram_bytes", vram);
		gs_json_key(&j, "gpus");
		gs_json_array_begin(&j);
		for (int g = 0; g < s.ngpus && g < 64; g++)
			if (mask & (1ULL << g))
				gs_json_int(&j, g);
		gs_json_array_end(&j);
		gs_json_object_end(&j);
		cli_json_print(&j);
	} else {
		if (ag.present && ag.fault[0])
			printf("%s (%s)\n", state, ag.fault);
		else
			printf("%s\n", state);
		if (ag.present && !verbose && ag.unmanaged_count) {
			char b[32];
			fprintf(stderr, "gpusnap: note: %llu allocation%s (%s) of process %d cannot be released by the agent; the driver moves them\n",
				(unsigned long long)ag.unmanaged_count, ag.unmanaged_count == 1 ? "" : "s",
				gs_format_bytes(ag.unmanaged_bytes, b, sizeof(b)), pid);
		}
		if (ag.present && verbose) {
			char b1[32], b2[32];
			printf("agent: %s, %llu allocation%s, %s releasable", gs_agent_state_name(ag.state),
			       (unsigned long long)ag.alloc_count, ag.alloc_count == 1 ? "" : "s",
			       gs_format_bytes(ag.alloc_bytes, b1, sizeof(b1)));
			if (ag.unmanaged_count)
				printf("; %llu allocation%s (%s) not releasable, moved by the driver",
				       (unsigned long long)ag.unmanaged_count, ag.unmanaged_count == 1 ? "" : "s",
				       gs_format_bytes(ag.unmanaged_bytes, b2, sizeof(b2)));
			printf("\n");
		}
	}
	cli_session_close(&s);
	return 0;
}
