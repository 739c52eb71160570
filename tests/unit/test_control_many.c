/*
 * test_control_many.c - several control calls at once (gs_ctl_call_many, the
 * list of `gpusnap state`): a real server, one that accepts and never
 * answers, one that never accepts, one that answers half a frame, a socket
 * nobody listens on. The whole takes the bound, not a bound per silent one;
 * each call gets what gs_ctl_call would give it.
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "core/control_socket.h"
#include "test.h"

static char tmpdir[64];

static void answer(void *ctx, const struct gs_msg *req, struct gs_msg *reply)
{
	(void)ctx;
	(void)req;
	reply->type = GS_MSG_INFO;
	gs_msg_add_u64(reply, GS_F_STATE, GS_AGENT_RUNNING);
	gs_msg_add_u64(reply, GS_F_ALLOC_BYTES, 4096);
}

/* A listening socket at dir/name that nobody serves. */
static int listener(const char *name, char *path, size_t n)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(path, n, "%s/%s", tmpdir, name);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) && !listen(fd, 8));
	return fd;
}

static void test_silent_ones_cost_one_bound(void)
{
	struct gs_err err = { 0 };
	char good[128], silent[128], deaf[128], half[128], nobody[128];
	snprintf(good, sizeof(good), "%s/good.sock", tmpdir);
	struct gs_ctl_server *srv = NULL;
	CHECK_INT(gs_ctl_server_start(good, answer, NULL, 10.0, &srv, &err), 0);
	int s_fd = listener("silent.sock", silent, sizeof(silent));
	int d_fd = listener("deaf.sock", deaf, sizeof(deaf));
	int h_fd = listener("half.sock", half, sizeof(half));
	snprintf(nobody, sizeof(nobody), "%s/nobody.sock", tmpdir);
	struct gs_msg hello;
	gs_msg_init(&hello, GS_MSG_HELLO);
	struct gs_ctl_call_many calls[6] = {
		{ .path = silent, .req = &hello },
		{ .path = good, .expect_pid = getpid(), .req = &hello },
		{ .path = deaf, .req = &hello },
		{ .path = half, .req = &hello },
		{ .path = nobody, .req = &hello },
		{ .path = good, .expect_pid = getpid() + 1, .req = &hello },
	};
	double t0 = gs_now();
	pid_t child = fork();
	if (child == 0) {
		/* a child plays the silent peer and the one that sends 10 of a header's 16 bytes */
		int c = accept(s_fd, NULL, NULL);
		int h = accept(h_fd, NULL, NULL);
		ssize_t w = write(h, "GSNP\1\0\2\0\0\0", 10);
		(void)w;
		sleep(5);
		close(c);
		close(h);
		_exit(0);
	}
	gs_ctl_call_many(calls, 6, 1.0);
	double took = gs_now() - t0;
	/* one after another the three silent ones alone would take 3 s */
	CHECK(took >= 0.95 && took < 2.9);
	CHECK_INT(calls[0].rc, GS_E_TIMEOUT);
	CHECK_CONTAINS(calls[0].err.msg, "no reply from the agent at '");
	CHECK_INT(calls[1].rc, 0);
	CHECK_INT(calls[1].reply.type, GS_MSG_INFO);
	uint64_t bytes = 0;
	CHECK(gs_msg_get_u64(&calls[1].reply, GS_F_ALLOC_BYTES, &bytes) && bytes == 4096);
	CHECK_INT(calls[2].rc, GS_E_TIMEOUT);
	CHECK_INT(calls[3].rc, GS_E_TIMEOUT);
	CHECK_INT(calls[4].rc, GS_E_AGENT);
	CHECK_CONTAINS(calls[4].err.msg, GS_CTL_NOBODY_LISTENS);
	CHECK_INT(calls[5].rc, GS_E_AGENT);
	CHECK_CONTAINS(calls[5].err.msg, "belongs to process");
	for (int i = 0; i < 6; i++)
		gs_msg_free(&calls[i].reply);
	/* nothing to ask: returns at once */
	t0 = gs_now();
	gs_ctl_call_many(calls, 0, 5.0);
	CHECK(gs_now() - t0 < 0.5);
	gs_msg_free(&hello);
	close(s_fd);
	close(d_fd);
	close(h_fd);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	gs_ctl_server_stop(srv);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/gs-many-test-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	RUN(test_silent_ones_cost_one_bound);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	if (system(cmd))
		return 1;
	return TEST_SUMMARY();
}
