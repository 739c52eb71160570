/*
 * agent_lifecycle.c - the state machine of the app's GPU data (see
 * agent_lifecycle.h). The steps forward (step_*) and back (back_*) are
 * written once; the requests are walks over them. set_state is the only
 * writer of the state, and the gate opens only in back_open.
 *
 * What each request walks:
 *   SUSPEND   quiesce, plan, copy to staging and/or spill, release  -> RELEASED
 *   DUMP      quiesce, plan, stream into a sealed image, release    -> RELEASED
 *   RESUME    bring back (from the holder or an image), drop, open  -> RUNNING
 *   GATE/OPEN close the gate / open it again                        <-> GATED
 * and a failed one walks back (unwind) from where it stopped; RESUME is that
 * same walk. When bringing the data back fails, the walk stops in RELEASED:
 * the gate stays closed, the holder keeps the data, and the reason is kept
 * for `gpusnap state`.
 */
#define LOG_PREFIX "agent: movement: "
#include "agent/movement/agent_lifecycle.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/intercept/agent_capture.h"
#include "agent/intercept/agent_contexts.h"
#include "agent/intercept/gate.h"
#include "agent/memory/memkind.h"
#include "agent/movement/agent_fingerprint.h"
#include "agent/movement/agent_image.h"
#include "agent/movement/agent_mover.h"
#include "agent/movement/agent_ring.h"
#include "agent/movement/agent_zero_scan.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/codec.h"
#include "common/util.h"
#include "image/image.h"
#include "image/store.h"

#define DEFAULT_LEASE_S 60.0

enum lc_state { LC_RUNNING, LC_GATED, LC_QUIESCED, LC_COPIED, LC_RELEASED };

static const char *const lc_names[] = { "running", "gated", "quiesced", "copied", "released" };

static struct {
	enum lc_state state;
	bool keep_context; /* of the suspend that left RUNNING: the driver is not asked to checkpoint */
	bool verify_gpu;   /* of the RESUME under way: fill_from_image checks the fingerprints on the GPU */
	/*
	 * GATED's lease: a thread that reopens the gate if neither SUSPEND nor
	 * OPEN comes in time (gpusnap killed between its GATE and SUSPEND). Owned
	 * here; stopped and joined by the next request (stop_lease), never waits
	 * for a->lock (it only tries it).
	 */
	pthread_mutex_t lease_lock;
	pthread_cond_t lease_cond;
	bool lease_cond_ready;
	pthread_t lease_thread;
	bool lease_running, lease_stop;
	double lease_deadline;
	/* why the process stays suspended: an undo failed ("" when none); read by STATUS without a->lock */
	pthread_mutex_t fault_lock;
	char fault[GS_ERR_MSG_MAX];
} lc = { .lease_lock = PTHREAD_MUTEX_INITIALIZER, .fault_lock = PTHREAD_MUTEX_INITIALIZER };

/* The one place the state is written; a->state is what STATUS reports. */
static void set_state(struct gs_agent *a, enum lc_state s)
{
	enum gs_agent_state pub = s == LC_RUNNING ? GS_AGENT_RUNNING
				  : s == LC_GATED ? GS_AGENT_GATED
				  : s == LC_RELEASED ? (lc.keep_context ? GS_AGENT_DATA_RELEASED : GS_AGENT_SUSPENDED)
						     : GS_AGENT_BUSY;
	if (lc.state != s)
		pr_debug("state %s -> %s", lc_names[lc.state], lc_names[s]);
	lc.state = s;
	__atomic_store_n(&a->state, pub, __ATOMIC_RELEASE);
}

static void set_fault(const char *why)
{
	pthread_mutex_lock(&lc.fault_lock);
	snprintf(lc.fault, sizeof(lc.fault), "%s", why);
	pthread_mutex_unlock(&lc.fault_lock);
}

/* Seconds left until deadline for calls where <= 0 means no limit (deadline < 0: there is none). */
static double left(double deadline)
{
	if (deadline < 0)
		return 0;
	double l = deadline - gs_now();
	return l > 1e-3 ? l : 1e-3;
}

/* ---- the gate's lease ---- */

static void lease_wait_until(double when)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (when - gs_now());
	ts.tv_sec = (time_t)at;
	ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
	pthread_cond_timedwait(&lc.lease_cond, &lc.lease_lock, &ts);
}

static void *lease_main(void *arg)
{
	struct gs_agent *a = arg;
	pthread_mutex_lock(&lc.lease_lock);
	while (!lc.lease_stop) {
		if (gs_now() < lc.lease_deadline) {
			lease_wait_until(lc.lease_deadline);
			continue;
		}
		/* a request holding a->lock may be stopping this thread: try, never wait */
		if (pthread_mutex_trylock(&a->lock) == 0) {
			if (lc.state == LC_GATED) {
				gs_gate_open();
				set_state(a, LC_RUNNING);
				pr_warn("no suspend came within the gate's lease: the gate is open again");
			}
			pthread_mutex_unlock(&a->lock);
			break;
		}
		lease_wait_until(gs_now() + 0.01);
	}
	pthread_mutex_unlock(&lc.lease_lock);
	return NULL;
}

/* Stops and joins the lease thread, if one was started. a->lock held. */
static void stop_lease(void)
{
	if (!lc.lease_running)
		return;
	pthread_mutex_lock(&lc.lease_lock);
	lc.lease_stop = true;
	pthread_cond_broadcast(&lc.lease_cond);
	pthread_mutex_unlock(&lc.lease_lock);
	pthread_join(lc.lease_thread, NULL);
	lc.lease_running = false;
}

/*
 * After fork the child has no lease thread, its gate is open again (gate.c)
 * and it holds none of the parent's GPU data (agent_main.c forgets it): it
 * starts RUNNING.
 */
