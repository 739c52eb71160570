/*
 * test_control_socket.c - the agent's control socket in one process: socket
 * directory checks, path discovery for another process, request/reply across
 * threads, pid check, version mismatch and malformed requests answered,
 * client timeout, silent clients, stopping while idle or busy.
 * (Rejection of another uid is in test_control_peercred.c: it needs root.)
 */
#include <errno.h>
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
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), 0);
	snprintf(want, sizeof(want), "%s/agent-%d.sock", dir, (int)getpid());
	CHECK_STR(path, want);
	setenv("GPUSNAP_RUN_DIR", link, 1);
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), GS_E_PERMISSION);
	char longdir[200];
	memset(longdir, 'x', sizeof(longdir));
	memcpy(longdir, "/tmp/", 5);
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("GPUSNAP_RUN_DIR", longdir, 1);
	CHECK_INT(gs_ctl_agent_socket_path(path, sizeof(path), &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "longer than a Unix socket allows");
	rmdir(longdir);
	unsetenv("GPUSNAP_RUN_DIR");
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
	usleep(100000); /* let exec happen, so /proc/<child>/environ is the new one */
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

	/* a silent client is dropped after the I/O timeout and the next one is served */
	int silent = raw_connect(path);
	CHECK(silent >= 0);
	double t0 = gs_now();
	gs_msg_init(&req, GS_MSG_HELLO);
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 5.0, &err), 0);
	double waited = gs_now() - t0;
	CHECK(waited >= 0.25 && waited < 2.0);
	gs_msg_free(&reply);
	char c;
	CHECK(recv(silent, &c, 1, 0) == 0); /* closed by the server */
	close(silent);
	CHECK_INT(h.calls, 1); /* only the good request reached the handler */
	gs_msg_free(&req);
	gs_ctl_server_stop(srv);
}

static void test_timeouts_and_stop(void)
{
	struct gs_err err = { 0 };
	struct handler_state h = { .sleep_s = 1.0 };
	struct gs_ctl_server *srv;
	char path[256];
	server_path(path, sizeof(path), "slow");
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err), 0);
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	double t0 = gs_now();
	CHECK_INT(gs_ctl_call(path, 0, &req, &reply, 0.2, &err), GS_E_TIMEOUT);
	double took = gs_now() - t0;
	CHECK(took >= 0.19 && took < 0.6);
	CHECK_CONTAINS(err.msg, "no reply from the agent");
	CHECK_CONTAINS(err.msg, "within 0.2 s");
	gs_msg_free(&reply);
	/* stop while the handler is still busy: waits for it, then returns */
	gs_ctl_server_stop(srv);
	took = gs_now() - t0;
	CHECK(took >= 0.9 && took < 3.0);
	CHECK_INT(h.calls, 1);

	/* stop while idle is immediate and removes the socket */
	h.sleep_s = 0;
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 2.0, &srv, &err), 0);
	t0 = gs_now();
	gs_ctl_server_stop(srv);
	CHECK(gs_now() - t0 < 0.2);
	struct stat st;
	CHECK(stat(path, &st) != 0);

	/* stop while a client is connected but silent (long I/O timeout) is immediate too */
	CHECK_INT(gs_ctl_server_start(path, handler, &h, 30.0, &srv, &err), 0);
	int silent = raw_connect(path);
	usleep(50000);
	t0 = gs_now();
	gs_ctl_server_stop(srv);
	CHECK(gs_now() - t0 < 0.2);
	close(silent);
	gs_ctl_server_stop(NULL);
	gs_msg_free(&req);
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
	RUN(test_no_agent);
	RUN(test_bad_requests);
	RUN(test_timeouts_and_stop);
	cleanup();
	return TEST_SUMMARY();
}
