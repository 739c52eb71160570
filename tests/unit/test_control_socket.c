/*
 * test_control_socket.c - the agent's control socket in one process: socket
 * directory checks, path discovery for another process, request/reply across
 * threads, pid check, version mismatch and malformed requests answered,
 * client timeout, silent clients, stopping while idle or busy, requests
 * served at once and the bound on connections, refused flags and timeouts,
 * stale sockets removed, a fork child letting go of its parent's server,
 * a descriptor passed with a request (gs_ctl_call_fd).
 * (Rejection of another uid is in test_control_peercred.c: it needs root.)
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "core/control_socket.h"
#include "test.h"
#include "common/settings.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/gs-ctl-test-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		exit(1);
	}
}

static void test_dir_checks(void)
{
	struct gs_err err = { 0 };
	char dir[128], link[128], file[128];
	struct stat st;
	snprintf(dir, sizeof(dir), "%s/run", tmpdir);
	CHECK_INT(gs_ctl_check_dir(dir, geteuid(), &err), 0);
	CHECK(!stat(dir, &st) && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	chmod(dir, 0755);
	CHECK_INT(gs_ctl_check_dir(dir, geteuid(), &err), 0); /* ours: made private again */
	CHECK(!stat(dir, &st) && (st.st_mode & 0777) == 0700);
	CHECK_INT(gs_ctl_check_dir(dir, geteuid() + 1, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "belongs to uid");
	snprintf(link, sizeof(link), "%s/link", tmpdir);
	CHECK_INT(symlink(dir, link), 0);
	CHECK_INT(gs_ctl_check_dir(link, geteuid(), &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "is not a directory");
	snprintf(file, sizeof(file), "%s/file", tmpdir);
	fclose(fopen(file, "w"));
	CHECK_INT(gs_ctl_check_dir(file, geteuid(), &err), GS_E_PERMISSION);
	snprintf(file, sizeof(file), "%s/no/such/dir", tmpdir);
	CHECK(gs_ctl_check_dir(file, geteuid(), &err) != 0);
	CHECK_CONTAINS(err.msg, "cannot create socket directory");

	char path[256], want[256];
	setenv("GPUSNAP_RUN_DIR", dir, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), 0);
	snprintf(want, sizeof(want), "%s/agent-%d.sock", dir, (int)getpid());
	CHECK_STR(path, want);
	setenv("GPUSNAP_RUN_DIR", link, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), GS_E_PERMISSION);
	char longdir[200];
	memset(longdir, 'x', sizeof(longdir));
	memcpy(longdir, "/tmp/", 5);
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("GPUSNAP_RUN_DIR", longdir, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "longer than a Unix socket allows");
	rmdir(longdir);
	unsetenv("GPUSNAP_RUN_DIR");
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK(gs_ctl_peer_allowed(1000, 1000) && gs_ctl_peer_allowed(0, 1000) && !gs_ctl_peer_allowed(1001, 1000));
	CHECK(gs_ctl_peer_allowed(0, 0) && !gs_ctl_peer_allowed(1000, 0));
}

static int bind_file(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
		perror("bind");
	return fd;
}