static void after_fork_in_child(void)
{
	pthread_mutex_init(&lc.lease_lock, NULL);
	pthread_mutex_init(&lc.fault_lock, NULL);
	lc.lease_running = false;
	lc.state = LC_RUNNING;
	lc.keep_context = false;
	lc.fault[0] = '\0';
}

static pthread_once_t lc_once = PTHREAD_ONCE_INIT;

static void lc_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	lc.lease_cond_ready = pthread_cond_init(&lc.lease_cond, &ca) == 0;
	pthread_condattr_destroy(&ca);
	pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* Every request that may change the state starts here: the fork handler is in place before the state moves. */
static void lc_setup(void)
{
	pthread_once(&lc_once, lc_init);
}

static int start_lease(struct gs_agent *a, double lease_s, struct gs_err *err)
{
	if (!lc.lease_cond_ready)
		return gs_fail(err, GS_E_AGENT, "cannot keep a lease on the gate: no condition variable");
	lc.lease_stop = false;
	lc.lease_deadline = gs_now() + (lease_s > 0 ? lease_s : DEFAULT_LEASE_S);
	int rc = gs_thread_start(&lc.lease_thread, lease_main, a);
	if (rc)
		return gs_fail_errno(err, GS_E_AGENT, rc, "cannot start the gate's lease thread");
	lc.lease_running = true;
	return 0;
}

/* ---- steps forward ---- */

/* RUNNING or GATED -> QUIESCED: the gate closes (GATE may have closed it) and every context's work ends. */
static int step_quiesce(struct gs_agent *a, double deadline, struct gs_msg *reply, struct gs_err *err)
{
	double t0 = gs_now();
	if (lc.state != LC_GATED) {
		int rc = gs_gate_close(left(deadline), err);
		if (rc)
			return rc;
	}
	set_state(a, LC_QUIESCED);
	double t1 = gs_now();
	if (a->cuda_ready) {
		/* the gate holds every app thread now: the open captures stay as they are (agent_capture.h) */
		int rc = gs_capture_check_none_open(err);
		if (!rc)
			rc = gs_ctx_quiesce(a, left(deadline), err);
		if (rc) {
			gs_gate_open(); /* nothing moved: the data is on the GPU */
			set_state(a, LC_RUNNING);
			return rc;
		}
		gs_memkind_quiesce(a); /* stream-ordered frees */
	}
	gs_msg_add_named_f64(reply, GS_F_TIMING, "quiesce", gs_now() - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "sync", gs_now() - t1);
	return 0;
}

/*
 * COPIED -> RELEASED: the physical memory goes. A failure part way leaves the
 * state RELEASED as soon as one region is released: its data is then only in
 * the holder, and only bringing it back may open the gate.
 */
static int step_release(struct gs_agent *a, struct gs_err *err)
{
	struct gs_agent_held *h = a->held;
	if (h)
		gs_ctx_use_copy_context(a);
	int rc = h ? gs_mover_release(a, h, err) : 0;
	bool any = false;
	for (size_t i = 0; h && i < h->nregions && !any; i++)
		any = h->regions[i].released;
	if (!rc || any)
		set_state(a, LC_RELEASED);
	return rc;
}

/*
 * RELEASED, before the reply of a suspend or dump the driver will checkpoint:
 * the contexts' stacks go too (agent_contexts.h says why). The last step, so
 * nothing after it fails; back_bring gives them back.
 */
static void step_shrink_stacks(struct gs_agent *a, struct gs_msg *reply)
{
	double t0 = gs_now();
	unsigned n = gs_ctx_shrink_stacks(a);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "shrink_stacks", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "stacks_shrunk", n);
}

/* ---- steps back ---- */

/* Where the holder keeps the data, for messages. */
static const char *holder_name(const struct gs_agent_held *h, char *buf, size_t n)
{
	if (h && h->pool && h->spilled && h->image_dir)
		snprintf(buf, n, "host memory and the spill image at '%s'", h->image_dir);
	else if (h && h->pool)
		snprintf(buf, n, "host memory");
	else if (h && h->spilled && h->image_dir)
		snprintf(buf, n, "the spill image at '%s'", h->image_dir);
	else if (h && h->image_dir)
		snprintf(buf, n, "the image at '%s'", h->image_dir);
	else
		snprintf(buf, n, "no holder");
	return buf;
}

/* What to record as the data's image for gpu_dir (agent_lifecycle.h, dir_name): never a descriptor's path. */
static const char *record_name(const char *gpu_dir, const char *dir_name)
{
	if (dir_name)
		return dir_name;
	return gpu_dir && strncmp(gpu_dir, "/proc/self/fd/", 14) ? gpu_dir : NULL;
}

/* The image at dir, checked to be h's, straight to the GPU through the engine (a prepared ring if there is one). */
static int fill_from_image(struct gs_agent *a, struct gs_agent_held *h, struct gs_image *img, struct gs_msg *reply,
			   struct gs_err *err)
{
	double t0 = gs_now();
	struct gs_ring *ring = gs_agent_image_take_prepared(h);
	double t_prep = gs_now();
	/*
	 * through the page cache: a restore usually follows a checksum pass (or a
	 * dump) that left the data there; a spill is read once, cold, where
	 * O_DIRECT skips the page cache's copy (as dd's iflag=direct)
	 */
	gs_image_set_direct_io(img, h->spilled);
	struct gs_ring_image_end end;
	gs_ring_image_reader_end(&end, img);
	struct gs_ring_stats rs;
	int rc = gs_ring_in(a, h, &end.end, ring, gs_ring_image_threads(false), &rs, err);
	gs_ring_destroy(ring);
	if (rc)
		return rc;
	struct gs_image_totals tot;
	gs_image_totals(img, &tot);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "prepare_wait", t_prep - t0);
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_read", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_prepared", ring != NULL);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", tot.stored_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_zero_bytes", rs.zero_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "io_threads", rs.threads);
	pr_info("brought %llu bytes of GPU data back from an image in %.2f s (ring of %llu bytes, %u threads)",
		(unsigned long long)tot.stored_bytes, gs_now() - t0, (unsigned long long)rs.ring_bytes, rs.threads);
	return lc.verify_gpu ? gs_fingerprint_verify(a, h, img, reply, err) : 0;
}

