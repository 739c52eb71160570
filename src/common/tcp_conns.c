/*
 * tcp_conns.c - the TCP connections of a process tree from /proc (see
 * tcp_conns.h).
 */
#include "common/tcp_conns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proc.h"

enum { TCP_ESTABLISHED = 1, TCP_CLOSE = 7, TCP_LISTEN = 10 };

bool gs_tcp_state_connected(unsigned state)
{
	return state != TCP_LISTEN && state != TCP_CLOSE && state != 0;
}

int gs_tcp_parse_table(const char *text, void (*row)(const struct gs_tcp_row *r, void *arg), void *arg)
{
	const char *line = strchr(text, '\n'); /* the header */
	int rows = 0;
	while (line && *++line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[512];
		if (len >= sizeof(buf))
			return -1;
		memcpy(buf, line, len);
		buf[len] = '\0';
		struct gs_tcp_row r = { 0 };
		/* sl local remote st tx:rx tr:when retrnsmt uid timeout inode ... */
		if (sscanf(buf, " %*u: %39[0-9A-Fa-f:] %39[0-9A-Fa-f:] %x %*s %*s %*s %*u %*u %lu", r.local, r.remote,
			   &r.state, &r.inode) != 4)
			return -1;
		row(&r, arg);
		rows++;
		line = end;
	}
	return rows;
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The kernel prints each 32-bit word of the address in host order (x86: bytes reversed). */
static bool address_bytes(const char *hex, size_t ndigits, unsigned char *out)
{
	for (size_t w = 0; w < ndigits / 8; w++)
		for (size_t b = 0; b < 4; b++) {
			int hi = hex_digit(hex[w * 8 + (3 - b) * 2]), lo = hex_digit(hex[w * 8 + (3 - b) * 2 + 1]);
			if (hi < 0 || lo < 0)
				return false;
			out[w * 4 + b] = (unsigned char)(hi << 4 | lo);
		}
	return true;
}

void gs_tcp_format_addr(const char *hex, char *out, size_t n)
{
	const char *colon = strchr(hex, ':');
	size_t digits = colon ? (size_t)(colon - hex) : 0;
	unsigned char a[16];
	unsigned port = 0;
	if (!colon || (digits != 8 && digits != 32) || !address_bytes(hex, digits, a) || sscanf(colon + 1, "%x", &port) != 1) {
		snprintf(out, n, "?");
		return;
	}
	if (digits == 8) {
		snprintf(out, n, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], port);
		return;
	}
	char text[48];
	size_t at = 0;
	for (int g = 0; g < 8; g++)
		at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%x", g ? ":" : "", a[2 * g] << 8 | a[2 * g + 1]);
	snprintf(out, n, "[%s]:%u", text, port);
}

/* The whole of a /proc file (its size is unknown beforehand); NULL when it cannot be read. */
static char *read_proc_text(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			buf[len] = '\0';
			break;
		}
		len += (size_t)r;
	}
	close(fd);
	return buf;
}

/* A socket of a process of the tree, by namespace and inode (the key its table row is found by). */
struct sock_owner {
	unsigned long netns, inode;
	pid_t pid;
};

static int cmp_owner(const void *a, const void *b)
{
	const struct sock_owner *x = a, *y = b;
	if (x->netns != y->netns)
		return x->netns < y->netns ? -1 : 1;
	return x->inode < y->inode ? -1 : x->inode > y->inode;
}

/* Appends pid's sockets ("socket:[N]" descriptors) with its network namespace; -1 when out of memory. */
static int add_sockets(pid_t pid, struct sock_owner **v, size_t *n, size_t *cap)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	unsigned long netns = stat(path, &st) ? 0 : (unsigned long)st.st_ino;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0; /* gone meanwhile, or not ours to read: nothing of it */
	struct dirent *de;
	int rc = 0;
	while (!rc && (de = readdir(d))) {
		char link[300], target[64];
		snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		unsigned long ino;
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (sscanf(target, "socket:[%lu]", &ino) != 1)
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			struct sock_owner *nv = realloc(*v, nc * sizeof(*nv));
			if (!nv) {
				rc = -1;
				break;
			}
			*v = nv;
			*cap = nc;
		}
		(*v)[(*n)++] = (struct sock_owner){ .netns = netns, .inode = ino, .pid = pid };
	}
	closedir(d);
	return rc;
}

/* One namespace's table against the tree's sockets in it (sorted), each row once. */
struct ns_scan {
	struct gs_tcp_conns *out;
	const struct sock_owner *owners;
	size_t n;
	int rc;
};

static void take_row(const struct gs_tcp_row *r, void *arg)
{
	struct ns_scan *s = arg;
	struct sock_owner key = { .netns = s->owners[0].netns, .inode = r->inode };
	const struct sock_owner *o;
	if (s->rc || !gs_tcp_state_connected(r->state) ||
	    !(o = bsearch(&key, s->owners, s->n, sizeof(*s->owners), cmp_owner)))
		return;
	if (s->out->n == s->out->cap) {
		size_t cap = s->out->cap ? s->out->cap * 2 : 16;
		struct gs_tcp_conn *nc = realloc(s->out->conn, cap * sizeof(*nc));
		if (!nc) {
			s->rc = -1;
			return;
		}
		s->out->conn = nc;
		s->out->cap = cap;
	}
	s->out->conn[s->out->n++] = (struct gs_tcp_conn){ .pid = o->pid, .netns = o->netns, .row = *r };
}

