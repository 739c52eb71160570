/*
 * cmd_state.c - `gpusnap state PID`: is the process running, locked,
 * suspended or failed (as the driver sees it), and what GPU memory it holds;
 * without PID, a line for every CUDA process (libcuda or the agent mapped).
 * It never waits for an operation on the process: it names the gpusnap at
 * work (leaving its agent alone, which may be busy), or what a gpusnap that
 * was killed left (op_lock.h).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cli/op_lock.h"
#include "cli/report.h"
#include "cli/spill.h"
#include "core/control_socket.h"
#include "core/protocol.h"
#include "common/proc.h"
#include "common/util.h"
#include "cuda/checkpoint.h"

static const char *const state_usage[] = {
	"gpusnap state [--json] [-v] [PID]",
	"without PID: every CUDA process this user can see, one line each",
	NULL,
};

const struct cli_doc state_doc = {
	.args = "PID",
	.description =
		"Says whether CUDA process PID is running, locked, suspended, failed, stopped or frozen, on which "
		"path (agent or driver), and what an operation at work, or one that was killed, left to do.\n\n"
		"Without PID, lists every CUDA process this user can see, one line each: PID, state, path, GPU "
		"memory, GPUs and command. It finds them by what they map (libcuda or the agent), so suspended "
		"processes, which hold no GPU memory, are listed too.\n\n"
		"For a suspended process with the agent, -v and --json say where its GPU data is: in host memory, or "
		"spilled to a spill directory (suspend --spill), and how many bytes (a spill is noted without -v too); "
		"the list ends with a line summing that up for the host.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "" }, { GS_E_NO_PROCESS, "" },
						{ GS_E_NOT_CUDA, "" }, { GS_E_PERMISSION, "" }, { GS_E_NO_DRIVER, "" },
						{ GS_E_DRIVER_OLD, "" }, { 0, NULL } },
	.env = "GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap state", "List the CUDA processes." },
		{ "gpusnap state --json 1234", "The state of process 1234 as JSON." },
		{ NULL, NULL } },
};

/* What `state` says of one process. */
struct state_view {
	int pid;
	char comm[64];
	const char *state;
	CUprocessState st;
	bool frozen, group_stopped, held_stopped;
	char why_stopped[GS_ERR_MSG_MAX];
	struct cli_agent ag;
	uint64_t vram, mask;
	bool has_op;
	struct cli_op_record op;
	char note[GS_ERR_MSG_MAX]; /* what an operation at work, or one that was killed, has to do with the state */
	bool ask_agent;            /* its agent is to be asked (look_at_rest takes the answer) */
	bool silent;               /* its agent did not answer within the list's bound */
	char why_silent[GS_ERR_MSG_MAX];
	char spill_dir[PATH_MAX]; /* the spill directory its data is in (suspend --spill), "" when none */
	char resume_failed[GS_ERR_MSG_MAX]; /* driver path, still checkpointed: why its last resume failed */
};

/* Where v's agent keeps its data while suspended: "host-memory", "spill", "image" (a dump's), or NULL. */
static const char *data_where(const struct state_view *v)
{
	if (!v->ag.present)
		return NULL;
	if (v->ag.held_memory && v->ag.held_image && v->spill_dir[0])
		return "split"; /* host memory held part of a suspend, the spill the rest */
	if (v->ag.held_memory)
		return "host-memory";
	if (v->ag.held_image)
		return v->spill_dir[0] ? "spill" : "image";
	return NULL;
}

/* How long the list of every CUDA process waits for all their agents together (each `state PID` waits 5 s). */
#define LIST_AGENTS_S 2.0

/*
 * Looks at pid as the driver and gpusnap's operation records see it; never
 * waits for an operation. Whether its agent is to be asked is in
 * v->ask_agent; look_at_rest takes the answer.
 */
