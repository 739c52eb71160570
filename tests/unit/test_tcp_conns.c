/*
 * test_tcp_conns.c - common/tcp_conns.c: /proc/net/tcp rows parsed and
 * addresses printed (IPv4, IPv6), connections matched by their reversed
 * addresses within a network namespace only, and real loopback connections:
 * one whose two ends are both in the scanned tree is inside, one whose
 * other end belongs to a process outside it is not; listening sockets are
 * not connections; an IPv4 client of a dual-stack listener (its peer's socket
 * IPv6, the address IPv4-mapped) is inside too.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/tcp_conns.h"
#include "test.h"

static const char table[] =
	"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	"   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0\n"
	"   1: 0100007F:9C40 0100007F:7530 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1\n"
	"   2: 0100007F:7530 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1\n"
	"   3: 0100007F:9C41 0100007F:7531 06 00000000:00000000 03:00000BB8 00000000     0        0 0 3 0000000000000000\n";

struct rows {
	struct gs_tcp_row r[8];
	int n;
};

static void take(const struct gs_tcp_row *r, void *arg)
{
	struct rows *rs = arg;
	if (rs->n < 8)
		rs->r[rs->n++] = *r;
}

static void test_parse(void)
{
	struct rows rs = { .n = 0 };
	CHECK_INT(gs_tcp_parse_table(table, take, &rs), 4);
	CHECK_INT(rs.n, 4);
	CHECK_STR(rs.r[0].local, "0100007F:7530");
	CHECK_INT(rs.r[0].state, 10);
	CHECK_INT(rs.r[0].inode, 1001);
	CHECK_STR(rs.r[1].remote, "0100007F:7530");
	CHECK_INT(rs.r[1].state, 1);
	CHECK_INT(rs.r[2].inode, 1003);
	CHECK_INT(rs.r[3].state, 6); /* TIME_WAIT: no socket of anyone's (inode 0) */
	CHECK(!gs_tcp_state_connected(10));
	CHECK(!gs_tcp_state_connected(7));
	CHECK(gs_tcp_state_connected(1));
	CHECK(gs_tcp_state_connected(8)); /* close-wait: CRIU still needs --tcp-* for it */
	/* a header alone, and a line that is no row */
	CHECK_INT(gs_tcp_parse_table("  sl  local_address\n", take, &rs), 0);
	CHECK_INT(gs_tcp_parse_table("  sl  local_address\n garbage here\n", take, &rs), -1);
}

static void test_format(void)
{
	char out[64];
	gs_tcp_format_addr("0100007F:7530", out, sizeof(out));
	CHECK_STR(out, "127.0.0.1:30000");
	gs_tcp_format_addr("00000000000000000000000001000000:1F90", out, sizeof(out));
	CHECK_STR(out, "[0:0:0:0:0:0:0:1]:8080");
	gs_tcp_format_addr("0000000000000000FFFF00000100007F:0050", out, sizeof(out)); /* ::ffff:127.0.0.1 */
	CHECK_STR(out, "[0:0:0:0:0:ffff:7f00:1]:80");
	gs_tcp_format_addr("zz", out, sizeof(out));
	CHECK_STR(out, "?");
	gs_tcp_format_addr("0100007F", out, sizeof(out));
	CHECK_STR(out, "?");
}

static void test_match_needs_same_namespace(void)
{
	struct gs_tcp_conn c[3] = {
		{ .pid = 10, .netns = 1, .row = { "0100007F:9C40", "0100007F:7530", 1, 1002 } },
		{ .pid = 11, .netns = 1, .row = { "0100007F:7530", "0100007F:9C40", 1, 1003 } },
		/* the same addresses reversed, but in another namespace's loopback: another connection */
		{ .pid = 12, .netns = 2, .row = { "0100007F:7530", "0100007F:9C41", 1, 1004 } },
	};
	struct gs_tcp_conns cs = { .conn = c, .n = 3, .cap = 3 };
	gs_tcp_conns_match(&cs);
	CHECK(c[0].inside);
	CHECK(c[1].inside);
	CHECK(!c[2].inside);
	c[1].netns = 3;
	gs_tcp_conns_match(&cs);
	CHECK(!c[0].inside);
	CHECK(!c[1].inside);
	/* an IPv4 client of a dual-stack listener: its peer's socket is IPv6, the address IPv4-mapped */
	struct gs_tcp_conn m[2] = {
		{ .pid = 10, .netns = 1, .row = { "0100007F:9C40", "0100007F:7530", 1, 1002 } },
		{ .pid = 11, .netns = 1, .row = { "0000000000000000FFFF00000100007F:7530", "0000000000000000ffff00000100007f:9C40", 1, 1003 } },
	};
	struct gs_tcp_conns ms = { .conn = m, .n = 2, .cap = 2 };
	gs_tcp_conns_match(&ms);
	CHECK(m[0].inside);
	CHECK(m[1].inside);
}

