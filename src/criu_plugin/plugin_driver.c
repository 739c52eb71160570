/*
 * plugin_driver.c - the plugin's driver helper: every call into the driver
 * (libcuda.so.1, and NVML) that a dump or a restore makes runs in a process
 * of its own, forked from criu at the stage's init, never in criu's.
 *
 * Why: libcuda's cuInit starts a thread (driver 580: one, named cudaXXXX),
 * and criu must stay single-threaded. The kernel refuses setns into a mount
 * namespace to a process whose threads share its fs (EINVAL), and CRIU
 * enters a container's mount namespace to dump and restore its tmpfs mounts
 * (/dev) and the like: with the driver in criu, every runc, Podman or CRI-O
 * checkpoint of a container with a CUDA process failed after the GPU part
 * (tests/gpu/t71 found it). A clone taken while a driver thread
 * holds a lock would also leave the lock held in a restored task.
 *
 * Requests and replies are records on two pipes: a fixed header, then a
 * payload of the length it names. The helper answers one request at a time,
 * in order, until criu closes the requests or kills it; it dies with criu
 * (PR_SET_PDEATHSIG) and blocks every other signal. Its first record is the
 * session: whether the driver opened (else why), then the GPUs, which criu
 * keeps in gsp.s.gpus for the images' GPU records and the restore's GPU plan.
 * The driver's restore thread is started and stopped by criu, its tracer,
 * between two requests (gsp_traced_restore).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criu_plugin/plugin.h"
#include "cuda/gpus.h"

enum driver_op {
	DRIVER_STATE = 1,	   /* the driver's state of pid */
	DRIVER_SUSPEND = 2,	   /* payload: gs_ckpt_proc[]; lock all, then checkpoint all (gs_ckpt_suspend) */
	DRIVER_RESUME = 3,	   /* payload: gs_ckpt_proc[]; the undo of DRIVER_SUSPEND (gs_ckpt_resume) */
	DRIVER_VRAM = 4,	   /* pid's bytes per GPU: reply payload uint64_t[CLI_MAX_GPUS] */
	DRIVER_RESTORE_THREAD = 5, /* the driver's restore thread of pid (0: it names none) */
	DRIVER_RESTORE = 6,	   /* payload: CUcheckpointGpuPair[]; restore with them, then unlock */
};

struct driver_request {
	int op;
	pid_t pid;
	double timeout_s;
	uint32_t len; /* payload bytes */
};

struct driver_reply {
	int rc;
	pid_t tid;
	int state;
	uint64_t total, mask;
	struct gs_err err;
	uint32_t len; /* payload bytes */
};

/* The session record, the helper's first: rc and err, then ngpus gs_gpu records. */
struct driver_session {
	int rc;
	struct gs_err err;
	int ngpus;
};