static bool is_sleep(const char *cmdline_path)
{
	char buf[16] = { 0 };
	FILE *f = fopen(cmdline_path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	return n >= 6 && !memcmp(buf, "sleep", 6);
}

static void test_find_agent(void)
{
	struct gs_err err = { 0 };
	char dir[128], path[256], want[256];
	snprintf(dir, sizeof(dir), "%s/find", tmpdir);
	CHECK_INT(gs_ctl_check_dir(dir, geteuid(), &err), 0);
	/* a process started with GPUSNAP_RUN_DIR in its environment, as `gpusnap run` would */
	pid_t child = fork();
	if (child == 0) {
		char env[160];
		snprintf(env, sizeof(env), "GPUSNAP_RUN_DIR=%s", dir);
		char *envp[] = { "A=1", env, "GPUSNAP_RUN_DIR=/elsewhere", NULL };
		execle("/bin/sleep", "sleep", "5", (char *)NULL, envp);
		_exit(127);
	}
	/* the exec has happened once the child's command line is sleep's: then /proc/<child>/environ is the new one */
	char cmdline_path[64];
	snprintf(cmdline_path, sizeof(cmdline_path), "/proc/%d/cmdline", (int)child);
	CHECK_SOON(is_sleep(cmdline_path), 10);
	CHECK_INT(gs_ctl_find_agent(child, path, sizeof(path), &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "no gpusnap agent in process");
	snprintf(want, sizeof(want), "%s/agent-%d.sock", dir, (int)child);
	int fd = bind_file(want);
	CHECK_INT(gs_ctl_find_agent(child, path, sizeof(path), &err), 0);
	CHECK_STR(path, want);
	close(fd);
	unlink(want);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	CHECK_INT(gs_ctl_find_agent(child, path, sizeof(path), &err), GS_E_NO_PROCESS);
}

struct handler_state {
	int calls;
	double sleep_s;
	bool answer_nothing;
};

static void handler(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	struct handler_state *h = ctx;
	h->calls++;
	if (h->sleep_s > 0)
		usleep((useconds_t)(h->sleep_s * 1e6));
	if (h->answer_nothing)
		return;
	if (req->type == GS_MSG_HELLO) {
		reply->type = GS_MSG_INFO;
		gs_msg_add_u64(reply, GS_F_PID, (uint64_t)getpid());
		gs_msg_add_str(reply, GS_F_VERSION, GPUSNAP_VERSION);
		const char *v = gs_msg_get_str(req, GS_F_VERSION);
		gs_msg_add_str(reply, GS_F_MESSAGE, v ? v : "(none)");
		return;
	}
	double timeout = 0;
	gs_msg_get_f64(req, GS_F_TIMEOUT, &timeout);
	gs_msg_set_result(reply, GS_E_STATE, "not suspended (timeout was %.1f)", timeout);
	gs_msg_add_named_f64(reply, GS_F_TIMING, "total", 0.5);
}

static void server_path(char *buf, size_t n, const char *name)
{
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/srv", tmpdir);
	gs_ctl_check_dir(dir, geteuid(), NULL);
	snprintf(buf, n, "%s/%s.sock", dir, name);
}

static void test_exchange(void)
{
	struct gs_err err = { 0 };
	struct handler_state h = { 0 };
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "exchange");
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err), 0);
	struct stat st;
	CHECK(!stat(path, &st) && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600);

	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_HELLO);
	gs_msg_add_str(&req, GS_F_VERSION, "9.9.9");
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 5.0, &err), 0);
	uint64_t pid = 0;
	CHECK_INT(reply.type, GS_MSG_INFO);
	CHECK(gs_msg_get_u64(&reply, GS_F_PID, &pid) && pid == (uint64_t)getpid());
	CHECK_STR(gs_msg_get_str(&reply, GS_F_MESSAGE), "9.9.9");
	gs_msg_free(&reply);
	gs_msg_free(&req);

	gs_msg_init(&req, GS_MSG_RESUME);
	gs_msg_add_f64(&req, GS_F_TIMEOUT, 30.0);
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 5.0, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_E_STATE);
	CHECK_STR(err.msg, "not suspended (timeout was 30.0)");
	double t = 0;
	CHECK(gs_msg_get_named_f64(&reply, GS_F_TIMING, "total", &t) && t == 0.5);
	gs_msg_free(&reply);

	/* the pid check: the socket is this process's, not pid 1's */
	CHECK_INT(gs_ctl_call(path, 1, &req, &reply, 5.0, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "not 1");
	gs_msg_free(&reply);

	/* a handler that fills nothing still produces an answer */
	h.answer_nothing = true;
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 5.0, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "agent gave no answer to resume");
	gs_msg_free(&reply);
	h.answer_nothing = false;
	gs_msg_free(&req);
	CHECK_INT(h.calls, 3);

	/* a non-socket file at the path is never replaced */
	char other[256];
	server_path(other, sizeof(other), "plainfile");
	fclose(fopen(other, "w"));
	struct gs_ctl_server *srv2;
	CHECK_INT(gs_ctl_server_start(other, handler, &h, 2.0, &srv2, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "exists and is not a socket");

	gs_ctl_server_stop(srv);
	CHECK(stat(path, &st) != 0);
}