/*
 * A split suspend's data back: the image's chunks from the spill
 * (O_DIRECT, read once, cold), the ELSEWHERE ones from the pool, in one
 * transfer. The pool is kept until the caller drops the holder.
 */
static int fill_split(struct gs_agent *a, struct gs_agent_held *h, struct gs_image *img, struct gs_msg *reply,
		      struct gs_err *err)
{
	double t0 = gs_now();
	uint8_t *to_image = gs_ring_split_from_image(img);
	if (!to_image)
		return gs_fail(err, GS_E_AGENT, "out of memory");
	gs_image_set_direct_io(img, true);
	struct gs_ring_staging_end mem;
	int rc = gs_ring_staging_end(&mem, h, h->pool, -1, h->zero_chunks, false, err);
	if (rc) {
		free(to_image);
		return rc;
	}
	struct gs_ring_image_end im;
	gs_ring_image_reader_end(&im, img);
	struct gs_ring_split_end end;
	gs_ring_split_end(&end, &mem, &im, to_image);
	struct gs_ring_stats rs = { 0 };
	rc = gs_ring_in(a, h, &end.end, NULL, gs_ring_image_threads(false), &rs, err);
	gs_ring_staging_end_finish(&mem);
	free(to_image);
	if (rc)
		return rc;
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "split_read", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", h->spilled_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	pr_info("brought %llu bytes of GPU data back from host memory and %llu from a spill in %.2f s",
		(unsigned long long)(h->held_bytes - h->spilled_bytes), (unsigned long long)h->spilled_bytes,
		gs_now() - t0);
	return 0;
}

/*
 * A message about the directory that came as a descriptor (dir, "/proc/self/fd/N/.")
 * names it by its real path, dir_name, where there is one: the descriptor is
 * closed once the request ends and means nothing to the user.
 */