bool gsp_read_exact(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

bool gsp_write_exact(int fd, const void *buf, size_t n)
{
	for (size_t put = 0; put < n;) {
		ssize_t w = write(fd, (const char *)buf + put, n - put);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		put += (size_t)w;
	}
	return true;
}

/* In the helper: one request; *out is the reply's payload (r->len bytes: the request's own, or per_gpu). */
static void serve(const struct driver_request *rq, void *payload, struct driver_reply *r, uint64_t *per_gpu,
		  const void **out)
{
	struct gs_cuda *cu = &gsp.s.cu;
	double secs;
	*out = NULL;
	switch (rq->op) {
	case DRIVER_STATE: {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		r->rc = gs_ckpt_get_state(cu, rq->pid, &st, &r->err);
		r->state = (int)st;
		break;
	}
	case DRIVER_SUSPEND:
	case DRIVER_RESUME: {
		int n = (int)(rq->len / sizeof(struct gs_ckpt_proc));
		struct gs_ckpt_proc *procs = payload;
		r->rc = rq->op == DRIVER_SUSPEND ? gs_ckpt_suspend(cu, procs, n, rq->timeout_s, &r->err)
						 : gs_ckpt_resume(cu, procs, n, NULL, 0, &r->err);
		*out = procs;
		r->len = rq->len;
		break;
	}
	case DRIVER_VRAM:
		memset(per_gpu, 0, CLI_MAX_GPUS * sizeof(*per_gpu));
		r->total = cli_process_vram_per_gpu(&gsp.s, rq->pid, per_gpu, &r->mask);
		*out = per_gpu;
		r->len = CLI_MAX_GPUS * sizeof(*per_gpu);
		break;
	case DRIVER_RESTORE_THREAD:
		/* a driver that names no restore thread restores from the calling thread: tid 0 */
		if (gs_ckpt_restore_thread(cu, rq->pid, &r->tid, &r->err))
			r->tid = 0;
		memset(&r->err, 0, sizeof(r->err));
		break;
	case DRIVER_RESTORE:
		r->rc = gs_ckpt_restore(cu, rq->pid, payload, (unsigned)(rq->len / sizeof(CUcheckpointGpuPair)), &secs,
					&r->err);
		if (!r->rc)
			r->rc = gs_ckpt_unlock(cu, rq->pid, &secs, &r->err);
		break;
	default:
		r->rc = gs_fail(&r->err, GS_E_FAILURE, "the driver helper got an unknown request (%d)", rq->op);
	}
}

/* The helper's life: the session record, then requests until criu closes them. */
static void helper_main(int req, int rep)
{
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGKILL);
	sigprocmask(SIG_SETMASK, &all, NULL);
	struct driver_session s = { 0 };
	s.rc = gsp_session_open(&s.err);
	s.ngpus = s.rc ? 0 : gsp.s.ngpus;
	if (!gsp_write_exact(rep, &s, sizeof(s)) ||
	    (s.ngpus && !gsp_write_exact(rep, gsp.s.gpus, (size_t)s.ngpus * sizeof(*gsp.s.gpus))))
		_exit(1);
	void *payload = NULL;
	uint64_t per_gpu[CLI_MAX_GPUS];
	while (!s.rc) {
		struct driver_request rq;
		struct driver_reply r = { 0 };
		if (!gsp_read_exact(req, &rq, sizeof(rq)))
			break;
		if (rq.len) {
			void *more = realloc(payload, rq.len);
			if (!more || !gsp_read_exact(req, more, rq.len))
				_exit(1);
			payload = more;
		}
		const void *out;
		serve(&rq, payload, &r, per_gpu, &out);
		if (!gsp_write_exact(rep, &r, sizeof(r)) || (r.len && !gsp_write_exact(rep, out, r.len)))
			break;
	}
	/*
	 * Done, or no driver: wait for the SIGKILL that ends this. A child of
	 * criu's that ends by itself during a restore fails it (CRIU takes it for
	 * a restored task that died).
	 */
	for (;;)
		pause();
}

void gsp_end_helper(pid_t *helper)
{
	if (*helper <= 0)
		return;
	struct sigaction dfl = { .sa_handler = SIG_DFL }, old;
	sigaction(SIGCHLD, &dfl, &old);
	kill(*helper, SIGKILL);
	while (waitpid(*helper, NULL, 0) < 0 && errno == EINTR)
		;
	sigaction(SIGCHLD, &old, NULL);
	*helper = 0;
}

void gsp_driver_stop(void)
{
	if (gsp.driver_req >= 0)
		close(gsp.driver_req);
	if (gsp.driver_rep >= 0)
		close(gsp.driver_rep);
	gsp.driver_req = gsp.driver_rep = -1;
	gsp_end_helper(&gsp.driver);
	free(gsp.s.gpus);
	gsp.s.gpus = NULL;
	gsp.s.ngpus = 0;
}