/* Answers with the inode of the descriptor that came with the request (0: none), leaving it to the server when asked. */
static ino_t fd_seen;
static bool fd_leave;
static void fd_handler(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	(void)ctx;
	(void)req;
	int fd = fd_leave ? -1 : gs_ctl_take_passed_fd();
	struct stat st;
	fd_seen = fd >= 0 && !fstat(fd, &st) ? st.st_ino : 0;
	if (fd >= 0)
		close(fd);
	gs_msg_set_result(reply, 0, "ok");
}

static int count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) != -1;
	return n;
}

/* gs_ctl_call_fd: the directory arrives as a descriptor of the same inode; none without; a left one is closed. */
static void test_pass_fd(void)
{
	struct gs_err err = { 0 };
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "passfd");
	CHECK_INT(gs_ctl_server_start(path, fd_handler, NULL, 2.0, &srv, &err), 0);
	int dir = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dir >= 0);
	struct stat st;
	CHECK_INT(fstat(dir, &st), 0);
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_DUMP_FD);
	gs_msg_add_u64(&req, GS_F_FLAGS, GS_DUMP_RUNNING);
	CHECK_INT(gs_ctl_call_fd(path, getpid(), &req, dir, &reply, 5.0, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), 0);
	CHECK(fd_seen == st.st_ino);
	gs_msg_free(&reply);
	/* the caller keeps its descriptor */
	CHECK(fcntl(dir, F_GETFD) != -1);
	/* without one the handler sees none */
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 5.0, &err), 0);
	CHECK(fd_seen == 0);
	gs_msg_free(&reply);
	/* one the handler leaves is closed by the server: no descriptor grows in this process */
	fd_leave = true;
	int before = count_fds();
	for (int i = 0; i < 20; i++) {
		CHECK_INT(gs_ctl_call_fd(path, getpid(), &req, dir, &reply, 5.0, &err), 0);
		gs_msg_free(&reply);
	}
	CHECK_SOON(count_fds() <= before, 10); /* the server closes each after its reply went out */
	fd_leave = false;
	gs_msg_free(&req);
	close(dir);
	gs_ctl_server_stop(srv);
}

static void test_no_agent(void)
{
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	char path[256];
	gs_msg_init(&req, GS_MSG_STATUS);
	server_path(path, sizeof(path), "nobody-here");
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 1.0, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "no agent listening at");
	gs_msg_free(&reply);
	/* a stale socket file (its process is gone) */
	int fd = bind_file(path);
	close(fd);
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 1.0, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "no agent listening at");
	gs_msg_free(&reply);
	/* a new server replaces the stale file */
	struct handler_state h = { 0 };
	struct gs_ctl_server *srv;
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err), 0);
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 1.0, &err), 0);
	gs_msg_free(&reply);
	gs_ctl_server_stop(srv);
	gs_msg_free(&req);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void test_bad_requests(void)
{
	struct gs_err err = { 0 };
	struct handler_state h = { 0 };
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "bad");
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 0.3, &srv, &err), 0);

	/* a newer gpusnap: the agent answers in its own version, naming both */
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	req.version = GS_PROTO_VERSION + 1;
	int fd = raw_connect(path);
	CHECK(fd >= 0);
	CHECK_INT(gs_ctl_send(fd, &req, gs_now() + 2, -1, &err), 0);
	CHECK_INT(gs_ctl_recv(fd, GS_PEER_AGENT, &reply, gs_now() + 2, -1, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_E_AGENT);
	CHECK_STR(err.msg, "gpusnap speaks protocol 2, agent speaks 1");
	gs_msg_free(&reply);
	gs_msg_free(&req);
	close(fd);

	/* garbage: answered with what is wrong */
	fd = raw_connect(path);
	CHECK(send(fd, "HELLO AGENT, ARE YOU THERE?\n", 28, 0) == 28);
	CHECK_INT(gs_ctl_recv(fd, GS_PEER_AGENT, &reply, gs_now() + 2, -1, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "not a gpusnap message");
	gs_msg_free(&reply);
	close(fd);

	/* a silent client is dropped after the I/O timeout (0.3 s), not before */
	double t0 = gs_now();
	int silent = raw_connect(path);
	CHECK(silent >= 0);
	char c;
	CHECK(recv(silent, &c, 1, 0) == 0); /* closed by the server */
	CHECK(gs_now() - t0 >= 0.25);
	close(silent);
	CHECK_INT(h.calls, 0); /* no bad request reached the handler */
	gs_ctl_server_stop(srv);

	/*
	 * ... and delays nobody (before: the next one waited out its I/O
	 * timeout): served while the silent one is still connected, on a server
	 * whose I/O timeout no load reaches, so the order is a fact, not a race.
	 */
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 60.0, &srv, &err), 0);
	silent = raw_connect(path);
	CHECK(silent >= 0);
	gs_msg_init(&req, GS_MSG_HELLO);
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 30.0, &err), 0);
	CHECK_INT(reply.type, GS_MSG_INFO);
	gs_msg_free(&reply);
	struct pollfd p = { .fd = silent, .events = POLLIN };
	CHECK_INT(poll(&p, 1, 0), 0); /* not closed: it was not dropped to make room */
	close(silent);
	CHECK_INT(h.calls, 1); /* only the good request reached the handler */
	gs_msg_free(&req);
	gs_ctl_server_stop(srv);
}

