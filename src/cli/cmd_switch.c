/*
 * cmd_switch.c - `gpusnap switch OUT_PID IN_PID`: one process leaves the GPU
 * (suspend) and another comes back onto it (resume), as one command. Both
 * are locked (op_lock.h) from the first check to the end.
 *
 * Each half is the suspend or the resume command's own run
 * (suspend_resume.h), the agent path or the driver path as each process
 * has it. When the GPUs IN used have room for its data already (NVML's free
 * memory against what IN's agent holds, or --overlap always) IN's resume
 * runs on a second thread while OUT's suspend runs: PCIe carries both
 * directions at once, so the switch costs about one transfer. Otherwise OUT
 * goes first and IN follows, its resume tried again while the GPU is short
 * of memory (OUT's memory can take a moment to be free) until --timeout.
 *
 * Undo, when a half fails or a signal comes before the switch is whole
 * (interrupt.h): OUT's suspend rolls itself back; a resumed IN is suspended
 * again and then a suspended OUT resumed, with the signal muted for those
 * steps. What each process is afterwards is read back, not assumed: the
 * error line says it for each, with the command that puts it right where an
 * undo failed, and the lock's record (cli_op_leave) lets `gpusnap state`
 * say the same later.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/interrupt.h"
#include "cli/op_lock.h"
#include "cli/report.h"
#include "cli/suspend_resume.h"
#include "common/fault.h"
#include "common/json.h"
#include "common/proc.h"
#include "common/util.h"
#include "core/protocol.h"
#include "cuda/checkpoint.h"

static const char *const switch_usage[] = {
	"gpusnap switch [--timeout SECONDS] [--keep-context] [--spill DIR [--spill-only]] [--driver] [--overlap WHEN] "
	"[--json] OUT_PID IN_PID",
	NULL,
};

const struct cli_doc switch_doc = {
	.args = "PID PID",
	.description =
		"Suspends process OUT_PID and resumes process IN_PID on the GPUs it used, as one command: the way two "
		"jobs that each fill a GPU take turns on it. Both processes are locked from the first check to the "
		"end; nothing moves unless OUT_PID runs and IN_PID is suspended.\n\n"
		"When the GPUs have room for IN_PID's data already (by NVML, against what its agent holds), its resume "
		"starts at once and runs while OUT_PID's suspend runs: the GPU's bus carries both directions at once, "
		"so a switch costs about one transfer. Otherwise OUT_PID goes first, and IN_PID's resume is tried again "
		"while the GPU is short of memory, up to --timeout. Each half takes the agent path or the driver path "
		"as its process allows, exactly as suspend and resume do.\n\n"
		"A failure of either half, or Ctrl-C before the switch is whole, puts both back: OUT_PID runs, IN_PID "
		"stays suspended. Where that cannot be done the error line says what each process is and the command "
		"that puts it right, and gpusnap state says the same.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" },
						{ GS_E_USAGE, "bad command line, or OUT_PID and IN_PID are the same process" },
						{ GS_E_NO_PROCESS, "" }, { GS_E_NOT_CUDA, "" },
						{ GS_E_PERMISSION, "the spill directory is another user's, or others can write "
								   "into it; nothing was done" },
						{ GS_E_STATE, "OUT_PID is not running or IN_PID is not suspended, or another "
							      "gpusnap is at work on one of them (named); nothing was done" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" },
						{ GS_E_TIMEOUT, "OUT_PID's GPU work did not finish within --timeout; undone" },
						{ GS_E_NO_SPACE, "not enough host memory for OUT_PID's GPU data (and no spill directory), "
								 "or the spill directory is full; undone" },
						{ GS_E_NO_VRAM, "no room on the GPU for IN_PID's data within --timeout; undone" },
						{ GS_E_AGENT, "" },
						{ GS_E_PARTIAL, "a half failed and its undo failed too: the line says what each "
								"process is and the command that puts it right" },
						{ GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR GPUSNAP_SPILL_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap switch 1234 5678", "Take process 1234 off the GPU and put suspended process 5678 back on it." },
		{ "while :; do gpusnap switch $A $B && sleep 600 && gpusnap switch $B $A && sleep 600; done",
		  "Two jobs take turns on one GPU every ten minutes." },
		{ NULL, NULL } },
};

#define DEFAULT_TIMEOUT_S 30.0
/* Beside the agent's data, what IN needs on a GPU after a full suspend: its context and the driver's own memory. */
#define CONTEXT_ROOM_BYTES (1ULL << 30)
/* Between two tries of IN's resume while the GPU is short of memory. */
#define RETRY_PAUSE_NS 50000000L

