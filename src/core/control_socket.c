/*
 * control_socket.c - socket location, the agent's control server and the
 * gpusnap client (see control_socket.h).
 */
#define LOG_PREFIX "control: "
#include "core/control_socket.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "common/settings.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

/* ---- where the socket lives ---- */

int gs_ctl_check_dir(const char *dir, uid_t uid, struct gs_err *err)
{
	return gs_private_dir(dir, uid, "socket", "directory", err);
}

/* The candidate directories for uid, in the agent's order of preference. */
static int candidate_dirs(uid_t uid, const char *run_dir, char dirs[2][PATH_MAX])
{
	if (run_dir && *run_dir) {
		snprintf(dirs[0], PATH_MAX, "%s", run_dir);
		return 1;
	}
	int n = 0;
	if (uid == 0)
		snprintf(dirs[n++], PATH_MAX, "/run/gpusnap");
	snprintf(dirs[n++], PATH_MAX, "/tmp/gpusnap-%u", (unsigned)uid);
	return n;
}

static int join_path(char *buf, size_t n, const char *prefix, const char *dir, pid_t pid, struct gs_err *err)
{
	int len = snprintf(buf, n, "%s%s/" GS_CTL_SOCKET_PREFIX "%d" GS_CTL_SOCKET_SUFFIX, prefix, dir, (int)pid);
	if (len < 0 || (size_t)len >= n || (size_t)len >= SUN_PATH_MAX)
		return gs_fail(err, GS_E_FAILURE, "socket path '%s%s/...' is longer than a Unix socket allows (%zu)",
			       prefix, dir, SUN_PATH_MAX - 1);
	return 0;
}

int gs_ctl_run_dir(char *buf, size_t n, struct gs_err *err)
{
	char dirs[2][PATH_MAX];
	uid_t uid = geteuid();
	int nd = candidate_dirs(uid, gs_setting_str(GS_S_RUN_DIR), dirs);
	int rc = GS_E_FAILURE;
	for (int i = 0; i < nd; i++) {
		rc = gs_ctl_check_dir(dirs[i], uid, err);
		if (!rc) {
			if ((size_t)snprintf(buf, n, "%s", dirs[i]) >= n)
				return gs_fail(err, GS_E_FAILURE, "runtime directory '%s' is too long", dirs[i]);
			return 0;
		}
		pr_debug("runtime directory '%s' not usable: %s", dirs[i], err ? err->msg : "");
	}
	return rc;
}

int gs_ctl_agent_socket_path(char *buf, size_t n, struct gs_err *err)
{
	char dir[PATH_MAX];
	int rc = gs_ctl_run_dir(dir, sizeof(dir), err);
	return rc ? rc : join_path(buf, n, "", dir, getpid(), err);
}

/* The value of variable name in an environ file (NUL-separated). 0 if found. */
static int environ_get(const char *path, const char *name, char *out, size_t n)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t nlen = strlen(name);
	char *entry = NULL;
	size_t cap = 0;
	int rc = -1;
	while (getdelim(&entry, &cap, '\0', f) > 0) {
		if (!strncmp(entry, name, nlen) && entry[nlen] == '=') {
			snprintf(out, n, "%s", entry + nlen + 1);
			rc = 0; /* the first definition, as getenv finds it */
			break;
		}
	}
	free(entry);
	fclose(f);
	return rc;
}