static void name_passed_dir(struct gs_err *err, const char *dir, const char *dir_name)
{
	if (!dir || !dir_name || strncmp(dir, "/proc/self/fd/", 14))
		return;
	char *at = strstr(err->msg, dir);
	if (!at)
		return;
	char msg[GS_ERR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%.*s%s%s", (int)(at - err->msg), err->msg, dir_name, at + strlen(dir));
	snprintf(err->msg, sizeof(err->msg), "%s", msg);
}

/*
 * RELEASED -> COPIED: the physical memory is re-created (all or nothing) and
 * refilled from the image at dir, else from the holder. The image is checked
 * before anything is touched. On failure the state stays RELEASED: what was
 * re-created is released again, so a retry starts over.
 */
static int back_bring(struct gs_agent *a, const char *dir, const char *dir_name, struct gs_msg *reply,
		      struct gs_err *err)
{
	struct gs_agent_held *h = a->held;
	double t_stacks = gs_now();
	int rc = gs_ctx_restore_stacks(a, err);
	if (rc)
		return rc;
	gs_msg_add_named_f64(reply, GS_F_TIMING, "restore_stacks", gs_now() - t_stacks);
	if (!h) { /* the app never allocated: nothing was moved */
		set_state(a, LC_COPIED);
		return 0;
	}
	bool split = h->pool && h->spilled;
	const char *from = dir ? dir : h->pool && !split ? NULL : h->image_dir;
	if (!from && (!h->pool || split) && h->plan.nchunks && h->spilled)
		return gs_fail(err, GS_E_STATE, "the process's GPU data was spilled into an image this agent cannot name: "
			       "gpusnap resume --image DIR names it");
	if (!from && !h->pool && h->plan.nchunks)
		return gs_fail(err, GS_E_STATE, "the process's GPU data is in an image: restore it with gpusnap restore");
	double t0 = gs_now();
	struct gs_image *img = NULL;
	rc = from ? gs_agent_image_open_matching(h, from, &img, err) : 0;
	if (rc) {
		if (!dir)
			gs_err_wrap(err, "its GPU data is in '%s' (gpusnap resume --image DIR names another copy)", from);
		return rc;
	}
	/*
	 * The image named matches: it is where the data is said to be should
	 * this load fail (the one the dump wrote may have another name by now).
	 */
	const char *rec = dir && (!h->pool || split) ? record_name(dir, dir_name) : NULL;
	char *copy = rec && rec != h->image_dir ? strdup(rec) : NULL;
	if (copy) {
		free(h->image_dir);
		h->image_dir = copy;
	}
	double t_open = gs_now();
	gs_ctx_use_copy_context(a);
	if ((rc = gs_mover_recreate(a, h, err))) {
		gs_image_close(img);
		return rc;
	}
	double t_map = gs_now();
	rc = split ? fill_split(a, h, img, reply, err)
	     : img ? fill_from_image(a, h, img, reply, err) : gs_mover_stage_in(a, h, reply, err);
	gs_image_close(img);
	if (rc) {
		/* back to "data only in the holder", the GPU memory free again */
		struct gs_err e2 = { 0 };
		if (gs_mover_release(a, h, &e2))
			pr_warn("GPU memory stays mapped after a failed copy back (the gate stays closed): %s", e2.msg);
		return rc;
	}
	if (img && !split) {
		gs_msg_add_named_f64(reply, GS_F_TIMING, "image_open", t_open - t0);
		gs_msg_add_named_f64(reply, GS_F_TIMING, "recreate", t_map - t_open);
	} else {
		gs_msg_add_named_f64(reply, GS_F_TIMING, "map", t_map - t0);
		gs_msg_add_named_f64(reply, GS_F_TIMING, "copy_in", gs_now() - t_map);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", h->bytes);
	}
	set_state(a, LC_COPIED);
	return 0;
}

/* COPIED or QUIESCED -> QUIESCED without a holder: the data is on the GPU and only there. */
static void back_drop(struct gs_agent *a)
{
	gs_mover_free_held(a, a->held);
	a->held = NULL;
	if (lc.state == LC_COPIED)
		set_state(a, LC_QUIESCED);
}

/*
 * COPIED -> RELEASED again: memory shared by other processes could not be
 * imported again, so the process's own memory is released once more and
 * the holder keeps the data (a retry starts over).
 */
static void back_unbring(struct gs_agent *a)
{
	struct gs_err e2 = { 0 };
	if (a->held && gs_mover_release(a, a->held, &e2))
		pr_warn("GPU memory stays mapped after a failed import (the gate stays closed): %s", e2.msg);
	set_state(a, LC_RELEASED);
}

/* QUIESCED or GATED -> RUNNING: the only place the gate opens. */
static void back_open(struct gs_agent *a)
{
	stop_lease();
	gs_memkind_after_resume();
	gs_gate_open();
	lc.keep_context = false;
	set_state(a, LC_RUNNING);
	set_fault("");
	gs_mover_after_resume(a); /* a reserved pool or ring dropped for a dump comes back, in the background */
}

/* Seconds a resume that stays gated waits for its OPEN before the agent opens the gate by itself. */
#define SHARED_RESUME_LEASE_S 300.0

/*
 * QUIESCED -> GATED: the data is back but the gate stays closed until OPEN,
 * so no process of a job that shares memory runs before the memory it maps
 * is filled (agent_share.h).
 */
static int back_gate(struct gs_agent *a, struct gs_err *err)
{
	lc.keep_context = false;
	set_fault("");
	gs_memkind_after_resume();
	set_state(a, LC_GATED);
	int rc = start_lease(a, SHARED_RESUME_LEASE_S, err);
	if (rc)
		back_open(a);
	return rc;
}

/*
 * Walks back toward RUNNING (GATED when stay_gated) from wherever the state
 * is; stops in RELEASED when the data cannot come back.
 */
static int unwind_to(struct gs_agent *a, const char *dir, const char *dir_name, bool stay_gated, struct gs_msg *reply,
		     struct gs_err *err)
{
	if (lc.state == LC_RELEASED) {
		int rc = back_bring(a, dir, dir_name, reply, err);
		if (rc)
			return rc;
		if ((rc = gs_memkind_bring_back(a, err))) {
			back_unbring(a);
			return rc;
		}
	}
	if (lc.state == LC_COPIED || lc.state == LC_QUIESCED)
		back_drop(a);
	if (stay_gated && lc.state == LC_QUIESCED)
		return back_gate(a, err);
	if (lc.state == LC_QUIESCED || lc.state == LC_GATED)
		back_open(a);
	return 0;
}

static int unwind(struct gs_agent *a, const char *dir, struct gs_msg *reply, struct gs_err *err)
{
	return unwind_to(a, dir, NULL, false, reply, err);
}

/*
 * A request failed with rc (err says why): walk back. If that stops short,
 * the process stays suspended: err says so and how to retry, and `state`
 * shows why.
 */
static int fail_back(struct gs_agent *a, int rc, struct gs_msg *reply, struct gs_err *err)
{
	struct gs_err e2 = { 0 };
	if (!unwind(a, NULL, reply, &e2))
		return rc;
	char where[GS_ERR_MSG_MAX], why[GS_ERR_MSG_MAX], cause[GS_ERR_MSG_MAX];
	holder_name(a->held, where, sizeof(where));
	snprintf(why, sizeof(why), "rollback failed: %.400s", e2.msg);
	set_fault(why);
	snprintf(cause, sizeof(cause), "%s", err->msg);
	pr_err("%s; %s: the process stays suspended with its GPU data in %s", cause, why, where);
	gs_fail(err, rc, "%.200s; putting the data back failed too (%.150s): the process stays suspended with its GPU "
		"data in %.100s, gpusnap resume retries", cause, e2.msg, where);
	return rc;
}

static bool fault_is_rollback(void)
{
	pthread_mutex_lock(&lc.fault_lock);
	bool r = !strncmp(lc.fault, "rollback failed", 15);
	pthread_mutex_unlock(&lc.fault_lock);
	return r;
}

/* A fault injected just before a successful reply: the request fails there and walks back. */
static int reply_fault(struct gs_err *err)
{
	if (!gs_fault(GS_FI_AGENT_REPLY))
		return 0;
	return gs_fail(err, GS_E_AGENT, "injected failure before the reply");
}

/* The requests that leave RUNNING start here: GATED is theirs, a lease's thread is joined. */
static int check_leaving(struct gs_agent *a, const char *what, struct gs_err *err)
{
	stop_lease();
	if (lc.state == LC_RUNNING || lc.state == LC_GATED)
		return 0;
	(void)a;
	return gs_fail(err, GS_E_STATE, "the process is already suspended%s", what);
}

/*
 * Where SUSPEND and DUMP both begin: from RUNNING or GATED (else refused,
 * what ending the message), the mover's background work joined, to QUIESCED
 * within timeout_s (<= 0: no limit). keep_context is the request's.
 */
static int leave_running(struct gs_agent *a, const char *what, double timeout_s, bool keep_context,
			 struct gs_msg *reply, struct gs_err *err)
{
	int rc = check_leaving(a, what, err);
	if (rc)
		return rc;
	gs_mover_join_background(a);
	double deadline = timeout_s > 0 ? gs_now() + timeout_s : -1;
	lc.keep_context = keep_context;
	return step_quiesce(a, deadline, reply, err);
}

/* ---- the requests ---- */

/*
 * The end of a spill's write: w aborted when the pass failed (rc; the
 * command discards the directory), else sealed and the image recorded as h's
 * (*rec: the name it is recorded under, NULL for a passed directory).
 */
static int spill_seal(struct gs_agent_held *h, const struct gs_lc_spill *sp, struct gs_image_writer *w, int rc,
		      struct gs_image_writer_stats *st, const char **rec, struct gs_err *err)
{
	if (rc) {
		gs_image_writer_abort(w);
		return rc;
	}
	if ((rc = gs_agent_image_seal(&w, st, err)))
		return rc;
	*rec = record_name(sp->dir, sp->dir_name);
	free(h->image_dir);
	h->image_dir = *rec ? strdup(*rec) : NULL;
	h->spilled = true;
	return 0;
}

/*
 * The spill of a suspend: h's data streamed into a sealed image
 * in sp->dir through the engine's image-writer end, as a running dump does
 * (O_DIRECT where the file system takes it, checksummed), then h is released
 * as by any suspend. h is planned in the image's chunks; the zero scan makes
 * zero records of what is zero, without crossing PCIe. On failure (ENOSPC
 * included) nothing is released: the caller walks back, the data on the GPU.
 */
static int spill_out(struct gs_agent *a, struct gs_agent_held *h, const struct gs_lc_spill *sp, struct gs_msg *reply,
		     struct gs_err *err)
{
	struct gs_image_writer *w = NULL;
	int rc = gs_agent_image_open_writer_named(a, h, sp->dir, sp->dir_name, &(struct gs_dump_opts){ .running = true },
						  &w, err);
	if (rc)
		return rc;
	double t0 = gs_now();
	struct gs_ring_stats rs = { 0 };
	struct gs_ring_image_end end;
	gs_ring_image_writer_end(&end, w);
	uint8_t *known_zero = h->plan.nchunks ? calloc(h->plan.nchunks, 1) : NULL;
	gs_zero_scan(a, h, known_zero, reply);
	end.known_zero = known_zero;
	rc = h->plan.nchunks ? gs_ring_out(a, h, &end.end, NULL, gs_ring_image_threads(true), &rs, err) : 0;
	free(known_zero);
	struct gs_image_writer_stats st;
	const char *rec = NULL;
	if ((rc = spill_seal(h, sp, w, rc, &st, &rec, err)))
		return rc;
	h->zero_bytes = st.zero_bytes;
	h->held_bytes = h->spilled_bytes = st.payload_bytes;
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "spill_write", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", st.zero_bytes);
	pr_info("spilled %llu bytes of GPU data into '%s' in %.2f s", (unsigned long long)st.payload_bytes,
		rec ? rec : "a passed directory", gs_now() - t0);
	return 0;
}

/*
 * A suspend split between host memory and the spill, in one
 * pass: what host memory admits (the plan's first chunks, after the zero
 * scan, less the margin) into the pool, the rest into a sealed image in
 * sp->dir that records the pool's chunks as ELSEWHERE. *split false: none
 * was made (nothing taken; the caller spills the whole). On failure (ENOSPC
 * included) nothing is released: the caller walks back, the data on the
 * GPU, and the pool goes with the holder.
 */
static int split_out(struct gs_agent *a, struct gs_agent_held *h, const struct gs_lc_spill *sp, double timeout_s,
		     bool *split, struct gs_msg *reply, struct gs_err *err)
{
	uint8_t *to_image = NULL;
	int rc = gs_mover_take_pool_split(a, h, &to_image, reply, err);
	*split = to_image != NULL;
	if (rc || !to_image)
		return rc;
	struct gs_image_writer *w = NULL;
	if ((rc = gs_agent_image_open_writer_named(a, h, sp->dir, sp->dir_name,
						   &(struct gs_dump_opts){ .running = true }, &w, err)) ||
	    (rc = gs_image_writer_set_partial(w, err))) {
		if (w)
			gs_image_writer_abort(w);
		free(to_image);
		return rc;
	}
	double t0 = gs_now();
	struct gs_ring_staging_end mem;
	if ((rc = gs_ring_staging_end(&mem, h, h->pool, timeout_s, h->zero_chunks, false, err))) {
		gs_image_writer_abort(w);
		free(to_image);
		return rc;
	}
	struct gs_ring_image_end im;
	gs_ring_image_writer_end(&im, w);
	im.known_zero = h->zero_chunks;
	struct gs_ring_split_end end;
	gs_ring_split_end(&end, &mem, &im, to_image);
	struct gs_ring_stats rs = { 0 };
	rc = gs_ring_out(a, h, &end.end, NULL, gs_ring_image_threads(true), &rs, err);
	gs_ring_staging_end_finish(&mem);
	uint64_t mem_zero = atomic_load(&mem.zero_bytes), mem_bytes = 0;
	for (size_t k = 0; k < h->plan.nchunks; k++)
		if (!to_image[k])
			mem_bytes += h->plan.chunks[k].size;
	free(to_image);
	struct gs_image_writer_stats st;
	const char *rec = NULL;
	if ((rc = spill_seal(h, sp, w, rc, &st, &rec, err)))
		return rc;
	/* the pool's zero chunks (ELSEWHERE in the image) and the image's (ZERO there) */
	h->zero_bytes = mem_zero + st.zero_bytes;
	h->spilled_bytes = st.payload_bytes;
	h->held_bytes = mem_bytes - mem_zero + st.payload_bytes;
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "spill_write", gs_now() - t0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "zero_bytes", h->zero_bytes);
	pr_info("kept %llu bytes of GPU data in host memory and spilled %llu into '%s' in %.2f s",
		(unsigned long long)(h->held_bytes - h->spilled_bytes), (unsigned long long)st.payload_bytes,
		rec ? rec : "a passed directory", gs_now() - t0);
	return 0;
}