enum overlap_when { OVERLAP_AUTO, OVERLAP_ALWAYS, OVERLAP_NEVER };

struct half {
	struct gs_ckpt_proc proc;
	struct cli_agent agent;
	struct cli_op *lock;
	struct cli_op_record left;
	const char *state_before; /* as a user sees it (cli_process_state_name) */
	CUprocessState driver_before;
	uint64_t agent_before;
	uint64_t mask, vram_before, vram_after;
	double start, end; /* its half's first try began, its last ended (gs_now) */
	int rc;
	struct gs_err err;
	bool moved; /* its half is done and not undone */
	char comm[64];
	uint64_t data_bytes; /* what the agent moved (its "bytes" counter), 0 on the driver path */
};

struct switch_run {
	struct cli_session s;
	struct half out, in;
	double timeout;
	bool keep_context, driver_only, json;
	struct cli_suspend_opts suspend; /* how OUT is suspended (and IN again by an undo): --spill, --spill-only */
	enum overlap_when when;
	bool together; /* the halves ran at once */
	char order_why[160];
	int retries;
	bool undo_ran;
};

/* The state a user sees now; the agent asked again (its state changed). */
static const char *state_now(struct switch_run *w, struct half *h, CUprocessState *driver)
{
	struct gs_err e = { 0 };
	CUprocessState st;
	if (driver)
		*driver = CU_PROCESS_STATE_FAILED; /* what a caller sees when the driver could not be asked */
	if (gs_ckpt_get_state(&w->s.cu, h->proc.pid, &st, &e))
		return "unknown";
	if (driver)
		*driver = st;
	if (!w->driver_only && h->agent.present && cli_agent_probe(h->proc.pid, &h->agent, &e))
		return "unknown";
	return cli_process_state_name(st, h->agent.present, h->agent.state);
}

/*
 * A suspend as the switch's options say, keep_context for this process. An
 * undo suspending IN again (undo) puts it back where a suspend would: into
 * host memory, the spill directory only when memory is short (not
 * --spill-only, which was asked of OUT), and is never refused for --spill:
 * IN may be a process without the agent.
 */
static int suspend_as_asked(struct switch_run *w, struct half *h, bool keep_context, bool undo, struct gs_err *err)
{
	struct cli_suspend_opts o = w->suspend;
	o.timeout = w->timeout;
	o.keep_context = keep_context;
	if (undo)
		o.spill_said = o.spill_only = false;
	return cli_suspend_procs(&w->s, &h->proc, &h->agent, 1, &o, err);
}

static void suspend_half(struct switch_run *w, struct half *h, bool keep_context)
{
	h->rc = suspend_as_asked(w, h, keep_context, false, &h->err);
	h->data_bytes = h->agent.present ? cli_agent_counter(&h->agent, "bytes") : 0;
}

static void resume_half(struct switch_run *w, struct half *h)
{
	h->rc = cli_resume_procs(&w->s, &h->proc, &h->agent, 1, &h->err);
	h->data_bytes = h->agent.present ? cli_agent_counter(&h->agent, "bytes") : 0;
}