int gs_ctl_find_agent(pid_t pid, char *buf, size_t n, struct gs_err *err)
{
	int rc = gs_proc_check(pid, err);
	if (rc)
		return rc;
	uid_t uid;
	pid_t nspid;
	if (gs_proc_status_ids(pid, &uid, &nspid))
		return gs_fail(err, GS_E_NO_PROCESS, "cannot read the status of process %d", (int)pid);

	/* GPUSNAP_RUN_DIR as the process was started with it */
	char path[PATH_MAX], run_dir_buf[PATH_MAX];
	const char *run_dir = NULL;
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	bool found = !environ_get(path, "GPUSNAP_RUN_DIR", run_dir_buf, sizeof(run_dir_buf));
	if (!found) {
		/* unset, or its page not in yet: a process CRIU restored lazily reads as empty until then */
		gs_proc_fault_in_environ(pid);
		found = !environ_get(path, "GPUSNAP_RUN_DIR", run_dir_buf, sizeof(run_dir_buf));
	}
	if (found)
		run_dir = run_dir_buf;

	/* Another mount namespace (a container): reach its files through /proc/<pid>/root. */
	char self_ns[64] = "", their_ns[64] = "", prefix[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	ssize_t a = readlink("/proc/self/ns/mnt", self_ns, sizeof(self_ns) - 1);
	ssize_t b = readlink(path, their_ns, sizeof(their_ns) - 1);
	if (a > 0 && b > 0 && strcmp(self_ns, their_ns))
		snprintf(prefix, sizeof(prefix), "/proc/%d/root", (int)pid);

	char dirs[2][PATH_MAX];
	int nd = candidate_dirs(uid, run_dir, dirs);
	int denied = 0;
	for (int i = 0; i < nd; i++) {
		rc = join_path(buf, n, prefix, dirs[i], nspid, err);
		if (rc)
			return rc;
		struct stat st;
		if (!stat(buf, &st) && S_ISSOCK(st.st_mode))
			return 0;
		if (errno == EACCES)
			denied = 1;
	}
	if (denied)
		return gs_fail(err, GS_E_PERMISSION, "not allowed to reach the agent socket of process %d (run as its user or root)",
			       (int)pid);
	return gs_fail(err, GS_E_AGENT, "no gpusnap agent in process %d (not started with gpusnap run or libgpusnap.so)",
		       (int)pid);
}

bool gs_ctl_peer_allowed(uid_t peer, uid_t self)
{
	return peer == self || peer == 0;
}

/* ---- frame I/O ---- */

/* Waits for events on fd. 0 when ready, else an error code with err set. */
static int wait_fd(int fd, short events, double deadline, int stop_fd, struct gs_err *err)
{
	for (;;) {
		int timeout_ms = -1;
		if (deadline >= 0) {
			double left = deadline - gs_now();
			if (left <= 0)
				return gs_fail(err, GS_E_TIMEOUT, "timed out waiting for the other side of the control socket");
			timeout_ms = (int)(left * 1000) + 1;
		}
		struct pollfd p[2] = { { fd, events, 0 }, { stop_fd, POLLIN, 0 } };
		int r = poll(p, stop_fd >= 0 ? 2 : 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return gs_fail_errno(err, GS_E_FAILURE, errno, "poll on the control socket failed");
		if (stop_fd >= 0 && p[1].revents)
			return gs_fail(err, GS_E_AGENT, "control server is stopping");
		if (p[0].revents)
			return 0;
	}
}

static int write_all(int fd, const uint8_t *p, size_t n, double deadline, int stop_fd, struct gs_err *err)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = wait_fd(fd, POLLOUT, deadline, stop_fd, err);
			if (rc)
				return rc;
			continue;
		}
		return gs_fail_errno(err, GS_E_AGENT, errno, "cannot send on the control socket");
	}
	return 0;
}

/* Keeps the first descriptor of an SCM_RIGHTS message in *passed (if it has none yet), closes the others. */
static void take_rights(struct msghdr *mh, int *passed)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*passed < 0)
				*passed = f;
			else
				close(f);
		}
	}
}

/* One recv; with passed, descriptors that come along are kept there (the first) or closed. */
static ssize_t recv_some(int fd, uint8_t *p, size_t n, int *passed)
{
	if (!passed)
		return recv(fd, p, n, MSG_DONTWAIT);
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = p, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r > 0)
		take_rights(&mh, passed);
	return r;
}

/* Reads exactly n bytes. *got says how many arrived before an end of stream. */
static int read_all(int fd, uint8_t *p, size_t n, size_t *got, int *passed, double deadline, int stop_fd,
		    struct gs_err *err)
{
	*got = 0;
	while (*got < n) {
		ssize_t r = recv_some(fd, p + *got, n - *got, passed);
		if (r > 0) {
			*got += (size_t)r;
			continue;
		}
		if (r == 0)
			return gs_fail(err, GS_E_AGENT, "connection closed after %zu of %zu bytes", *got, n);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int rc = wait_fd(fd, POLLIN, deadline, stop_fd, err);
			if (rc)
				return rc;
			continue;
		}
		return gs_fail_errno(err, GS_E_AGENT, errno, "cannot read from the control socket");
	}
	return 0;
}

int gs_ctl_send(int fd, struct gs_msg *m, double deadline, int stop_fd, struct gs_err *err)
{
	const void *frame;
	size_t len;
	int rc = gs_msg_finish(m, &frame, &len, err);
	if (rc)
		return rc;
	return write_all(fd, frame, len, deadline, stop_fd, err);
}

/*
 * Reads one whole frame (malloc'd into *frame). *io_failed tells a broken or
 * timed-out stream (nobody to answer) from a frame that is not acceptable.
 */