/* The timings and counters of src, added to dst. */
static void copy_named_fields(struct gs_msg *dst, const struct gs_msg *src)
{
	struct gs_msg_field f;
	for (size_t i = 0; i < gs_msg_field_count(src); i++) {
		if (!gs_msg_field_at(src, i, &f) || !f.name)
			continue;
		if (f.type == GS_FT_NAMED_F64)
			gs_msg_add_named_f64(dst, f.tag, f.name, f.f64);
		else if (f.type == GS_FT_NAMED_U64)
			gs_msg_add_named_u64(dst, f.tag, f.name, f.u64);
	}
}

int gs_lc_suspend(struct gs_agent *a, double timeout_s, bool keep_context, struct gs_msg *reply, struct gs_err *err)
{
	return gs_lc_suspend_spill(a, timeout_s, keep_context, NULL, reply, err);
}

int gs_lc_suspend_spill(struct gs_agent *a, double timeout_s, bool keep_context, const struct gs_lc_spill *sp,
			struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	int rc = leave_running(a, "", timeout_s, keep_context, reply, err);
	if (rc)
		goto out;
	if ((rc = gs_memkind_before_suspend(a, err)))
		goto fail;
	if (!a->cuda_ready) {
		/* the app never allocated: nothing of ours to move */
		set_state(a, LC_RELEASED);
		goto out;
	}
	struct gs_agent_held *h;
	bool spill = sp && sp->only;
	double t_pool = gs_now();
	if (!spill) {
		if ((rc = gs_mover_plan(a, 0, &h, err)))
			goto fail;
		a->held = h;
		h->keep_context = keep_context;
		/* with a spill to fall back on, the pool's counters wait: the spill's scan would say them again */
		struct gs_msg trial;
		gs_msg_init(&trial, GS_MSG_RESULT);
		rc = gs_mover_take_pool(a, h, sp ? &trial : reply, err);
		if (!rc && sp)
			copy_named_fields(reply, &trial);
		gs_msg_free(&trial);
		if (rc == GS_E_NO_SPACE && sp) {
			/*
			 * host memory would not hold it: what it holds stays there, the
			 * spill directory takes the rest (or all), planned anew in the
			 * image's chunks (a later RESUME's image must match the plan)
			 */
			pr_warn("host memory would not hold this suspend's data, spilling to disk what it does not hold (%s)",
				err->msg);
			gs_err_clear(err);
			gs_mover_free_held(a, h);
			a->held = NULL;
			if ((rc = gs_mover_plan(a, GS_MOVER_IMAGE_CHUNK_BYTES, &h, err)))
				goto fail;
			a->held = h;
			h->keep_context = keep_context;
			bool split = false;
			if ((rc = split_out(a, h, sp, timeout_s, &split, reply, err)))
				goto fail;
			spill = !split; /* no split: the whole goes to the image, as planned */
		} else if (rc || (rc = gs_mover_stage_out(a, h, timeout_s, !keep_context, reply, err))) {
			goto fail;
		}
	}
	if (spill) {
		if (!a->held) {
			if ((rc = gs_mover_plan(a, GS_MOVER_IMAGE_CHUNK_BYTES, &h, err)))
				goto fail;
			a->held = h;
			h->keep_context = keep_context;
		}
		if ((rc = spill_out(a, h, sp, reply, err)))
			goto fail;
	}
	set_state(a, LC_COPIED);
	double t_copy = gs_now();
	if ((rc = step_release(a, err)) || (rc = reply_fault(err)))
		goto fail;
	double t_release = gs_now();
	if (!keep_context)
		step_shrink_stacks(a, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "copy_out", t_copy - t_pool);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "release", t_release - t_copy);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", h->bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "regions", h->nregions);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "spilled", h->spilled);
	if (h->spilled) {
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "held_bytes", h->held_bytes);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "spilled_bytes", h->spilled_bytes);
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "memory_bytes", h->held_bytes - h->spilled_bytes);
	}
	goto out;