/* IN's resume; with retry, tried again while the GPU says it has no room, until the deadline. */
static void resume_in(struct switch_run *w, bool retry)
{
	struct half *h = &w->in;
	double deadline = gs_now() + (w->timeout > 0 ? w->timeout : DEFAULT_TIMEOUT_S);
	if (!h->start)
		h->start = gs_now();
	for (;;) {
		memset(&h->err, 0, sizeof(h->err));
		resume_half(w, h);
		if (h->rc != GS_E_NO_VRAM || !retry || gs_now() >= deadline || cli_signal_caught())
			break;
		/* the agent put its memory back to suspended and may say so differently now */
		struct timespec pause = { 0, RETRY_PAUSE_NS };
		nanosleep(&pause, NULL);
		state_now(w, h, NULL);
		w->retries++;
	}
	h->end = gs_now();
}

static void *resume_in_thread(void *arg)
{
	resume_in(arg, false);
	return NULL;
}

/*
 * Whether every GPU IN used has room for its data now: NVML's free memory
 * against what IN's agent holds and a context. Without an agent, NVML or a
 * record of IN's GPUs the answer is no (why says which), and OUT goes first.
 */
static bool room_for_in(struct switch_run *w)
{
	struct half *in = &w->in;
	if (!in->agent.present) {
		snprintf(w->order_why, sizeof(w->order_why), "process %d's GPU data is with the driver, which does not say its size",
			 (int)in->proc.pid);
		return false;
	}
	if (!w->s.nvml) {
		snprintf(w->order_why, sizeof(w->order_why), "no NVML to say what is free on the GPU");
		return false;
	}
	CUuuid used[CLI_MAX_GPUS];
	int nused = cli_recorded_gpus(in->proc.pid, used, CLI_MAX_GPUS);
	if (nused <= 0) {
		snprintf(w->order_why, sizeof(w->order_why), "no record of the GPUs process %d used", (int)in->proc.pid);
		return false;
	}
	struct gs_nvml_gpu g[CLI_MAX_GPUS];
	int ng = gs_nvml_gpus(w->s.nvml, g, CLI_MAX_GPUS);
	uint64_t need = in->agent.alloc_bytes + (in->driver_before == CU_PROCESS_STATE_CHECKPOINTED ? CONTEXT_ROOM_BYTES : 0);
	for (int k = 0; k < nused; k++) {
		int i = gs_gpus_find_uuid(w->s.gpus, w->s.ngpus, used[k].bytes);
		if (i < 0 || i >= ng) {
			snprintf(w->order_why, sizeof(w->order_why), "a GPU process %d used is not here", (int)in->proc.pid);
			return false;
		}
		uint64_t free_bytes = g[i].total_bytes > g[i].used_bytes ? g[i].total_bytes - g[i].used_bytes : 0;
		if (free_bytes < need) {
			char b1[32], b2[32];
			snprintf(w->order_why, sizeof(w->order_why), "GPU %d has %s free, process %d needs %s", i,
				 gs_format_bytes(free_bytes, b1, sizeof(b1)), (int)in->proc.pid,
				 gs_format_bytes(need, b2, sizeof(b2)));
			return false;
		}
	}
	snprintf(w->order_why, sizeof(w->order_why), "the GPU has room for process %d's data", (int)in->proc.pid);
	return true;
}

/* The checks before anything moves: OUT runs, IN is suspended (as its own suspend left it). */
static int check_states(struct switch_run *w, struct gs_err *err)
{
	struct half *out = &w->out, *in = &w->in;
	int rc = gs_ckpt_get_state(&w->s.cu, out->proc.pid, &out->driver_before, err);
	if (!rc)
		rc = gs_ckpt_get_state(&w->s.cu, in->proc.pid, &in->driver_before, err);
	if (rc)
		return rc;
	out->agent_before = out->agent.state;
	in->agent_before = in->agent.state;
	out->state_before = cli_process_state_name(out->driver_before, out->agent.present, out->agent.state);
	in->state_before = cli_process_state_name(in->driver_before, in->agent.present, in->agent.state);
	out->proc.state_before = out->driver_before;
	in->proc.state_before = in->driver_before;
	if (strcmp(out->state_before, "running"))
		return gs_fail(err, GS_E_STATE, "process %d is %s, not running: switch takes a running process off the GPU",
			       (int)out->proc.pid, out->state_before);
	bool agent_holds = in->agent.present &&
			   (in->agent.state == GS_AGENT_SUSPENDED || in->agent.state == GS_AGENT_DATA_RELEASED);
	if (strcmp(in->state_before, "suspended") || (in->driver_before != CU_PROCESS_STATE_CHECKPOINTED && !agent_holds))
		return gs_fail(err, GS_E_STATE, "process %d is %s, not suspended: switch puts a suspended process back",
			       (int)in->proc.pid, in->state_before);
	if (w->keep_context && !out->agent.present)
		return gs_fail(err, GS_E_AGENT,
			       "--keep-context needs the gpusnap agent, and process %d runs without it (start it with gpusnap run)",
			       (int)out->proc.pid);
	return 0;
}