static int recv_frame(int fd, enum gs_peer from, uint8_t **frame, size_t *len, bool *io_failed, int *passed,
		      double deadline, int stop_fd, struct gs_err *err)
{
	uint8_t header[GS_MSG_HEADER_SIZE];
	uint32_t plen;
	size_t got;
	*frame = NULL;
	*io_failed = true;
	int rc = read_all(fd, header, sizeof(header), &got, passed, deadline, stop_fd, err);
	if (rc) {
		if (rc == GS_E_AGENT && got == 0 && !strncmp(err->msg, "connection closed", 17))
			gs_fail(err, GS_E_AGENT, "%s closed the connection without a message",
				from == GS_PEER_AGENT ? "agent" : "gpusnap");
		return rc;
	}
	*io_failed = false;
	rc = gs_msg_parse_header(header, from, &plen, err);
	if (rc)
		return rc;
	uint8_t *f = malloc(sizeof(header) + plen);
	if (!f)
		return gs_fail(err, GS_E_FAILURE, "out of memory reading a %u byte message", plen);
	memcpy(f, header, sizeof(header));
	*io_failed = true;
	rc = read_all(fd, f + sizeof(header), plen, &got, passed, deadline, stop_fd, err);
	if (rc) {
		free(f);
		return rc;
	}
	*io_failed = false;
	*frame = f;
	*len = sizeof(header) + plen;
	return 0;
}

int gs_ctl_recv(int fd, enum gs_peer from, struct gs_msg *m, double deadline, int stop_fd, struct gs_err *err)
{
	uint8_t *frame = NULL;
	size_t len = 0;
	bool io_failed = false;
	gs_msg_init(m, 0);
	int rc = recv_frame(fd, from, &frame, &len, &io_failed, NULL, deadline, stop_fd, err);
	if (rc)
		return rc;
	rc = gs_msg_decode(frame, len, from, m, err);
	free(frame);
	return rc;
}

/* ---- server ---- */

/*
 * One thread per connection, at most GS_CTL_MAX_CONNECTIONS at once, so a
 * client that connects and says nothing holds only its own thread (until the
 * I/O timeout), never another client's answer. The acceptor thread owns the
 * connection threads: it joins the finished ones before it accepts the next,
 * and gs_ctl_server_stop joins it and then every connection thread left.
 */
struct conn {
	struct gs_ctl_server *s;
	pthread_t thread;
	int fd;        /* -1 once its thread closed it (atomic: read without the lock after fork) */
	bool used;     /* the slot holds a connection thread, running or finished (under s->lock) */
	bool finished; /* its thread is done and may be joined (under s->lock) */
};

struct gs_ctl_server {
	int listen_fd, stop_fd; /* atomic; -1 once lost to the app (see control_socket.h) */
	bool stopping; /* atomic: set by gs_ctl_server_stop, for a server whose eventfd was lost */
	pthread_t thread;
	char path[SUN_PATH_MAX];
	dev_t dev; /* the socket file at path (not the socket itself) */
	ino_t ino;
	gs_ctl_handler fn;
	void *ctx;
	double io_timeout;
	uid_t self_uid;
	pthread_mutex_t lock;
	struct conn conns[GS_CTL_MAX_CONNECTIONS];
};

/* The descriptor passed with the request the connection thread handles (gs_ctl_take_passed_fd). */
static __thread int passed_fd = -1;

int gs_ctl_take_passed_fd(void)
{
	int f = passed_fd;
	passed_fd = -1;
	return f;
}

/* The eventfd that wakes the connections' waits; -1 once the app closed it (then they end by their timeout). */
static int stop_fd_of(const struct gs_ctl_server *s)
{
	return __atomic_load_n(&s->stop_fd, __ATOMIC_ACQUIRE);
}

static void serve_client(struct gs_ctl_server *s, int fd)
{
	struct gs_err err = { 0 };
	struct gs_msg req, reply;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	gs_msg_init(&reply, GS_MSG_RESULT);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		gs_msg_set_result(&reply, GS_E_PERMISSION, "cannot identify the client: %s", strerror(errno));
	} else if (!gs_ctl_peer_allowed(cred.uid, s->self_uid)) {
		pr_warn("refused control connection from pid %d uid %u", (int)cred.pid, (unsigned)cred.uid);
		gs_msg_set_result(&reply, GS_E_PERMISSION,
				  "uid %u may not control this process (it belongs to uid %u; run as that user or root)",
				  (unsigned)cred.uid, (unsigned)s->self_uid);
	} else {
		uint8_t *frame = NULL;
		size_t len = 0;
		bool io_failed;
		passed_fd = -1;
		int rc = recv_frame(fd, GS_PEER_CLI, &frame, &len, &io_failed, &passed_fd, gs_now() + s->io_timeout,
				    stop_fd_of(s), &err);
		if (!rc)
			rc = gs_msg_decode(frame, len, GS_PEER_CLI, &req, &err);
		else
			gs_msg_init(&req, 0);
		free(frame);
		if (!rc)
			rc = gs_msg_check_request(&req, &err);
		if (rc && io_failed) {
			/* a client that went away or sent too little, or a stop: no one to answer */
			pr_debug("dropping control connection: %s", err.msg);
			gs_msg_free(&req);
			gs_msg_free(&reply);
			return;
		} else if (rc) {
			/* another protocol version, a malformed request, flags or a timeout it may not have: say so */
			gs_msg_set_result(&reply, rc, "%s", err.msg);
		} else {
			s->fn(s->ctx, &req, &reply);
			uint64_t code;
			if (reply.type == GS_MSG_RESULT && !gs_msg_get_u64(&reply, GS_F_CODE, &code))
				gs_msg_set_result(&reply, GS_E_AGENT, "agent gave no answer to %s",
						  gs_msg_type_name(req.type));
		}
		int left = gs_ctl_take_passed_fd();
		if (left >= 0)
			close(left);
		gs_msg_free(&req);
	}
	if (gs_ctl_send(fd, &reply, gs_now() + s->io_timeout, stop_fd_of(s), &err))
		pr_debug("cannot send control reply: %s", err.msg);
	gs_msg_free(&reply);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct gs_ctl_server *s = c->s;
	serve_client(s, c->fd);
	pthread_mutex_lock(&s->lock);
	int fd = __atomic_exchange_n(&c->fd, -1, __ATOMIC_RELAXED);
	c->finished = true;
	pthread_mutex_unlock(&s->lock);
	close(fd);
	return NULL;
}