static int look_at_first(struct cli_session *s, int pid, struct state_view *v, struct gs_err *err)
{
	memset(v, 0, sizeof(*v));
	v->pid = pid;
	v->st = CU_PROCESS_STATE_RUNNING; /* left so for a process that is stopped */
	int rc = gs_proc_check(pid, err);
	if (rc) {
		cli_op_explain_gone(pid, err);
		return rc;
	}
	v->has_op = cli_op_find(pid, &v->op) == 1;
	/*
	 * Stopped by a signal (a supervisor's SIGSTOP): neither the driver nor the
	 * agent can answer for it until it continues; state says so at once.
	 * Stopped by a debugger: the driver answers, the agent cannot.
	 */
	char why[320], until[64];
	enum gs_proc_halt halt = gs_proc_halted(pid, false, why, sizeof(why), until, sizeof(until));
	v->frozen = halt == GS_PROC_FROZEN;
	v->group_stopped = halt != GS_PROC_RUNS;
	v->held_stopped = v->group_stopped;
	if (v->group_stopped)
		snprintf(v->why_stopped, sizeof(v->why_stopped),
			 "process %d is %s: the driver and its agent answer for it once %s", pid, why, until);
	else if ((rc = gs_ckpt_get_state(&s->cu, pid, &v->st, err)))
		return rc;
	v->vram = cli_process_vram(s, pid, &v->mask);
	/* stopped: whether it has an agent (its socket) is all that can be known of it */
	struct gs_err socket_err = { 0 };
	if (v->group_stopped && gs_ctl_find_agent(pid, v->ag.socket, sizeof(v->ag.socket), &socket_err))
		v->ag.socket[0] = '\0';
	/* an agent at work for another gpusnap answers when its work is done: not asked then */
	v->ask_agent = !v->group_stopped && (!v->has_op || !v->op.holder_alive);
	return 0;
}

/*
 * The rest of look_at_first's view, with the agent's answer (cli_agent_probe's
 * rc and agent_err) where v->ask_agent; silent: it did not answer in time.
 */
static int look_at_rest(int pid, struct state_view *v, int rc, bool silent, const struct gs_err *agent_err,
			struct gs_err *err)
{
	if (v->ask_agent && silent) {
		v->silent = true;
		snprintf(v->why_silent, sizeof(v->why_silent), "%s", agent_err->msg);
	} else if (v->ask_agent && rc) {
		*err = *agent_err;
		v->held_stopped = rc == GS_E_STATE && gs_proc_all_stopped(pid, true);
		if (!v->held_stopped)
			return rc;
		snprintf(v->why_stopped, sizeof(v->why_stopped), "%s; the state shown is the driver's", err->msg);
	}
	v->state = v->frozen	    ? "frozen"
		   : v->group_stopped ? "stopped"
		   : v->silent	      ? "not-answering"
				      : cli_process_state_name(v->st, v->ag.present, v->ag.state);
	gs_proc_comm(pid, v->comm, sizeof(v->comm));
	if (v->ag.present && v->ag.held_image)
		cli_spill_lookup(pid, NULL, 0, v->spill_dir, sizeof(v->spill_dir));
	char why[GS_ERR_MSG_MAX - 40];
	if (!v->ag.present && v->st == CU_PROCESS_STATE_CHECKPOINTED && cli_recorded_resume_failure(pid, why, sizeof(why)))
		snprintf(v->resume_failed, sizeof(v->resume_failed), "its last resume failed: %s", why);
	struct gs_proc_stat ps;
	/* a killed operation left nothing to say on a process that runs, unless it is held stopped */
	bool stopped = gs_proc_read_stat(pid, &ps) == 0 && ps.state == 'T';
	if (v->has_op && (v->op.holder_alive || strcmp(v->state, "running") || stopped))
		cli_op_describe(pid, &v->op, true, v->note, sizeof(v->note));
	return 0;
}

/* Looks at pid as the driver, its agent and gpusnap's operation records see it; never waits for an operation. */
static int look_at(struct cli_session *s, int pid, struct state_view *v, struct gs_err *err)
{
	int rc = look_at_first(s, pid, v, err);
	if (rc)
		return rc;
	struct gs_err agent_err = { 0 };
	int agent_rc = v->ask_agent ? cli_agent_probe(pid, &v->ag, &agent_err) : 0;
	return look_at_rest(pid, v, agent_rc, false, &agent_err, err);
}

/* Where v's GPU state goes: the agent's path, the driver's, or unknown (stopped, no agent socket). */
static const char *view_path(const struct state_view *v)
{
	if (v->group_stopped && !v->ag.socket[0])
		return NULL;
	return v->ag.present || v->silent || (v->held_stopped && v->ag.socket[0]) ? "agent" : "driver";
}

