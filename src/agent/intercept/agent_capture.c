/*
 * agent_capture.c - the app's open global-mode stream captures (see
 * agent_capture.h).
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/agent_capture.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "common/log.h"
#include "common/util.h"
#include "cuda/driver_api.h"

#define CAPTURE_MODE_GLOBAL 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */
/* the stream handles that name a different stream in every thread: the legacy and the per-thread default streams */
#define STREAM_LEGACY ((CUstream)0x1)
#define STREAM_PER_THREAD ((CUstream)0x2)

/* One open global-mode capture: its stream, and the thread that began it (for the per-thread handles). */
struct open_capture {
	CUstream stream;
	pid_t tid;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a background section ended, or a begin finished */
	struct open_capture *v;
	size_t n, cap;
	unsigned beginning;  /* global-mode begins in the driver now */
	unsigned background; /* the agent's background sections running now */
} open_captures = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER };

static struct {
	CUresult (*begin)(CUstream);
	CUresult (*begin_ptsz)(CUstream);
	CUresult (*begin_v2)(CUstream, int);
	CUresult (*begin_v2_ptsz)(CUstream, int);
	CUresult (*begin_to_graph)(CUstream, void *, const void *, const void *, size_t, int);
	CUresult (*begin_to_graph_ptsz)(CUstream, void *, const void *, const void *, size_t, int);
	CUresult (*end)(CUstream, void **);
	CUresult (*end_ptsz)(CUstream, void **);
} real;

static pid_t this_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* The NULL stream is the legacy stream: the same entry for both spellings. */
static CUstream canonical(CUstream s)
{
	return s ? s : STREAM_LEGACY;
}

static bool same(const struct open_capture *c, CUstream s, pid_t tid)
{
	bool per_thread = s == STREAM_LEGACY || s == STREAM_PER_THREAD;
	return c->stream == s && (!per_thread || c->tid == tid);
}

/* Before a begin: a global-mode one waits for the agent's background sections and counts as beginning. */
static void beginning(int mode)
{
	if (mode != CAPTURE_MODE_GLOBAL)
		return;
	pthread_mutex_lock(&open_captures.lock);
	while (open_captures.background)
		pthread_cond_wait(&open_captures.changed, &open_captures.lock);
	open_captures.beginning++;
	pthread_mutex_unlock(&open_captures.lock);
}

static void began(CUresult r, CUstream s, int mode)
{
	if (mode != CAPTURE_MODE_GLOBAL)
		return;
	pthread_mutex_lock(&open_captures.lock);
	open_captures.beginning--;
	bool opened = r == CUDA_SUCCESS;
	if (opened && gs_grow_array((void **)&open_captures.v, &open_captures.cap, open_captures.n,
				    sizeof(*open_captures.v), 4))
		pr_warn("out of memory noting a stream capture: a suspend during it may break it");
	else if (opened)
		open_captures.v[open_captures.n++] = (struct open_capture){ .stream = canonical(s), .tid = this_tid() };
	pthread_cond_broadcast(&open_captures.changed);
	pthread_mutex_unlock(&open_captures.lock);
}

bool gs_capture_bg_begin(void)
{
	pthread_mutex_lock(&open_captures.lock);
	bool ok = !open_captures.n && !open_captures.beginning;
	if (ok)
		open_captures.background++;
	pthread_mutex_unlock(&open_captures.lock);
	return ok;
}

void gs_capture_bg_begin_wait(void)
{
	pthread_mutex_lock(&open_captures.lock);
	while (open_captures.n || open_captures.beginning)
		pthread_cond_wait(&open_captures.changed, &open_captures.lock);
	open_captures.background++;
	pthread_mutex_unlock(&open_captures.lock);
}

void gs_capture_bg_end(void)
{
	pthread_mutex_lock(&open_captures.lock);
	open_captures.background--;
	pthread_cond_broadcast(&open_captures.changed);
	pthread_mutex_unlock(&open_captures.lock);
}

/* cuStreamEndCapture ends the capture whatever it returns (an invalidated one too). */
static void ended(CUstream s)
{
	s = canonical(s);
	pid_t tid = this_tid();
	pthread_mutex_lock(&open_captures.lock);
	for (size_t i = 0; i < open_captures.n; i++)
		if (same(&open_captures.v[i], s, tid)) {
			open_captures.v[i] = open_captures.v[--open_captures.n];
			break;
		}
	pthread_cond_broadcast(&open_captures.changed); /* for gs_capture_bg_begin_wait */
	pthread_mutex_unlock(&open_captures.lock);
}

