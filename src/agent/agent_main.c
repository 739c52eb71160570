/*
 * agent_main.c - libgpusnap.so's life, on top of its parts (base, intercept,
 * memory, movement): the constructor (load the settings, register the
 * listeners and the memory kinds, install the replacements, start the
 * control server), and the control handler that serves gpusnap's requests
 * (HELLO, STATUS, SUSPEND, RESUME, DUMP, PREPARE, GATE, OPEN, the _FD ones) on the
 * server's thread from a table of request type to handler, each handing its
 * decoded request (struct gs_request) to the lifecycle (agent_lifecycle.h).
 *
 * Nothing here runs in a signal handler. The constructor makes no CUDA
 * call: the driver is loaded when the app first allocates or when gpusnap
 * first asks for a suspend.
 *
 * The control server serves clients concurrently; serve_request lets one
 * operation run at a time. A fork child starts with no GPU state of its own
 * and a server of its own (after_fork_in_child).
 */
#define LOG_PREFIX "agent: "
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/base/agent.h"
#include "agent/intercept/agent_capture.h"
#include "agent/intercept/agent_contexts.h"
#include "agent/intercept/agent_fds.h"
#include "agent/intercept/agent_io_uring.h"
#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "agent/memory/agent_app_vmm.h"
#include "agent/memory/agent_hooks.h"
#include "agent/memory/agent_peer.h"
#include "agent/memory/agent_pointer.h"
#include "agent/memory/agent_share.h"
#include "agent/memory/agent_vmm.h"
#include "agent/memory/memkind.h"
#include "agent/movement/agent_lifecycle.h"
#include "agent/movement/agent_mover.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/proc.h"
#include "common/settings.h"
#include "common/util.h"
#include "core/control_socket.h"
#include "core/hostmem.h"

static struct gs_ctl_server *control_server;

static void add_info(struct gs_agent *a, struct gs_msg *reply)
{
	uint64_t count = 0, bytes = 0;
	gs_memkind_stats(a, &count, &bytes);
	int ndev = 0;
	for (int i = 0; i < GS_AGENT_MAX_DEVICES; i++)
		ndev += a->devices[i].used;
	reply->type = GS_MSG_INFO;
	gs_msg_add_u64(reply, GS_F_PID, (uint64_t)getpid());
	gs_msg_add_str(reply, GS_F_VERSION, GPUSNAP_VERSION);
	gs_msg_add_u64(reply, GS_F_ALLOC_COUNT, count);
	gs_msg_add_u64(reply, GS_F_ALLOC_BYTES, bytes);
	uint64_t caps = GS_CAP_SUSPEND | GS_CAP_KEEP_CONTEXT | GS_CAP_DUMP | GS_CAP_DUMP_RUNNING | GS_CAP_DUMP_CACHED |
			GS_CAP_DUMP_COMPRESS | GS_CAP_VERIFY_GPU | GS_CAP_DUMP_PARENT | GS_CAP_DUMP_STORE | GS_CAP_PREPARE |
			GS_CAP_GATE | GS_CAP_DIR_FD | GS_CAP_GATED_FD | GS_CAP_SPILL | (gs_mover_has_reserve(a) ? GS_CAP_RESERVED_POOL : 0);
	/*
	 * For tests: answer as the agents before the streamed dump did, so the
	 * command line's path for them (suspend into staging, then DUMP of the
	 * staging) keeps being exercised (t4004).
	 */
	if (gs_setting_bool(GS_S_AGENT_NO_DUMP_RUNNING))
		caps &= ~(uint64_t)GS_CAP_DUMP_RUNNING;
	gs_msg_add_u64(reply, GS_F_CAPS, caps);
	gs_lc_info(a, reply);
	gs_msg_add_u64(reply, GS_F_UNMANAGED_COUNT, __atomic_load_n(&a->unmanaged_allocs, __ATOMIC_RELAXED));
	gs_msg_add_u64(reply, GS_F_UNMANAGED_BYTES, __atomic_load_n(&a->unmanaged_bytes, __ATOMIC_RELAXED));
	gs_msg_add_u64(reply, GS_F_DEVICE_COUNT, (uint64_t)ndev);
}

/*
 * The path of the directory passed as descriptor fd, as this process sees
 * it: the descriptor's link, kept only when that path names the very same
 * directory here (an agent in another mount namespace may see none, or
 * another one). NULL when it does not.
 */
static const char *dir_fd_name(int fd, char *buf, size_t n)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t len = readlink(link, buf, n - 1);
	if (len <= 0 || buf[0] != '/')
		return NULL;
	buf[len] = '\0';
	struct stat by_fd, by_name;
	if (fstat(fd, &by_fd) || stat(buf, &by_name) || by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino)
		return NULL;
	return buf;
}