int gsp_driver_start(struct gs_err *err)
{
	if (gsp.driver > 0)
		return 0;
	int req[2], rep[2];
	if (pipe2(req, O_CLOEXEC))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot start the driver helper: pipe");
	if (pipe2(rep, O_CLOEXEC)) {
		close(req[0]);
		close(req[1]);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot start the driver helper: pipe");
	}
	pid_t criu = getpid();
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		close(req[0]);
		close(req[1]);
		close(rep[0]);
		close(rep[1]);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot start the driver helper: fork");
	}
	if (child == 0) {
		close(req[1]);
		close(rep[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != criu)
			_exit(1);
		helper_main(req[0], rep[1]);
	}
	close(req[0]);
	close(rep[1]);
	gsp.driver = child;
	gsp.driver_req = req[1];
	gsp.driver_rep = rep[0];
	struct driver_session s;
	if (!gsp_read_exact(gsp.driver_rep, &s, sizeof(s))) {
		gsp_driver_stop();
		return gs_fail(err, GS_E_FAILURE, "the driver helper ended before it opened the driver");
	}
	s.err.msg[sizeof(s.err.msg) - 1] = '\0';
	if (s.rc) {
		*err = s.err;
		gsp_driver_stop();
		return s.rc;
	}
	gsp.s.gpus = calloc(s.ngpus > 0 ? (size_t)s.ngpus : 1, sizeof(*gsp.s.gpus));
	if (!gsp.s.gpus) {
		gsp_driver_stop();
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	if (s.ngpus && !gsp_read_exact(gsp.driver_rep, gsp.s.gpus, (size_t)s.ngpus * sizeof(*gsp.s.gpus))) {
		gsp_driver_stop();
		return gs_fail(err, GS_E_FAILURE, "the driver helper ended before it listed the GPUs");
	}
	gsp.s.ngpus = s.ngpus;
	return 0;
}

/*
 * One request (payload in, inlen bytes) and its reply (payload into out, up
 * to outcap bytes); the reply's rc, GS_E_FAILURE with err when the helper is
 * gone.
 */
static int call(int op, pid_t pid, double timeout_s, const void *in, size_t inlen, struct driver_reply *r, void *out,
		size_t outcap, struct gs_err *err)
{
	struct driver_request rq = { .op = op, .pid = pid, .timeout_s = timeout_s, .len = (uint32_t)inlen };
	memset(r, 0, sizeof(*r));
	if (inlen > UINT32_MAX)
		return gs_fail(err, GS_E_FAILURE, "a request of %zu bytes to the driver helper", inlen);
	if (gsp.driver_req < 0 || !gsp_write_exact(gsp.driver_req, &rq, sizeof(rq)) ||
	    (inlen && !gsp_write_exact(gsp.driver_req, in, inlen)) || !gsp_read_exact(gsp.driver_rep, r, sizeof(*r)) ||
	    r->len > outcap || (r->len && !gsp_read_exact(gsp.driver_rep, out, r->len)))
		return gs_fail(err, GS_E_FAILURE, "the driver helper is gone");
	r->err.msg[sizeof(r->err.msg) - 1] = '\0';
	if (r->rc)
		*err = r->err;
	return r->rc;
}

int gsp_driver_state(pid_t pid, CUprocessState *st, struct gs_err *err)
{
	struct driver_reply r;
	int rc = call(DRIVER_STATE, pid, 0, NULL, 0, &r, NULL, 0, err);
	*st = (CUprocessState)r.state;
	return rc;
}

int gsp_driver_suspend(struct gs_ckpt_proc *procs, int n, double timeout_s, struct gs_err *err)
{
	struct driver_reply r;
	size_t len = (size_t)n * sizeof(*procs);
	return call(DRIVER_SUSPEND, 0, timeout_s, procs, len, &r, procs, len, err);
}

int gsp_driver_resume(struct gs_ckpt_proc *procs, int n, struct gs_err *err)
{
	struct driver_reply r;
	size_t len = (size_t)n * sizeof(*procs);
	return call(DRIVER_RESUME, 0, 0, procs, len, &r, procs, len, err);
}

uint64_t gsp_driver_vram(pid_t pid, uint64_t *per_gpu, uint64_t *mask)
{
	struct driver_reply r;
	uint64_t mine[CLI_MAX_GPUS];
	struct gs_err e = { 0 };
	*mask = 0;
	if (call(DRIVER_VRAM, pid, 0, NULL, 0, &r, mine, sizeof(mine), &e) || r.len != sizeof(mine))
		return 0;
	for (int i = 0; i < CLI_MAX_GPUS; i++)
		per_gpu[i] += mine[i];
	*mask = r.mask;
	return r.total;
}

int gsp_traced_restore(pid_t pid, const CUcheckpointGpuPair *pairs, unsigned npairs, struct gs_err *err)
{
	struct driver_reply r;
	int rc = call(DRIVER_RESTORE_THREAD, pid, 0, NULL, 0, &r, NULL, 0, err);
	if (rc)
		return rc;
	struct gsp_traced_thread t = { 0 };
	if (r.tid && (rc = gsp_run_alone_start(r.tid, &t, err)))
		return rc;
	rc = call(DRIVER_RESTORE, pid, 0, pairs, (size_t)npairs * sizeof(*pairs), &r, NULL, 0, err);
	struct gs_err e = { 0 };
	int src = gsp_run_alone_stop(&t, &e);
	if (!rc && src)
		rc = gs_fail(err, src, "%s", e.msg);
	return rc;
}