/*
 * One end as the kernel prints it, made comparable: IPv4 as its IPv4-mapped
 * IPv6 form, since the two ends of one connection can be of either family (a
 * dual-stack listener's accepted socket is IPv6, its IPv4 client's is not).
 */
static void endpoint_key(const char *hex, char out[48])
{
	const char *colon = strchr(hex, ':');
	size_t digits = colon ? (size_t)(colon - hex) : 0;
	if (digits == 8)
		snprintf(out, 48, "0000000000000000FFFF0000%.8s%s", hex, colon);
	else
		snprintf(out, 48, "%s", hex);
	for (char *c = out; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c = (char)(*c - 'a' + 'A');
}

static bool same_endpoint(const char *a, const char *b)
{
	char ka[48], kb[48];
	endpoint_key(a, ka);
	endpoint_key(b, kb);
	return !strcmp(ka, kb);
}

void gs_tcp_conns_match(struct gs_tcp_conns *c)
{
	for (size_t i = 0; i < c->n; i++) {
		struct gs_tcp_conn *a = &c->conn[i];
		a->inside = false;
		for (size_t j = 0; j < c->n && !a->inside; j++) {
			const struct gs_tcp_conn *b = &c->conn[j];
			a->inside = j != i && b->netns == a->netns && same_endpoint(b->row.local, a->row.remote) &&
				    same_endpoint(b->row.remote, a->row.local);
		}
	}
}

int gs_tcp_conns_of_tree(pid_t root, struct gs_tcp_conns *out, struct gs_err *err)
{
	memset(out, 0, sizeof(*out));
	pid_t *all;
	size_t nall;
	int rc = gs_proc_tree(root, &all, &nall, err);
	if (rc)
		return rc;
	struct sock_owner *socks = NULL;
	size_t n = 0, cap = 0;
	for (size_t i = 0; i < nall && !rc; i++)
		if (add_sockets(all[i], &socks, &n, &cap))
			rc = gs_fail(err, GS_E_FAILURE, "out of memory");
	free(all);
	if (n)
		qsort(socks, n, sizeof(*socks), cmp_owner);
	/* each network namespace's tables once, through any of its processes */
	for (size_t g = 0, end; g < n && !rc; g = end) {
		for (end = g; end < n && socks[end].netns == socks[g].netns; end++)
			;
		struct ns_scan s = { .out = out, .owners = socks + g, .n = end - g };
		for (int v6 = 0; v6 < 2 && !rc && !s.rc; v6++) {
			char path[64];
			snprintf(path, sizeof(path), "/proc/%d/net/tcp%s", (int)socks[g].pid, v6 ? "6" : "");
			char *text = read_proc_text(path);
			if (text && gs_tcp_parse_table(text, take_row, &s) < 0)
				rc = gs_fail(err, GS_E_FAILURE, "cannot parse %s", path);
			free(text);
		}
		if (s.rc && !rc)
			rc = gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	free(socks);
	if (rc) {
		gs_tcp_conns_free(out);
		return rc;
	}
	gs_tcp_conns_match(out);
	return 0;
}

struct peer_search {
	const struct gs_tcp_conn *c;
	unsigned long inode; /* the peer's socket, once found in the table */
};

static void find_peer_row(const struct gs_tcp_row *r, void *arg)
{
	struct peer_search *ps = arg;
	if (!ps->inode && r->inode && same_endpoint(r->local, ps->c->row.remote) &&
	    same_endpoint(r->remote, ps->c->row.local))
		ps->inode = r->inode;
}

pid_t gs_tcp_peer_pid(const struct gs_tcp_conn *c)
{
	struct peer_search ps = { .c = c };
	for (int v6 = 0; v6 < 2 && !ps.inode; v6++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/net/tcp%s", (int)c->pid, v6 ? "6" : "");
		char *text = read_proc_text(path);
		if (text)
			gs_tcp_parse_table(text, find_peer_row, &ps);
		free(text);
	}
	if (!ps.inode)
		return 0;
	char want[40];
	snprintf(want, sizeof(want), "socket:[%lu]", ps.inode); /* the closing bracket: no longer inode matches */
	DIR *procs = opendir("/proc");
	pid_t found = 0;
	struct dirent *de;
	while (procs && !found && (de = readdir(procs))) {
		pid_t pid = (pid_t)atoi(de->d_name);
		char path[64];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
		if (pid > 0 && !stat(path, &st) && (unsigned long)st.st_ino == c->netns && gs_proc_has_open_file(pid, want))
			found = pid;
	}
	if (procs)
		closedir(procs);
	return found;
}

void gs_tcp_conns_free(struct gs_tcp_conns *c)
{
	free(c->conn);
	memset(c, 0, sizeof(*c));
}
