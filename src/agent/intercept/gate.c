/*
 * gate.c - per-thread "inside the driver" tracking and the close/open switch
 * (see gate.h).
 *
 * Every app thread that calls into the driver gets a slot (struct gate_slot)
 * the first time; slots live in chunks that are never freed, so the closing
 * side can scan them without locks, and a thread's slot is recycled when it
 * exits (pthread key destructor). A slot's `depth` says how many gated calls
 * the thread is nested in; it is written only by its own thread (and that
 * thread's signal handlers, which leave it as they found it).
 *
 * The ordering problem is Dekker's: an entering thread stores depth=1 then
 * loads `gate_closed`; the closer stores gate_closed=1 then loads every depth.
 * Without a full fence on both sides each could miss the other's store. The
 * app's side is the hot one, so it has no fence at all: the closer issues
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full barrier on
 * every CPU currently running one of our threads (threads not running pass a
 * context switch, also a barrier). After it returns, either the entering
 * thread saw gate_closed=1 and backs off, or its depth=1 is visible to the
 * closer. Where membarrier is unavailable (old kernel, seccomp), both sides use
 * seq_cst fences instead; the mode is chosen once, before any thread enters.
 *
 * Leaving: depth=0, then if the gate is closed bump `exit_seq` and wake the
 * closer, which sleeps on that futex between scans. The same membarrier
 * argument shows the closer cannot sleep through the last exit.
 */
#define LOG_PREFIX "agent: intercept: "
#include "agent/intercept/gate.h"
#include "agent/intercept/gate_layout.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/settings.h"

#define SLOTS_PER_CHUNK 64

struct gate_slot {
	_Atomic int depth;      /* > 0: inside the driver; written by the owner thread only */
	unsigned sp;            /* used entries of shadow[]; owner thread only */
	int exempt;             /* an agent thread: never gated, never counted */
	int in_use;             /* under slots_lock */
	uint64_t calls;         /* gated calls; the owner increments, gs_gate_call_count reads (relaxed) */
	pid_t tid;              /* for messages */
	void *shadow[GS_SHADOW_DEPTH];
	struct gate_slot *next_free; /* under slots_lock */
} __attribute__((aligned(64))); /* one slot per cache line start: no false sharing of depth */

_Static_assert(offsetof(struct gate_slot, depth) == GS_SLOT_DEPTH, "gate_layout.h is stale");
_Static_assert(offsetof(struct gate_slot, sp) == GS_SLOT_SP, "gate_layout.h is stale");
_Static_assert(offsetof(struct gate_slot, exempt) == GS_SLOT_EXEMPT, "gate_layout.h is stale");
_Static_assert(offsetof(struct gate_slot, calls) == GS_SLOT_CALLS, "gate_layout.h is stale");
_Static_assert(offsetof(struct gate_slot, shadow) == GS_SLOT_SHADOW, "gate_layout.h is stale");
_Static_assert(sizeof(_Atomic int) == 4 && sizeof(void *) == 8, "gate_x86_64.S assumes LP64");

struct slot_chunk {
	struct slot_chunk *_Atomic next;
	struct gate_slot slots[SLOTS_PER_CHUNK];
};

/* Read by the fast path in gate_x86_64.S, hence not static (they stay hidden). */
_Atomic int gs_gate_closed;      /* futex word: threads wait on it while 1 */
_Atomic int gs_gate_use_membarrier;
_Atomic uintptr_t gs_gate_driver_lo, gs_gate_driver_len;
_Thread_local struct gate_slot *gs_gate_current_slot __attribute__((tls_model("initial-exec")));

static _Atomic int exit_seq;      /* futex word: bumped by a thread leaving while closed */
static _Atomic int waiting;       /* threads blocked at the closed gate */
static struct gate_slot *_Atomic closer_slot; /* the thread that closed the gate: it always passes */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status = -1;
static pthread_key_t slot_key;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot_chunk *_Atomic chunks; /* newest first; never freed */
static struct gate_slot *free_slots;      /* under slots_lock */
static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER; /* gs_gate_close/open */

static long sys_futex(_Atomic int *word, int op, int val, const struct timespec *timeout)
{
	return syscall(SYS_futex, (int *)word, op, val, timeout, NULL, 0);
}

