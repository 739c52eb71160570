/*
 * report.h - the outcome of suspend/resume for the user: a short human form
 * on stdout, or one JSON object with --json (same facts, stable keys).
 */
#ifndef GPUSNAP_CLI_REPORT_H
#define GPUSNAP_CLI_REPORT_H

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cuda/checkpoint.h"

struct cli_outcome {
	const char *action; /* "suspend" or "resume" */
	struct gs_ckpt_proc *procs;
	struct cli_agent *agents; /* per process; .present when the agent did the data part */
	uint64_t *vram_before, *vram_after; /* per process, bytes */
	int nprocs;
	struct cli_vram gpus_before, gpus_after;
	double total_s;
	int rc;
	const struct gs_err *err;
};

/*
 * The state a user sees: the driver's, except where the agent holds the data
 * while the driver sees a running process (a --keep-context suspend, or between
 * the two steps of a --tree suspend). agent_state: enum gs_agent_state.
 */
const char *cli_process_state_name(CUprocessState st, bool agent_present, uint64_t agent_state);

void cli_print_outcome(struct cli_session *s, const struct cli_outcome *o, bool json);

#endif