/* What a killed gpusnap leaves each process with: the next command on it says so (op_lock.h). */
static void record_working(struct switch_run *w)
{
	char s[GS_ERR_MSG_MAX];
	snprintf(s, sizeof(s), "process %d was being suspended by a gpusnap switch (pid %d) that was killed; if gpusnap "
		 "state says it is suspended, gpusnap resume %d puts it back", (int)w->out.proc.pid, (int)getpid(),
		 (int)w->out.proc.pid);
	cli_op_step(w->out.lock, "switch-out", NULL, s, NULL);
	snprintf(s, sizeof(s), "process %d was being resumed by a gpusnap switch (pid %d) that was killed; if gpusnap "
		 "state says it is suspended, gpusnap resume %d finishes it", (int)w->in.proc.pid, (int)getpid(),
		 (int)w->in.proc.pid);
	cli_op_step(w->in.lock, "switch-in", NULL, s, NULL);
}

/*
 * After IN's resume failed: what it is now. Resumed after all (the failure
 * came after its last step): moved, for the undo to take back. The driver's
 * part done but the agent's not: the driver checkpoints it again, so it is
 * suspended as it was before.
 */
static void settle_in(struct switch_run *w)
{
	struct half *in = &w->in;
	CUprocessState st = CU_PROCESS_STATE_FAILED;
	const char *now = state_now(w, in, &st);
	if (!strcmp(now, "running")) {
		in->moved = true;
		return;
	}
	if (st == CU_PROCESS_STATE_RUNNING && in->driver_before == CU_PROCESS_STATE_CHECKPOINTED) {
		struct gs_err e = { 0 };
		struct gs_ckpt_proc p = { .pid = in->proc.pid };
		if (gs_ckpt_suspend(&w->s.cu, &p, 1, w->timeout, &e))
			fprintf(stderr, "gpusnap: note: process %d keeps its CUDA context on the GPU: %s\n",
				(int)in->proc.pid, e.msg);
	}
}

/*
 * Puts back what moved: IN suspended again (as it was: --keep-context if
 * its context had stayed), then OUT resumed. If IN cannot be taken off the
 * GPU again, OUT stays suspended: the switch stands rather than two
 * processes competing for the GPU. The ending signals are muted meanwhile:
 * the steps must not stop for the signal that asked for them.
 */
static void undo(struct switch_run *w)
{
	w->undo_ran = w->in.moved || w->out.moved;
	cli_signals_mute(true);
	if (w->in.moved) {
		struct half *in = &w->in;
		state_now(w, in, NULL);
		bool kept = in->driver_before == CU_PROCESS_STATE_RUNNING;
		struct gs_err e = { 0 };
		if (!suspend_as_asked(w, in, kept && in->agent.present, true, &e))
			in->moved = false;
		else
			fprintf(stderr, "gpusnap: cannot suspend process %d again: %s\n", (int)in->proc.pid, e.msg);
	}
	if (w->out.moved && !w->in.moved) {
		struct half *out = &w->out;
		state_now(w, out, NULL);
		struct gs_err e = { 0 };
		if (!cli_resume_procs(&w->s, &out->proc, &out->agent, 1, &e))
			out->moved = false;
		else
			fprintf(stderr, "gpusnap: cannot resume process %d again: %s\n", (int)out->proc.pid, e.msg);
	}
	cli_signals_mute(false);
}