/*
 * The requests, each decoded once (struct gs_request, core/protocol.h) and
 * answered by its handler from the table below. A handler returns the
 * request's result (0 or an error in err), which becomes the reply's RESULT;
 * an `answers` handler writes the whole reply itself (INFO). Types not in the
 * table go to the memory kinds (memory shared between processes: 30-39).
 */
typedef int (*request_fn)(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err);

static int on_info(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	(void)r;
	(void)err;
	add_info(a, reply);
	return 0;
}

static int on_suspend(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	return gs_lc_suspend(a, r->timeout_s, r->keep_context, reply, err);
}

static int on_dump(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	if (!r->dir)
		return gs_fail(err, GS_E_USAGE, "dump request without a directory");
	return gs_lc_dump(a, r->dir, NULL, r->timeout_s, &r->dump, reply, err);
}

/* DUMP_FD, RESUME_FD, SUSPEND_FD: the image directory came as a descriptor: reached through it, whatever our mount namespace */
static int on_dir_fd(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	int dirfd = gs_ctl_take_passed_fd();
	char dir[64], real[PATH_MAX];
	snprintf(dir, sizeof(dir), "/proc/self/fd/%d/.", dirfd); /* "." : opened with O_NOFOLLOW */
	/* its name, resolved while we hold it: what is recorded and said, never the descriptor's path */
	const char *name = dirfd >= 0 ? dir_fd_name(dirfd, real, sizeof(real)) : NULL;
	int rc = dirfd < 0 ? gs_fail(err, GS_E_USAGE, "%s request without a directory descriptor", gs_msg_type_name(r->type))
		 : r->type == GS_MSG_RESUME_FD ? gs_lc_resume_gated(a, dir, name, r->stay_gated, r->verify_gpu, reply, err)
		 : r->type == GS_MSG_SUSPEND_FD
			 ? gs_lc_suspend_spill(a, r->timeout_s, r->keep_context,
					       &(struct gs_lc_spill){ .dir = dir, .dir_name = name, .only = r->spill_only }, reply,
					       err)
			 : gs_lc_dump(a, dir, name, r->timeout_s, &r->dump, reply, err);
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}

static int on_prepare(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	(void)r;
	return gs_lc_prepare(a, reply, err);
}

static int on_resume(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	return gs_lc_resume_gated(a, r->dir, NULL, r->stay_gated, r->verify_gpu, reply, err);
}

static int on_gate(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	return gs_lc_gate(a, r->timeout_s, r->lease_s, reply, err);
}

static int on_open(struct gs_agent *a, const struct gs_request *r, struct gs_msg *reply, struct gs_err *err)
{
	(void)r;
	return gs_lc_open(a, reply, err);
}

static const struct {
	uint16_t type;
	request_fn fn;
	bool answers; /* fn writes the whole reply: no RESULT */
} handlers[] = {
	{ GS_MSG_HELLO, on_info, true },
	{ GS_MSG_STATUS, on_info, true },
	{ GS_MSG_SUSPEND, on_suspend, false },
	{ GS_MSG_DUMP, on_dump, false },
	{ GS_MSG_DUMP_FD, on_dir_fd, false },
	{ GS_MSG_RESUME_FD, on_dir_fd, false },
	{ GS_MSG_SUSPEND_FD, on_dir_fd, false },
	{ GS_MSG_PREPARE, on_prepare, false },
	{ GS_MSG_RESUME, on_resume, false },
	{ GS_MSG_GATE, on_gate, false },
	{ GS_MSG_OPEN, on_open, false },
};

static void handle_request(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	struct gs_agent *a = ctx;
	struct gs_request r;
	gs_request_decode(req, &r);
	for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
		if (handlers[i].type != r.type)
			continue;
		struct gs_err err = { 0 };
		int rc = handlers[i].fn(a, &r, reply, &err);
		if (!handlers[i].answers)
			gs_msg_set_result(reply, rc, "%s", rc ? err.msg : "ok");
		return;
	}
	if (gs_memkind_handle_request(a, req, reply)) /* 30-39: memory shared between processes */
		return;
	gs_msg_set_result(reply, GS_E_USAGE, "the agent does not handle message type %u", req->type);
}

/* Log lines of the agent go to a file, not the app's stderr (which belongs to the app). */
static void open_log(void)
{
	const char *path = gs_setting_str(GS_S_AGENT_LOG);
	if (!path || !*path)
		return;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0) {
		gs_log_set_fd(fd);
		gs_agent_fds_set_log(fd);
	}
}

