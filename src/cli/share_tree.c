/*
 * share_tree.c - GPU memory shared between the processes of one operation
 * (see share_tree.h): the agents' records gathered, matched by kcmp(2), and
 * the new descriptors of a resume fetched from the exporters (pidfd_getfd)
 * and handed to the importers (SCM_RIGHTS).
 *
 * The agents name an exporter by its PID in their own PID namespace: what
 * an image records, and what the process has again after CRIU restored it
 * in a container. The callers' PIDs are this process's view; records are
 * translated on the way in and out (common/pid_names.h; the same numbers
 * outside containers).
 * Processes that share memory must be in one PID namespace.
 */
#include "cli/share_tree.h"

#include <errno.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/interrupt.h"
#include "common/fault.h"
#include "common/pid_names.h"
#include "core/control_socket.h"
#include "core/share_plan.h"

#define SHARE_TIMEOUT_S 60.0
/* how long a rollback's SUSPEND waits for the app's GPU work */
#define ROLLBACK_SUSPEND_TIMEOUT_S 30.0

struct gathered {
	struct gs_share_export *ex;
	size_t nex;
	struct gs_share_import *im;
	size_t nim;
	const struct gs_pid_names *names; /* the importers' exporters translated with it */
};

static void gathered_free(struct gathered *g)
{
	free(g->ex);
	free(g->im);
	g->ex = NULL;
	g->im = NULL;
	g->nex = g->nim = 0;
}

/* Appends b's records to a's. */
static int append(void **a, size_t *na, void *b, size_t nb, size_t elem, struct gs_err *err)
{
	if (!nb)
		return 0;
	void *p = realloc(*a, (*na + nb) * elem);
	if (!p) {
		free(b);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	memcpy((char *)p + *na * elem, b, nb * elem);
	*a = p;
	*na += nb;
	free(b);
	return 0;
}

/* One request to pid's agent (pass_fd: a descriptor passed along, or -1); its records are added to g. */
static int call(pid_t pid, const struct cli_agent *ag, struct gs_msg *req, int pass_fd, struct gathered *g,
		struct gs_err *err)
{
	struct gs_msg reply;
	struct gs_err e = { 0 };
	int rc = cli_agent_exchange(pid, ag, req, pass_fd, &reply, SHARE_TIMEOUT_S, &e);
	/* an agent that does not know the request (older than shared memory) shares nothing */
	if (rc == GS_E_USAGE && req->type == GS_MSG_SHARES && strstr(e.msg, "does not handle")) {
		rc = 0; /* an agent older than shared memory: it has none of ours */
	} else if (rc) {
		*err = e;
		gs_err_wrap(err, "agent of process %d", (int)pid);
	}
	if (!rc && g) {
		struct gs_share_export *ex = NULL;
		struct gs_share_import *im = NULL;
		size_t nex = 0, nim = 0;
		if (!(rc = gs_share_get_exports(&reply, pid, &ex, &nex, err)) &&
		    !(rc = gs_share_get_imports(&reply, pid, &im, &nim, err))) {
			for (size_t k = 0; k < nim; k++)
				im[k].exporter = gs_pid_names_ours(g->names, im[k].exporter);
			rc = append((void **)&g->ex, &g->nex, ex, nex, sizeof(*ex), err);
			if (!rc)
				rc = append((void **)&g->im, &g->nim, im, nim, sizeof(*im), err);
			else
				free(im);
		}
	}
	gs_msg_free(&reply);
	return rc;
}

static int ask(pid_t pid, const struct cli_agent *ag, uint16_t type, struct gathered *g, struct gs_err *err)
{
	struct gs_msg req;
	gs_msg_init(&req, type);
	int rc = call(pid, ag, &req, -1, g, err);
	gs_msg_free(&req);
	return rc;
}

static int gather(const pid_t *pids, const struct cli_agent *agents, int n, struct gathered *g, struct gs_err *err)
{
	for (int i = 0; i < n; i++)
		if (agents[i].present) {
			int rc = ask(pids[i], &agents[i], GS_MSG_SHARES, g, err);
			if (rc)
				return rc;
		}
	return 0;
}

static int same_file(void *ctx, pid_t pa, int fa, pid_t pb, int fb, struct gs_err *err)
{
	(void)ctx;
	long r = syscall(SYS_kcmp, pa, pb, KCMP_FILE, (unsigned long)fa, (unsigned long)fb);
	if (r < 0)
		return gs_fail_errno(err, GS_E_PERMISSION, errno,
				     "cannot compare the shared-memory descriptors of processes %d and %d (kcmp)", (int)pa,
				     (int)pb), -1;
	return r == 0 ? 0 : 1;
}

static bool shares(const struct gathered *g, pid_t pid)
{
	for (size_t i = 0; i < g->nex; i++)
		if (g->ex[i].pid == pid)
			return true;
	for (size_t i = 0; i < g->nim; i++)
		if (g->im[i].pid == pid)
			return true;
	return false;
}

int cli_share_before_suspend(const pid_t *pids, const struct cli_agent *agents, int n, bool together, bool *shared,
			     struct gs_err *err)
{
	struct gs_pid_names names;
	int rc = gs_pid_names_make(pids, n, &names, err);
	if (rc)
		return rc;
	struct gathered g = { .names = &names };
	*shared = false;
	rc = gather(pids, agents, n, &g, err);
	if (rc || (!g.nex && !g.nim))
		goto out;
	*shared = true;
	if (names.mixed) {
		rc = gs_fail(err, GS_E_STATE, "processes that share GPU memory run in different PID namespaces: gpusnap "
			     "carries shared GPU memory within one namespace only");
		goto out;
	}
	for (int i = 0; i < n; i++)
		if (!agents[i].present) {
			rc = gs_fail(err, GS_E_AGENT,
				     "process %d runs without the gpusnap agent while processes with it share GPU memory: "
				     "start every process of the job with gpusnap run",
				     (int)pids[i]);
			goto out;
		}
	if ((rc = gs_share_plan(g.ex, g.nex, g.im, g.nim, together, same_file, NULL, err)))
		goto out;
	/* every agent that shares gets its links: the go-ahead for its suspend or dump */
	for (int i = 0; i < n && !rc; i++) {
		if (!shares(&g, pids[i]))
			continue;
		struct gs_msg req;
		gs_msg_init(&req, GS_MSG_SHARE_LINK);
		for (size_t k = 0; k < g.nim; k++)
			if (g.im[k].pid == pids[i]) {
				struct gs_share_link l = { .import_vh = g.im[k].vh,
							   .exporter = gs_pid_names_own(&names, g.im[k].exporter),
							   .export_vh = g.im[k].export_vh };
				gs_share_add_link(&req, &l);
			}
		rc = call(pids[i], &agents[i], &req, -1, NULL, err);
		gs_msg_free(&req);
	}
out:
	gathered_free(&g);
	gs_pid_names_free(&names);
	return rc;
}

static bool is_suspended(const struct cli_agent *ag)
{
	return ag->state == GS_AGENT_SUSPENDED || ag->state == GS_AGENT_DATA_RELEASED;
}

/* A descriptor of process pid (fd there) opened here: pidfd_getfd(2). */
static int fetch_fd(pid_t pid, int fd, struct gs_err *err)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0)
		return gs_fail_errno(err, GS_E_NO_PROCESS, errno, "cannot open process %d", (int)pid), -1;
	int got = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
	int e = errno;
	close(pfd);
	if (got < 0)
		return gs_fail_errno(err, GS_E_PERMISSION, e, "cannot take the exported GPU memory's descriptor from process %d",
				     (int)pid), -1;
	return got;
}