static int sys_membarrier(int cmd)
{
	return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

/* membarrier registration is per address space and does not survive fork. */
static void choose_fence(void)
{
	int mb = 0;
	if (gs_setting_choice(GS_S_GATE_FENCE) == 0) { /* "auto", not "seq_cst" */
		int cmds = sys_membarrier(MEMBARRIER_CMD_QUERY);
		mb = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
		     sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
	}
	atomic_store(&gs_gate_use_membarrier, mb);
}

static void slot_release(void *p);
static void atfork_prepare(void) { pthread_mutex_lock(&slots_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&slots_lock); }

/*
 * The child has one thread: every other slot belongs to a thread that does not
 * exist there. A gate closed in the parent is open in the child (its agent
 * thread, if any, did not come along).
 */
static void atfork_child(void)
{
	struct gate_slot *self = gs_gate_current_slot;
	free_slots = NULL;
	for (struct slot_chunk *c = atomic_load(&chunks); c; c = atomic_load(&c->next)) {
		for (int i = SLOTS_PER_CHUNK - 1; i >= 0; i--) {
			struct gate_slot *s = &c->slots[i];
			if (s == self)
				continue;
			atomic_store_explicit(&s->depth, 0, memory_order_relaxed);
			s->sp = 0;
			s->exempt = 0;
			s->in_use = 0;
			s->next_free = free_slots;
			free_slots = s;
		}
	}
	if (self)
		self->tid = (pid_t)syscall(SYS_gettid);
	pthread_mutex_unlock(&slots_lock);
	pthread_mutex_init(&control_lock, NULL);
	atomic_store(&gs_gate_closed, 0);
	atomic_store(&waiting, 0);
	if (atomic_load(&gs_gate_use_membarrier))
		choose_fence(); /* single-threaded here, so switching mode is safe */
}

static void gate_init_once(void)
{
	choose_fence();
	if (pthread_key_create(&slot_key, slot_release)) {
		pr_err("cannot create the thread-slot key; the CUDA gate is disabled");
		return;
	}
	if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child))
		pr_warn("cannot register fork handlers; a forked child may see a stale gate");
	init_status = 0;
}

int gs_gate_init(void)
{
	pthread_once(&init_once, gate_init_once);
	return init_status;
}

const char *gs_gate_fence_name(void)
{
	gs_gate_init();
	return atomic_load(&gs_gate_use_membarrier) ? "membarrier" : "seq_cst";
}