/* v's keys, into an object the caller opened: a list's element, or the document of `state PID` */
static void json_view(struct gs_json *j, const struct cli_session *s, const struct state_view *v)
{
	gs_json_kv_int(j, "pid", v->pid);
	gs_json_kv_string(j, "comm", v->comm);
	gs_json_kv_string(j, "state", v->state);
	if (v->ag.present && v->ag.fault[0]) /* an undo of the agent failed: why it stays suspended */
		gs_json_kv_string(j, "fault", v->ag.fault);
	else if (v->resume_failed[0]) /* the driver could not give it back */
		gs_json_kv_string(j, "fault", v->resume_failed);
	if (!v->group_stopped)
		gs_json_kv_string(j, "driver_state", gs_cuda_state_name(v->st));
	if (view_path(v))
		gs_json_kv_string(j, "path", view_path(v));
	if (v->ag.present) {
		gs_json_key(j, "agent");
		gs_json_object_begin(j);
		gs_json_kv_string(j, "state", gs_agent_state_name(v->ag.state));
		gs_json_kv_uint(j, "allocations", v->ag.alloc_count);
		gs_json_kv_uint(j, "bytes", v->ag.alloc_bytes);
		gs_json_kv_uint(j, "unmanaged_allocations", v->ag.unmanaged_count);
		gs_json_kv_uint(j, "unmanaged_bytes", v->ag.unmanaged_bytes);
		gs_json_object_end(j);
	}
	if (data_where(v)) {
		gs_json_key(j, "data");
		gs_json_object_begin(j);
		gs_json_kv_string(j, "where", data_where(v));
		if (v->spill_dir[0])
			gs_json_kv_string(j, "dir", v->spill_dir);
		gs_json_kv_uint(j, "bytes", v->ag.held_memory + v->ag.held_image);
		gs_json_kv_uint(j, "memory_bytes", v->ag.held_memory);
		gs_json_kv_uint(j, "spilled_bytes", v->ag.held_image);
		gs_json_object_end(j);
	}
	if (s->nvml)
		gs_json_kv_uint(j, "vram_bytes", v->vram);
	gs_json_key(j, "gpus");
	gs_json_array_begin(j);
	for (int g = 0; g < s->ngpus && g < 64; g++)
		if (v->mask & (1ULL << g))
			gs_json_int(j, g);
	gs_json_array_end(j);
	if (v->held_stopped)
		gs_json_kv_string(j, "stopped", v->why_stopped);
	if (v->silent)
		gs_json_kv_string(j, "not_answering", v->why_silent);
	if (v->note[0]) {
		gs_json_key(j, "operation");
		gs_json_object_begin(j);
		gs_json_kv_string(j, "action", v->op.action);
		gs_json_kv_int(j, "gpusnap_pid", v->op.holder);
		gs_json_kv_bool(j, "at_work", v->op.holder_alive);
		gs_json_kv_string(j, "step", v->op.step);
		if (v->op.image[0])
			gs_json_kv_string(j, "image", v->op.image);
		gs_json_kv_string(j, "message", v->note);
		gs_json_object_end(j);
	}
}

/* A note on stderr, one printable line whatever it quotes (a cgroup's name, an image's path). */
static void print_note(const char *text)
{
	char shown[GS_ERR_MSG_MAX];
	fprintf(stderr, "gpusnap: note: %s\n", gs_printable(shown, sizeof(shown), text));
}

/* The notes on stderr that go with v's state line: an operation, a stop, memory the agent cannot release. */
static void print_notes(const struct state_view *v, bool verbose)
{
	if (v->note[0])
		print_note(v->note);
	if (v->resume_failed[0])
		print_note(v->resume_failed);
	if (v->held_stopped)
		print_note(v->why_stopped);
	if (v->silent)
		print_note(v->why_silent);
	if (v->spill_dir[0] && v->ag.held_image && !verbose) {
		/* the first line stays the state word (scripts read it); data on disk is worth a word */
		char note[GS_ERR_MSG_MAX], b[32];
		snprintf(note, sizeof(note), "the GPU data of process %d is spilled to %s (%s)", v->pid, v->spill_dir,
			 gs_format_bytes(v->ag.held_image, b, sizeof(b)));
		print_note(note);
	}
	if (v->ag.present && !verbose && v->ag.unmanaged_count) {
		char b[32];
		fprintf(stderr, "gpusnap: note: %llu allocation%s (%s) of process %d cannot be released by the agent; the driver moves them\n",
			(unsigned long long)v->ag.unmanaged_count, v->ag.unmanaged_count == 1 ? "" : "s",
			gs_format_bytes(v->ag.unmanaged_bytes, b, sizeof(b)), v->pid);
	}
}