/* Joins the connection threads that finished and frees their slots. */
static void reap_finished(struct gs_ctl_server *s)
{
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++) {
		struct conn *c = &s->conns[i];
		pthread_mutex_lock(&s->lock);
		bool done = c->used && c->finished;
		pthread_mutex_unlock(&s->lock);
		if (!done)
			continue;
		pthread_join(c->thread, NULL);
		pthread_mutex_lock(&s->lock);
		c->used = c->finished = false;
		pthread_mutex_unlock(&s->lock);
	}
}

/* Answers a connection over the bound at once, without reading it (one attempt: nothing waits here). */
static void refuse_busy(struct gs_ctl_server *s, int fd, const char *why)
{
	struct gs_err err = { 0 };
	struct gs_msg reply;
	gs_msg_init(&reply, GS_MSG_RESULT);
	gs_msg_set_result(&reply, GS_E_AGENT, "%s", why);
	if (gs_ctl_send(fd, &reply, gs_now(), stop_fd_of(s), &err))
		pr_debug("cannot send control reply: %s", err.msg);
	gs_msg_free(&reply);
	close(fd);
}

static void start_connection(struct gs_ctl_server *s, int fd)
{
	struct conn *c = NULL;
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS && !c; i++)
		if (!s->conns[i].used)
			c = &s->conns[i];
	if (c) {
		c->s = s;
		c->fd = fd;
		c->used = true;
		c->finished = false;
	}
	pthread_mutex_unlock(&s->lock);
	if (!c) {
		char why[128];
		snprintf(why, sizeof(why), "the agent is serving %d control connections already; try again",
			 GS_CTL_MAX_CONNECTIONS);
		pr_warn("refused a control connection: %d are open already", GS_CTL_MAX_CONNECTIONS);
		refuse_busy(s, fd, why);
		return;
	}
	/* created from the acceptor, whose signals are all blocked: so are the connection thread's */
	int e = pthread_create(&c->thread, NULL, conn_main, c);
	if (e) {
		pthread_mutex_lock(&s->lock);
		c->used = false;
		c->fd = -1;
		pthread_mutex_unlock(&s->lock);
		pr_warn("cannot start a thread for a control connection: %s", strerror(e));
		refuse_busy(s, fd, "the agent cannot start a thread for this connection");
	}
}

/*
 * Whether fd still is the server's listening socket: a listening Unix
 * socket bound to path. By what it is, not by its inode: CRIU restores a
 * process's sockets as new ones under the same numbers.
 */
static bool is_listener_at(int fd, const char *path)
{
	int on = 0, domain = 0;
	socklen_t len = sizeof(on), dlen = sizeof(domain);
	struct sockaddr_un addr;
	socklen_t alen = sizeof(addr);
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) || !on ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) || domain != AF_UNIX ||
	    getsockname(fd, (struct sockaddr *)&addr, &alen) || alen <= offsetof(struct sockaddr_un, sun_path))
		return false;
	size_t n = alen - offsetof(struct sockaddr_un, sun_path);
	return strnlen(addr.sun_path, n) == strlen(path) && !strncmp(addr.sun_path, path, n);
}