/* The switch stopped at point (a signal, or a test's injected failure): err says why. */
static int stopped(struct switch_run *w, enum gs_fault_point point, struct gs_err *err)
{
	char what[96];
	snprintf(what, sizeof(what), "switch of process %d out and %d in", (int)w->out.proc.pid, (int)w->in.proc.pid);
	return cli_signal_caught() ? cli_fail_interrupted(err, what)
				   : gs_fail(err, GS_E_FAILURE, "%s failed at '%s' (injected)", what, gs_fault_name(point));
}

static void run_halves(struct switch_run *w, struct gs_err *err)
{
	struct half *out = &w->out, *in = &w->in;
	int rc = 0;
	pthread_t th;
	if (w->together && pthread_create(&th, NULL, resume_in_thread, w)) {
		w->together = false;
		snprintf(w->order_why, sizeof(w->order_why), "no second thread");
	}
	out->start = gs_now();
	suspend_half(w, out, w->keep_context);
	out->end = gs_now();
	out->moved = !out->rc;
	if (w->together) {
		pthread_join(th, NULL);
		in->moved = !in->rc;
		/* no room after all: it is OUT's memory IN waited for, free now */
		if (in->rc == GS_E_NO_VRAM && out->moved && !cli_signal_caught()) {
			state_now(w, in, NULL);
			resume_in(w, true);
			in->moved = !in->rc;
		}
	} else if (out->moved) {
		if (gs_fault(GS_FI_SWITCH_AFTER_OUT) || cli_signal_caught()) {
			rc = stopped(w, GS_FI_SWITCH_AFTER_OUT, err);
		} else {
			resume_in(w, true);
			in->moved = !in->rc;
		}
	}
	if (!rc && cli_is_interrupted(out->rc)) {
		/* OUT's suspend undid itself for the signal: the switch was interrupted, nothing else moved yet */
		rc = stopped(w, GS_FI_SWITCH_AFTER_OUT, err);
	} else if (!rc && out->rc) {
		*err = out->err;
		rc = out->rc;
	} else if (!rc && in->rc == GS_E_NO_VRAM && cli_signal_caught()) {
		/* the signal, not the GPU, ended the wait for room */
		rc = stopped(w, GS_FI_SWITCH_AFTER_OUT, err);
	} else if (!rc && in->rc && (w->together || out->moved)) {
		*err = in->err;
		rc = in->rc;
	}
	if (in->rc)
		settle_in(w);
	if (!rc && (gs_fault(GS_FI_SWITCH_AFTER_BOTH) || cli_signal_caught()))
		rc = stopped(w, GS_FI_SWITCH_AFTER_BOTH, err);
	if (!rc)
		return;
	err->code = rc;
	undo(w);
}

/*
 * The end of a switch that did not finish: err names the cause; appended,
 * what each process is now and, where it is not where it was, the command
 * that puts it right, also left in its lock's record for gpusnap state.
 * Returns the exit code.
 */