/* Where a suspended process's data is, a line of its own: "data: in host memory, 1.00 GiB". */
static void print_data_line(const struct state_view *v, const char *prefix)
{
	const char *where = data_where(v);
	char b[32], shown[PATH_MAX];
	if (!where)
		return;
	char b2[32];
	if (!strcmp(where, "split"))
		printf("%sdata: in host memory, %s, and spilled to %s, %s\n", prefix,
		       gs_format_bytes(v->ag.held_memory, b, sizeof(b)), gs_printable(shown, sizeof(shown), v->spill_dir),
		       gs_format_bytes(v->ag.held_image, b2, sizeof(b2)));
	else if (v->ag.held_memory)
		printf("%sdata: in host memory, %s\n", prefix, gs_format_bytes(v->ag.held_memory, b, sizeof(b)));
	else if (v->spill_dir[0])
		printf("%sdata: spilled to %s, %s\n", prefix, gs_printable(shown, sizeof(shown), v->spill_dir),
		       gs_format_bytes(v->ag.held_image, b, sizeof(b)));
	else
		printf("%sdata: in an image, %s\n", prefix, gs_format_bytes(v->ag.held_image, b, sizeof(b)));
}

/* The host's sum of what suspended processes keep: in host memory, and per spill directory. */
#define MAX_SPILL_DIRS 16
struct host_sum {
	uint64_t memory_bytes;
	int memory_procs;
	int ndirs;
	struct {
		const char *dir;
		uint64_t bytes;
		int procs;
	} spill[MAX_SPILL_DIRS];
};

static void host_sum_add(struct host_sum *h, const struct state_view *v)
{
	const char *where = data_where(v);
	if (!where)
		return;
	if (v->ag.held_memory) {
		h->memory_bytes += v->ag.held_memory;
		h->memory_procs++;
	}
	if (!v->ag.held_image)
		return;
	if (!v->spill_dir[0])
		return;
	int k = 0;
	while (k < h->ndirs && strcmp(h->spill[k].dir, v->spill_dir))
		k++;
	if (k == h->ndirs) {
		if (h->ndirs == MAX_SPILL_DIRS)
			return;
		h->spill[h->ndirs++].dir = v->spill_dir;
	}
	h->spill[k].bytes += v->ag.held_image;
	h->spill[k].procs++;
}

static void print_host_sum(const struct host_sum *h)
{
	char b[32], shown[PATH_MAX];
	printf("host: %s of suspended GPU data in host memory (%d process%s)", gs_format_bytes(h->memory_bytes, b, sizeof(b)),
	       h->memory_procs, h->memory_procs == 1 ? "" : "es");
	for (int k = 0; k < h->ndirs; k++)
		printf("; %s spilled to %s (%d process%s)", gs_format_bytes(h->spill[k].bytes, b, sizeof(b)),
		       gs_printable(shown, sizeof(shown), h->spill[k].dir), h->spill[k].procs, h->spill[k].procs == 1 ? "" : "es");
	printf("\n");
}

static void json_host_sum(struct gs_json *j, const struct host_sum *h)
{
	gs_json_key(j, "host");
	gs_json_object_begin(j);
	gs_json_kv_uint(j, "memory_bytes", h->memory_bytes);
	gs_json_kv_int(j, "memory_processes", h->memory_procs);
	gs_json_key(j, "spill");
	gs_json_array_begin(j);
	for (int k = 0; k < h->ndirs; k++) {
		gs_json_object_begin(j);
		gs_json_kv_string(j, "dir", h->spill[k].dir);
		gs_json_kv_uint(j, "bytes", h->spill[k].bytes);
		gs_json_kv_int(j, "processes", h->spill[k].procs);
		gs_json_object_end(j);
	}
	gs_json_array_end(j);
	gs_json_object_end(j);
}

static void print_agent_line(const struct state_view *v, const char *prefix)
{
	char b1[32], b2[32];
	printf("%sagent: %s, %llu allocation%s, %s releasable", prefix, gs_agent_state_name(v->ag.state),
	       (unsigned long long)v->ag.alloc_count, v->ag.alloc_count == 1 ? "" : "s",
	       gs_format_bytes(v->ag.alloc_bytes, b1, sizeof(b1)));
	if (v->ag.unmanaged_count)
		printf("; %llu allocation%s (%s) not releasable, moved by the driver",
		       (unsigned long long)v->ag.unmanaged_count, v->ag.unmanaged_count == 1 ? "" : "s",
		       gs_format_bytes(v->ag.unmanaged_bytes, b2, sizeof(b2)));
	printf("\n");
}