/* A listener on loopback, its port in *port. */
static int listener(unsigned short *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

/* A dual-stack listener on :: (as torch's store makes it), its port in *port; -1 where IPv6 is off. */
static int listener6(unsigned short *port)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), off = 0;
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t len = sizeof(a);
	if (fd < 0 || setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4) || getsockname(fd, (struct sockaddr *)&a, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin6_port);
	return fd;
}

static int connect_to(unsigned short port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	return fd;
}

static size_t count(const struct gs_tcp_conns *c, bool inside)
{
	size_t n = 0;
	for (size_t i = 0; i < c->n; i++)
		n += c->conn[i].inside == inside;
	return n;
}

static void test_real_connections(void)
{
	unsigned short port;
	int lfd = listener(&port);
	CHECK(lfd >= 0);
	if (lfd < 0)
		return;
	/* a connection whose two ends are this process: inside its tree */
	int c1 = connect_to(port), a1 = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(c1 >= 0 && a1 >= 0);
	/* a child holds one end of a second connection, this process the other */
	int ready[2];
	CHECK_INT(pipe(ready), 0);
	pid_t child = fork();
	if (child == 0) {
		/* the sockets fork gave it would be its connections too */
		close(ready[0]);
		close(c1);
		close(a1);
		close(lfd);
		int c2 = connect_to(port);
		char ok = c2 >= 0 ? 'y' : 'n';
		if (write(ready[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	char ok = 0;
	CHECK_INT(read(ready[0], &ok, 1), 1);
	CHECK_INT(ok, 'y');
	int a2 = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(a2 >= 0);

	struct gs_tcp_conns all;
	struct gs_err err = { 0 };
	/* this process's tree: both connections' ends are in it (the child is in it too) */
	CHECK_INT(gs_tcp_conns_of_tree(getpid(), &all, &err), 0);
	CHECK_INT(all.n, 4);
	CHECK_INT(count(&all, false), 0);
	gs_tcp_conns_free(&all);
	/* the child's tree alone: its end's peer is ours, outside it */
	CHECK_INT(gs_tcp_conns_of_tree(child, &all, &err), 0);
	CHECK_INT(all.n, 1);
	CHECK_INT(count(&all, false), 1);
	if (all.n == 1) {
		CHECK_INT(all.conn[0].pid, child);
		char remote[64];
		gs_tcp_format_addr(all.conn[0].row.remote, remote, sizeof(remote));
		char want[32];
		snprintf(want, sizeof(want), "127.0.0.1:%u", port);
		CHECK_STR(remote, want);
		/* the other end is this process's accepted socket */
		CHECK_INT(gs_tcp_peer_pid(&all.conn[0]), getpid());
	}
	gs_tcp_conns_free(&all);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(a2);
	/* the child's connection is gone with both its ends: the first one is left */
	CHECK_INT(gs_tcp_conns_of_tree(getpid(), &all, &err), 0);
	CHECK_INT(all.n, 2);
	CHECK_INT(count(&all, true), 2);
	gs_tcp_conns_free(&all);
	close(c1);
	close(a1);
	close(lfd);
	close(ready[0]);
	close(ready[1]);
}

static void test_dual_stack(void)
{
	unsigned short port;
	int lfd = listener6(&port);
	if (lfd < 0) {
		printf("     (no IPv6 here: the dual-stack case is not tested)\n");
		return;
	}
	int c = connect_to(port), a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(c >= 0 && a >= 0);
	struct gs_tcp_conns all;
	struct gs_err err = { 0 };
	CHECK_INT(gs_tcp_conns_of_tree(getpid(), &all, &err), 0);
	CHECK_INT(all.n, 2);
	CHECK_INT(count(&all, true), 2);
	gs_tcp_conns_free(&all);
	close(c);
	close(a);
	close(lfd);
}

int main(void)
{
	RUN(test_parse);
	RUN(test_format);
	RUN(test_match_needs_same_namespace);
	RUN(test_real_connections);
	RUN(test_dual_stack);
	return TEST_SUMMARY();
}