static int say_fate(struct switch_run *w, const char *out_now, const char *in_now, struct gs_err *err)
{
	pid_t o = w->out.proc.pid, i = w->in.proc.pid;
	bool out_back = !strcmp(out_now, "running"), in_back = !strcmp(in_now, "suspended");
	char s[GS_ERR_MSG_MAX];
	if (out_back && in_back) {
		cli_err_append(err, "%sprocess %d runs on, process %d stays suspended", w->undo_ran ? "undone, " : "",
			       (int)o, (int)i);
		return err->code;
	}
	if (!out_back && !in_back && !strcmp(in_now, "running")) {
		/* the undo could not take IN off the GPU again: the switch stands */
		cli_err_append(err, "could not be undone, so the switch stands: process %d is %s, process %d runs "
			       "(gpusnap switch %d %d puts them back)", (int)o, out_now, (int)i, (int)i, (int)o);
		snprintf(s, sizeof(s), "process %d was left %s by a gpusnap switch (pid %d) that could not undo it; gpusnap "
			 "resume %d puts it back", (int)o, out_now, (int)getpid(), (int)o);
		cli_op_leave(w->out.lock, NULL, s, NULL);
		return GS_E_PARTIAL;
	}
	if (out_back)
		cli_err_append(err, "process %d runs on; process %d is %s too (gpusnap suspend %d takes it off the GPU)",
			       (int)o, (int)i, in_now, (int)i);
	else if (in_back)
		cli_err_append(err, "process %d is left %s (gpusnap resume %d puts it back); process %d stays suspended",
			       (int)o, out_now, (int)o, (int)i);
	else
		cli_err_append(err, "process %d is left %s (gpusnap resume %d puts it back); process %d is %s (gpusnap "
			       "state %d says more)", (int)o, out_now, (int)o, (int)i, in_now, (int)i);
	if (!out_back) {
		snprintf(s, sizeof(s), "process %d was left %s by a gpusnap switch (pid %d) that could not put it back; "
			 "gpusnap resume %d puts it back", (int)o, out_now, (int)getpid(), (int)o);
		cli_op_leave(w->out.lock, NULL, s, NULL);
	}
	if (!in_back) {
		snprintf(s, sizeof(s), "process %d was left %s by a gpusnap switch (pid %d) that could not suspend it again",
			 (int)i, in_now, (int)getpid());
		cli_op_leave(w->in.lock, NULL, s, NULL);
	}
	return GS_E_PARTIAL;
}

static void json_half(struct gs_json *j, const char *key, const struct switch_run *w, const struct half *h,
		      const char *after)
{
	gs_json_key(j, key);
	gs_json_object_begin(j);
	gs_json_kv_int(j, "pid", h->proc.pid);
	gs_json_kv_string(j, "comm", h->comm);
	gs_json_kv_string(j, "path", h->agent.present ? "agent" : "driver");
	gs_json_kv_string(j, "state_before", h->state_before ? h->state_before : "unknown");
	gs_json_kv_string(j, "state_after", after);
	gs_json_kv_double(j, "time_s", h->end > h->start ? h->end - h->start : 0);
	if (h->agent.present)
		gs_json_kv_uint(j, "data_bytes", h->data_bytes);
	if (w->s.nvml) {
		gs_json_kv_uint(j, "vram_before_bytes", h->vram_before);
		gs_json_kv_uint(j, "vram_after_bytes", h->vram_after);
	}
	gs_json_object_end(j);
}

static double overlap_s(const struct switch_run *w)
{
	double a = w->out.start > w->in.start ? w->out.start : w->in.start;
	double b = w->out.end < w->in.end ? w->out.end : w->in.end;
	return w->in.start && b > a ? b - a : 0;
}

static void print_outcome(struct switch_run *w, int rc, const struct gs_err *err, double total, const char *out_now,
			  const char *in_now)
{
	if (w->json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "switch", rc, err);
		gs_json_kv_double(&j, "total_s", total);
		gs_json_kv_string(&j, "order", w->together ? "together" : "out-first");
		gs_json_kv_string(&j, "order_why", w->order_why);
		gs_json_kv_double(&j, "overlap_s", overlap_s(w));
		gs_json_kv_int(&j, "retries", w->retries);
		gs_json_kv_bool(&j, "undone", w->undo_ran);
		json_half(&j, "out", w, &w->out, out_now);
		json_half(&j, "in", w, &w->in, in_now);
		gs_json_object_end(&j);
		cli_json_print(&j);
		fflush(stdout);
		return;
	}
	char comm[64];
	if (rc) {
		gs_printable(comm, sizeof(comm), w->out.comm);
		printf("%d (%s): %s\n", (int)w->out.proc.pid, comm, out_now);
		gs_printable(comm, sizeof(comm), w->in.comm);
		printf("%d (%s): %s\n", (int)w->in.proc.pid, comm, in_now);
		fflush(stdout);
		return;
	}
	const struct half *hs[2] = { &w->out, &w->in };
	for (int k = 0; k < 2; k++) {
		const struct half *h = hs[k];
		char b[32];
		gs_printable(comm, sizeof(comm), h->comm);
		printf("%s %d (%s) [%s]: %.2f s", k ? "resumed" : "suspended", (int)h->proc.pid, comm,
		       h->agent.present ? "agent" : "driver", h->end - h->start);
		if (h->agent.present)
			printf(", data %s", gs_format_bytes(h->data_bytes, b, sizeof(b)));
		if (w->s.nvml) {
			char b2[32];
			printf("; VRAM %s -> %s", gs_format_bytes(h->vram_before, b, sizeof(b)),
			       gs_format_bytes(h->vram_after, b2, sizeof(b2)));
		}
		printf("\n");
	}
	printf("total %.2f s, %s", total, w->together ? "the halves at once" : "one after the other");
	if (w->retries)
		printf(", %d retr%s for room on the GPU", w->retries, w->retries == 1 ? "y" : "ies");
	printf("\n");
	fflush(stdout);
}