fail:
	rc = fail_back(a, rc, reply, err);
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

static int dump_running(struct gs_agent *a, const char *gpu_dir, const char *dir_name, double timeout_s,
			const struct gs_dump_opts *o, struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	struct gs_image_writer *w = NULL;
	struct gs_store *store = NULL;
	int rc = leave_running(a, ": a streamed dump starts from a running process", timeout_s, false, reply, err);
	if (rc)
		goto out;
	if ((rc = gs_memkind_before_suspend(a, err)))
		goto fail;
	double t_quiesce = gs_now();
	/* an app that never allocated has nothing of ours to move: its image lists no allocations */
	struct gs_agent_held *h = NULL;
	if (a->cuda_ready && (rc = gs_mover_plan(a, GS_MOVER_IMAGE_CHUNK_BYTES, &h, err)))
		goto fail;
	a->held = h;
	double t_plan = gs_now();
	if ((rc = gs_agent_image_open_writer(a, h, gpu_dir, o, &w, err)))
		goto fail;
	struct gs_ring_stats rs = { 0 };
	struct gs_ring_image_end end;
	gs_ring_image_writer_end(&end, w);
	/* chunks all zero on the GPU become zero records without crossing PCIe (agent_zero_scan.h) */
	uint8_t *known_zero = h && h->plan.nchunks ? calloc(h->plan.nchunks, 1) : NULL;
	gs_zero_scan(a, h, known_zero, reply);
	end.known_zero = known_zero;
	/* and the others' fingerprints, where they lie (agent_fingerprint.h) */
	struct gs_fp *fp = known_zero ? calloc(h->plan.nchunks, sizeof(*fp)) : NULL;
	gs_fingerprint_gpu(a, h, known_zero, fp, reply);
	end.fp = fp;
	/* dump --parent: the chunks whose fingerprint is the parent's stay there, uncopied (agent_image.h) */
	struct gs_ring_parent_ref *pref = NULL;
	rc = gs_agent_image_parent(w, h, o, known_zero, fp, &pref, reply, err);
	end.parent_ref = pref;
	/* dump --store: the chunks the store holds already stay there, uncopied (agent_image.h) */
	uint64_t *sref = NULL;
	if (!rc)
		rc = gs_agent_image_store(w, h, o, known_zero, fp, &store, &sref, reply, err);
	end.store_ref = sref;
	if (!rc)
		rc = h && h->plan.nchunks ? gs_ring_out(a, h, &end.end, NULL, gs_ring_image_threads(true), &rs, err) : 0;
	free(sref);
	free(pref);
	free(fp);
	free(known_zero);
	if (rc)
		goto fail;
	struct gs_image_writer_stats st;
	rc = gs_agent_image_seal(&w, &st, err);
	gs_store_close(store); /* after the seal: its objects are synced, the ref goes with the command's */
	store = NULL;
	if (rc)
		goto fail;
	if (o->store)
		gs_msg_add_named_u64(reply, GS_F_COUNTER, "store_new_objects", st.store_new_objects);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "copied_bytes", __atomic_load_n(&end.copied_bytes, __ATOMIC_RELAXED));
	const char *rec = record_name(gpu_dir, dir_name);
	if (h)
		h->held_bytes = st.payload_bytes;
	if (h && rec && !(h->image_dir = strdup(rec))) {
		rc = gs_fail(err, GS_E_AGENT, "out of memory");
		goto fail;
	}
	set_state(a, LC_COPIED);
	double t_write = gs_now();
	if ((rc = step_release(a, err)) || (rc = reply_fault(err)))
		goto fail;
	if (!h)
		set_state(a, LC_RELEASED);
	/* unused by this dump, and CRIU would carry it: unpinned and freed before the reply */
	gs_mover_drop_reserve(a);
	double t_release = gs_now();
	if (h)
		step_shrink_stacks(a, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "plan", t_plan - t_quiesce);
	gs_ring_stats_report(&rs, reply);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_write", t_write - t_plan);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "release", t_release - t_write);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "bytes", h ? h->bytes : 0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "regions", h ? h->nregions : 0);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", st.payload_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_zero_bytes", st.zero_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "ring_bytes", rs.ring_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "io_threads", rs.threads);
	pr_info("streamed %llu bytes of GPU data into '%s' in %.2f s (ring of %llu bytes, %u threads)",
		(unsigned long long)st.payload_bytes, gpu_dir, t_write - t_plan, (unsigned long long)rs.ring_bytes,
		rs.threads);
	goto out;
