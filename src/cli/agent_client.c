/*
 * agent_client.c - talking to a process's gpusnap agent (see agent_client.h).
 *
 * The agent runs inside a process that may belong to someone else, and what
 * it answers reaches the terminal of the user running gpusnap (often root):
 * its messages and its fault text are made printable (gs_fail does it for
 * every message; printable.h), numbers out of bounds are refused by the
 * decoder (protocol.h), and a result code that is not one of gpusnap's
 * becomes GS_E_AGENT. A reply that does not come in time is the agent
 * failing (GS_E_AGENT), never GS_E_TIMEOUT, which says GPU work did not
 * finish within --timeout and comes only from the agent's own answer.
 */
#include "cli/agent_client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/printable.h"
#include "common/proc.h"
#include "core/control_socket.h"
#include "core/protocol.h"

/* Replies to HELLO come at once; a suspend may copy tens of GiB, so its wait follows the caller's timeout. */
#define HELLO_TIMEOUT_S 5.0
#define WORK_MARGIN_S 600.0
/* --timeout 0 (no limit) waits this long for the agent's reply: gs_ctl_call has no unlimited wait */
#define NO_LIMIT_S 1e6

/* The exchange with the agent failed (rc from gs_ctl_call): say so with a code of the agent's. */
static int exchange_failed(pid_t pid, int rc, double waited_s, struct gs_err *err)
{
	if (rc == GS_E_TIMEOUT)
		return gs_fail(err, GS_E_AGENT, "the agent of process %d did not answer within %.0f s", (int)pid, waited_s);
	return rc;
}

