/*
 * cmd_state.c - `gpusnap state PID`: is the process running, locked,
 * suspended or failed (as the driver sees it), and what GPU memory it holds.
 * It never waits for an operation on the process: it names the gpusnap at
 * work (leaving its agent alone, which may be busy), or what a gpusnap that
 * was killed left (op_lock.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cli/op_lock.h"
#include "cli/report.h"
#include "core/control_socket.h"
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
	if ((rc = cli_want_args("state", argv, nargs, 1, "PID")))
		return rc;
	struct gs_err err = { 0 };
	struct cli_session s;
	int pid;
	if (gs_parse_pid(argv[0], &pid)) {
		gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", argv[0]);
		return cli_report_error(&err);
	}
	CUprocessState st = CU_PROCESS_STATE_RUNNING; /* left so for a process that is stopped */
	rc = gs_proc_check(pid, &err);
	if (rc) {
		cli_op_explain_gone(pid, &err);
		return cli_report_error(&err);
	}
	struct cli_op_record op;
	bool has_op = cli_op_find(pid, &op) == 1;
	/*
	 * Stopped by a signal (a supervisor's SIGSTOP): neither the driver nor the
	 * agent can answer for it until it continues; state says so at once.
	 * Stopped by a debugger: the driver answers, the agent cannot.
	 */
	char why_stopped[GS_ERR_MSG_MAX] = "", why[320], until[64];
	enum gs_proc_halt halt = gs_proc_halted(pid, false, why, sizeof(why), until, sizeof(until));
	bool frozen = halt == GS_PROC_FROZEN, group_stopped = halt != GS_PROC_RUNS;
	bool held_stopped = group_stopped;
	if (group_stopped)
		snprintf(why_stopped, sizeof(why_stopped), "process %d is %s: the driver and its agent answer for it once %s",
			 pid, why, until);
	rc = cli_session_open(&s, &err);
	if (!rc && !group_stopped)
		rc = gs_ckpt_get_state(&s.cu, pid, &st, &err);
	if (rc) {
		cli_session_close(&s);
		return cli_report_error(&err);
	}
	uint64_t mask = 0;
	uint64_t vram = cli_process_vram(&s, pid, &mask);
	struct cli_agent ag = { .present = false };
	/* stopped: whether it has an agent (its socket) is all that can be known of it */
	struct gs_err socket_err = { 0 };
	if (group_stopped && gs_ctl_find_agent(pid, ag.socket, sizeof(ag.socket), &socket_err))
		ag.socket[0] = '\0';
	/* an agent at work for another gpusnap answers when its work is done: not asked then */
	if (!group_stopped && (!has_op || !op.holder_alive) && (rc = cli_agent_probe(pid, &ag, &err))) {
		held_stopped = rc == GS_E_STATE && gs_proc_all_stopped(pid, true);
		if (!held_stopped) {
			cli_session_close(&s);
			return cli_report_error(&err);
		}
		snprintf(why_stopped, sizeof(why_stopped), "%s; the state shown is the driver's", err.msg);
	}
	const char *state = frozen ? "frozen" : group_stopped ? "stopped" : cli_process_state_name(st, ag.present, ag.state);
	char comm[64];
	gs_proc_comm(pid, comm, sizeof(comm));
	/* what an operation at work, or one that was killed, has to do with the state */
	char note[GS_ERR_MSG_MAX] = "";
	struct gs_proc_stat ps;
	/* a killed operation left nothing to say on a process that runs, unless it is held stopped */
	bool stopped = gs_proc_read_stat(pid, &ps) == 0 && ps.state == 'T';
	if (has_op && (op.holder_alive || strcmp(state, "running") || stopped))
		cli_op_describe(pid, &op, true, note, sizeof(note));
	if (json) {
		struct gs_json j;
		gs_json_init(&j);
		gs_json_object_begin(&j);
		gs_json_kv_int(&j, "pid", pid);
		gs_json_kv_string(&j, "comm", comm);
		gs_json_kv_string(&j, "state", state);
		if (ag.present && ag.fault[0]) /* an undo of the agent failed: why it stays suspended */
			gs_json_kv_string(&j, "fault", ag.fault);
		if (!group_stopped)
			gs_json_kv_string(&j, "driver_state", gs_cuda_state_name(st));
		if (!group_stopped || ag.socket[0])
			gs_json_kv_string(&j, "path", ag.present || (held_stopped && ag.socket[0]) ? "agent" : "driver");
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
		if (held_stopped)
			gs_json_kv_string(&j, "stopped", why_stopped);
		if (note[0]) {
			gs_json_key(&j, "operation");
			gs_json_object_begin(&j);
			gs_json_kv_string(&j, "action", op.action);
			gs_json_kv_int(&j, "gpusnap_pid", op.holder);
			gs_json_kv_bool(&j, "at_work", op.holder_alive);
			gs_json_kv_string(&j, "step", op.step);
			if (op.image[0])
				gs_json_kv_string(&j, "image", op.image);
			gs_json_kv_string(&j, "message", note);
			gs_json_object_end(&j);
		}
		gs_json_object_end(&j);
		cli_json_print(&j);
	} else {
		if (ag.present && ag.fault[0])
			printf("%s (%s)\n", state, ag.fault);
		else
			printf("%s\n", state);
		if (note[0])
			fprintf(stderr, "gpusnap: note: %s\n", note);
		if (held_stopped)
			fprintf(stderr, "gpusnap: note: %s\n", why_stopped);
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