/* Whether fd is an eventfd (the server's stop descriptor is the only one it keeps). */
static bool is_eventfd(int fd)
{
	char link[64], target[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = fd < 0 ? -1 : readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return false;
	target[n] = '\0';
	return !strcmp(target, "anon_inode:[eventfd]");
}

void gs_ctl_server_own_fds(const struct gs_ctl_server *s, int out[2])
{
	out[0] = s ? __atomic_load_n(&s->listen_fd, __ATOMIC_ACQUIRE) : -1;
	out[1] = s ? __atomic_load_n(&s->stop_fd, __ATOMIC_ACQUIRE) : -1;
}

/* A listening socket bound at path, which must be free (the caller removed what was there). */
static int open_listener(const char *path, int *out_fd, struct stat *file, struct gs_err *err)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create the control socket");
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr))) {
		int e = errno;
		close(fd);
		return gs_fail_errno(err, e == EACCES ? GS_E_PERMISSION : GS_E_FAILURE, e,
				     "cannot bind control socket '%s'", path);
	}
	if (chmod(path, 0600) || stat(path, file) || listen(fd, 16)) {
		int e = errno;
		unlink(path);
		close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot set up control socket '%s'", path);
	}
	*out_fd = fd;
	return 0;
}

static bool nobody_listens(const char *path);

/*
 * The app closed the listening socket (its number may be another file now,
 * which is left alone): listen anew at the same path, once nobody listens
 * there any more. A failure is retried at the next check.
 */
static void listen_again(struct gs_ctl_server *s)
{
	static bool said;
	if (!said) {
		pr_warn("the app closed the control socket's descriptor; listening anew at %s", s->path);
		said = true;
	}
	struct stat st;
	if (!lstat(s->path, &st)) {
		if (!S_ISSOCK(st.st_mode) || !nobody_listens(s->path))
			return;
		unlink(s->path);
	}
	struct gs_err err = { 0 };
	int fd;
	if (open_listener(s->path, &fd, &st, &err)) {
		pr_debug("%s", err.msg);
		return;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	__atomic_store_n(&s->listen_fd, fd, __ATOMIC_RELEASE);
}

/* Forgets (never closes) a long-lived descriptor that is not what it was; true if it is gone. */
static bool lost(struct gs_ctl_server *s, int *fdp)
{
	int fd = __atomic_load_n(fdp, __ATOMIC_ACQUIRE);
	if (fd < 0)
		return true;
	if (fdp == &s->listen_fd ? is_listener_at(fd, s->path) : is_eventfd(fd))
		return false;
	__atomic_store_n(fdp, -1, __ATOMIC_RELEASE);
	return true;
}

static void *server_main(void *arg)
{
	struct gs_ctl_server *s = arg;
	for (;;) {
		if (__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
			return NULL;
		/* looked at on every tick: a descriptor the app closed is never polled, read or accepted on */
		(void)lost(s, &s->stop_fd);
		if (lost(s, &s->listen_fd))
			listen_again(s);
		int listen_fd = __atomic_load_n(&s->listen_fd, __ATOMIC_ACQUIRE);
		struct pollfd p[2] = { { listen_fd, POLLIN, 0 }, { __atomic_load_n(&s->stop_fd, __ATOMIC_ACQUIRE), POLLIN, 0 } };
		int r = poll(p, 2, GS_CTL_CHECK_MS);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			pr_perror("control server poll failed");
			return NULL;
		}
		/*
		 * Only gs_ctl_server_stop writes the eventfd, and it sets stopping first:
		 * a readable descriptor without it is a file the app opened on the
		 * eventfd's number after closing it (always readable); the next tick
		 * forgets it.
		 */
		if ((p[1].revents & POLLIN) && __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
			return NULL;
		if (!(p[0].revents & POLLIN) || !is_listener_at(listen_fd, s->path))
			continue;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				pr_perror("control server accept failed");
			continue;
		}
		reap_finished(s); /* their slots are free again */
		start_connection(s, fd);
	}
}

/* The pid in a file name agent-<pid>.sock; 0 for any other name. */
static pid_t socket_name_pid(const char *name)
{
	size_t lp = strlen(GS_CTL_SOCKET_PREFIX), ls = strlen(GS_CTL_SOCKET_SUFFIX), n = strlen(name);
	if (n <= lp + ls || strncmp(name, GS_CTL_SOCKET_PREFIX, lp) || strcmp(name + n - ls, GS_CTL_SOCKET_SUFFIX))
		return 0;
	long pid = 0;
	for (size_t i = lp; i < n - ls; i++) {
		if (name[i] < '0' || name[i] > '9' || pid > INT_MAX / 10)
			return 0;
		pid = pid * 10 + (name[i] - '0');
	}
	return (pid_t)pid;
}

/* Nobody listens at path: connecting is refused (the socket's process closed it by ending). */
static bool nobody_listens(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return false;
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return false;
	bool refused = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) && errno == ECONNREFUSED;
	close(fd);
	return refused;
}

