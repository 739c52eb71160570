/*
 * socket_server.c - a CPU-only server for tests/cli/t5007-criu-sockets.sh: it holds
 * a listening TCP socket, the TCP connections it accepted (a client may keep one
 * open: an established connection at dump time) and a UDP socket, all on 127.0.0.1.
 *
 *   socket_server --daemon DIR
 *
 * Detaches (fork, setsid, stdio on /dev/null; prints the daemon's PID) and writes
 * "TCP_PORT UDP_PORT" to DIR/ports. Every line received on a TCP connection and
 * every UDP datagram is answered with "count N", N a counter in its memory that
 * each answer increments: after a restore the answers go on from the dump's count
 * (a fresh start would say 1 again). A connection that ends is closed and forgotten.
 *
 * A second thread named "cuda-restore" only waits, standing in for the CUDA
 * driver's restore thread, as in cpu_counter.c (the fake libcuda needs it).
 *
 * SOCKET_SERVER_RELAY=1: the daemon also forks a relay, a child in its tree
 * that connects to the daemon's TCP port once (a connection whose two ends are
 * both in the tree, as a launcher's store and its workers have) and answers
 * each datagram on its own UDP port (DIR/relay_port) with "relay " and what
 * the daemon answered on that one connection. It never connects again: an
 * answer after a restore says the connection came back as it was.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 32

static void *restore_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static int bound_socket(int type, int *port)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	/* SOCKET_SERVER_NO_REUSEADDR=1: a listener as NCCL's bootstrap or PyTorch's store make it */
	const char *no_reuse = getenv("SOCKET_SERVER_NO_REUSEADDR");
	int one = !(no_reuse && !strcmp(no_reuse, "1"));
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &len))
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

static int write_ports(const char *dir, int tcp, int udp)
{
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof(tmp), "%s/ports.tmp", dir);
	snprintf(path, sizeof(path), "%s/ports", dir);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%d %d\n", tcp, udp);
	if (fclose(f))
		return -1;
	return rename(tmp, path);
}

/* The relay (see the top): one TCP connection to the daemon, for its whole life. */
static void relay(int tcp_port, const char *dir)
{
	int udp_port, udp = bound_socket(SOCK_DGRAM, &udp_port);
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)tcp_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (udp < 0 || c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		_exit(1);
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof(tmp), "%s/relay_port.tmp", dir);
	snprintf(path, sizeof(path), "%s/relay_port", dir);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", udp_port) < 0 || fclose(f) || rename(tmp, path))
		_exit(1);
	for (;;) {
		char buf[512], answer[128];
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		if (recvfrom(udp, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len) < 0)
			continue;
		size_t have = 0;
		if (write(c, "relay\n", 6) != 6)
			_exit(1);
		while (have < sizeof(answer) - 1 && (have == 0 || answer[have - 1] != '\n')) {
			ssize_t r = read(c, answer + have, sizeof(answer) - 1 - have);
			if (r <= 0)
				_exit(1); /* the connection is gone: the test sees no answer */
			have += (size_t)r;
		}
		char reply[160];
		int n = snprintf(reply, sizeof(reply), "relay %.*s", (int)have, answer);
		sendto(udp, reply, (size_t)n, 0, (struct sockaddr *)&from, len);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--daemon")) {
		fprintf(stderr, "usage: socket_server --daemon DIR\n");
		return 2;
	}
	int tcp_port, udp_port;
	int listener = bound_socket(SOCK_STREAM, &tcp_port);
	int udp = bound_socket(SOCK_DGRAM, &udp_port);
	if (listener < 0 || udp < 0 || listen(listener, 16)) {
		perror("socket_server: socket");
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid > 0) {
		/* the ports are known before the PID is printed: the test reads both at once */
		if (write_ports(argv[2], tcp_port, udp_port)) {
			perror("socket_server: ports");
			return 1;
		}
		printf("%d\n", (int)pid);
		return 0;
	}
	setsid();
	int null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
		return 1;
	close(null);
	/* nothing inherited beyond the sockets: a test runner's open log file would change size under CRIU */
	for (int fd = 3; fd < 1024; fd++)
		if (fd != listener && fd != udp)
			close(fd);
	const char *want_relay = getenv("SOCKET_SERVER_RELAY");
	if (want_relay && !strcmp(want_relay, "1")) {
		pid_t r = fork();
		if (r < 0)
			return 1;
		if (r == 0) {
			close(listener);
			close(udp);
			relay(tcp_port, argv[2]);
		}
	}
	pthread_t t;
	if (pthread_create(&t, NULL, restore_thread, NULL))
		return 1;
	pthread_setname_np(t, "cuda-restore");

	unsigned long long count = 0;
	struct pollfd fds[2 + MAX_CONNS];
	int n = 2;
	fds[0] = (struct pollfd){ .fd = listener, .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = udp, .events = POLLIN };
	for (;;) {
		if (poll(fds, (nfds_t)n, -1) < 0)
			continue;
		if (fds[0].revents & POLLIN) {
			int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0 && n < 2 + MAX_CONNS)
				fds[n++] = (struct pollfd){ .fd = c, .events = POLLIN };
			else if (c >= 0)
				close(c);
		}
		if (fds[1].revents & POLLIN) {
			char buf[512];
			struct sockaddr_in from;
			socklen_t len = sizeof(from);
			if (recvfrom(udp, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len) >= 0) {
				char reply[64];
				int r = snprintf(reply, sizeof(reply), "count %llu\n", ++count);
				sendto(udp, reply, (size_t)r, 0, (struct sockaddr *)&from, len);
			}
		}
		for (int i = 2; i < n; i++) {
			if (!fds[i].revents)
				continue;
			char buf[512];
			ssize_t got = read(fds[i].fd, buf, sizeof(buf));
			if (got <= 0) {
				close(fds[i].fd);
				fds[i--] = fds[--n];
				continue;
			}
			/* one answer per line received */
			for (ssize_t k = 0; k < got; k++) {
				if (buf[k] != '\n')
					continue;
				char reply[64];
				int r = snprintf(reply, sizeof(reply), "count %llu\n", ++count);
				if (write(fds[i].fd, reply, (size_t)r) != r)
					break;
			}
		}
	}
}