/* Resolves and locks one side: a process ID of a CUDA process, ours until the end. */
static int take(struct switch_run *w, struct half *h, const char *arg, struct gs_err *err)
{
	pid_t *pids = NULL;
	int n = 0;
	int rc = cli_targets(&w->s, arg, false, &pids, &n, err);
	if (rc)
		return rc;
	h->proc.pid = pids[0];
	free(pids);
	gs_proc_comm(h->proc.pid, h->comm, sizeof(h->comm));
	if ((rc = cli_op_begin(h->proc.pid, false, "switch", &h->lock, &h->left, err))) {
		cli_op_explain_gone(h->proc.pid, err);
		return rc;
	}
	if (!w->driver_only && (rc = cli_agent_probe(h->proc.pid, &h->agent, err)))
		return rc;
	return 0;
}

static int execute(struct switch_run *w, char **argv)
{
	struct gs_err err = { 0 };
	int a, b;
	int rc = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		int *p = k ? &b : &a;
		rc = gs_parse_pid(argv[k], p) ? gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", argv[k])
					      : gs_proc_check(*p, &err);
		if (rc && rc != GS_E_USAGE)
			cli_op_explain_gone(*p, &err);
	}
	if (rc)
		return cli_report_error(&err);
	if (a == b)
		return cli_usage_error("switch", "OUT_PID and IN_PID are the same process (%d)", a);
	cli_signals_catch();
	if ((rc = cli_session_open(&w->s, &err))) {
		cli_session_close(&w->s);
		return cli_report_error(&err);
	}
	rc = gs_cuda_require_checkpoint(&w->s.cu, &err);
	if (!rc)
		rc = take(w, &w->out, argv[0], &err);
	if (!rc)
		rc = take(w, &w->in, argv[1], &err);
	bool checked = !rc;
	if (!rc)
		rc = check_states(w, &err);
	/* a process another operation left as it is: the refusal says by whom and what to do */
	for (int k = 0; rc == GS_E_STATE && k < 2; k++) {
		const struct half *h = k ? &w->in : &w->out;
		if (h->left.action[0] && h->left.if_alive[0]) {
			cli_err_append(&err, "%s", h->left.if_alive);
			break;
		}
	}
	if (rc) {
		if (w->json && checked && rc == GS_E_STATE)
			print_outcome(w, rc, &err, 0, w->out.state_before ? w->out.state_before : "unknown",
				      w->in.state_before ? w->in.state_before : "unknown");
		cli_report_error(&err);
		goto out;
	}
	record_working(w);
	w->out.vram_before = cli_process_vram(&w->s, w->out.proc.pid, &w->out.mask);
	w->in.vram_before = cli_process_vram(&w->s, w->in.proc.pid, NULL);
	if (w->when == OVERLAP_ALWAYS) {
		w->together = true;
		snprintf(w->order_why, sizeof(w->order_why), "--overlap always");
	} else if (w->when == OVERLAP_NEVER) {
		snprintf(w->order_why, sizeof(w->order_why), "--overlap never");
	} else {
		w->together = room_for_in(w);
	}

	char what[64];
	snprintf(what, sizeof(what), "switch %d -> %d", (int)w->out.proc.pid, (int)w->in.proc.pid);
	struct cli_progress *progress = cli_progress_start(what);
	double t0 = gs_now();
	bool nothing_done = cli_signal_caught();
	if (nothing_done) {
		rc = stopped(w, GS_FI_SWITCH_AFTER_OUT, &err);
		cli_err_append(&err, "nothing was done");
	} else {
		run_halves(w, &err);
		rc = err.code;
	}
	double total = gs_now() - t0;
	cli_progress_stop(progress);

	const char *out_now = state_now(w, &w->out, &w->out.proc.state_after);
	const char *in_now = state_now(w, &w->in, &w->in.proc.state_after);
	w->out.vram_after = cli_process_vram(&w->s, w->out.proc.pid, NULL);
	w->in.vram_after = cli_process_vram(&w->s, w->in.proc.pid, NULL);
	if (rc && !nothing_done)
		rc = say_fate(w, out_now, in_now, &err);
	/* what suspend and resume keep about a suspended process (the GPUs it used), as they keep it */
	if (!strcmp(out_now, "suspended") && w->out.moved)
		cli_record_suspend(&w->s, w->out.proc.pid, w->out.mask);
	if (!strcmp(in_now, "running") && w->in.moved)
		cli_forget_suspend(w->in.proc.pid);
	print_outcome(w, rc, &err, total, out_now, in_now);
	if (rc)
		cli_report_error(&err);
