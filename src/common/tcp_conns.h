/*
 * tcp_conns.h - the TCP connections of a process tree, and whether each one's
 * other end is in the tree too.
 *
 * CRIU dumps a connected TCP socket only with --tcp-established (restored
 * as it was, by TCP repair) or --tcp-close (restored closed), and for
 * --tcp-established it locks the network with iptables so that no packet
 * of a peer outside the tree meets a socket that is gone (the peer would
 * get a reset). A connection whose two ends both belong to the dumped tree
 * (PyTorch's TCPStore and its clients, torchrun and its workers, NCCL's
 * bootstrap) has no such peer: both ends stop, leave and come back
 * together, so it needs no lock. The dump uses this to restore such
 * connections as they were without iptables (criu.c).
 *
 * Connections are read from /proc/<pid>/net/tcp and tcp6 (the table of the
 * process's network namespace) and matched to the tree's processes by the
 * socket inodes in /proc/<pid>/fd.
 */
#ifndef GPUSNAP_COMMON_TCP_CONNS_H
#define GPUSNAP_COMMON_TCP_CONNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

/* One row of /proc/net/tcp{,6}: addresses as the kernel prints them (hex), state, socket inode. */
struct gs_tcp_row {
	char local[40], remote[40]; /* "0100007F:1F90", or 32 hex digits and a port for IPv6 */
	unsigned state;             /* the kernel's TCP state: 1 established, 10 listen, 7 close */
	unsigned long inode;
};

/*
 * Parses the text of /proc/net/tcp or tcp6 (header line first). Calls row()
 * for each row; returns the rows parsed, -1 for a line that is not a row.
 */
int gs_tcp_parse_table(const char *text, void (*row)(const struct gs_tcp_row *r, void *arg), void *arg);

/* True for a state CRIU dumps only with --tcp-established or --tcp-close: all but listen and close. */
bool gs_tcp_state_connected(unsigned state);

/* A connected socket of a process of the tree. */
struct gs_tcp_conn {
	pid_t pid;
	unsigned long netns; /* inode of /proc/<pid>/ns/net */
	struct gs_tcp_row row;
	bool inside; /* the other end is a socket of the tree, in the same network namespace */
};

struct gs_tcp_conns {
	struct gs_tcp_conn *conn;
	size_t n, cap;
};

/*
 * The connected TCP sockets of every process of root's tree, each marked
 * inside or not. A socket shared by several processes is listed once. Free
 * with gs_tcp_conns_free.
 */
int gs_tcp_conns_of_tree(pid_t root, struct gs_tcp_conns *out, struct gs_err *err);

/* Marks each connection inside whose reverse (same namespace, addresses swapped) is in the list too. */
void gs_tcp_conns_match(struct gs_tcp_conns *c);

/* "127.0.0.1:29500" or "[::1]:29500" for an address as the kernel prints it; "?" where it cannot be read. */
void gs_tcp_format_addr(const char *hex, char *out, size_t n);

/*
 * The process holding the other end of c (in c's network namespace), for a
 * message that names it; 0 when none is found (a peer on another machine,
 * or in a process this caller cannot look into). Reads every process's
 * descriptors: for error paths.
 */
pid_t gs_tcp_peer_pid(const struct gs_tcp_conn *c);

void gs_tcp_conns_free(struct gs_tcp_conns *c);

#endif
