/*
 * test_control_peercred.c - another user is refused by the agent's control
 * server (SO_PEERCRED) and cannot even reach a socket in the private
 * directory. Needs root to become another user (setuid in a forked child);
 * otherwise prints SKIP and exits 77.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "core/control_socket.h"
#include "test.h"

#define OTHER_UID 65534 /* nobody */

static void handler(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	(void)req;
	(*(int *)ctx)++;
	gs_msg_set_result(reply, GS_OK, "done");
}

/* Runs fn as OTHER_UID in a child; returns its exit status (0 = its checks passed). */
static int as_other_user(int (*fn)(const char *), const char *path)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(OTHER_UID) || setuid(OTHER_UID))
			_exit(99);
		_exit(fn(path));
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 98;
}

static int call_refused(const char *path)
{
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	if (gs_ctl_call(path, 0, &req, &reply, 5.0, &err)) {
		fprintf(stderr, "call failed: %s\n", err.msg);
		return 1;
	}
	int rc = gs_msg_result_code(&reply, &err);
	if (rc != GS_E_PERMISSION || !strstr(err.msg, "uid 65534 may not control this process")) {
		fprintf(stderr, "expected a permission refusal, got %d '%s'\n", rc, err.msg);
		return 2;
	}
	return 0;
}

static int connect_denied(const char *path)
{
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_STATUS);
	int rc = gs_ctl_call(path, 0, &req, &reply, 5.0, &err);
	if (rc != GS_E_PERMISSION || !strstr(err.msg, "not allowed to use agent socket")) {
		fprintf(stderr, "expected GS_E_PERMISSION, got %d '%s'\n", rc, err.msg);
		return 1;
	}
	return 0;
}

static char open_dir[64], private_dir[128];

static void test_other_uid_refused(void)
{
	/* a socket others can reach (open directory, socket mode 0666): the server refuses them */
	struct gs_err err = { 0 };
	int calls = 0;
	char path[160];
	snprintf(path, sizeof(path), "%s/agent.sock", open_dir);
	struct gs_ctl_server *srv;
	CHECK_INT(gs_ctl_server_start(path, handler, &calls, 2.0, &srv, &err), 0);
	CHECK_INT(chmod(path, 0666), 0);
	CHECK_INT(as_other_user(call_refused, path), 0);
	CHECK_INT(calls, 0);
	/* root and the owner are served */
	struct gs_msg req, reply;
	gs_msg_init(&req, GS_MSG_SUSPEND);
	CHECK_INT(gs_ctl_call(path, getpid(), &req, &reply, 5.0, &err), 0);
	CHECK_INT(gs_msg_result_code(&reply, &err), GS_OK);
	CHECK_INT(calls, 1);
	gs_msg_free(&reply);
	gs_msg_free(&req);
	gs_ctl_server_stop(srv);
}

static void test_private_dir_unreachable(void)
{
	struct gs_err err = { 0 };
	int calls = 0;
	char path[200];
	CHECK_INT(gs_ctl_check_dir(private_dir, geteuid(), &err), 0);
	snprintf(path, sizeof(path), "%s/agent.sock", private_dir);
	struct gs_ctl_server *srv;
	CHECK_INT(gs_ctl_server_start(path, handler, &calls, 2.0, &srv, &err), 0);
	CHECK_INT(as_other_user(connect_denied, path), 0);
	CHECK_INT(calls, 0);
	gs_ctl_server_stop(srv);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: becoming another user to test SO_PEERCRED refusal needs root\n");
		return 77;
	}
	snprintf(open_dir, sizeof(open_dir), "/tmp/gs-peer-XXXXXX");
	if (!mkdtemp(open_dir) || chmod(open_dir, 0755)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(private_dir, sizeof(private_dir), "%s/private", open_dir);
	RUN(test_other_uid_refused);
	RUN(test_private_dir_unreachable);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", open_dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", open_dir);
	return TEST_SUMMARY();
}