/*
 * Requests arrive on several connections at once (core/control_socket.h):
 * HELLO and STATUS are answered whatever else runs, operations (suspend,
 * resume, dump, prepare) one at a time. A second operation while one is under
 * way is refused at once, not queued behind it: its gpusnap command would
 * otherwise wait out the first one's copy and then act on a changed process.
 */
static struct {
	pthread_mutex_t lock;
	const char *running; /* the operation under way ("suspend"), NULL when none */
} operation = { PTHREAD_MUTEX_INITIALIZER, NULL };

static void serve_request(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	if (!gs_msg_is_operation(req->type)) {
		handle_request(ctx, req, reply);
		return;
	}
	pthread_mutex_lock(&operation.lock);
	const char *busy = operation.running;
	if (!busy)
		operation.running = gs_msg_type_name(req->type);
	pthread_mutex_unlock(&operation.lock);
	if (busy) {
		gs_msg_set_result(reply, GS_E_STATE, "busy: a %s is under way", busy);
		return;
	}
	if (gs_fault(GS_FI_AGENT_OPERATION))
		gs_msg_set_result(reply, GS_E_AGENT, "the agent failed before the %s (fault injected)",
				  gs_msg_type_name(req->type));
	else
		handle_request(ctx, req, reply);
	pthread_mutex_lock(&operation.lock);
	operation.running = NULL;
	pthread_mutex_unlock(&operation.lock);
}

static void start_control_server(void)
{
	struct gs_err err = { 0 };
	char path[512];
	if (gs_ctl_agent_socket_path(path, sizeof(path), &err) ||
	    gs_ctl_server_start(path, serve_request, gs_agent_get(), 0, &control_server, &err))
		pr_err("no control socket, gpusnap will use the driver path for this process: %s", err.msg);
	/* an app that closes every descriptor at its start leaves these open (agent_fds.h) */
	gs_agent_fds_set_server(control_server);
}

/*
 * A fork child (a DataLoader worker, say) has none of its parent's GPU
 * memory, staging memory (MADV_DONTFORK) or threads, and CUDA does not work
 * in it: it starts as an agent that has seen no allocation, so it never
 * copies, releases or reports what is its parent's. Locks are made anew: a
 * thread the fork did not copy may have held them.
 */
static void forget_parent_gpu_state(struct gs_agent *a)
{
	gs_agent_forget_after_fork(a);
	pthread_mutex_init(&operation.lock, NULL);
	operation.running = NULL;
	gs_mover_forget_after_fork();
	gs_memkind_forget_after_fork();
}

/* gs_gpu_device_prefix() read at load: getenv is not for the fork child of a threaded process */
static char device_prefix[256];

/*
 * A fork child inherits the driver's mappings of the GPU device files
 * (/dev/nvidia0 and the like) that its parent's CUDA set up, without the
 * CUDA state behind them: CUDA does not work in a fork child. CRIU cannot
 * dump such a mapping (a DataLoader worker's, an Inductor compile worker's)
 * and the driver does not take it away, since the child is no CUDA process
 * to it; so the dump of the whole job would fail on it. Each is replaced by
 * private anonymous memory of the same size and protection, at the same
 * address: whatever in the child still touches it (nothing should) meets
 * memory, not a fault, and no write of the child reaches the device. Not
 * reserved (MAP_NORESERVE): such a range can be large, and is never used.
 * What it costs: NVML's descriptors are among them, so a child that goes on
 * using NVML as its parent initialized it gets errors from it
 * (GPUSNAP_FORK_DROP_DEVICE=0 keeps them, and the child undumpable).
 * Async-signal-safe: the child of a threaded parent may only do that.
 */