int gs_ctl_remove_stale_sockets(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		pid_t pid = socket_name_pid(e->d_name);
		if (pid <= 0 || pid == getpid())
			continue;
		/* a live pid may be a new process that reuses it: its agent binds the name itself (a zombie's is stale) */
		if (gs_proc_life(pid, NULL) == GS_PROC_LIVES)
			continue;
		char path[PATH_MAX];
		struct stat st;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path) || lstat(path, &st) ||
		    !S_ISSOCK(st.st_mode) || !nobody_listens(path))
			continue;
		if (!unlink(path)) {
			pr_debug("removed the stale socket of process %d", (int)pid);
			removed++;
		}
	}
	closedir(d);
	return removed;
}

int gs_ctl_server_start(const char *path, gs_ctl_handler fn, void *ctx, double io_timeout_s,
			struct gs_ctl_server **out, struct gs_err *err)
{
	*out = NULL;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return gs_fail(err, GS_E_FAILURE, "socket path '%s' is too long", path);
	strcpy(addr.sun_path, path);

	struct stat st;
	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode))
			return gs_fail(err, GS_E_FAILURE, "'%s' exists and is not a socket", path);
		unlink(path); /* stale: a previous process with this pid */
	}
	struct gs_ctl_server *s = calloc(1, sizeof(*s));
	if (!s)
		return gs_fail(err, GS_E_FAILURE, "out of memory starting the control server");
	s->fn = fn;
	s->ctx = ctx;
	s->io_timeout = io_timeout_s > 0 ? io_timeout_s : 10.0;
	s->self_uid = geteuid();
	snprintf(s->path, sizeof(s->path), "%s", path);
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++)
		s->conns[i].fd = -1;
	int rc;
	if ((rc = pthread_mutex_init(&s->lock, NULL))) {
		free(s);
		return gs_fail_errno(err, GS_E_FAILURE, rc, "cannot start the control server");
	}
	s->listen_fd = -1;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create the control socket's eventfd");
		goto fail;
	}
	if ((rc = open_listener(path, &s->listen_fd, &st, err)))
		goto fail;
	s->dev = st.st_dev;
	s->ino = st.st_ino;

	/* agents that ended without removing their socket (a fork child's _exit, SIGKILL): the next one does */
	char dir[SUN_PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		gs_ctl_remove_stale_sockets(*dir ? dir : "/");
	}

	int e = gs_thread_start(&s->thread, server_main, s);
	if (e) {
		rc = gs_fail_errno(err, GS_E_FAILURE, e, "cannot start the control server thread");
		unlink(path);
		goto fail;
	}
	*out = s;
	return 0;
fail:
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return rc;
}

/* Closes the long-lived descriptors only if they still are the server's (else the numbers may be the app's). */
static void close_own_fds(struct gs_ctl_server *s)
{
	if (!lost(s, &s->listen_fd))
		close(s->listen_fd);
	if (!lost(s, &s->stop_fd))
		close(s->stop_fd);
}

void gs_ctl_server_stop(struct gs_ctl_server *s)
{
	if (!s)
		return;
	__atomic_store_n(&s->stopping, true, __ATOMIC_RELEASE);
	/* without its eventfd (lost to the app) the server sees the flag within GS_CTL_CHECK_MS */
	int stop_fd = __atomic_load_n(&s->stop_fd, __ATOMIC_ACQUIRE);
	uint64_t one = 1;
	if (stop_fd >= 0 && is_eventfd(stop_fd))
		while (write(stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
	pthread_join(s->thread, NULL);
	/* every connection's I/O waits on stop_fd too; a handler under way is waited for */
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++)
		if (s->conns[i].used)
			pthread_join(s->conns[i].thread, NULL);
	/* remove the socket file only if it is still ours (not a newer process's) */
	struct stat st;
	if (!lstat(s->path, &st) && st.st_dev == s->dev && st.st_ino == s->ino)
		unlink(s->path);
	close_own_fds(s);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void gs_ctl_server_abandon(struct gs_ctl_server *s)
{
	if (!s)
		return;
	/* no lock: its holder may be a thread the fork did not copy; this process has one thread now */
	for (int i = 0; i < GS_CTL_MAX_CONNECTIONS; i++) {
		int fd = __atomic_load_n(&s->conns[i].fd, __ATOMIC_RELAXED);
		if (fd >= 0)
			close(fd);
	}
	close_own_fds(s);
	free(s);
}

/* ---- client ---- */

static int ctl_connect(const char *path, pid_t expect_pid, double deadline, int *out, struct gs_err *err)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return gs_fail(err, GS_E_USAGE, "socket path '%s' is too long", path);
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create a socket");
	for (;;) {
		if (!connect(fd, (struct sockaddr *)&addr, sizeof(addr)))
			break;
		int e = errno;
		if (e == EINTR)
			continue;
		/* a full backlog: the agent is busy with another client */
		if (e == EAGAIN && gs_now() < deadline) {
			usleep(10000);
			continue;
		}
		close(fd);
		if (e == ENOENT || e == ECONNREFUSED)
			return gs_fail(err, GS_E_AGENT, GS_CTL_NOBODY_LISTENS " at '%s'", path);
		if (e == EACCES || e == EPERM)
			return gs_fail(err, GS_E_PERMISSION, "not allowed to use agent socket '%s'", path);
		if (e == EAGAIN)
			return gs_fail(err, GS_E_TIMEOUT, "agent at '%s' accepts no connection (busy)", path);
		return gs_fail_errno(err, GS_E_AGENT, e, "cannot connect to agent socket '%s'", path);
	}
	if (expect_pid > 0) {
		struct ucred cred;
		socklen_t clen = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
			int e = errno;
			close(fd);
			return gs_fail_errno(err, GS_E_AGENT, e, "cannot identify the agent at '%s'", path);
		}
		if (cred.pid != expect_pid) {
			close(fd);
			return gs_fail(err, GS_E_AGENT, "agent socket '%s' belongs to process %d, not %d", path,
				       (int)cred.pid, (int)expect_pid);
		}
	}
	*out = fd;
	return 0;
}