static int state_of_one(struct cli_session *s, int pid, bool json, bool verbose)
{
	struct gs_err err = { 0 };
	struct state_view *v = malloc(sizeof(*v));
	if (!v) {
		gs_fail(&err, GS_E_FAILURE, "out of memory");
		return cli_report_error(&err);
	}
	int rc = look_at(s, pid, v, &err);
	if (rc) {
		free(v);
		return cli_report_error(&err);
	}
	if (json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "state", 0, NULL);
		json_view(&j, s, v);
		gs_json_object_end(&j);
		cli_json_print(&j);
	} else {
		if (v->ag.present && v->ag.fault[0]) /* made printable as it came (cli_agent_probe) */
			printf("%s (%s)\n", v->state, v->ag.fault);
		else
			printf("%s\n", v->state);
		print_notes(v, verbose);
		if (v->ag.present && verbose) {
			print_agent_line(v, "");
			print_data_line(v, "");
		}
	}
	free(v);
	return 0;
}

static int cmp_pid(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/*
 * The processes that may hold CUDA state: libcuda or the gpusnap agent mapped
 * (a suspended process holds no GPU memory, so NVML's list misses it). Those
 * whose maps this user may not read (another user's, as a rule) are left
 * out and counted in *unreadable. Sorted by PID.
 */
static int find_cuda_candidates(int **pids, size_t *n, size_t *unreadable, struct gs_err *err)
{
	static const char *const cuda_libraries[] = { "libcuda.so", "libgpusnap.so", NULL };
	*pids = NULL;
	*n = 0;
	*unreadable = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read /proc");
	size_t cap = 0;
	int self = (int)getpid(), rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid;
		if (gs_parse_pid(de->d_name, &pid) || pid == self)
			continue;
		int maps = gs_proc_maps_contain(pid, cuda_libraries);
		*unreadable += maps == -EACCES || maps == -EPERM;
		if (maps <= 0)
			continue;
		if (*n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			int *np = realloc(*pids, ncap * sizeof(*np));
			if (!np) {
				rc = gs_fail(err, GS_E_FAILURE, "out of memory");
				break;
			}
			*pids = np;
			cap = ncap;
		}
		(*pids)[(*n)++] = pid;
	}
	closedir(d);
	if (rc) {
		free(*pids);
		*pids = NULL;
		*n = 0;
		return rc;
	}
	if (*n)
		qsort(*pids, *n, sizeof(**pids), cmp_pid);
	return 0;
}

/* A line of the list, its columns as text: the header, a process, or one that could not be looked at. */
static void print_row(const char *pid, const char *state, const char *path, const char *vram, const char *gpus,
		      const char *comm)
{
	char shown[64]; /* the name a process gave itself */
	printf("%-8s %-10s %-7s %12s %-6s %s\n", pid, state, path, vram, gpus, gs_printable(shown, sizeof(shown), comm));
}

/* One process of the list: its view, or why it could not be looked at. */
struct list_entry {
	struct state_view v;
	int rc;
	struct gs_err err;
};

/*
 * look_at for each of pids[n] into e[n], every agent asked at once within
 * LIST_AGENTS_S (any user can start a process whose agent accepts and never
 * answers: one such must not hold the list, nor several add up).
 */
static int look_at_all(struct cli_session *s, const int *pids, size_t n, struct list_entry *e, struct gs_err *err)
{
	struct cli_agent_ask *asks = calloc(n ? n : 1, sizeof(*asks));
	if (!asks)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	size_t nasks = 0;
	for (size_t i = 0; i < n; i++) {
		e[i].rc = look_at_first(s, pids[i], &e[i].v, &e[i].err);
		if (!e[i].rc && e[i].v.ask_agent)
			asks[nasks++] = (struct cli_agent_ask){ .pid = pids[i], .ag = &e[i].v.ag };
	}
	cli_agent_probe_all(asks, nasks, LIST_AGENTS_S);
	for (size_t i = 0, k = 0; i < n; i++) {
		if (e[i].rc)
			continue;
		struct cli_agent_ask none = { 0 }, *a = e[i].v.ask_agent ? &asks[k++] : &none;
		e[i].rc = look_at_rest(pids[i], &e[i].v, a->rc, a->silent, &a->err, &e[i].err);
	}
	free(asks);
	return 0;
}