/*
 * A SUSPEND handler that holds until the test lets it go: "busy" is a state
 * the test controls, not a guessed duration a loaded machine may outlast.
 */
struct slow_handler {
	int calls; /* atomic */
	int entered, released; /* under lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void gate_init(struct slow_handler *h)
{
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
}

static void gate_destroy(struct slow_handler *h)
{
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
}

static bool gate_entered(struct slow_handler *h)
{
	pthread_mutex_lock(&h->lock);
	bool e = h->entered > 0;
	pthread_mutex_unlock(&h->lock);
	return e;
}

static int gate_held(struct slow_handler *h)
{
	pthread_mutex_lock(&h->lock);
	int n = h->released ? 0 : h->entered;
	pthread_mutex_unlock(&h->lock);
	return n;
}

/* Lets every held handler go; later ones pass at once until gate_close. */
static void gate_release(struct slow_handler *h)
{
	pthread_mutex_lock(&h->lock);
	h->released = 1;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

static void gate_close(struct slow_handler *h)
{
	pthread_mutex_lock(&h->lock);
	h->released = 0;
	h->entered = 0;
	pthread_mutex_unlock(&h->lock);
}

static void slow_handler(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	struct slow_handler *h = ctx;
	__atomic_add_fetch(&h->calls, 1, __ATOMIC_SEQ_CST);
	if (req->type == GS_MSG_SUSPEND) {
		pthread_mutex_lock(&h->lock);
		h->entered++;
		pthread_cond_broadcast(&h->cond);
		while (!h->released)
			pthread_cond_wait(&h->cond, &h->lock);
		pthread_mutex_unlock(&h->lock);
		gs_msg_set_result(reply, GS_OK, "ok");
		return;
	}
	reply->type = GS_MSG_INFO;
	gs_msg_add_u64(reply, GS_F_PID, (uint64_t)getpid());
}

struct call_arg {
	const char *path;
	bool retry_busy; /* asks again while the server says it serves its maximum already */
	int rc, code;
	int done; /* atomic */
};

static void *call_suspend(void *p)
{
	struct call_arg *c = p;
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	double until = gs_now() + 60;
	do {
		c->rc = gs_ctl_call(c->path, 0, &req, &reply, 60.0, &err);
		c->code = c->rc ? -1 : gs_msg_result_code(&reply, &err);
		gs_msg_free(&reply);
	} while (c->retry_busy && c->code == GS_E_AGENT && strstr(err.msg, "already") && gs_now() < until);
	gs_msg_free(&req);
	__atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

struct stopper {
	struct gs_ctl_server *srv;
	int done; /* atomic */
};

static void *stop_server(void *p)
{
	struct stopper *st = p;
	gs_ctl_server_stop(st->srv);
	__atomic_store_n(&st->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * Stops srv from a thread of its own once h's handler is held: the stop waits
 * for the handler (still under way a moment later), and returns once the
 * handler is released. Returns the seconds from the release to its return.
 */
static double stop_while_held(struct slow_handler *h, struct gs_ctl_server *srv)
{
	CHECK_SOON(gate_entered(h), 30);
	struct stopper st = { .srv = srv };
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, stop_server, &st), 0);
	usleep(100000); /* a stop that does not wait is done by now unless load slows it: then this passes, never fails, wrongly */
	CHECK(!__atomic_load_n(&st.done, __ATOMIC_SEQ_CST));
	double t0 = gs_now();
	gate_release(h);
	pthread_join(t, NULL);
	return gs_now() - t0;
}

static void test_timeouts_and_stop(void)
{
	struct gs_err err = { 0 };
	struct slow_handler h = { 0 };
	gate_init(&h);
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "slow");
	CHECK_INT(gs_ctl_server_start(path, slow_handler, &h, 30.0, &srv, &err), 0);
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	/* the client gives up after its own 0.2 s while the handler is held */
	double t0 = gs_now();
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 0.2, &err), GS_E_TIMEOUT);
	CHECK(gs_now() - t0 >= 0.19);
	CHECK_CONTAINS(err.msg, "no reply from the agent");
	CHECK_CONTAINS(err.msg, "within 0.2 s");
	gs_msg_free(&reply);
	/* stop while the handler is still busy: waits for it, then returns */
	stop_while_held(&h, srv);
	CHECK_INT(h.calls, 1);