/* The importer pids[i]'s released imports, each with the new descriptor of its export (one request each). */
static int hand_over(pid_t pid, const struct cli_agent *ag, const struct gathered *g, struct gs_err *err)
{
	int rc = 0;
	for (size_t k = 0; !rc && k < g->nim; k++) {
		const struct gs_share_import *im = &g->im[k];
		if (im->pid != pid || !(im->flags & GS_SHARE_IMPORT_RELEASED))
			continue;
		const struct gs_share_export *ex = NULL;
		for (size_t j = 0; j < g->nex && !ex; j++)
			if (g->ex[j].pid == im->exporter && g->ex[j].vh == im->export_vh &&
			    (g->ex[j].flags & GS_SHARE_EXPORT_READY))
				ex = &g->ex[j];
		if (!ex) {
			rc = gs_fail(err, GS_E_STATE,
				     "process %d maps GPU memory of process %d, which is not resumed with it (or no longer "
				     "exports it): resume them together with --tree",
				     (int)pid, (int)im->exporter);
			break;
		}
		int fd = fetch_fd(ex->pid, ex->fd, err);
		if (fd < 0) {
			rc = err->code;
			break;
		}
		struct gs_msg req;
		gs_msg_init(&req, GS_MSG_SHARE_IMPORT);
		struct gs_share_link l = { .import_vh = im->vh, .exporter = gs_pid_names_own(g->names, ex->pid),
					   .export_vh = ex->vh };
		gs_share_add_link(&req, &l);
		rc = call(pid, ag, &req, fd, NULL, err);
		close(fd);
		gs_msg_free(&req);
	}
	return rc;
}

int cli_share_release(const pid_t *pids, const struct cli_agent *agents, int n, struct gs_err *err)
{
	for (int close_them = 0; close_them < 2; close_them++)
		for (int i = 0; i < n; i++) {
			if (!agents[i].present)
				continue;
			struct gs_msg req;
			gs_msg_init(&req, GS_MSG_SHARE_RELEASE);
			gs_msg_add_u64(&req, GS_F_FLAGS, close_them ? GS_SHARE_RELEASE_CLOSE : 0);
			int rc = call(pids[i], &agents[i], &req, -1, NULL, err);
			gs_msg_free(&req);
			if (rc)
				return rc;
		}
	return 0;
}