/* The frame's first bytes carry pass_fd (SCM_RIGHTS); the rest follows as gs_ctl_send sends. */
static int send_with_fd(int fd, struct gs_msg *m, int pass_fd, double deadline, struct gs_err *err)
{
	const void *frame;
	size_t len;
	int rc = gs_msg_finish(m, &frame, &len, err);
	if (rc)
		return rc;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { .iov_base = (void *)frame, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	ssize_t w;
	while ((w = sendmsg(fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (w <= 0)
		return gs_fail_errno(err, GS_E_AGENT, errno, "cannot send on the control socket");
	return write_all(fd, (const uint8_t *)frame + w, len - (size_t)w, deadline, -1, err);
}

static int call(const char *path, pid_t expect_pid, struct gs_msg *req, int pass_fd, struct gs_msg *reply,
		double timeout_s, struct gs_err *err)
{
	double deadline = gs_now() + timeout_s;
	int fd = -1;
	gs_msg_init(reply, 0);
	int rc = ctl_connect(path, expect_pid, deadline, &fd, err);
	if (rc)
		return rc;
	rc = pass_fd >= 0 ? send_with_fd(fd, req, pass_fd, deadline, err) : gs_ctl_send(fd, req, deadline, -1, err);
	if (!rc) {
		rc = gs_ctl_recv(fd, GS_PEER_AGENT, reply, deadline, -1, err);
	} else if (rc == GS_E_AGENT) {
		/* The agent may refuse (another user) before reading: its reply is waiting. */
		struct gs_err recv_err = { 0 };
		gs_msg_free(reply);
		if (!gs_ctl_recv(fd, GS_PEER_AGENT, reply, deadline, -1, &recv_err))
			rc = 0;
	}
	close(fd);
	if (rc == GS_E_TIMEOUT)
		gs_fail(err, GS_E_TIMEOUT, "no reply from the agent at '%s' within %.1f s", path, timeout_s);
	return rc;
}

int gs_ctl_call(const char *path, pid_t expect_pid, struct gs_msg *req, struct gs_msg *reply, double timeout_s,
		struct gs_err *err)
{
	return call(path, expect_pid, req, -1, reply, timeout_s, err);
}

int gs_ctl_call_fd(const char *path, pid_t expect_pid, struct gs_msg *req, int pass_fd, struct gs_msg *reply,
		   double timeout_s, struct gs_err *err)
{
	return call(path, expect_pid, req, pass_fd < 0 ? -1 : pass_fd, reply, timeout_s, err);
}

/* ---- several calls at once ---- */

/* Where one call of gs_ctl_call_many is. */
struct many_state {
	enum { MANY_CONNECT, MANY_READ, MANY_DONE } step;
	int fd;
	uint8_t header[GS_MSG_HEADER_SIZE];
	uint8_t *frame; /* header and payload, once the header is read */
	size_t want, got;
	int send_rc; /* the request could not be sent: the agent may have refused first (its reply waits) */
	struct gs_err send_err;
};

static void many_done(struct gs_ctl_call_many *c, struct many_state *st, int rc)
{
	c->rc = rc;
	st->step = MANY_DONE;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
	free(st->frame);
	st->frame = NULL;
}

/* Connects and sends; a backlog that is full (a busy agent) leaves the call to be tried again. */
static void many_connect(struct gs_ctl_call_many *c, struct many_state *st, double deadline)
{
	int rc = ctl_connect(c->path, c->expect_pid, 0, &st->fd, &c->err);
	if (rc == GS_E_TIMEOUT && gs_now() < deadline)
		return;
	if (rc) {
		st->fd = -1;
		many_done(c, st, rc);
		return;
	}
	/* a request fits in the new socket's buffer: sending does not wait for the agent */
	st->send_rc = gs_ctl_send(st->fd, c->req, deadline, -1, &st->send_err);
	if (st->send_rc && st->send_rc != GS_E_AGENT) {
		c->err = st->send_err;
		many_done(c, st, st->send_rc);
		return;
	}
	st->step = MANY_READ;
	st->want = GS_MSG_HEADER_SIZE;
}

/* Reads what has come; the whole frame decoded into c->reply. */
static void many_read(struct gs_ctl_call_many *c, struct many_state *st)
{
	for (;;) {
		uint8_t *into = st->frame ? st->frame : st->header;
		ssize_t r = recv(st->fd, into + st->got, st->want - st->got, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			if (st->send_rc) /* refused before it was sent, and no reply: the send's failure says it */
				c->err = st->send_err;
			else if (r == 0 && !st->got)
				gs_fail(&c->err, GS_E_AGENT, "agent closed the connection without a message");
			else if (r == 0)
				gs_fail(&c->err, GS_E_AGENT, "connection closed after %zu of %zu bytes", st->got, st->want);
			else
				gs_fail_errno(&c->err, GS_E_AGENT, errno, "cannot read from the control socket");
			many_done(c, st, c->err.code);
			return;
		}
		st->got += (size_t)r;
		if (st->got < st->want)
			continue;
		if (!st->frame) {
			uint32_t plen;
			int rc = gs_msg_parse_header(st->header, GS_PEER_AGENT, &plen, &c->err);
			if (!rc && !(st->frame = malloc(sizeof(st->header) + plen)))
				rc = gs_fail(&c->err, GS_E_FAILURE, "out of memory reading a %u byte message", plen);
			if (rc) {
				many_done(c, st, rc);
				return;
			}
			memcpy(st->frame, st->header, sizeof(st->header));
			st->want = sizeof(st->header) + plen;
			if (st->got < st->want)
				continue;
		}
		many_done(c, st, gs_msg_decode(st->frame, st->want, GS_PEER_AGENT, &c->reply, &c->err));
		return;
	}
}

void gs_ctl_call_many(struct gs_ctl_call_many *calls, size_t n, double timeout_s)
{
	double deadline = gs_now() + timeout_s;
	struct many_state *st = calloc(n ? n : 1, sizeof(*st));
	struct pollfd *pfd = calloc(n ? n : 1, sizeof(*pfd));
	size_t *of = calloc(n ? n : 1, sizeof(*of));
	for (size_t i = 0; i < n; i++) {
		gs_msg_init(&calls[i].reply, 0);
		calls[i].rc = 0;
		gs_err_clear(&calls[i].err);
		if (!st || !pfd || !of) {
			calls[i].rc = gs_fail(&calls[i].err, GS_E_FAILURE, "out of memory asking %zu agents", n);
			continue;
		}
		st[i].fd = -1;
		many_connect(&calls[i], &st[i], deadline);
	}
	for (;;) {
		size_t npoll = 0;
		bool connecting = false;
		for (size_t i = 0; st && pfd && of && i < n; i++) {
			if (st[i].step == MANY_CONNECT)
				connecting = true;
			else if (st[i].step == MANY_READ) {
				pfd[npoll] = (struct pollfd){ .fd = st[i].fd, .events = POLLIN };
				of[npoll++] = i;
			}
		}
		double left = deadline - gs_now();
		if ((!npoll && !connecting) || left <= 0)
			break;
		/* a busy agent's backlog is tried again every 10 ms, as gs_ctl_call does */
		int ms = connecting && left > 0.01 ? 10 : (int)(left * 1000) + 1;
		int r = poll(pfd, npoll, ms);
		if (r < 0 && errno != EINTR)
			break;
		for (size_t k = 0; r > 0 && k < npoll; k++)
			if (pfd[k].revents)
				many_read(&calls[of[k]], &st[of[k]]);
		for (size_t i = 0; connecting && i < n; i++)
			if (st[i].step == MANY_CONNECT)
				many_connect(&calls[i], &st[i], deadline);
	}
	for (size_t i = 0; st && pfd && of && i < n; i++) {
		if (st[i].step == MANY_DONE)
			continue;
		if (st[i].step == MANY_CONNECT)
			gs_fail(&calls[i].err, GS_E_TIMEOUT, "agent at '%s' accepts no connection (busy)", calls[i].path);
		else
			gs_fail(&calls[i].err, GS_E_TIMEOUT, "no reply from the agent at '%s' within %.1f s", calls[i].path,
				timeout_s);
		many_done(&calls[i], &st[i], GS_E_TIMEOUT);
	}
	free(st);
	free(pfd);
	free(of);
}