	/* stop while idle returns without waiting out anything, and removes the socket */
	h.calls = 0;
	CHECK_INT(gs_ctl_server_start(path, slow_handler, &h, 30.0, &srv, &err), 0);
	t0 = gs_now();
	gs_ctl_server_stop(srv);
	CHECK(gs_now() - t0 < 5.0);
	struct stat sb;
	CHECK(stat(path, &sb) != 0);

	/* stop while a client is connected but silent: does not wait out its 30 s I/O timeout */
	CHECK_INT(gs_ctl_server_start(path, slow_handler, &h, 30.0, &srv, &err), 0);
	int silent = raw_connect(path);
	CHECK(silent >= 0);
	t0 = gs_now();
	gs_ctl_server_stop(srv);
	CHECK(gs_now() - t0 < 10.0);
	close(silent);
	gs_ctl_server_stop(NULL);
	gs_msg_free(&req);
	gate_destroy(&h);
}

/* Requests with flags or a timeout the protocol does not allow are refused before the handler. */
static void test_request_checks(void)
{
	struct gs_err err = { 0 };
	struct handler_state h = { 0 };
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "checks");
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err), 0);
	static const struct {
		uint16_t type;
		uint64_t flags;
		double timeout;
		const char *want; /* NULL: carried out */
	} cases[] = {
		{ GS_MSG_SUSPEND, GS_SUSPEND_KEEP_CONTEXT, 30, NULL },
		{ GS_MSG_SUSPEND, 1u << 7, 30, "suspend request with unknown flags 0x80" },
		{ GS_MSG_SUSPEND, GS_DUMP_RUNNING, 30, "unknown flags 0x4" },
		{ GS_MSG_DUMP, GS_DUMP_RUNNING | GS_DUMP_DROP_STAGING, 0, NULL },
		{ GS_MSG_RESUME, GS_SUSPEND_KEEP_CONTEXT, 0, "resume request with unknown flags 0x1" },
		{ GS_MSG_PREPARE, 2, 0, "prepare request with unknown flags" },
		{ GS_MSG_SUSPEND, 0, -1, "suspend request with timeout -1: not a number of seconds >= 0" },
		{ GS_MSG_DUMP, 0, NAN, "dump request with timeout nan" },
		{ GS_MSG_SUSPEND, 0, INFINITY, "timeout inf" },
		{ GS_MSG_SUSPEND, 0, -INFINITY, "timeout -inf" },
	};
	int carried = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gs_msg req, reply;
		gs_msg_init(&req, cases[i].type);
		gs_msg_add_f64(&req, GS_F_TIMEOUT, cases[i].timeout);
		gs_msg_add_u64(&req, GS_F_FLAGS, cases[i].flags);
		CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 5.0, &err), 0);
		int code = gs_msg_result_code(&reply, &err);
		if (cases[i].want) {
			CHECK_INT(code, GS_E_USAGE);
			CHECK_CONTAINS(err.msg, cases[i].want);
		} else {
			CHECK_INT(code, GS_E_STATE); /* the handler's answer */
			carried++;
		}
		gs_msg_free(&reply);
		gs_msg_free(&req);
	}
	CHECK_INT(h.calls, carried);
	gs_ctl_server_stop(srv);
}

/*
 * A long request and quick ones at once; the bound on connections; stop with
 * all of it going on. The long request is held by the test (slow_handler),
 * the silent clients sit on a server whose I/O timeout no load reaches.
 */