/* Each hook runs inside the gate: the wait for background work, the real call and the list's update together. */
#define CAPTURE_HOOK(before, call, update)                     \
	do {                                                   \
		int token_ = gs_gate_enter_c();                \
		before;                                        \
		CUresult r_ = (call);                          \
		update;                                        \
		gs_gate_exit_c(token_);                        \
		return r_;                                     \
	} while (0)

static CUresult hook_begin(CUstream s)
{
	if (!real.begin)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(CAPTURE_MODE_GLOBAL), real.begin(s), began(r_, s, CAPTURE_MODE_GLOBAL));
}
static CUresult hook_begin_ptsz(CUstream s)
{
	if (!real.begin_ptsz)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(CAPTURE_MODE_GLOBAL), real.begin_ptsz(s), began(r_, s ? s : STREAM_PER_THREAD, CAPTURE_MODE_GLOBAL));
}
static CUresult hook_begin_v2(CUstream s, int mode)
{
	if (!real.begin_v2)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(mode), real.begin_v2(s, mode), began(r_, s, mode));
}
static CUresult hook_begin_v2_ptsz(CUstream s, int mode)
{
	if (!real.begin_v2_ptsz)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(mode), real.begin_v2_ptsz(s, mode), began(r_, s ? s : STREAM_PER_THREAD, mode));
}
static CUresult hook_begin_to_graph(CUstream s, void *g, const void *deps, const void *data, size_t n, int mode)
{
	if (!real.begin_to_graph)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(mode), real.begin_to_graph(s, g, deps, data, n, mode), began(r_, s, mode));
}
static CUresult hook_begin_to_graph_ptsz(CUstream s, void *g, const void *deps, const void *data, size_t n, int mode)
{
	if (!real.begin_to_graph_ptsz)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK(beginning(mode), real.begin_to_graph_ptsz(s, g, deps, data, n, mode), began(r_, s ? s : STREAM_PER_THREAD, mode));
}
static CUresult hook_end(CUstream s, void **graph)
{
	if (!real.end)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK((void)0, real.end(s, graph), ended(s));
}
static CUresult hook_end_ptsz(CUstream s, void **graph)
{
	if (!real.end_ptsz)
		return CUDA_ERROR_NOT_FOUND;
	CAPTURE_HOOK((void)0, real.end_ptsz(s, graph), ended(s ? s : STREAM_PER_THREAD));
}

/* A fork child has none of its parent's captures (and no thread of it holds the lock). */
static void after_fork_in_child(void)
{
	pthread_mutex_init(&open_captures.lock, NULL);
	pthread_cond_init(&open_captures.changed, NULL);
	open_captures.n = 0;
	open_captures.beginning = open_captures.background = 0;
}

int gs_capture_install_hooks(struct gs_err *err)
{
	pthread_atfork(NULL, NULL, after_fork_in_child);
	static const struct gs_interpose_hook hooks[] = {
		{ "cuStreamBeginCapture", (void *)hook_begin, (void **)&real.begin },
		{ "cuStreamBeginCapture_ptsz", (void *)hook_begin_ptsz, (void **)&real.begin_ptsz },
		{ "cuStreamBeginCapture_v2", (void *)hook_begin_v2, (void **)&real.begin_v2 },
		{ "cuStreamBeginCapture_v2_ptsz", (void *)hook_begin_v2_ptsz, (void **)&real.begin_v2_ptsz },
		{ "cuStreamBeginCaptureToGraph", (void *)hook_begin_to_graph, (void **)&real.begin_to_graph },
		{ "cuStreamBeginCaptureToGraph_ptsz", (void *)hook_begin_to_graph_ptsz, (void **)&real.begin_to_graph_ptsz },
		{ "cuStreamEndCapture", (void *)hook_end, (void **)&real.end },
		{ "cuStreamEndCapture_ptsz", (void *)hook_end_ptsz, (void **)&real.end_ptsz },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

int gs_capture_check_none_open(struct gs_err *err)
{
	pthread_mutex_lock(&open_captures.lock);
	struct open_capture c = open_captures.n ? open_captures.v[0] : (struct open_capture){ 0 };
	size_t n = open_captures.n;
	pthread_mutex_unlock(&open_captures.lock);
	if (!n)
		return 0;
	return gs_fail(err, GS_E_STATE,
		       "the app is capturing a CUDA graph in global mode (thread %d, stream %p%s): suspending now would "
		       "break its capture; the app runs on, retry once the capture has ended",
		       (int)c.tid, (void *)c.stream, n > 1 ? ", and others" : "");
}