fail:
	if (w)
		gs_image_writer_abort(w); /* the command discards the directory */
	w = NULL;
	gs_store_close(store); /* objects it wrote stay: gc removes them once the command's ref is gone */
	rc = fail_back(a, rc, reply, err);
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_lc_save(struct gs_agent *a, const char *gpu_dir, const char *dir_name, const struct gs_dump_opts *o,
	       struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	struct gs_agent_held *h = a->held;
	struct gs_image_writer *w = NULL;
	double t0 = gs_now();
	if (lc.state != LC_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended: suspend it before writing its image");
		goto out;
	}
	if (h && !h->pool && h->plan.nchunks) {
		rc = gs_fail(err, GS_E_STATE, "the process's GPU data is no longer in memory (already written to an image)");
		goto out;
	}
	if (h && h->spilled) {
		rc = gs_fail(err, GS_E_STATE, "part of the process's GPU data is spilled to disk: resume it before writing "
			     "its image");
		goto out;
	}
	if ((rc = gs_agent_image_open_writer(a, h, gpu_dir, &(struct gs_dump_opts){ .compress_codec = o->compress_codec,
				.compress_level = o->compress_level }, &w, err)))
		goto out;
	struct gs_ring_stats rs = { 0 };
	if (h && h->plan.nchunks) {
		struct gs_ring_staging_end from;
		struct gs_ring_image_end to;
		if ((rc = gs_ring_staging_end(&from, h, h->pool, -1, h->zero_chunks, false, err)))
			goto out;
		gs_ring_image_writer_end(&to, w);
		rc = gs_ring_host(h, &from.end, &to.end, gs_ring_image_threads(true), &rs, err);
		gs_ring_staging_end_finish(&from);
		if (rc)
			goto out;
	}
	struct gs_image_writer_stats st;
	if ((rc = gs_agent_image_seal(&w, &st, err)))
		goto out;
	double t_write = gs_now();
	if (o->drop_staging && h) {
		const char *rec = record_name(gpu_dir, dir_name);
		char *dir = rec ? strdup(rec) : NULL;
		if (rec && !dir) {
			rc = gs_fail(err, GS_E_AGENT, "out of memory");
			goto out;
		}
		/* the image is the holder from now on; unregistering and unmapping end here, before the driver's lock */
		gs_mover_drop_pool(a, h);
		free(h->image_dir);
		h->image_dir = dir;
	}
	gs_msg_add_named_f64(reply, GS_F_TIMING, "image_write", t_write - t0);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "drop_staging", gs_now() - t_write);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_bytes", st.payload_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_direct_bytes", st.direct_bytes);
	gs_msg_add_named_u64(reply, GS_F_COUNTER, "image_zero_bytes", st.zero_bytes);
	pr_info("wrote %llu bytes of GPU data into '%s' in %.2f s", (unsigned long long)st.payload_bytes, gpu_dir,
		t_write - t0);