static void test_concurrent_clients(void)
{
	struct gs_err err = { 0 };
	struct slow_handler h = { 0 };
	gate_init(&h);
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "concurrent");
	CHECK_INT(gs_ctl_server_start(path, slow_handler, &h, 60.0, &srv, &err), 0);
	struct call_arg ca = { .path = path };
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, call_suspend, &ca), 0);
	CHECK_SOON(gate_entered(&h), 30);
	/* while the suspend is held, HELLO is answered */
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_HELLO);
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 30.0, &err), 0);
	CHECK_INT(reply.type, GS_MSG_INFO);
	gs_msg_free(&reply);
	CHECK(!__atomic_load_n(&ca.done, __ATOMIC_SEQ_CST));
	gate_release(&h);
	pthread_join(t, NULL);
	CHECK_INT(ca.rc, 0);
	CHECK_INT(ca.code, GS_OK);
	gate_close(&h);

	/*
	 * GS_CTL_MAX_CONNECTIONS requests held in the handler: one more is told
	 * at once, not left waiting. (They ask again while the connections that
	 * just ended still hold their slots: those are freed when the acceptor
	 * next looks, a moment after their reply went out.)
	 */
	struct call_arg held[GS_CTL_MAX_CONNECTIONS];
	pthread_t held_t[GS_CTL_MAX_CONNECTIONS];
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++) {
		held[i] = (struct call_arg){ .path = path, .retry_busy = true };
		CHECK_INT(pthread_create(&held_t[i], NULL, call_suspend, &held[i]), 0);
	}
	CHECK_SOON(gate_held(&h) == GS_CTL_MAX_CONNECTIONS, 60);
	double t0 = gs_now();
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 30.0, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "serving 32 control connections already");
	CHECK(gs_now() - t0 < 20.0); /* not after a held one ended */
	CHECK_INT(gate_held(&h), GS_CTL_MAX_CONNECTIONS);
	gs_msg_free(&reply);
	/* once they are answered, clients are served again */
	gate_release(&h);
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++) {
		pthread_join(held_t[i], NULL);
		CHECK_INT(held[i].code, GS_OK);
	}
	gate_close(&h);
	int served = 0;
	double until = gs_now() + 30;
	while (!served && gs_now() < until) {
		CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 30.0, &err), 0);
		served = reply.type == GS_MSG_INFO;
		gs_msg_free(&reply);
	}
	CHECK(served);

	/* stop with a suspend under way and silent clients: waits for the handler only */
	int silent[4];
	for (int i = 0; i < 4; i++)
		silent[i] = raw_connect(path);
	ca.done = 0;
	CHECK_INT(pthread_create(&t, NULL, call_suspend, &ca), 0);
	CHECK(stop_while_held(&h, srv) < 30.0); /* not the silent clients' 60 s */
	pthread_join(t, NULL);
	CHECK_INT(ca.code, GS_OK); /* its answer still went out */
	for (int i = 0; i < 4; i++)
		close(silent[i]);
	struct stat sb;
	CHECK(stat(path, &sb) != 0);
	gs_msg_free(&req);
	gate_destroy(&h);
}