int cli_share_before_resume(const pid_t *pids, const struct cli_agent *agents, int n, bool *shared,
			    struct gs_err *err)
{
	struct gs_pid_names names;
	int rc = gs_pid_names_make(pids, n, &names, err);
	if (rc)
		return rc;
	struct gathered g = { .names = &names }, fresh = { .names = &names };
	*shared = false;
	rc = gather(pids, agents, n, &g, err);
	if (rc || (!g.nex && !g.nim))
		goto out;
	*shared = true;
	/* suspended exporters: memory created again and exported; the others' exports are as they were */
	for (int i = 0; i < n && !rc; i++)
		if (agents[i].present && is_suspended(&agents[i]) && shares(&g, pids[i]))
			rc = ask(pids[i], &agents[i], GS_MSG_SHARE_EXPORT, &fresh, err);
	for (int i = 0; i < n && !rc; i++)
		if (agents[i].present && !is_suspended(&agents[i]) && shares(&g, pids[i]))
			rc = ask(pids[i], &agents[i], GS_MSG_SHARES, &fresh, err);
	if (!rc && gs_fault(GS_FI_SHARE_HANDOVER))
		rc = gs_fail(err, GS_E_FAILURE, "resume failed at '%s' (injected)", gs_fault_name(GS_FI_SHARE_HANDOVER));
	if (rc)
		goto out;
	/* the importers keep their links from g; the exports (with descriptors) are the fresh ones */
	free(g.ex);
	g.ex = fresh.ex;
	g.nex = fresh.nex;
	fresh.ex = NULL;
	fresh.nex = 0;
	for (int i = 0; i < n && !rc; i++)
		if (agents[i].present && is_suspended(&agents[i]) && shares(&g, pids[i]))
			rc = hand_over(pids[i], &agents[i], &g, err);
out:
	gathered_free(&g);
	gathered_free(&fresh);
	gs_pid_names_free(&names);
	return rc;
}

/*
 * A RESUME failed in one agent of a job that shares memory (failed: its
 * index; it rolled itself back to suspended): those resumed with their gates
 * held are suspended again and the shared memory let go and closed, as at
 * the end of a suspend --tree, so no gate opens onto memory the failed
 * exporter never filled, and a later resume --tree starts from a whole,
 * suspended tree. false if one could not (said on stderr).
 */
static bool suspend_again(const pid_t *pids, struct cli_agent *agents, int n, const bool *gated)
{
	struct gs_err e = { 0 };
	bool shared, ok = true;
	/* the links of the resume are gone (each agent forgot them when it resumed): made again */
	if (cli_share_before_suspend(pids, agents, n, true, &shared, &e)) {
		fprintf(stderr, "gpusnap: %s\n", e.msg);
		return false;
	}
	for (int i = 0; i < n; i++) {
		if (!gated[i])
			continue;
		if (cli_agent_suspend(pids[i], &agents[i], ROLLBACK_SUSPEND_TIMEOUT_S, false, &e)) {
			fprintf(stderr, "gpusnap: %s\n", e.msg);
			ok = false;
		}
	}
	if (ok && cli_share_release(pids, agents, n, &e)) {
		fprintf(stderr, "gpusnap: %s\n", e.msg);
		ok = false;
	}
	return ok;
}

int cli_share_resume(const pid_t *pids, struct cli_agent *agents, int n, const char *const *images, bool verify_gpu,
		     struct gs_err *err)
{
	bool shared = false;
	int rc = cli_share_before_resume(pids, agents, n, &shared, err);
	if (rc)
		return rc;
	bool *gated = calloc((size_t)n, sizeof(bool));
	if (!gated)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int failed = -1;
	for (int i = 0; i < n; i++) {
		if (!agents[i].present || !is_suspended(&agents[i]))
			continue;
		const char *image = images ? images[i] : NULL;
		struct gs_err e = { 0 };
		int r = cli_agent_resume_image(pids[i], &agents[i], image, shared, verify_gpu, &e);
		gated[i] = shared && !r;
		if (r && !rc) {
			rc = r;
			*err = e;
			failed = i;
		} else if (r) {
			cli_report_error(&e);
		}
		/* sharing: the first failure ends it; the others would open onto what that rank did not fill */
		if (r && shared)
			break;
	}
	if (rc && shared) {
		/* the agent of the failed rank rolled itself back; the others go back to where they were */
		for (int i = 0; i < n; i++) {
			struct gs_err e = { 0 };
			if (agents[i].present && i != failed && cli_agent_probe(pids[i], &agents[i], &e))
				cli_report_error(&e);
		}
		if (suspend_again(pids, agents, n, gated))
			cli_err_append(err, "the processes stay suspended (gpusnap resume --tree retries)");
		else
			cli_err_append(err, "not every process could be suspended again (said above)");
		free(gated);
		return rc;
	}
	for (int i = 0; i < n; i++) {
		struct gs_err e = { 0 };
		int r = gated[i] ? cli_agent_open(pids[i], &agents[i], &e) : 0;
		if (r && !rc) {
			rc = r;
			*err = e;
		} else if (r) {
			cli_report_error(&e);
		}
	}
	free(gated);
	return rc;
}