out:
	if (w)
		gs_image_writer_abort(w);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_lc_dump(struct gs_agent *a, const char *gpu_dir, const char *dir_name, double timeout_s,
	       const struct gs_dump_opts *o, struct gs_msg *reply, struct gs_err *err)
{
	/* a codec whose library this process lacks is said before anything moves (image/codec.h) */
	const char *why = o->compress_codec ? gs_codec_unavailable(o->compress_codec) : NULL;
	if (why)
		return gs_fail(err, GS_E_AGENT, "cannot compress with %s in this process: %s",
			       gs_codec_name(o->compress_codec), why);
	return o->running ? dump_running(a, gpu_dir, dir_name, timeout_s, o, reply, err)
			  : gs_lc_save(a, gpu_dir, dir_name, o, reply, err);
}

int gs_lc_resume_gated(struct gs_agent *a, const char *gpu_dir, const char *dir_name, bool stay_gated, bool verify_gpu,
		       struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	lc.verify_gpu = verify_gpu;
	if (lc.state != LC_RELEASED) {
		rc = gs_fail(err, GS_E_STATE, "the process is not suspended");
		goto out;
	}
	if (gpu_dir && !a->held) {
		/* nothing was moved; the image must still be this process's (it lists no allocations) */
		struct gs_image *img = NULL;
		if ((rc = gs_agent_image_open_matching(NULL, gpu_dir, &img, err)))
			goto out;
		gs_image_close(img);
	}
	rc = unwind_to(a, gpu_dir, dir_name, stay_gated, reply, err);
	if (rc)
		name_passed_dir(err, gpu_dir, dir_name);
	if (rc && lc.state == LC_RELEASED && !fault_is_rollback()) {
		/*
		 * `state` says so until a resume succeeds (back_open, back_gate clear
		 * it); a failed rollback, why the process is suspended at all, stays
		 */
		char where[GS_ERR_MSG_MAX], why[GS_ERR_MSG_MAX];
		holder_name(a->held, where, sizeof(where));
		snprintf(why, sizeof(why), "the last resume failed: %.300s; its GPU data is in %.300s, gpusnap resume retries",
			 err->msg, where);
		set_fault(why);
	}
out:
	lc.verify_gpu = false;
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_lc_prepare(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	const struct gs_agent_held *h = a->held;
	/* only for data in an image; otherwise the restore will say what is wrong, if anything is */
	bool in_image = lc.state == LC_RELEASED && h && !h->pool && h->plan.nchunks;
	int rc = gs_agent_image_prepare(a, in_image ? h : NULL, reply, err);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_lc_gate(struct gs_agent *a, double timeout_s, double lease_s, struct gs_msg *reply, struct gs_err *err)
{
	lc_setup();
	pthread_mutex_lock(&a->lock);
	int rc = check_leaving(a, "", err);
	if (rc)
		goto out;
	double t0 = gs_now();
	if (lc.state == LC_RUNNING) {
		/* (closed already: a gpusnap that died between its GATE and SUSPEND; this one takes it over) */
		gs_mover_join_background(a); /* their CUDA calls end before the gate closes */
		if ((rc = gs_gate_close(timeout_s, err)))
			goto out;
		set_state(a, LC_GATED);
	}
	if ((rc = start_lease(a, lease_s, err))) {
		gs_gate_open();
		set_state(a, LC_RUNNING);
		goto out;
	}
	gs_msg_add_named_f64(reply, GS_F_TIMING, "gate", gs_now() - t0);
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int gs_lc_open(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err)
{
	(void)reply;
	lc_setup();
	pthread_mutex_lock(&a->lock);
	int rc = 0;
	stop_lease();
	if (lc.state == LC_GATED)
		back_open(a);
	else if (lc.state != LC_RUNNING)
		rc = gs_fail(err, GS_E_STATE, "the process is suspended: resume it instead");
	pthread_mutex_unlock(&a->lock);
	return rc;
}

void gs_lc_info(struct gs_agent *a, struct gs_msg *reply)
{
	gs_msg_add_u64(reply, GS_F_STATE, (uint64_t)__atomic_load_n(&a->state, __ATOMIC_ACQUIRE));
	char fault[GS_ERR_MSG_MAX];
	pthread_mutex_lock(&lc.fault_lock);
	snprintf(fault, sizeof(fault), "%s", lc.fault);
	pthread_mutex_unlock(&lc.fault_lock);
	if (fault[0])
		gs_msg_add_str(reply, GS_F_FAULT, fault);
	/* where the data is: read without a->lock (STATUS is answered while an operation runs), so only when settled */
	uint64_t st = __atomic_load_n(&a->state, __ATOMIC_ACQUIRE);
	if ((st == GS_AGENT_SUSPENDED || st == GS_AGENT_DATA_RELEASED) && pthread_mutex_trylock(&a->lock) == 0) {
		const struct gs_agent_held *h = a->held;
		if (h && h->pool && h->spilled) { /* split: both parts */
			gs_msg_add_u64(reply, GS_F_HELD_MEMORY, h->held_bytes - h->spilled_bytes);
			gs_msg_add_u64(reply, GS_F_HELD_IMAGE, h->spilled_bytes);
		} else if (h && h->pool) {
			gs_msg_add_u64(reply, GS_F_HELD_MEMORY, gs_mover_held_bytes(h));
		} else if (h && h->plan.nchunks) {
			gs_msg_add_u64(reply, GS_F_HELD_IMAGE, h->held_bytes);
		}
		pthread_mutex_unlock(&a->lock);
	}
}