static void drop_inherited_device_maps(void)
{
	struct gs_maps_entry maps[32];
	for (int pass = 0; pass < 64; pass++) {
		int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		int n = gs_maps_find(fd, device_prefix, maps, 32);
		close(fd);
		if (n <= 0)
			return;
		for (int i = 0; i < n && i < 32; i++)
			if (mmap((void *)maps[i].start, maps[i].end - maps[i].start, maps[i].prot,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
				return; /* left mapped: the dump names this process then */
		if (n <= 32)
			return;
	}
}

/*
 * The same for the driver's descriptors of the device files: CRIU cannot
 * dump them either. Each number is kept, now naming /dev/null (still
 * close-on-exec): libcuda in the child may still hold the numbers, and an
 * ioctl it makes there fails instead of reaching a file opened later.
 */
static bool drop_inherited_device_fds(void)
{
	int fds[64], null_fd = -1, n = 0;
	bool any = false;
	for (int pass = 0; pass < 64; pass++) {
		if ((n = gs_fds_find(device_prefix, fds, 64)) <= 0)
			break;
		any = true;
		if (null_fd < 0 && (null_fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
			break;
		for (int i = 0; i < n && i < 64; i++)
			dup3(null_fd, fds[i], O_CLOEXEC);
		if (n <= 64)
			break;
	}
	if (null_fd >= 0)
		close(null_fd);
	return any || n < 0; /* unreadable: look at the mappings all the same */
}

/* After fork(), in the child: let go of the parent's server (its descriptors too) and start one of its own. */
static void after_fork_in_child(void)
{
	/*
	 * Descriptors first: a parent whose driver or NVML had the device files
	 * mapped keeps them open too, and the list of descriptors is short where
	 * that of mappings is long (thousands in a PyTorch process): a child with
	 * none (of a process that never used the GPU, a grandchild) skips the
	 * mappings, which costs a fork a measurable share of its time
	 * (docs/benchmarks.md, "Steady-state overhead").
	 */
	if (device_prefix[0] && drop_inherited_device_fds())
		drop_inherited_device_maps();
	gs_agent_fds_set_server(NULL);
	gs_ctl_server_abandon(control_server);
	control_server = NULL;
	forget_parent_gpu_state(gs_agent_get());
	start_control_server();
}

/* `gpusnap run --reserve` refuses more than the host has; GPUSNAP_RESERVE set by hand is only warned about. */
static void check_reserve_size(void)
{
	const char *v = gs_setting_raw(GS_S_RESERVE);
	uint64_t bytes = gs_setting_size(GS_S_RESERVE);
	if (!bytes)
		return;
	struct gs_hostmem m;
	gs_hostmem_read("", &m);
	if (m.avail == UINT64_MAX || bytes <= m.avail)
		return;
	char want[32], have[32];
	pr_warn("GPUSNAP_RESERVE=%s (%s) is more than the host memory available (%s, %s): reserving it may push the "
		"host into swap or the OOM killer",
		v, gs_format_bytes(bytes, want, sizeof(want)), gs_format_bytes(m.avail, have, sizeof(have)), m.limit);
}

/*
 * What the parts hear from base (base/agent.h), in the order they run: a
 * device's sub-allocator before its context is noted, both before the mover
 * starts the reserved pool. Registered before anything can use a device.
 */
static void listen_to_base(void)
{
	gs_agent_listen(&gs_vmm_listener);
	gs_agent_listen(&gs_ctx_listener);
	gs_agent_listen(&gs_mover_listener);
}

/*
 * The kinds of memory made releasable (memory/memkind.h), in the order their
 * hooks are installed and their regions listed. A new kind is one line here.
 */
static void register_memory_kinds(void)
{
	gs_memkind_register(&gs_alloc_kind);
	gs_memkind_register(&gs_peer_kind);
	gs_memkind_register(&gs_pointer_kind);
	gs_memkind_register(&gs_app_vmm_kind);
	gs_memkind_register(&gs_share_kind);
}

__attribute__((constructor)) static void agent_init(void)
{
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment, once (common/settings.h) */
	listen_to_base();
	register_memory_kinds();
	gs_log_init_from_env();
	gs_agent_fds_init();
	/* GPUSNAP_FORK_DROP_DEVICE=0: fork children keep what they inherit (and cannot be dumped) */
	if (gs_setting_bool(GS_S_FORK_DROP_DEVICE))
		snprintf(device_prefix, sizeof(device_prefix), "%s", gs_gpu_device_prefix());
	open_log();
	gs_settings_warn();
	gs_agent_io_uring_init();
	struct gs_err err = { 0 };
	/*
	 * GPUSNAP_AGENT_HOOKS=0 leaves allocations to the driver (an escape hatch for
	 * apps that need what releasable memory cannot give, e.g. legacy CUDA IPC);
	 * suspend then takes the driver path for their memory.
	 */
	if (gs_setting_bool(GS_S_AGENT_HOOKS) && (gs_memkind_install_hooks(&err) || gs_capture_install_hooks(&err))) {
		pr_err("%s", err.msg);
		return;
	}
	/* every context the app makes, so a suspend waits for the work of each (agent_contexts.h) */
	if (gs_ctx_install_hooks(&err)) {
		pr_err("%s", err.msg);
		return;
	}
	gs_mover_init_from_env(gs_agent_get());
	check_reserve_size();
	start_control_server();
	pthread_atfork(NULL, NULL, after_fork_in_child);
}

__attribute__((destructor)) static void agent_fini(void)
{
	gs_agent_fds_set_server(NULL);
	gs_ctl_server_stop(control_server);
	control_server = NULL;
}