/* `gpusnap state` without PID: a line (or a JSON object) for each CUDA process; the others are left out. */
static int state_of_all(struct cli_session *s, bool json, bool verbose)
{
	struct gs_err err = { 0 };
	int *pids;
	size_t n, unreadable;
	int rc = find_cuda_candidates(&pids, &n, &unreadable, &err);
	struct list_entry *entries = rc ? NULL : calloc(n ? n : 1, sizeof(*entries));
	if (!rc && !entries)
		rc = gs_fail(&err, GS_E_FAILURE, "out of memory");
	if (!rc)
		rc = look_at_all(s, pids, n, entries, &err);
	if (rc) {
		free(entries);
		free(pids);
		return cli_report_error(&err);
	}
	struct gs_json j;
	if (json) {
		cli_json_begin_outcome(&j, "state", 0, NULL);
		gs_json_key(&j, "processes");
		gs_json_array_begin(&j);
	}
	size_t shown = 0;
	struct host_sum sum = { 0 };
	for (size_t i = 0; i < n; i++) {
		const struct state_view *v = &entries[i].v;
		const struct gs_err e = entries[i].err;
		rc = entries[i].rc;
		if (!rc)
			host_sum_add(&sum, v);
		/* gone meanwhile, or the agent is loaded but CUDA is not in use: not a CUDA process to list */
		if (rc == GS_E_NO_PROCESS || rc == GS_E_NOT_CUDA)
			continue;
		char pid_text[16];
		snprintf(pid_text, sizeof(pid_text), "%d", pids[i]);
		if (!shown++ && !json)
			print_row("PID", "STATE", "PATH", "VRAM", "GPUS", "COMMAND");
		if (rc) {
			char comm[64];
			gs_proc_comm(pids[i], comm, sizeof(comm));
			if (json) {
				gs_json_object_begin(&j);
				gs_json_kv_int(&j, "pid", pids[i]);
				gs_json_kv_string(&j, "comm", comm);
				gs_json_kv_string(&j, "error", e.msg);
				gs_json_object_end(&j);
			} else {
				print_row(pid_text, "?", "-", "-", "-", comm);
				fprintf(stderr, "gpusnap: process %d: %s\n", pids[i], e.msg);
			}
			continue;
		}
		if (json) {
			gs_json_object_begin(&j);
			json_view(&j, s, v);
			gs_json_object_end(&j);
			continue;
		}
		char vram[32] = "-", gpus[32] = "", *g = gpus;
		if (s->nvml)
			gs_format_bytes(v->vram, vram, sizeof(vram));
		for (int k = 0; k < s->ngpus && k < 64 && g < gpus + sizeof(gpus) - 4; k++)
			if (v->mask & (1ULL << k))
				g += snprintf(g, (size_t)(gpus + sizeof(gpus) - g), "%s%d", g == gpus ? "" : ",", k);
		print_row(pid_text, v->state, view_path(v) ? view_path(v) : "-", vram, gpus[0] ? gpus : "-", v->comm);
		print_notes(v, verbose);
		if (v->ag.present && verbose) {
			print_agent_line(v, "         ");
			print_data_line(v, "         ");
		}
	}
	if (json) {
		gs_json_array_end(&j);
		json_host_sum(&j, &sum);
		gs_json_kv_uint(&j, "not_looked_at", unreadable); /* processes whose memory maps this user may not read */
		gs_json_object_end(&j);
		cli_json_print(&j);
	} else if (!shown) {
		printf("no CUDA process found\n");
	} else if (sum.memory_procs || sum.ndirs) {
		print_host_sum(&sum);
	}
	if (unreadable)
		fprintf(stderr, "gpusnap: note: %zu process%s whose memory map%s this user may not read %s not looked at\n",
			unreadable, unreadable == 1 ? "" : "es", unreadable == 1 ? "" : "s", unreadable == 1 ? "was" : "were");
	free(entries);
	free(pids);
	return 0;
}

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
	struct gs_err err = { 0 };
	int pid = 0;
	if (nargs > 1)
		return cli_want_args("state", argv, nargs, 1, "PID");
	if (nargs == 1 && gs_parse_pid(argv[0], &pid)) {
		gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", argv[0]);
		return cli_report_error(&err);
	}
	if (pid) {
		/* a PID that is gone is said before the driver is loaded */
		if ((rc = gs_proc_check(pid, &err))) {
			cli_op_explain_gone(pid, &err);
			return cli_report_error(&err);
		}
	}
	cli_sweep_leftovers(); /* what processes that are gone left: spills, stages */
	struct cli_session s;
	if ((rc = cli_session_open(&s, &err))) {
		cli_session_close(&s);
		return cli_report_error(&err);
	}
	rc = pid ? state_of_one(&s, pid, json, verbose) : state_of_all(&s, json, verbose);
	cli_session_close(&s);
	return rc;
}