out:
	cli_op_end(w->out.lock, rc == 0);
	cli_op_end(w->in.lock, rc == 0);
	cli_session_close(&w->s);
	return rc;
}

int cmd_switch(int argc, char **argv)
{
	struct switch_run w = { .timeout = DEFAULT_TIMEOUT_S };
	const char *overlap = "auto";
	const struct gs_option opts[] = {
		GS_OPT_SECONDS_(0, "timeout", &w.timeout, "SECONDS",
				"wait at most this long for OUT's GPU work, and for room on the GPU for IN (default 30, 0 = "
				"no limit for the work)"),
		GS_OPT_BOOL_(0, "keep-context", &w.keep_context,
			     "agent only: OUT releases its data but keeps its CUDA context (faster both ways)"),
		GS_OPT_BOOL_(0, "driver", &w.driver_only, "use the driver path even where the gpusnap agent runs"),
		GS_OPT_BOOL_(0, "multi-gpu-driver", &w.suspend.multi_gpu_driver, "driver path: go ahead with a process holding memory on several GPUs (the driver cannot restore some such processes)"),
		GS_OPT_STRING_(0, "spill", &w.suspend.spill_dir, "DIR",
			       "agent only: OUT's GPU data goes to DIR when host memory would not hold it (default "
			       "GPUSNAP_SPILL_DIR)"),
		GS_OPT_BOOL_(0, "spill-only", &w.suspend.spill_only, "agent only: OUT's GPU data always goes to the spill "
								     "directory"),
		GS_OPT_STRING_(0, "overlap", &overlap, "WHEN",
			       "auto (default): IN's resume runs during OUT's suspend when the GPU has room for it; always; "
			       "never (OUT first)"),
		GS_OPT_BOOL_(0, "json", &w.json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, switch_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs != 2)
		return cli_usage_error("switch", nargs < 2 ? "OUT_PID and IN_PID are needed" : "only OUT_PID and IN_PID are taken");
	if (w.driver_only && w.keep_context)
		return cli_usage_error("switch", "--keep-context and --driver exclude each other");
	if (!strcmp(overlap, "auto"))
		w.when = OVERLAP_AUTO;
	else if (!strcmp(overlap, "always"))
		w.when = OVERLAP_ALWAYS;
	else if (!strcmp(overlap, "never"))
		w.when = OVERLAP_NEVER;
	else
		return cli_usage_error("switch", "--overlap takes auto, always or never, not '%s'", overlap);
	if ((rc = cli_suspend_opts_settle("switch", &w.suspend, w.driver_only)))
		return rc;
	return execute(&w, argv);
}