/* Agent sockets left behind by processes that are gone are removed by the next server; others are not. */
static void test_stale_sockets(void)
{
	struct gs_err err = { 0 };
	char dir[128], dead[256], live_pid[256], listening[256], other[256], own[256];
	snprintf(dir, sizeof(dir), "%s/stale", tmpdir);
	CHECK_INT(gs_ctl_check_dir(dir, geteuid(), &err), 0);
	pid_t gone = test_dead_pid();
	snprintf(dead, sizeof(dead), "%s/agent-%d.sock", dir, (int)gone);
	close(bind_file(dead)); /* bound, then its process "ended": nobody listens */
	/* a socket named for a live pid: a process that reuses the pid, not ours to judge */
	snprintf(live_pid, sizeof(live_pid), "%s/agent-1.sock", dir);
	close(bind_file(live_pid));
	/* a dead pid, but someone listens on it (cannot happen for an agent; never removed) */
	pid_t gone2 = test_dead_pid();
	snprintf(listening, sizeof(listening), "%s/agent-%d.sock", dir, (int)gone2);
	int lfd = bind_file(listening);
	CHECK_INT(listen(lfd, 1), 0);
	snprintf(other, sizeof(other), "%s/suspended-%d", dir, (int)gone);
	fclose(fopen(other, "w"));

	struct handler_state h = { 0 };
	struct gs_ctl_server *srv;
	snprintf(own, sizeof(own), "%s/agent-%d.sock", dir, (int)getpid());
	CHECK_INT(gs_ctl_server_start(own, handler, &h, 2.0, &srv, &err), 0);
	struct stat st;
	CHECK(lstat(dead, &st) != 0);
	CHECK(lstat(live_pid, &st) == 0);
	CHECK(lstat(listening, &st) == 0);
	CHECK(lstat(other, &st) == 0);
	CHECK(lstat(own, &st) == 0);
	CHECK_INT(gs_ctl_remove_stale_sockets(dir), 0);
	gs_ctl_server_stop(srv);
	close(lfd);
	CHECK_INT(gs_ctl_remove_stale_sockets(dir), 1); /* the one nobody listens on any more */
	CHECK(lstat(listening, &st) != 0);
	unlink(live_pid);
	unlink(other);
	/* a zombie (ended, its parent has not reaped it yet) is gone too: its socket is stale */
	pid_t z = fork();
	if (z == 0)
		_exit(0);
	siginfo_t si;
	CHECK_INT(waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT), 0);
	char zombie[256];
	snprintf(zombie, sizeof(zombie), "%s/agent-%d.sock", dir, (int)z);
	close(bind_file(zombie));
	CHECK_INT(gs_ctl_remove_stale_sockets(dir), 1);
	CHECK(lstat(zombie, &st) != 0);
	waitpid(z, NULL, 0);
}

/*
 * A fork child of a process with a server must not keep the server's
 * listening socket: once the parent is gone, clients would connect to a
 * socket nobody answers. Here process A serves, its child B abandons the
 * inherited server, A is killed: A's socket must refuse connections.
 */
static void test_abandon_in_child(void)
{
	char path[256];
	server_path(path, sizeof(path), "forked");
	int ready[2], b_pid_pipe[2], abandoned[2];
	CHECK_INT(pipe(ready), 0);
	CHECK_INT(pipe(b_pid_pipe), 0);
	CHECK_INT(pipe(abandoned), 0);
	pid_t a = fork();
	if (a == 0) {
		struct gs_err err = { 0 };
		struct handler_state h = { 0 };
		struct gs_ctl_server *srv;
		if (gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err))
			_exit(1);
		pid_t b = fork();
		if (b == 0) {
			gs_ctl_server_abandon(srv);
			/* said once the listening socket is closed here: until then B holds it open too */
			if (write(abandoned[1], "A", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		char said = 0;
		if (read(abandoned[0], &said, 1) != 1 || write(b_pid_pipe[1], &b, sizeof(b)) != sizeof(b) ||
		    write(ready[1], "R", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	char c = 0;
	pid_t b = 0;
	CHECK(read(ready[0], &c, 1) == 1 && c == 'R');
	CHECK(read(b_pid_pipe[0], &b, sizeof(b)) == sizeof(b));
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_HELLO);
	CHECK_INT(gs_ctl_call(path, a, &req, &reply, 5.0, &err), 0); /* A serves */
	gs_msg_free(&reply);
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	int fd = raw_connect(path);
	CHECK(fd < 0 && errno == ECONNREFUSED);
	if (fd >= 0)
		close(fd);
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 1.0, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "no agent listening");
	gs_msg_free(&reply);
	gs_msg_free(&req);
	if (b > 0) {
		kill(b, SIGKILL); /* a grandchild: reaped by init */
	}
	close(ready[0]);
	close(ready[1]);
	close(b_pid_pipe[0]);
	close(b_pid_pipe[1]);
	close(abandoned[0]);
	close(abandoned[1]);
	unlink(path);
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

int main(void)
{
	signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill the test: the socket code must not raise one */
	make_tmpdir();
	RUN(test_dir_checks);
	RUN(test_find_agent);
	RUN(test_exchange);
	RUN(test_pass_fd);
	RUN(test_no_agent);
	RUN(test_bad_requests);
	RUN(test_timeouts_and_stop);
	RUN(test_request_checks);
	RUN(test_concurrent_clients);
	RUN(test_stale_sockets);
	RUN(test_abandon_in_child);
	cleanup();
	return TEST_SUMMARY();
}