static struct gate_slot *slot_attach(void)
{
	if (gs_gate_init())
		return NULL;
	pthread_mutex_lock(&slots_lock);
	struct gate_slot *s = free_slots;
	if (!s) {
		struct slot_chunk *c = aligned_alloc(64, sizeof(*c));
		if (!c) {
			pthread_mutex_unlock(&slots_lock);
			return NULL;
		}
		memset(c, 0, sizeof(*c));
		for (int i = SLOTS_PER_CHUNK - 1; i >= 0; i--) {
			c->slots[i].next_free = free_slots;
			free_slots = &c->slots[i];
		}
		atomic_store_explicit(&c->next, atomic_load_explicit(&chunks, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(&chunks, c, memory_order_release);
		s = free_slots;
	}
	free_slots = s->next_free;
	s->next_free = NULL;
	s->in_use = 1;
	s->exempt = 0;
	s->sp = 0;
	s->tid = (pid_t)syscall(SYS_gettid);
	atomic_store_explicit(&s->depth, 0, memory_order_relaxed);
	pthread_mutex_unlock(&slots_lock);
	gs_gate_current_slot = s;
	/* For the destructor only; if it fails the slot leaks when the thread exits. */
	pthread_setspecific(slot_key, s);
	return s;
}

/*
 * Thread exit (pthread key destructor). A thread that exits inside a call
 * (pthread_exit from a callback) is not inside the driver any more. If a later
 * destructor of the same thread calls the driver again, the thread gets a
 * slot again and glibc runs this destructor once more.
 */
static void slot_release(void *p)
{
	struct gate_slot *s = p;
	if (gs_gate_current_slot == s)
		gs_gate_current_slot = NULL;
	pthread_mutex_lock(&slots_lock);
	atomic_store_explicit(&s->depth, 0, memory_order_release);
	s->sp = 0;
	s->exempt = 0;
	s->in_use = 0;
	s->next_free = free_slots;
	free_slots = s;
	if (atomic_load(&gs_gate_closed)) {
		atomic_fetch_add(&exit_seq, 1);
		sys_futex(&exit_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
	}
	pthread_mutex_unlock(&slots_lock);
}

static inline void fence_after_store(void)
{
	atomic_signal_fence(memory_order_seq_cst); /* the compiler keeps the store before the load */
	if (__builtin_expect(!atomic_load_explicit(&gs_gate_use_membarrier, memory_order_relaxed), 0))
		atomic_thread_fence(memory_order_seq_cst);
}

static void notify_closer(void)
{
	atomic_fetch_add(&exit_seq, 1);
	sys_futex(&exit_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

/* Entered with depth==1 stored and the gate seen closed; returns with depth==1 and the gate open. */
static void __attribute__((noinline)) wait_at_gate(struct gate_slot *s)
{
	if (s == atomic_load(&closer_slot))
		return; /* waiting for ourselves would never end */
	for (;;) {
		atomic_store_explicit(&s->depth, 0, memory_order_relaxed);
		notify_closer(); /* it may have counted us before we backed off */
		atomic_fetch_add(&waiting, 1);
		while (atomic_load(&gs_gate_closed))
			sys_futex(&gs_gate_closed, FUTEX_WAIT_PRIVATE, 1, NULL);
		atomic_fetch_sub(&waiting, 1);
		atomic_store_explicit(&s->depth, 1, memory_order_relaxed);
		fence_after_store();
		if (!atomic_load_explicit(&gs_gate_closed, memory_order_relaxed))
			return;
	}
}

/*
 * depth is one variable, stored in one instruction, so a signal handler that
 * calls the driver in between either sees 0 (and does a full entry of its own)
 * or sees the thread already inside (and nests).
 */
static inline void depth_enter(struct gate_slot *s)
{
	int d = atomic_load_explicit(&s->depth, memory_order_relaxed);
	if (d > 0) {
		atomic_store_explicit(&s->depth, d + 1, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&s->depth, 1, memory_order_relaxed);
	fence_after_store();
	if (__builtin_expect(atomic_load_explicit(&gs_gate_closed, memory_order_relaxed), 0))
		wait_at_gate(s);
}

static inline void depth_leave(struct gate_slot *s)
{
	int d = atomic_load_explicit(&s->depth, memory_order_relaxed) - 1;
	atomic_store_explicit(&s->depth, d, memory_order_relaxed);
	if (d == 0) {
		fence_after_store();
		if (__builtin_expect(atomic_load_explicit(&gs_gate_closed, memory_order_relaxed), 0))
			notify_closer();
	}
}

int gs_gate_enter(void *return_address)
{
	struct gate_slot *s = gs_gate_current_slot;
	if (__builtin_expect(!s, 0)) {
		s = slot_attach();
		if (!s)
			return 0; /* out of memory: the call passes ungated rather than failing */
	}
	if (s->exempt)
		return 0;
	if ((uintptr_t)return_address - atomic_load_explicit(&gs_gate_driver_lo, memory_order_relaxed) <
	    atomic_load_explicit(&gs_gate_driver_len, memory_order_relaxed))
		return 0;
	unsigned sp = s->sp;
	if (sp >= GS_SHADOW_DEPTH)
		return 0;
	depth_enter(s);
	__atomic_store_n(&s->calls, s->calls + 1, __ATOMIC_RELAXED);
	/* sp before the entry: a signal handler's nested call then uses the next one */
	s->sp = sp + 1;
	atomic_signal_fence(memory_order_seq_cst);
	s->shadow[sp] = return_address;
	return 1;
}

/* The assembly return path saw depth reach 0 with the gate closed. */
void gs_gate_notify_closer(void)
{
	notify_closer();
}

int gs_gate_enter_c(void)
{
	struct gate_slot *s = gs_gate_current_slot;
	if (__builtin_expect(!s, 0)) {
		s = slot_attach();
		if (!s)
			return 0;
	}
	if (s->exempt)
		return 0;
	depth_enter(s);
	__atomic_store_n(&s->calls, s->calls + 1, __ATOMIC_RELAXED);
	return 1;
}

void gs_gate_exit_c(int token)
{
	if (token)
		depth_leave(gs_gate_current_slot);
}

int gs_gate_exempt_current_thread(struct gs_err *err)
{
	struct gate_slot *s = gs_gate_current_slot;
	if (!s)
		s = slot_attach();
	if (!s)
		return gs_fail(err, GS_E_FAILURE, "cannot exempt this thread from the CUDA gate: out of memory");
	s->exempt = 1;
	return 0;
}

void gs_gate_set_driver_range(uintptr_t lo, uintptr_t hi)
{
	/* len first as 0 so a reader never pairs the new lo with an old len */
	atomic_store(&gs_gate_driver_len, 0);
	atomic_store(&gs_gate_driver_lo, lo);
	atomic_store(&gs_gate_driver_len, hi > lo ? hi - lo : 0);
}

/* Threads inside now, other than `self`; their tids (up to max) into tids. */
static int count_inside(const struct gate_slot *self, pid_t *tids, int max)
{
	int n = 0;
	for (struct slot_chunk *c = atomic_load_explicit(&chunks, memory_order_acquire); c;
	     c = atomic_load_explicit(&c->next, memory_order_acquire)) {
		for (int i = 0; i < SLOTS_PER_CHUNK; i++) {
			const struct gate_slot *s = &c->slots[i];
			if (s == self || atomic_load_explicit(&s->depth, memory_order_relaxed) <= 0)
				continue;
			if (tids && n < max)
				tids[n] = s->tid;
			n++;
		}
	}
	return n;
}

int gs_gate_inside_count(void)
{
	return count_inside(gs_gate_current_slot, NULL, 0);
}

int gs_gate_waiting_count(void) { return atomic_load(&waiting); }

int gs_gate_thread_count(void)
{
	int n = 0;
	pthread_mutex_lock(&slots_lock);
	for (struct slot_chunk *c = atomic_load(&chunks); c; c = atomic_load(&c->next))
		for (int i = 0; i < SLOTS_PER_CHUNK; i++)
			n += c->slots[i].in_use;
	pthread_mutex_unlock(&slots_lock);
	return n;
}
bool gs_gate_is_closed(void) { return atomic_load(&gs_gate_closed) != 0; }

static void open_locked(void)
{
	atomic_store(&closer_slot, NULL);
	atomic_store(&gs_gate_closed, 0);
	sys_futex(&gs_gate_closed, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

/* After it, every thread's later loads see gs_gate_closed=1 and we see every earlier depth store. */
static int publish_closed(struct gs_err *err)
{
	if (!atomic_load(&gs_gate_use_membarrier)) {
		atomic_thread_fence(memory_order_seq_cst);
		return 0;
	}
	if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return 0;
	int e = errno;
	/* Registration lost (it should not be): the global command needs none, only slower. */
	if (sys_membarrier(MEMBARRIER_CMD_GLOBAL) == 0)
		return 0;
	return gs_fail_errno(err, GS_E_FAILURE, e, "cannot close the CUDA gate: membarrier failed");
}

int gs_gate_close(double timeout_s, struct gs_err *err)
{
	if (gs_gate_init())
		return gs_fail(err, GS_E_FAILURE, "cannot close the CUDA gate: it could not be initialized");
	pthread_mutex_lock(&control_lock);
	if (atomic_load(&gs_gate_closed)) {
		pthread_mutex_unlock(&control_lock);
		return gs_fail(err, GS_E_STATE, "the CUDA gate is already closed");
	}
	struct gate_slot *self = gs_gate_current_slot ? gs_gate_current_slot : slot_attach();
	atomic_store(&closer_slot, self);
	atomic_store(&gs_gate_closed, 1);
	int rc = publish_closed(err);
	if (rc) {
		open_locked();
		pthread_mutex_unlock(&control_lock);
		return rc;
	}
	double deadline = timeout_s > 0 ? gs_now() + timeout_s : -1; /* <= 0: no limit */
	pid_t tids[8];
	for (;;) {
		int seq = atomic_load(&exit_seq);
		int n = count_inside(self, tids, (int)GS_ARRAY_SIZE(tids));
		if (n == 0)
			break;
		double left = deadline < 0 ? 1 : deadline - gs_now();
		if (left <= 0) {
			open_locked();
			pthread_mutex_unlock(&control_lock);
			char list[128] = "";
			size_t len = 0;
			for (int i = 0; i < n && i < (int)GS_ARRAY_SIZE(tids); i++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d", i ? " " : "", (int)tids[i]);
			return gs_fail(err, GS_E_TIMEOUT,
				       "%d app thread%s still inside the CUDA driver after %.1f s (tid %s%s); the app was left running",
				       n, n == 1 ? "" : "s", timeout_s, list, n > (int)GS_ARRAY_SIZE(tids) ? " ..." : "");
		}
		/* Wakeups are not lost (see the top of this file); the cap is belt and braces. */
		if (left > 0.05)
			left = 0.05;
		struct timespec ts = { .tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9) };
		sys_futex(&exit_seq, FUTEX_WAIT_PRIVATE, seq, &ts);
	}
	pthread_mutex_unlock(&control_lock);
	return 0;
}

void gs_gate_open(void)
{
	pthread_mutex_lock(&control_lock);
	open_locked();
	pthread_mutex_unlock(&control_lock);
}

uint64_t gs_gate_call_count(void)
{
	/* slots are never freed and keep their count when reused: the sum covers threads that exited too */
	uint64_t n = 0;
	for (struct slot_chunk *c = atomic_load_explicit(&chunks, memory_order_acquire); c;
	     c = atomic_load_explicit(&c->next, memory_order_relaxed))
		for (int i = 0; i < SLOTS_PER_CHUNK; i++)
			n += __atomic_load_n(&c->slots[i].calls, __ATOMIC_RELAXED);
	return n;
}