/* The agent's result: its code if it is one of gpusnap's (err.h), else GS_E_AGENT; its message printable. */
static int agent_result(const struct gs_msg *reply, struct gs_err *err)
{
	int rc = gs_msg_result_code(reply, err);
	if (!rc)
		return 0;
	if (!strcmp(gs_exit_name(rc), "unknown")) {
		char msg[GS_ERR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", err->msg);
		return gs_fail(err, GS_E_AGENT, "the agent answered with an unknown code %d: %s", rc, msg);
	}
	return rc;
}

int cli_agent_exchange(pid_t pid, const struct cli_agent *ag, struct gs_msg *req, int pass_fd, struct gs_msg *reply,
		       double timeout_s, struct gs_err *err)
{
	int rc = gs_ctl_call_fd(ag->socket, pid, req, pass_fd, reply, timeout_s, err);
	if (rc)
		return exchange_failed(pid, rc, timeout_s, err);
	return agent_result(reply, err);
}

/*
 * Whether pid's agent is to be asked HELLO (*ask, its socket in ag), or why
 * not: 0 for no agent (the driver path serves the process), else the error.
 */
static int probe_start(pid_t pid, struct cli_agent *ag, bool *ask, struct gs_err *err)
{
	memset(ag, 0, sizeof(*ag));
	*ask = false;
	struct gs_err e = { 0 };
	if (gs_ctl_find_agent(pid, ag->socket, sizeof(ag->socket), &e)) {
		if (e.code == GS_E_AGENT)
			return 0; /* no agent: the driver path serves this process */
		*err = e;
		return e.code;
	}
	/* its agent would not answer: say why at once rather than after the time limit */
	char why[320], until[64];
	if (gs_proc_halted(pid, true, why, sizeof(why), until, sizeof(until)))
		return gs_fail(err, GS_E_STATE, "process %d is %s: its gpusnap agent cannot answer until %s", (int)pid, why,
			       until);
	*ask = true;
	return 0;
}

/* What the HELLO exchange (rc, e: gs_ctl_call's) says of the agent; frees reply. */
static int probe_finish(pid_t pid, struct cli_agent *ag, int rc, struct gs_err *e, struct gs_msg *reply, double waited_s,
			struct gs_err *err)
{
	if (rc) {
		gs_msg_free(reply);
		/*
		 * Nobody listens (an agent that ended without removing its socket, a
		 * process that re-exec'd without the agent): no agent. An agent that
		 * accepts and does not answer, or answers what the protocol does not
		 * allow, is one that fails.
		 */
		if (e->code == GS_E_AGENT && !strncmp(e->msg, GS_CTL_NOBODY_LISTENS, strlen(GS_CTL_NOBODY_LISTENS)))
			return 0;
		*err = *e;
		return exchange_failed(pid, rc, waited_s, err);
	}
	if (reply->type == GS_MSG_RESULT) {
		/* an agent that refuses (another user's process, too many connections) is there all the same */
		rc = agent_result(reply, err);
		gs_msg_free(reply);
		if (!rc)
			rc = gs_fail(err, GS_E_AGENT, "the agent answered hello with a result");
		return gs_err_wrap(err, "agent of process %d", (int)pid);
	}
	ag->present = reply->type == GS_MSG_INFO;
	gs_msg_get_u64(reply, GS_F_STATE, &ag->state);
	gs_msg_get_u64(reply, GS_F_CAPS, &ag->caps);
	gs_msg_get_u64(reply, GS_F_ALLOC_COUNT, &ag->alloc_count);
	gs_msg_get_u64(reply, GS_F_ALLOC_BYTES, &ag->alloc_bytes);
	gs_msg_get_u64(reply, GS_F_UNMANAGED_COUNT, &ag->unmanaged_count);
	gs_msg_get_u64(reply, GS_F_UNMANAGED_BYTES, &ag->unmanaged_bytes);
	gs_msg_get_u64(reply, GS_F_HELD_MEMORY, &ag->held_memory);
	gs_msg_get_u64(reply, GS_F_HELD_IMAGE, &ag->held_image);
	const char *fault = gs_msg_get_str(reply, GS_F_FAULT);
	if (fault)
		gs_printable(ag->fault, sizeof(ag->fault), fault);
	gs_msg_free(reply);
	return 0;
}

int cli_agent_probe(pid_t pid, struct cli_agent *ag, struct gs_err *err)
{
	bool ask;
	int rc = probe_start(pid, ag, &ask, err);
	if (rc || !ask)
		return rc;
	struct gs_msg req, reply;
	struct gs_err e = { 0 };
	gs_msg_init(&req, GS_MSG_HELLO);
	rc = gs_ctl_call(ag->socket, pid, &req, &reply, HELLO_TIMEOUT_S, &e);
	gs_msg_free(&req);
	return probe_finish(pid, ag, rc, &e, &reply, HELLO_TIMEOUT_S, err);
}

void cli_agent_probe_all(struct cli_agent_ask *asks, size_t n, double bound_s)
{
	struct gs_ctl_call_many *calls = calloc(n ? n : 1, sizeof(*calls));
	struct gs_msg req;
	gs_msg_init(&req, GS_MSG_HELLO);
	size_t ncalls = 0;
	for (size_t i = 0; i < n; i++) {
		struct cli_agent_ask *a = &asks[i];
		bool ask;
		a->silent = false;
		gs_err_clear(&a->err);
		a->rc = probe_start(a->pid, a->ag, &ask, &a->err);
		if (a->rc || !ask)
			continue;
		if (!calls) {
			a->rc = gs_fail(&a->err, GS_E_FAILURE, "out of memory asking %zu agents", n);
			continue;
		}
		calls[ncalls++] = (struct gs_ctl_call_many){ .path = a->ag->socket, .expect_pid = a->pid, .req = &req };
	}
	gs_ctl_call_many(calls, ncalls, bound_s);
	for (size_t i = 0, k = 0; i < n && k < ncalls; i++) {
		struct cli_agent_ask *a = &asks[i];
		if (a->rc || !a->ag->socket[0] || calls[k].path != a->ag->socket)
			continue;
		struct gs_ctl_call_many *c = &calls[k++];
		a->silent = c->rc == GS_E_TIMEOUT;
		a->rc = probe_finish(a->pid, a->ag, c->rc, &c->err, &c->reply, bound_s, &a->err);
	}
	gs_msg_free(&req);
	free(calls);
}

static void keep_fields(struct cli_agent *ag, const struct gs_msg *m)
{
	memset(&ag->last, 0, sizeof(ag->last));
	struct gs_msg_field f;
	for (size_t i = 0; i < gs_msg_field_count(m); i++) {
		if (!gs_msg_field_at(m, i, &f) || !f.name)
			continue;
		if (f.tag == GS_F_TIMING && ag->last.ntimings < CLI_AGENT_MAX_FIELDS) {
			int k = ag->last.ntimings++;
			snprintf(ag->last.timing_name[k], sizeof(ag->last.timing_name[k]), "%s", f.name);
			ag->last.timing_s[k] = f.f64;
		} else if (f.tag == GS_F_COUNTER && ag->last.ncounters < CLI_AGENT_MAX_FIELDS) {
			int k = ag->last.ncounters++;
			snprintf(ag->last.counter_name[k], sizeof(ag->last.counter_name[k]), "%s", f.name);
			ag->last.counter[k] = f.u64;
		}
	}
}

/*
 * Every request is a struct gs_request (core/protocol.h), encoded in one
 * place. Its timeout_s goes to the agent (its bound on waiting for GPU work;
 * 0: none); wait is how long this side waits for the reply.
 */
static int request_full(pid_t pid, struct cli_agent *ag, const struct gs_request *r, int dir_fd, double wait,
			struct gs_err *err)
{
	struct gs_msg req, reply;
	gs_request_encode(r, &req);
	int rc = dir_fd >= 0 ? gs_ctl_call_fd(ag->socket, pid, &req, dir_fd, &reply, wait, err)
			     : gs_ctl_call(ag->socket, pid, &req, &reply, wait, err);
	gs_msg_free(&req);
	if (!rc) {
		keep_fields(ag, &reply);
		rc = agent_result(&reply, err);
	} else {
		rc = exchange_failed(pid, rc, wait, err);
	}
	gs_msg_free(&reply);
	return rc;
}

/* A request the agent answers once its work is done: waited for its timeout and a margin. */
static int request(pid_t pid, struct cli_agent *ag, const struct gs_request *r, struct gs_err *err)
{
	return request_full(pid, ag, r, -1, (r->timeout_s > 0 ? r->timeout_s : 0) + WORK_MARGIN_S, err);
}

/* A request whose timeout bounds waiting for the app's GPU work: <= 0 is no limit, here too. */
static int request_bounded(pid_t pid, struct cli_agent *ag, struct gs_request r, int dir_fd, struct gs_err *err)
{
	double t = r.timeout_s;
	r.timeout_s = t > 0 ? t : 0;
	return request_full(pid, ag, &r, dir_fd, t > 0 ? t + WORK_MARGIN_S : NO_LIMIT_S, err);
}

int cli_agent_suspend(pid_t pid, struct cli_agent *ag, double timeout_s, bool keep_context, struct gs_err *err)
{
	struct gs_request r = { .type = GS_MSG_SUSPEND, .timeout_s = timeout_s, .keep_context = keep_context };
	int rc = request_bounded(pid, ag, r, -1, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_suspend_spill(pid_t pid, struct cli_agent *ag, double timeout_s, bool keep_context, int spill_fd,
			    bool spill_only, struct gs_err *err)
{
	struct gs_request r = { .type = GS_MSG_SUSPEND_FD, .timeout_s = timeout_s, .keep_context = keep_context,
				.spill_only = spill_only };
	int rc = !(ag->caps & GS_CAP_SPILL)
			 ? gs_fail(err, GS_E_AGENT, "the agent cannot spill to disk (an older agent): restart the process "
				   "with this gpusnap's run")
			 : request_bounded(pid, ag, r, spill_fd, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_resume(pid_t pid, struct cli_agent *ag, struct gs_err *err)
{
	return cli_agent_resume_from(pid, ag, NULL, false, err);
}

/* An agent without GS_CAP_VERIFY_GPU asked to check fingerprints on the GPU. */
static int verify_gpu_refused(pid_t pid, struct gs_err *err)
{
	return gs_fail(err, GS_E_AGENT, "the agent of process %d cannot check fingerprints on the GPU (an older agent): "
		       "restore without --verify-gpu", (int)pid);
}

int cli_agent_resume_from(pid_t pid, struct cli_agent *ag, const char *image_dir, bool verify_gpu, struct gs_err *err)
{
	if (verify_gpu && !(ag->caps & GS_CAP_VERIFY_GPU))
		return verify_gpu_refused(pid, err);
	int rc = request(pid, ag, &(struct gs_request){ .type = GS_MSG_RESUME, .dir = image_dir, .verify_gpu = verify_gpu },
			 err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_prepare(pid_t pid, struct cli_agent *ag, struct gs_err *err)
{
	if (!(ag->caps & GS_CAP_PREPARE))
		return 0;
	int rc = request(pid, ag, &(struct gs_request){ .type = GS_MSG_PREPARE }, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

/* What the agent is sent of o: cached only for a running process's dump, where the agent offers it. */
static struct gs_dump_opts dump_opts_for(const struct cli_agent *ag, const struct gs_dump_opts *o)
{
	struct gs_dump_opts sent = *o;
	sent.cached = o->running && o->cached && (ag->caps & GS_CAP_DUMP_CACHED);
	return sent;
}

/* An agent that does not know GS_F_COMPRESS would write the image uncompressed: refused instead. */
static int compress_offered(pid_t pid, const struct cli_agent *ag, const struct gs_dump_opts *o, struct gs_err *err)
{
	if (!o->compress_codec || (ag->caps & GS_CAP_DUMP_COMPRESS))
		return 0;
	return gs_fail(err, GS_E_AGENT, "the agent of process %d does not compress images (an older agent): dump without "
		       "--compress", (int)pid);
}

int cli_agent_dump(pid_t pid, struct cli_agent *ag, const char *image_dir, double timeout_s,
		   const struct gs_dump_opts *o, struct gs_err *err)
{
	int rc = compress_offered(pid, ag, o, err);
	if (rc)
		return rc;
	struct gs_request r = { .type = GS_MSG_DUMP, .dir = image_dir, .dump = dump_opts_for(ag, o) };
	if (o->running)
		r.timeout_s = timeout_s;
	rc = o->running ? request_bounded(pid, ag, r, -1, err) : request(pid, ag, &r, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_dump_fd(pid_t pid, struct cli_agent *ag, int dir_fd, double timeout_s, const struct gs_dump_opts *o,
		      struct gs_err *err)
{
	struct gs_request r = { .type = GS_MSG_DUMP_FD, .timeout_s = timeout_s, .dump = dump_opts_for(ag, o) };
	int rc = compress_offered(pid, ag, o, err) ? GS_E_AGENT : !(ag->caps & GS_CAP_DIR_FD)
			 ? gs_fail(err, GS_E_AGENT, "the agent takes no image directory as a descriptor (an older agent)")
			 : request_bounded(pid, ag, r, dir_fd, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_resume_image(pid_t pid, struct cli_agent *ag, const char *image_dir, bool gated, bool verify_gpu,
			   struct gs_err *err)
{
	if (verify_gpu && !(ag->caps & GS_CAP_VERIFY_GPU))
		return verify_gpu_refused(pid, err);
	bool by_fd = image_dir && (ag->caps & GS_CAP_DIR_FD) && (!gated || (ag->caps & GS_CAP_GATED_FD));
	int fd = by_fd ? open(image_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (by_fd && fd < 0)
		return gs_fail_errno(err, GS_E_IMAGE, errno, "cannot open the image '%s'", image_dir);
	struct gs_request r = { .type = by_fd ? GS_MSG_RESUME_FD : GS_MSG_RESUME, .dir = by_fd ? NULL : image_dir,
				.stay_gated = gated, .verify_gpu = verify_gpu };
	int rc = by_fd ? request_full(pid, ag, &r, fd, WORK_MARGIN_S, err) : request(pid, ag, &r, err);
	if (fd >= 0)
		close(fd);
	ag->verify_gpu_chunks = !rc && verify_gpu ? cli_agent_counter(ag, "verify_gpu_chunks") : 0;
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_gate(pid_t pid, struct cli_agent *ag, double timeout_s, double lease_s, struct gs_err *err)
{
	/* the lease travels in the request; the reply comes once app threads left the driver (timeout_s) */
	struct gs_request r = { .type = GS_MSG_GATE, .timeout_s = timeout_s, .lease_s = lease_s };
	int rc = request_bounded(pid, ag, r, -1, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

int cli_agent_open(pid_t pid, struct cli_agent *ag, struct gs_err *err)
{
	int rc = request(pid, ag, &(struct gs_request){ .type = GS_MSG_OPEN }, err);
	if (rc)
		gs_err_wrap(err, "agent of process %d", (int)pid);
	return rc;
}

double cli_agent_timing(const struct cli_agent *ag, const char *name)
{
	double s = 0;
	for (int i = 0; i < ag->last.ntimings; i++)
		if (!strcmp(ag->last.timing_name[i], name))
			s += ag->last.timing_s[i];
	return s;
}

uint64_t cli_agent_counter(const struct cli_agent *ag, const char *name)
{
	for (int i = 0; i < ag->last.ncounters; i++)
		if (!strcmp(ag->last.counter_name[i], name))
			return ag->last.counter[i];
	return 0;
}
