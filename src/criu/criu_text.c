/*
 * criu_text.c - the parts of driving criu that are only text: reading its version
 * and its log, and building its command lines (see criu.h). No process is run here,
 * so all of it is unit-tested without CRIU.
 */
#include "criu/criu.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gs_argv_add(struct gs_argv *a, const char *s)
{
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -1;
		a->v = v;
		a->cap = cap;
	}
	char *copy = strdup(s);
	if (!copy)
		return -1;
	a->v[a->n++] = copy;
	a->v[a->n] = NULL;
	return 0;
}

void gs_argv_free(struct gs_argv *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

/* A version component: 1 to 9 digits (no sign, no space); -1 otherwise, so a longer number cannot wrap. */
static int version_number(const char **p)
{
	int v = 0, digits = 0;
	for (; isdigit((unsigned char)**p); (*p)++) {
		if (++digits > 9)
			return -1;
		v = v * 10 + (**p - '0');
	}
	return digits ? v : -1;
}

int gs_criu_parse_version(const char *text, int *major, int *minor, int *patch)
{
	const char *p = text ? strstr(text, "Version:") : NULL;
	if (!p)
		return -1;
	p += strlen("Version:");
	while (*p == ' ' || *p == '\t')
		p++;
	int ma = version_number(&p);
	if (ma < 0 || *p++ != '.')
		return -1;
	int mi = version_number(&p), pa = 0;
	if (mi < 0)
		return -1;
	if (*p == '.' && isdigit((unsigned char)p[1])) {
		p++;
		if ((pa = version_number(&p)) < 0)
			return -1;
	}
	*major = ma;
	*minor = mi;
	*patch = pa;
	return 0;
}

int gs_criu_version_check(const struct gs_criu *c, struct gs_err *err)
{
	if (c->major > GS_CRIU_MIN_MAJOR || (c->major == GS_CRIU_MIN_MAJOR && c->minor >= GS_CRIU_MIN_MINOR))
		return 0;
	return gs_fail(err, GS_E_CRIU,
		       "criu '%s' is version %s; gpusnap needs CRIU >= " GS_CRIU_MIN_TEXT
		       " (older ones cannot dump a process holding a network socket on Linux 6.16 and later): %s",
		       c->path, c->version, GS_CRIU_HOWTO);
}

/* Errors CRIU logs that do not explain a failure. */
static bool error_is_noise(const char *msg)
{
	static const char *const noise[] = {
		"Can't setup RLIMIT_NOFILE", /* criu tries to raise its own fd limit; fails in containers */
		"Dumping FAILED.",
		"Restoring FAILED.",
		"Pre-dumping FAILED.",
	};
	for (size_t i = 0; i < sizeof(noise) / sizeof(noise[0]); i++)
		if (strstr(msg, noise[i]))
			return true;
	return false;
}

/*
 * CRIU's words for limits a user meets with real apps, and what to do about
 * them; appended to the cause. Seen on the GPU machines with PyTorch jobs.
 */
static const char *known_limit(const char *msg)
{
	static const struct {
		const char *needle, *hint;
	} limits[] = {
		{ "anon_inode:[io_uring]", "the process uses io_uring, which CRIU cannot dump (PyTorch's TCPStore sets one "
					   "up through libuv: start the job with USE_LIBUV=0)" },
		{ "Address already in use", "a port the process had bound is taken on this machine now (`ss -tanp` "
					    "names who holds it): restore where it is free" },
		/*
		 * CRIU records the size of every regular file the process had open,
		 * except one opened write-only with O_APPEND, and restores only into
		 * that size: a log opened with `>` (not `>>`) that grew after `dump
		 * --leave-running`, or after an earlier restore from the same image.
		 */
		{ "has bad size", "the process had this file open and it changed size since the dump (CRIU checks "
				  "every file but a write-only O_APPEND one): truncate it back to the expected size (keep a "
				  "copy), or have the app open its logs for appending (`>>`)" },
	};
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
		if (strstr(msg, limits[i].needle))
			return limits[i].hint;
	return NULL;
}

int gs_criu_log_error(const char *log_text, char *out, size_t n)
{
	if (n)
		out[0] = '\0';
	if (!log_text || !n)
		return -1;
	/*
	 * "(00.040481) Error (criu/cr-restore.c:1230): Can't fork for 6307: File exists"
	 * or from a restored task "pie: 6307: Error (criu/pie/restorer.c:...): ...".
	 * The first one is the cause; the ones after it are its consequences.
	 */
	for (const char *line = log_text; *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *found = memmem(line, len, "Error (", 7);
		if (found) {
			const char *msg = memchr(found, ')', len - (size_t)(found - line));
			if (msg && msg + 1 < line + len && msg[1] == ':') {
				msg += 2;
				while (msg < line + len && *msg == ' ')
					msg++;
				size_t mlen = (size_t)(line + len - msg);
				while (mlen && (msg[mlen - 1] == ' ' || msg[mlen - 1] == '\r'))
					mlen--;
				char buf[512];
				if (mlen >= sizeof(buf))
					mlen = sizeof(buf) - 1;
				memcpy(buf, msg, mlen);
				buf[mlen] = '\0';
				if (mlen && !error_is_noise(buf)) {
					const char *hint = known_limit(buf);
					snprintf(out, n, "%s%s%s", buf, hint ? ": " : "", hint ? hint : "");
					return 0;
				}
			}
		}
		if (!end)
			break;
		line = end + 1;
	}
	return -1;
}

pid_t gs_criu_log_pid_in_use(const char *log_text)
{
	/* clone3 with set_tid fails with EEXIST when the PID is taken. */
	for (const char *p = log_text; p && (p = strstr(p, "Can't fork for ")); p++) {
		const char *end = p + strlen("Can't fork for ");
		long long pid = 0;
		/* Digits only, and no more than a pid_t holds: a longer number must not wrap to another PID. */
		while (*end >= '0' && *end <= '9' && pid <= INT_MAX)
			pid = pid * 10 + (*end++ - '0');
		if (pid > 0 && pid <= INT_MAX && strncmp(end, ": File exists", 13) == 0)
			return (pid_t)pid;
	}
	return -1;
}

bool gs_criu_needs_shell_job(pid_t pid, pid_t pgrp, pid_t session, int tty_nr)
{
	return pgrp != pid || session != pid || tty_nr != 0;
}

static int add_all(struct gs_argv *out, const char *const *args, struct gs_err *err)
{
	for (; args && *args; args++)
		if (gs_argv_add(out, *args))
			return gs_fail(err, GS_E_FAILURE, "out of memory building the criu command line");
	return 0;
}

#define ADD(...)                                                                     \
	do {                                                                         \
		const char *const items_[] = { __VA_ARGS__, NULL };                      \
		int rc_ = add_all(out, items_, err);                                     \
		if (rc_) {                                                           \
			gs_argv_free(out);                                           \
			return rc_;                                                  \
		}                                                                    \
	} while (0)

static const char *tcp_flag(enum gs_criu_tcp tcp)
{
	switch (tcp) {
	case GS_CRIU_TCP_ESTABLISHED:
		return "--tcp-established";
	case GS_CRIU_TCP_CLOSE:
		return "--tcp-close";
	default:
		return NULL;
	}
}

int gs_criu_dump_args(const struct gs_criu *c, pid_t pid, const char *images_dir, const char *log_path,
		      const struct gs_criu_dump_opts *o, bool shell_job, struct gs_argv *out, struct gs_err *err)
{
	static const struct gs_criu_dump_opts defaults;
	if (!o)
		o = &defaults;
	char pidbuf[24];
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
	ADD(c->path, "dump", "--tree", pidbuf, "--images-dir", images_dir, "--log-file", log_path, "-v4");
	if (shell_job)
		ADD("--shell-job");
	if (!o->no_file_locks)
		ADD("--file-locks");
	if (tcp_flag(o->tcp))
		ADD(tcp_flag(o->tcp));
	if (o->skip_network_lock)
		ADD("--network-lock=skip");
	else if (o->nft_network_lock)
		ADD("--network-lock=nftables");
	if (o->leave_running)
		ADD("--leave-running");
	if (o->libdir)
		ADD("--libdir", o->libdir);
	int rc = add_all(out, o->extra_args, err);
	if (rc)
		gs_argv_free(out);
	return rc;
}

bool gs_criu_args_has(const char *text, const char *flag)
{
	size_t fl = strlen(flag);
	for (const char *p = text; p && (p = strstr(p, flag)); p += fl)
		if ((p == text || p[-1] == '\n') && (p[fl] == '\n' || p[fl] == '\0'))
			return true;
	return false;
}

int gs_criu_restore_args(const struct gs_criu *c, const char *images_dir, const char *log_path,
			 const char *pidfile, const struct gs_criu_restore_opts *o, const char *recorded,
			 struct gs_argv *out, struct gs_err *err)
{
	static const struct gs_criu_restore_opts defaults;
	if (!o)
		o = &defaults;
	ADD(c->path, "restore", "--images-dir", images_dir, "--restore-detached", "--pidfile", pidfile,
	    "--log-file", log_path, "-v4");
	if (o->shell_job || gs_criu_args_has(recorded, "--shell-job"))
		ADD("--shell-job");
	if (gs_criu_args_has(recorded, "--file-locks"))
		ADD("--file-locks");
	enum gs_criu_tcp tcp = o->tcp;
	if (tcp == GS_CRIU_TCP_REFUSE && gs_criu_args_has(recorded, "--tcp-established"))
		tcp = GS_CRIU_TCP_ESTABLISHED;
	if (tcp == GS_CRIU_TCP_REFUSE && gs_criu_args_has(recorded, "--tcp-close"))
		tcp = GS_CRIU_TCP_CLOSE;
	if (tcp_flag(tcp))
		ADD(tcp_flag(tcp));
	/* the connections were dumped without a lock: restore has none to take off */
	if (gs_criu_args_has(recorded, "--network-lock=skip"))
		ADD("--network-lock=skip");
	/* locked with nftables at the dump, or no iptables here: the restore's lock likewise */
	else if (o->nft_network_lock || gs_criu_args_has(recorded, "--network-lock=nftables"))
		ADD("--network-lock=nftables");
	if (o->libdir)
		ADD("--libdir", o->libdir);
	if (o->leave_stopped)
		ADD("--leave-stopped");
	if (o->lazy)
		ADD("--lazy-pages");
	int rc = add_all(out, o->extra_args, err);
	if (rc)
		gs_argv_free(out);
	return rc;
}

int gs_criu_lazy_args(const struct gs_criu *c, const char *images_dir, const char *work_dir, const char *log_path,
		      int status_fd, struct gs_argv *out, struct gs_err *err)
{
	char fd[16];
	snprintf(fd, sizeof(fd), "%d", status_fd);
	ADD(c->path, "lazy-pages", "--images-dir", images_dir, "--work-dir", work_dir, "--log-file", log_path, "-v4",
	    "--status-fd", fd);
	return 0;
}

/* The task id a CRIU log line starts with after its timestamp: "(00.18)   6034: ..." -> 6034; 0 for none. */
static pid_t log_line_task(const char *line)
{
	const char *p = strchr(line, ')');
	if (!p || line[0] != '(')
		return 0;
	p++;
	while (*p == ' ')
		p++;
	long v = 0;
	const char *d = p;
	while (*d >= '0' && *d <= '9' && v < INT_MAX)
		v = v * 10 + (*d++ - '0');
	return d != p && *d == ':' && v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

bool gs_criu_log_restore_port(const char *line, pid_t *task, int *port)
{
	const char *r = strstr(line, "inet: \tRestore: ");
	const char *p = r ? strstr(r, " port ") : NULL;
	if (!p)
		return false;
	char *end;
	long v = strtol(p + 6, &end, 10);
	if (end == p + 6 || v <= 0 || v > 65535)
		return false;
	*task = log_line_task(line);
	*port = (int)v;
	return true;
}

bool gs_criu_log_bind_in_use(const char *line, pid_t *task)
{
	if (!strstr(line, "Can't bind inet socket") || !strstr(line, "Address already in use"))
		return false;
	*task = log_line_task(line);
	return true;
}

int gs_net_tcp_time_wait(const char *text, int port)
{
	int n = 0;
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		/* "  sl  local_address rem_address   st ...": "   3: 0100007F:CDE3 0100007F:1F90 06 ..." */
		char local[64], remote[64], st[8];
		if (sscanf(line, " %*[0-9]: %63s %63s %7s", local, remote, st) == 3 && !strcmp(st, "06")) {
			const char *colon = strrchr(local, ':');
			char *e;
			long p = colon ? strtol(colon + 1, &e, 16) : -1;
			if (colon && *e == '\0' && p == port)
				n++;
		}
		line = end ? end + 1 : NULL;
	}
	return n;
}
