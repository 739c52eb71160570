/*
 * criu.c - finding criu and running its dump, restore and check (see criu.h).
 *
 * criu reports through its log file, not its exit status: on failure the log's
 * first meaningful error line becomes the one-line gs_err message, and a copy of
 * the log is kept in the home's logs/ folder (the images folder or restore's work
 * folder it was written to is usually removed after a failure) and named there.
 */
#define LOG_PREFIX "criu: "
#include "criu/criu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/userfaultfd.h>
#include <linux/securebits.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/proc.h"
#include "common/tcp_conns.h"
#include "common/util.h"
#include "criu/run.h"
#include "common/settings.h"

/* `criu --version` prints and exits; it has its own, short, limit. */
#define VERSION_TIMEOUT_S 30.0
/* How long dump waits for the process criu killed to be reaped, and restore for a zombie holding its PID. */
#define GONE_TIMEOUT_S 5.0
/* How long a restore waits for the TIME_WAIT connections holding a port it must bind (Linux: 60 s). */
#define TIME_WAIT_MAX_S 65
/* Lines of a log kept while looking for the cause of a failure. */
#define LOG_ERRORS_MAX 64

/* The last non-empty line of text into out. */
static void last_line(const char *text, char *out, size_t n)
{
	size_t len = strlen(text);
	while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
		len--;
	size_t start = len;
	while (start && text[start - 1] != '\n')
		start--;
	snprintf(out, n, "%.*s", (int)(len - start), text + start);
}

static int is_executable_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The first executable file called name in PATH's folders, as execvp would run it; -1 when none is. */
static int search_path(const char *name, char *out, size_t n)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	const char *p = path;
	for (;;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		char cand[PATH_MAX];
		/* An empty PATH entry means the current directory. */
		int w = len ? snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, p, name)
			    : snprintf(cand, sizeof(cand), "./%s", name);
		if (w > 0 && (size_t)w < sizeof(cand) && is_executable_file(cand)) {
			snprintf(out, n, "%s", cand);
			return 0;
		}
		if (!colon)
			return -1;
		p = colon + 1;
	}
}

/* The limit of one criu run: the caller's, else the criu's (GPUSNAP_CRIU_TIMEOUT), else the default. */
static double run_timeout(const struct gs_criu *c, double asked)
{
	if (asked > 0)
		return asked;
	return c->timeout_s > 0 ? c->timeout_s : GS_CRIU_TIMEOUT_S;
}

/*
 * Runs one criu command (dump, restore, check). GS_FI_CRIU_RUN makes it fail
 * without running, the way a criu that exits 1 with an error line would.
 */
static int run_criu(char *const argv[], double timeout_s, int flags, int keep_fd, struct gs_run_result *res,
		    struct gs_err *err)
{
	if (gs_fault(GS_FI_CRIU_RUN)) {
		memset(res, 0, sizeof(*res));
		res->status = 1 << 8; /* as waitpid reports "exit status 1" */
		snprintf(res->output, sizeof(res->output),
			 "Error (gpusnap fault injection): criu-run: criu failed without running\n");
		return 0;
	}
	return gs_run_fd(argv, timeout_s, flags, keep_fd, res, err);
}

int gs_criu_find(struct gs_criu *c, struct gs_err *err)
{
	memset(c, 0, sizeof(*c));
	/* a bad GPUSNAP_CRIU_TIMEOUT stopped the command at its start (settings.h) */
	c->timeout_s = gs_setting_seconds(GS_S_CRIU_TIMEOUT);
	const char *env = gs_setting_str(GS_S_CRIU);
	if (env) {
		if (!is_executable_file(env))
			return gs_fail(err, GS_E_CRIU, "GPUSNAP_CRIU='%s' is not an executable file; %s", env,
				       GS_CRIU_HOWTO);
		snprintf(c->path, sizeof(c->path), "%s", env);
	} else if (search_path("criu", c->path, sizeof(c->path)) != 0) {
		/* the CRIU `make test` fetched into the source tree this gpusnap was built from, if it is there */
		const char *fetched = GPUSNAP_SOURCE_DIR "/.cache/criu/bin/criu";
		if (is_executable_file(fetched))
			return gs_fail(err, GS_E_CRIU,
				       "criu not found on PATH; gpusnap needs CRIU >= " GS_CRIU_MIN_TEXT
				       ": set GPUSNAP_CRIU=%s (the one `make test` fetched)",
				       fetched);
		return gs_fail(err, GS_E_CRIU, "criu not found on PATH; gpusnap needs CRIU >= " GS_CRIU_MIN_TEXT ": %s",
			       GS_CRIU_HOWTO);
	}
	/* Absolute, so the path still works after a chdir; a wrapper finds its tree itself. */
	char abs[PATH_MAX];
	if (c->path[0] != '/' && realpath(c->path, abs))
		snprintf(c->path, sizeof(c->path), "%s", abs);

	char *argv[] = { c->path, "--version", NULL };
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int rc = gs_run(argv, VERSION_TIMEOUT_S, 0, res, err);
	if (rc) {
		free(res);
		return gs_fail(err, GS_E_CRIU, "cannot run criu '%s': %s; %s", c->path, err ? err->msg : "?",
			       GS_CRIU_HOWTO);
	}
	int ma, mi, pa;
	if (res->timed_out || !WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0 ||
	    gs_criu_parse_version(res->output, &ma, &mi, &pa) != 0) {
		char st[64], line[256];
		last_line(res->output, line, sizeof(line));
		rc = gs_fail(err, GS_E_CRIU, "'%s --version' failed (%s%s%s); %s", c->path,
			     res->timed_out ? "timed out" : gs_run_status_str(res->status, st, sizeof(st)),
			     line[0] ? ": " : "", line, GS_CRIU_HOWTO);
		free(res);
		return rc;
	}
	free(res);
	c->major = ma;
	c->minor = mi;
	c->patch = pa;
	snprintf(c->version, sizeof(c->version), "%d.%d.%d", ma, mi, pa);
	rc = gs_criu_version_check(c, err);
	if (rc)
		return rc;
	pr_debug("using criu %s at %s (time limit %.0f s)", c->version, c->path, c->timeout_s);
	return 0;
}

int gs_criu_set_home(struct gs_criu *c, const char *dir, struct gs_err *err)
{
	char plugins[PATH_MAX], logs[PATH_MAX];
	int w1 = snprintf(plugins, sizeof(plugins), "%s/%s", dir, GS_CRIU_PLUGIN_SUBDIR);
	int w2 = snprintf(logs, sizeof(logs), "%s/%s", dir, GS_CRIU_LOG_SUBDIR);
	if (w1 < 0 || (size_t)w1 >= sizeof(plugins) || w2 < 0 || (size_t)w2 >= sizeof(logs))
		return gs_fail(err, GS_E_FAILURE, "criu's folder path '%s' is too long", dir);
	int rc;
	/* private to this user: root's criu loads every plugin in plugins/, nobody else may write there */
	const char *const folders[] = { dir, plugins, logs };
	for (size_t i = 0; i < GS_ARRAY_SIZE(folders); i++)
		if ((rc = gs_private_dir(folders[i], geteuid(), "criu's", "folder", err)))
			return rc;
	snprintf(c->plugin_dir, sizeof(c->plugin_dir), "%s", plugins);
	snprintf(c->log_dir, sizeof(c->log_dir), "%s", logs);
	return 0;
}

/* Deletes the oldest kept logs beyond GS_CRIU_LOGS_KEPT. */
static void prune_logs(const char *log_dir)
{
	DIR *d = opendir(log_dir);
	if (!d)
		return;
	struct kept { char name[256]; struct timespec mtime; } *all = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 4, ".log") || len >= sizeof(all->name))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 32;
			struct kept *bigger = realloc(all, ncap * sizeof(*all));
			if (!bigger)
				break;
			all = bigger;
			cap = ncap;
		}
		snprintf(all[n].name, sizeof(all[n].name), "%s", e->d_name);
		all[n++].mtime = st.st_mtim;
	}
	/* n is small (about GS_CRIU_LOGS_KEPT): delete the oldest until few enough are left */
	while (n > GS_CRIU_LOGS_KEPT) {
		size_t oldest = 0;
		for (size_t i = 1; i < n; i++)
			if (all[i].mtime.tv_sec < all[oldest].mtime.tv_sec ||
			    (all[i].mtime.tv_sec == all[oldest].mtime.tv_sec && all[i].mtime.tv_nsec < all[oldest].mtime.tv_nsec))
				oldest = i;
		unlinkat(dirfd(d), all[oldest].name, 0);
		all[oldest] = all[--n];
	}
	free(all);
	closedir(d);
}

/*
 * Keeps a copy of the log of a failed run in the home's logs/ folder, named
 * WHAT-TIME-XXXXXX.log ("dump-1234-20260101-120000-a1B2c3.log"), and its path in
 * kept. false (kept "") when there is no log or it cannot be copied: then the
 * error names none.
 */
static bool keep_log(const struct gs_criu *c, const char *log_path, const char *what, char *kept, size_t n)
{
	kept[0] = '\0';
	if (!c->log_dir[0])
		return false;
	int in = open(log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (in < 0)
		return false;
	struct stat st;
	if (fstat(in, &st) || !S_ISREG(st.st_mode)) {
		close(in);
		return false;
	}
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
	int w = snprintf(kept, n, "%s/%s-%s-XXXXXX.log", c->log_dir, what, stamp);
	int out = w > 0 && (size_t)w < n ? mkostemps(kept, 4, O_CLOEXEC) : -1;
	if (out < 0) {
		close(in);
		kept[0] = '\0';
		return false;
	}
	char buf[65536];
	ssize_t r;
	bool ok = true;
	while (ok && (r = read(in, buf, sizeof(buf))) != 0) {
		if (r < 0) {
			ok = errno == EINTR;
			continue;
		}
		for (ssize_t off = 0; ok && off < r;) {
			ssize_t wr = write(out, buf + off, (size_t)(r - off));
			if (wr < 0 && errno != EINTR)
				ok = false;
			else if (wr > 0)
				off += wr;
		}
	}
	close(in);
	if (close(out) || !ok) {
		unlink(kept);
		kept[0] = '\0';
		return false;
	}
	prune_logs(c->log_dir);
	return true;
}

/* " (log: PATH)" for a kept log, "" for none: a message names only a log that exists. */
static const char *log_note(const char *kept, char *buf, size_t n)
{
	if (!kept[0])
		return "";
	snprintf(buf, n, " (log: %s)", kept);
	return buf;
}

/* The "Error (" lines of a log file (the first LOG_ERRORS_MAX), malloc'd; NULL if unreadable. */
static char *read_log_errors(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t cap = 1, len = 0;
	char *text = calloc(1, cap);
	char *line = NULL;
	size_t line_cap = 0;
	ssize_t n;
	int kept = 0;
	while (text && kept < LOG_ERRORS_MAX && (n = getline(&line, &line_cap, f)) > 0) {
		if (!strstr(line, "Error ("))
			continue;
		char *bigger = realloc(text, cap + (size_t)n + 1);
		if (!bigger)
			break;
		text = bigger;
		cap += (size_t)n + 1;
		memcpy(text + len, line, (size_t)n);
		len += (size_t)n;
		if (text[len - 1] != '\n')
			text[len++] = '\n';
		text[len] = '\0';
		kept++;
	}
	free(line);
	fclose(f);
	return text;
}

/* The cause of a failed criu run: from its log, else from its output, else its status. */
static void failure_cause(const char *log_errors, const struct gs_run_result *res, char *out, size_t n)
{
	if (log_errors && gs_criu_log_error(log_errors, out, n) == 0)
		return;
	if (gs_criu_log_error(res->output, out, n) == 0)
		return;
	char line[256];
	last_line(res->output, line, sizeof(line));
	if (line[0]) {
		snprintf(out, n, "%s", line);
		return;
	}
	char st[64];
	snprintf(out, n, "criu ended with %s", gs_run_status_str(res->status, st, sizeof(st)));
}

static const char *root_hint(void)
{
	return geteuid() == 0 ? "" : " (criu needs root or CAP_CHECKPOINT_RESTORE)";
}

/*
 * The capabilities criu gets when this root process executes it (capget(2)
 * and prctl(2): libcap would add a build dependency for the same three
 * reads): without SECBIT_NOROOT, root's exec grants the bounding set plus
 * the inheritable one; with it, only the ambient set survives the exec.
 */
static bool root_child_has_cap(int cap)
{
	int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	if (bits >= 0 && (bits & SECBIT_NOROOT))
		return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1;
	if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1)
		return true;
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0 || cap / 32 >= _LINUX_CAPABILITY_U32S_3)
		return false;
	return (data[cap / 32].inheritable >> (cap % 32)) & 1;
}

int gs_criu_check_rights(const struct gs_criu *c, struct gs_err *err)
{
	if (geteuid() == 0) {
		/* CAP_CHECKPOINT_RESTORE (40) exists from Linux 5.9 on; an older kernel answers "not set" */
		if (root_child_has_cap(CAP_SYS_ADMIN) || root_child_has_cap(40))
			return 0;
		return gs_fail(err, GS_E_PERMISSION, "criu would run without CAP_CHECKPOINT_RESTORE and CAP_SYS_ADMIN, "
			       "one of which it needs (root with limited capabilities, as in a container): give gpusnap "
			       "CAP_CHECKPOINT_RESTORE, e.g. docker run --cap-add CHECKPOINT_RESTORE");
	}
	char *argv[] = { (char *)c->path, "check", "--feature", "mnt_id", NULL };
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	struct gs_err e = { 0 };
	int rc = run_criu(argv, VERSION_TIMEOUT_S, 0, -1, res, &e);
	if (!rc && !res->timed_out && (!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0) &&
	    (strstr(res->output, "capability") || strstr(res->output, "non-root"))) {
		/* criu's first line says what it lacks: its capabilities, or --unprivileged (not passed by gpusnap) */
		char line[256] = "";
		const char *p = res->output;
		while (*p == '\n' || *p == ' ')
			p++;
		size_t n = strcspn(p, "\n");
		while (n && (p[n - 1] == ' ' || p[n - 1] == ':' || p[n - 1] == '\r'))
			n--;
		snprintf(line, sizeof(line), "%.*s", (int)n, p);
		rc = gs_fail(err, GS_E_PERMISSION, "criu refuses to run as user %u ('%s'): run gpusnap as root (sudo)",
			     (unsigned)geteuid(), line);
	} else {
		if (!rc && (!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0))
			pr_debug("'%s check --feature mnt_id' failed; the dump or restore will say why", c->path);
		rc = 0;
	}
	free(res);
	return rc;
}

int gs_criu_check(const struct gs_criu *c, struct gs_err *err)
{
	char *argv[] = { (char *)c->path, "check", NULL };
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	double limit = run_timeout(c, 0);
	int rc = run_criu(argv, limit, 0, -1, res, err);
	if (rc) {
		free(res);
		return gs_err_wrap(err, "criu check");
	}
	if (res->timed_out) {
		rc = gs_fail(err, GS_E_TIMEOUT, "criu check ran past %g s (%s) and was killed", limit, GS_CRIU_TIMEOUT_ENV);
	} else if (!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0) {
		char cause[256];
		failure_cause(NULL, res, cause, sizeof(cause));
		rc = gs_fail(err, GS_E_CRIU, "criu check failed: %s%s", cause, root_hint());
	}
	free(res);
	return rc;
}


static int ensure_dir(const char *dir, struct gs_err *err)
{
	struct stat st;
	if (stat(dir, &st) != 0) {
		if (errno != ENOENT)
			return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot use images folder '%s'", dir);
		if (mkdir(dir, 0700) != 0 && errno != EEXIST)
			return gs_fail_errno(err, errno == EACCES ? GS_E_PERMISSION : GS_E_FAILURE, errno,
					     "cannot create images folder '%s'", dir);
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_FAILURE, "'%s' is not a folder", dir);
	return 0;
}

static int write_args_record(const char *path, const struct gs_argv *a, struct gs_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "cannot write '%s'", path);
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot write '%s'", path);
	}
	for (size_t i = 0; i < a->n; i++)
		fprintf(f, "%s\n", a->v[i]);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad)
		return gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "cannot write '%s'", path);
	return 0;
}

/*
 * Waits until pid has disappeared, reaped by its parent: a zombie still holds its
 * PID, and a restore needs that PID free. An orphan's parent is init, which may
 * reap late (seen: ~2 s in our VMs). false if it still exists after timeout_s.
 */
/*
 * The local port of the socket CRIU could not bind on restore ("Address
 * already in use"): the one its task logged last before the failure; 0 if
 * none is found.
 */
static int log_busy_port(const char *log_path)
{
	FILE *f = fopen(log_path, "r");
	if (!f)
		return 0;
	/* the last port each task logged (tasks interleave; a handful of them restore sockets) */
	struct {
		pid_t task;
		int port;
	} last[64];
	int nlast = 0, busy = 0;
	char *line = NULL;
	size_t cap = 0;
	while (!busy && getline(&line, &cap, f) > 0) {
		pid_t task;
		int port;
		if (gs_criu_log_restore_port(line, &task, &port)) {
			int i = 0;
			while (i < nlast && last[i].task != task)
				i++;
			if (i == nlast && nlast < 64)
				nlast++;
			if (i < nlast) {
				last[i].task = task;
				last[i].port = port;
			}
		} else if (gs_criu_log_bind_in_use(line, &task)) {
			for (int i = 0; i < nlast; i++)
				if (last[i].task == task)
					busy = last[i].port;
		}
	}
	free(line);
	fclose(f);
	return busy;
}

/* TCP sockets of this network namespace in TIME_WAIT on local port `port`. */
static int time_wait_on(int port)
{
	int n = 0;
	const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	char *line = NULL;
	size_t cap = 0;
	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "r");
		if (!f)
			continue;
		while (getline(&line, &cap, f) > 0)
			n += gs_net_tcp_time_wait(line, port);
		fclose(f);
	}
	free(line);
	return n;
}

static bool wait_pid_free(pid_t pid, double timeout_s)
{
	double deadline = gs_now() + timeout_s;
	while (kill(pid, 0) == 0 || errno == EPERM) {
		if (gs_now() > deadline)
			return false;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return true;
}

/* A program CRIU runs by name (iptables-restore) is on PATH. */
static bool on_path(const char *name)
{
	char found[PATH_MAX];
	return search_path(name, found, sizeof(found)) == 0;
}

/*
 * CRIU can lock the network through libnftables here (its build and the
 * kernel): what a host without iptables, nftables only, still offers. Asked
 * once per CRIU binary and command: the dump asks again inside its pause.
 */
static bool nft_lock_works(const struct gs_criu *c)
{
	static char asked_path[PATH_MAX];
	static bool answer;
	if (!strcmp(asked_path, c->path))
		return answer;
	char *argv[] = { (char *)c->path, "check", "--feature", "network_lock_nftables", NULL };
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res)
		return false;
	struct gs_err e = { 0 };
	answer = run_criu(argv, VERSION_TIMEOUT_S, 0, -1, res, &e) == 0 && !res->timed_out && WIFEXITED(res->status) &&
		 WEXITSTATUS(res->status) == 0;
	free(res);
	snprintf(asked_path, sizeof(asked_path), "%s", c->path);
	return answer;
}

/*
 * ", held by process P (comm)" for the other end of c where it is found on
 * this machine, with the command that takes both where P is an ancestor of
 * root (a launcher above the dumped rank: torchrun and its worker).
 */
static void describe_peer(const struct gs_tcp_conn *c, pid_t root, char *out, size_t n)
{
	pid_t peer = gs_tcp_peer_pid(c);
	if (peer <= 0)
		return;
	char comm[64];
	gs_proc_comm(peer, comm, sizeof(comm));
	bool above = false;
	for (pid_t p = gs_proc_ppid(root); p > 1 && !above; p = gs_proc_ppid(p))
		above = p == peer;
	if (above)
		snprintf(out, n, ", held by process %d (%s) above it: gpusnap dump --tree %d takes both ends", (int)peer,
			 comm, (int)peer);
	else
		snprintf(out, n, ", held by process %d (%s)", (int)peer, comm);
}

int gs_criu_tcp_plan(const struct gs_criu *c, pid_t pid, enum gs_criu_tcp asked, struct gs_criu_tcp_plan *plan,
		     struct gs_err *err)
{
	*plan = (struct gs_criu_tcp_plan){ .tcp = asked };
	struct gs_tcp_conns conns;
	int rc = gs_tcp_conns_of_tree(pid, &conns, err);
	if (rc)
		return rc;
	const struct gs_tcp_conn *out = NULL;
	for (size_t i = 0; i < conns.n; i++) {
		if (conns.conn[i].inside) {
			plan->inside++;
		} else {
			plan->outside++;
			out = out ? out : &conns.conn[i];
		}
	}
	bool iptables = on_path("iptables-restore");
	if (asked == GS_CRIU_TCP_CLOSE) {
		/* as asked, for every connection: the dump says what that closes inside the tree */
	} else if (out && asked == GS_CRIU_TCP_ESTABLISHED && !iptables && c && nft_lock_works(c)) {
		plan->nft_network_lock = true; /* no iptables: CRIU locks through libnftables */
	} else if (out && (asked == GS_CRIU_TCP_REFUSE || !iptables)) {
		char comm[64], local[64], remote[64], peer[200] = "";
		gs_proc_comm(out->pid, comm, sizeof(comm));
		gs_tcp_format_addr(out->row.local, local, sizeof(local));
		gs_tcp_format_addr(out->row.remote, remote, sizeof(remote));
		describe_peer(out, pid, peer, sizeof(peer));
		if (asked == GS_CRIU_TCP_REFUSE)
			rc = gs_fail(err, GS_E_CRIU,
				     "process %d (%s) has a TCP connection to outside the dumped tree (%s to %s%s%s): dump "
				     "with --tcp-established (it comes back as it was; CRIU locks the network with "
				     "iptables or nftables meanwhile) or --tcp-close (it comes back closed)",
				     (int)out->pid, comm, local, remote, peer, plan->outside > 1 ? ", and others" : "");
		else
			rc = gs_fail(err, GS_E_CRIU,
				     "process %d (%s) has a TCP connection to outside the dumped tree (%s to %s%s%s), which "
				     "CRIU locks for --tcp-established with iptables-restore, and there is none on PATH "
				     "(nor can this CRIU lock it with nftables here): install iptables, or dump with "
				     "--tcp-close (it comes back closed)",
				     (int)out->pid, comm, local, remote, peer, plan->outside > 1 ? ", and others" : "");
	} else if (!out && plan->inside) {
		plan->tcp = GS_CRIU_TCP_ESTABLISHED;
		plan->skip_network_lock = true;
	}
	gs_tcp_conns_free(&conns);
	return rc;
}

int gs_criu_dumpable(const struct gs_criu *c, pid_t pid, enum gs_criu_tcp tcp, struct gs_criu_tcp_plan *plan_out,
		     struct gs_err *err)
{
	int rc = gs_proc_check(pid, err);
	if (rc)
		return rc;
	struct gs_proc_stat st;
	if (gs_proc_read_stat(pid, &st))
		return gs_fail(err, GS_E_NO_PROCESS, "process %d disappeared", (int)pid);
	/* the kernel shows 0 for a session whose leader is in an ancestor PID namespace */
	if (st.session == 0)
		return gs_fail(err, GS_E_CRIU,
			       "process %d belongs to a session whose leader is outside its PID namespace, which CRIU "
			       "cannot dump; start it in a session of its own (setsid)", (int)pid);
	if ((rc = gs_criu_check_io_uring(pid, err)))
		return rc;
	struct gs_criu_tcp_plan plan;
	return gs_criu_tcp_plan(c, pid, tcp, plan_out ? plan_out : &plan, err);
}

static bool holds_io_uring(pid_t process, void *arg)
{
	(void)arg;
	return gs_proc_has_open_file(process, "anon_inode:[io_uring]");
}

int gs_criu_check_io_uring(pid_t root, struct gs_err *err)
{
	pid_t p;
	int rc = gs_proc_tree_find(root, holds_io_uring, NULL, &p, err);
	if (rc || !p)
		return rc;
	char comm[64];
	gs_proc_comm(p, comm, sizeof(comm));
	return gs_fail(err, GS_E_CRIU,
		       "process %d (%s) holds an io_uring, which CRIU cannot dump (libuv's event loops set one up, "
		       "PyTorch's TCPStore among them): start the job with gpusnap run, whose agent keeps io_uring "
		       "from the app (libuv then uses epoll), or without io_uring (PyTorch: USE_LIBUV=0)",
		       (int)p, comm);
}

static bool is_zombie(pid_t pid)
{
	struct gs_proc_stat st;
	return gs_proc_read_stat(pid, &st) == 0 && st.state == 'Z';
}

static int path_join(char *out, size_t n, const char *dir, const char *name, struct gs_err *err)
{
	int w = snprintf(out, n, "%s/%s", dir, name);
	if (w < 0 || (size_t)w >= n)
		return gs_fail(err, GS_E_FAILURE, "path too long: '%s/%s'", dir, name);
	return 0;
}

/* The plugin folder a run names: the caller's, else the home's; NULL (with err) when neither is set. */
static const char *plugin_dir(const struct gs_criu *c, const char *asked, struct gs_err *err)
{
	if (asked)
		return asked;
	if (c->plugin_dir[0])
		return c->plugin_dir;
	/* without --libdir criu would load the plugins of its default folder (e.g. CRIU's cuda_plugin.so) */
	gs_fail(err, GS_E_FAILURE, "no plugin folder for criu (gs_criu_set_home was not called)");
	return NULL;
}

/*
 * The images folder as criu gets it. gpusnap's own descriptor of a checked
 * folder ("/proc/<our pid>/fd/<n>", image.h) is handed to criu itself and
 * named "/proc/self/fd/<n>" (*keep_fd = n): resolving it would give back a
 * path that a rename above the folder could redirect, and a path through
 * gpusnap's /proc entry would vanish if gpusnap were killed while criu works,
 * which must finish on its own. Any other path is made absolute (*keep_fd -1).
 */
static bool images_dir_path(const char *images_dir, char out[PATH_MAX], int *keep_fd)
{
	*keep_fd = -1;
	char own[48];
	snprintf(own, sizeof(own), "/proc/%d/fd/", (int)getpid());
	const char *num = NULL;
	if (!strncmp(images_dir, own, strlen(own)))
		num = images_dir + strlen(own);
	else if (!strncmp(images_dir, "/proc/self/fd/", 14))
		num = images_dir + 14;
	if (num) {
		char *end;
		long fd = strtol(num, &end, 10);
		if (end != num && !*end && fd >= 3 && fd < INT_MAX && fcntl((int)fd, F_GETFD) >= 0) {
			*keep_fd = (int)fd;
			snprintf(out, PATH_MAX, "/proc/self/fd/%d", (int)fd);
			return true;
		}
	}
	return realpath(images_dir, out) != NULL;
}

int gs_criu_dump(const struct gs_criu *c, pid_t pid, const char *images_dir, const struct gs_criu_dump_opts *o,
		 struct gs_err *err)
{
	static const struct gs_criu_dump_opts defaults;
	if (!o)
		o = &defaults;
	struct gs_criu_dump_opts opts = *o;
	if (!(opts.libdir = plugin_dir(c, o->libdir, err)))
		return GS_E_FAILURE;
	/* the TCP plan decided now, the tree as it is when CRIU comes (the check before anything moved said the same) */
	struct gs_criu_tcp_plan tcp;
	int rc = gs_criu_dumpable(c, pid, o->tcp, &tcp, err);
	if (rc)
		return rc;
	opts.tcp = tcp.tcp;
	opts.skip_network_lock = tcp.skip_network_lock;
	opts.nft_network_lock = tcp.nft_network_lock;
	if (tcp.nft_network_lock)
		pr_info("no iptables-restore on PATH: CRIU locks the %zu TCP connection(s) to outside the tree with "
			"nftables", tcp.outside);
	if (tcp.skip_network_lock)
		pr_info("%zu TCP connection(s) between processes of the tree: dumped as they are (--tcp-established), "
			"without a network lock", tcp.inside);
	if (tcp.tcp == GS_CRIU_TCP_CLOSE && tcp.inside)
		pr_warn("--tcp-close closes the %zu TCP connection(s) between processes of the tree too (a launcher's "
			"store and its workers); without --tcp-* they would come back as they were", tcp.inside);
	rc = ensure_dir(images_dir, err);
	if (rc)
		return rc;
	char dir[PATH_MAX], log_path[PATH_MAX], rec_path[PATH_MAX];
	int images_fd;
	if (!images_dir_path(images_dir, dir, &images_fd))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot resolve images folder '%s'", images_dir);
	if ((rc = path_join(log_path, sizeof(log_path), dir, GS_CRIU_DUMP_LOG, err)) ||
	    (rc = path_join(rec_path, sizeof(rec_path), dir, GS_CRIU_DUMP_ARGS, err)))
		return rc;
	unlink(log_path);

	bool shell_job = o->shell_job == GS_CRIU_SHELL_JOB_ON;
	if (o->shell_job == GS_CRIU_SHELL_JOB_AUTO) {
		struct gs_proc_stat st;
		if (gs_proc_read_stat(pid, &st) == 0)
			shell_job = gs_criu_needs_shell_job(pid, st.pgrp, st.session, st.tty_nr);
	}

	struct gs_argv args = { 0 };
	rc = gs_criu_dump_args(c, pid, dir, log_path, &opts, shell_job, &args, err);
	if (rc)
		return rc;
	rc = write_args_record(rec_path, &args, err);
	if (rc) {
		gs_argv_free(&args);
		return rc;
	}
	pr_info("dumping %d into %s%s", (int)pid, dir, shell_job ? " (shell job)" : "");
	struct gs_run_result *res = malloc(sizeof(*res));
	/* the tree CRIU will kill: a restore needs every one of its PIDs free, the orphans' too */
	pid_t *tree = NULL;
	size_t ntree = 0;
	if (!res || (rc = gs_proc_tree(pid, &tree, &ntree, err))) {
		free(res);
		gs_argv_free(&args);
		return res ? rc : gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	double limit = run_timeout(c, o->timeout_s);
	/* Images hold the process's memory, which may be secret: owner-only files. */
	rc = run_criu(args.v, limit, GS_RUN_PRIVATE_FILES, images_fd, res, err);
	gs_argv_free(&args);
	if (rc) {
		free(res);
		free(tree);
		return gs_err_wrap(err, "criu dump of %d", (int)pid);
	}
	char what[48], kept[PATH_MAX], note[PATH_MAX + 16];
	snprintf(what, sizeof(what), "dump-%d", (int)pid);
	if (res->timed_out) {
		free(res);
		free(tree);
		keep_log(c, log_path, what, kept, sizeof(kept));
		return gs_fail(err, GS_E_TIMEOUT,
			       "criu dump of %d ran past %g s (%s) and was killed; the process may be left stopped or "
			       "killed%s",
			       (int)pid, limit, GS_CRIU_TIMEOUT_ENV, log_note(kept, note, sizeof(note)));
	}
	if (!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0) {
		char *errors = read_log_errors(log_path);
		char cause[GS_ERR_MSG_MAX - 128];
		failure_cause(errors, res, cause, sizeof(cause));
		free(errors);
		free(res);
		free(tree);
		keep_log(c, log_path, what, kept, sizeof(kept));
		return gs_fail(err, GS_E_CRIU, "criu dump of %d failed: %s%s%s", (int)pid, cause, root_hint(),
			       log_note(kept, note, sizeof(note)));
	}
	free(res);
	/*
	 * Every task of the tree is gone once reaped: the root by its parent,
	 * the others, orphaned when the root died, by init, which may reap late
	 * (seconds on the GPU machine's VM init): a restore right after would
	 * find their PIDs taken.
	 */
	double deadline = gs_now() + GONE_TIMEOUT_S;
	for (size_t i = 0; !o->leave_running && i < ntree; i++) {
		double left = deadline - gs_now();
		if (!wait_pid_free(tree[i], left > 0 ? left : 0))
			pr_warn("process %d still exists (%s) %.0f s after criu dump; a restore needs its pid",
				(int)tree[i], is_zombie(tree[i]) ? "a zombie its parent has not reaped" : "running",
				GONE_TIMEOUT_S);
	}
	free(tree);
	return 0;
}

/* A small text file, malloc'd; NULL if absent or unreadable. */
static char *read_small_file(const char *path, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(max + 1);
	size_t len = 0;
	ssize_t r;
	while (buf && len < max && (r = read(fd, buf + len, max - len)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			free(buf);
			buf = NULL;
			break;
		}
		len += (size_t)r;
	}
	close(fd);
	if (buf)
		buf[len] = '\0';
	return buf;
}

static int pid_in_use_error(pid_t pid, const char *note, struct gs_err *err)
{
	char comm[64];
	struct gs_proc_stat st;
	gs_proc_comm(pid, comm, sizeof(comm));
	if (gs_proc_read_stat(pid, &st) != 0)
		return gs_fail(err, GS_E_CRIU,
			       "cannot restore: pid %d, which the image needs, was in use during the restore and is "
			       "free now; try again%s",
			       (int)pid, note);
	if (st.state == 'Z')
		return gs_fail(err, GS_E_CRIU,
			       "cannot restore: pid %d, which the image needs, is held by a zombie '%s' that its "
			       "parent %d has not reaped%s",
			       (int)pid, comm, (int)st.ppid, note);
	return gs_fail(err, GS_E_CRIU,
		       "cannot restore: pid %d, which the image needs, is in use by '%s' (the dumped process, or an "
		       "earlier restore of this image, still running?); stop it first%s",
		       (int)pid, comm, note);
}

/* The image PID of the restore in flight, for gs_criu_interrupt; 0 when none. */
static volatile sig_atomic_t restoring_pid;
/* gs_criu_interrupt was called: a restore waiting to try again gives up. */
static volatile sig_atomic_t interrupted;

void gs_criu_interrupt(void)
{
	interrupted = 1;
	pid_t child = gs_run_child();
	if (child > 0) {
		kill(-child, SIGKILL);
		kill(child, SIGKILL);
	}
	pid_t p = (pid_t)restoring_pid;
	if (p > 0)
		kill(p, SIGKILL);
}

unsigned long long gs_criu_boot_ticks(void)
{
	struct timespec ts;
	long hz = sysconf(_SC_CLK_TCK);
	if (clock_gettime(CLOCK_BOOTTIME, &ts) || hz <= 0)
		return 0;
	return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
	       (unsigned long long)ts.tv_nsec * (unsigned long long)hz / 1000000000ULL;
}

bool gs_criu_kill_leftover(pid_t pid, unsigned long long started_ticks)
{
	struct gs_proc_stat st;
	if (pid <= 0 || gs_proc_read_stat(pid, &st) || st.state == 'Z' || st.start_time < started_ticks)
		return false;
	if (kill(pid, SIGKILL))
		return false;
	pr_info("killed %d, which the failed restore left behind", (int)pid);
	/* its parent is init once criu is gone, which may reap it late: a zombie runs nothing */
	for (double deadline = gs_now() + GONE_TIMEOUT_S; gs_now() < deadline;) {
		if (gs_proc_read_stat(pid, &st) || st.state == 'Z')
			break;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return true;
}

/* True if nothing but a zombie holds pid: then a task found there later is the restore's. */
static bool pid_unused(pid_t pid)
{
	struct gs_proc_stat st;
	return gs_proc_read_stat(pid, &st) != 0 || st.state == 'Z';
}

/*
 * " from 'DIR'" for messages, or "" where DIR is a descriptor's path
 * (/proc/self/fd/N, as gpusnap restore passes it): that names nothing to the
 * user, who gave the image's path to the command.
 */
static const char *from_dir(const char *dir, char *buf, size_t n)
{
	if (strncmp(dir, "/proc/self/fd/", 14) == 0)
		return "";
	snprintf(buf, n, " from '%s'", dir);
	return buf;
}

/* After a failed restore: the task it left at the image's PID goes too. */
static void restore_failed_cleanup(const struct gs_criu_restore_opts *o, unsigned long long started)
{
	restoring_pid = 0;
	if (o->image_pid > 0)
		gs_criu_kill_leftover(o->image_pid, started);
}

/* ---- lazy restore: the `criu lazy-pages` daemon ---- */

int gs_criu_uffd_usable(char *why, size_t n)
{
	if (gs_fault(GS_FI_CRIU_UFFD)) {
		snprintf(why, n, "this kernel has no userfaultfd (injected)");
		return GS_E_CRIU;
	}
	/*
	 * What `criu check --feature uffd-noncoop` asks, asked here: 50-70 ms
	 * less per restore than running criu for it. Kernel faults included
	 * (no UFFD_USER_MODE_ONLY), as CRIU's restorer needs.
	 */
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && (errno == EPERM || errno == EACCES)) {
		snprintf(why, n, "userfaultfd is for root only here (vm.unprivileged_userfaultfd is not 1)");
		return GS_E_PERMISSION;
	}
	if (fd < 0) {
		snprintf(why, n, "this kernel has no userfaultfd (%s)", strerror(errno));
		return GS_E_CRIU;
	}
	struct uffdio_api api = { .api = UFFD_API, .features = 0 };
	int rc = ioctl(fd, UFFDIO_API, &api);
	int e = errno;
	close(fd);
	const uint64_t noncoop = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE |
				 UFFD_FEATURE_EVENT_UNMAP;
	if (rc) {
		snprintf(why, n, "this kernel's userfaultfd refuses its API handshake (%s)", strerror(e));
		return GS_E_CRIU;
	}
	if ((api.features & noncoop) != noncoop) {
		snprintf(why, n, "this kernel's userfaultfd lacks the fork, remap, remove and unmap events that CRIU's lazy "
			 "restore needs");
		return GS_E_CRIU;
	}
	return 0;
}

/* Sets the daemon's outcome from its wait status (rc 0 only for exit status 0). */
static void lazy_ended(struct gs_criu_lazy *l, const struct gs_run_result *res)
{
	l->ended = gs_now();
	if (!res->timed_out && WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0) {
		l->rc = 0;
		return;
	}
	char *errors = read_log_errors(l->log_path);
	char cause[GS_ERR_MSG_MAX / 2] = "", st[96], kept[PATH_MAX] = "", note[PATH_MAX + 16];
	if (errors && gs_criu_log_error(errors, cause, sizeof(cause)) == 0)
		;
	else if (gs_criu_log_error(res->output, cause, sizeof(cause)) != 0)
		last_line(res->output, cause, sizeof(cause));
	free(errors);
	struct gs_criu kc = { 0 };
	snprintf(kc.log_dir, sizeof(kc.log_dir), "%s", l->log_dir);
	char what[48];
	snprintf(what, sizeof(what), "lazy-pages-%d", (int)l->served);
	keep_log(&kc, l->log_path, what, kept, sizeof(kept));
	l->rc = res->timed_out ? GS_E_TIMEOUT : GS_E_CRIU;
	if (res->timed_out)
		snprintf(st, sizeof(st), "ran past its time limit (%s) and was killed", GS_CRIU_TIMEOUT_ENV);
	else if (WIFSIGNALED(res->status))
		snprintf(st, sizeof(st), "was killed by signal %d", WTERMSIG(res->status));
	else
		snprintf(st, sizeof(st), "ended with %s", gs_run_status_str(res->status, note, sizeof(note)));
	const char *shown = log_note(kept, note, sizeof(note));
	snprintf(l->why, sizeof(l->why), "%s%s%s%s", st, cause[0] ? ": " : "", cause, shown);
	snprintf(l->msg, sizeof(l->msg), "the lazy-pages daemon (criu lazy-pages, pid %d) %s before every CPU page of "
		 "process %d was in%s%s%s", (int)l->proc.pid, st, (int)l->served, cause[0] ? " (" : "", cause,
		 cause[0] ? ")" : "");
	snprintf(l->msg + strlen(l->msg), sizeof(l->msg) - strlen(l->msg), "%s", shown);
}

int gs_criu_lazy_check(struct gs_criu_lazy *l, bool wait, struct gs_err *err)
{
	if (!l->ended && l->proc.pid > 0) {
		struct gs_run_result *res = malloc(sizeof(*res));
		if (!res)
			return gs_fail(err, GS_E_FAILURE, "out of memory");
		pid_t pid = l->proc.pid;
		struct gs_err e = { 0 };
		int rc = gs_run_wait(&l->proc, wait ? l->timeout_s : -1, res, &e);
		if (rc == GS_RUN_STILL) {
			free(res);
			return 0;
		}
		if (rc) {
			l->ended = gs_now();
			l->rc = rc;
			snprintf(l->msg, sizeof(l->msg), "%s", e.msg);
			snprintf(l->why, sizeof(l->why), "%s", e.msg);
		} else {
			l->proc.pid = pid; /* named in the message */
			lazy_ended(l, res);
			l->proc.pid = 0;
		}
		free(res);
	}
	if (!l->ended || !l->rc)
		return 0;
	return gs_fail(err, l->rc, "%s", l->msg);
}

void gs_criu_lazy_stop(struct gs_criu_lazy *l)
{
	if (l->proc.pid <= 0)
		return;
	gs_run_kill(&l->proc);
	struct gs_run_result *res = malloc(sizeof(*res));
	struct gs_run_result local;
	struct gs_err e = { 0 };
	gs_run_wait(&l->proc, 0, res ? res : &local, &e);
	free(res);
	if (!l->ended) {
		l->ended = gs_now();
		l->rc = GS_E_CRIU;
		snprintf(l->msg, sizeof(l->msg), "the lazy-pages daemon was stopped");
	}
}

/*
 * Starts the daemon of a lazy restore and waits until it listens on its
 * socket (it says so on its status descriptor): criu restore connects to it
 * at once and fails if nobody listens. GS_E_CRIU naming its cause if it ends
 * first; GS_E_TIMEOUT past limit.
 */
static int lazy_start(const struct gs_criu *c, const char *dir, int images_fd, const char *work, double limit,
		      pid_t served, struct gs_criu_lazy *l, struct gs_err *err)
{
	memset(l, 0, sizeof(*l));
	l->timeout_s = limit;
	l->served = served;
	snprintf(l->log_dir, sizeof(l->log_dir), "%s", c->log_dir);
	int rc = path_join(l->log_path, sizeof(l->log_path), work, GS_CRIU_LAZY_LOG, err);
	if (rc)
		return rc;
	unlink(l->log_path);
	int st[2];
	if (pipe2(st, O_CLOEXEC))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot create a pipe for criu lazy-pages");
	struct gs_argv args = { 0 };
	if ((rc = gs_criu_lazy_args(c, dir, work, l->log_path, st[1], &args, err))) {
		close(st[0]);
		close(st[1]);
		return rc;
	}
	int keep[2] = { images_fd, st[1] };
	l->started = gs_now();
	rc = gs_run_spawn(args.v, GS_RUN_PRIVATE_FILES, images_fd >= 0 ? keep : keep + 1, images_fd >= 0 ? 2 : 1,
			  &l->proc, err);
	gs_argv_free(&args);
	close(st[1]);
	if (rc) {
		close(st[0]);
		return gs_err_wrap(err, "criu lazy-pages");
	}
	char byte = 1;
	ssize_t r = -1;
	double deadline = gs_now() + limit;
	for (;;) {
		struct pollfd pfd = { .fd = st[0], .events = POLLIN };
		double left = deadline - gs_now();
		int pr = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
		if (pr < 0 && errno == EINTR && !interrupted)
			continue;
		if (pr > 0)
			while ((r = read(st[0], &byte, 1)) < 0 && errno == EINTR)
				;
		break;
	}
	close(st[0]);
	if (r == 1 && byte == 0)
		return 0;
	if (r < 0) { /* no word in time, or interrupted */
		gs_criu_lazy_stop(l);
		return interrupted ? gs_fail(err, GS_E_FAILURE, "criu lazy-pages was interrupted")
				   : gs_fail(err, GS_E_TIMEOUT, "criu lazy-pages did not get ready within %g s (%s)", limit,
					     GS_CRIU_TIMEOUT_ENV);
	}
	/* it closed its status descriptor without a word: it failed, and says why in its log */
	gs_criu_lazy_check(l, true, err);
	int code = l->rc ? l->rc : GS_E_CRIU;
	return gs_fail(err, code, "criu lazy-pages failed to start: %s", l->why[0] ? l->why : "it ended without a word");
}

int gs_criu_restore(const struct gs_criu *c, const char *images_dir, const struct gs_criu_restore_opts *o,
		    pid_t *restored_pid, struct gs_err *err)
{
	static const struct gs_criu_restore_opts defaults;
	if (!o)
		o = &defaults;
	struct gs_criu_restore_opts opts = *o;
	if (!(opts.libdir = plugin_dir(c, o->libdir, err)))
		return GS_E_FAILURE;
	char dir[PATH_MAX], work[PATH_MAX], inv[PATH_MAX], rec_path[PATH_MAX];
	char log_path[PATH_MAX], pidfile[PATH_MAX], shown[PATH_MAX + 16];
	int images_fd;
	if (!images_dir_path(images_dir, dir, &images_fd))
		return gs_fail_errno(err, GS_E_IMAGE, errno, "no CRIU images at '%s'", images_dir);
	int rc;
	if ((rc = path_join(inv, sizeof(inv), dir, "inventory.img", err)))
		return rc;
	if (access(inv, R_OK) != 0)
		return gs_fail(err, GS_E_IMAGE, "'%s' holds no CRIU images (no inventory.img)", dir);
	const char *from = from_dir(dir, shown, sizeof(shown));
	if (o->lazy && !o->work_dir)
		return gs_fail(err, GS_E_FAILURE, "a lazy restore needs a work folder of its own");
	const char *work_dir = o->work_dir ? o->work_dir : dir;
	if (!realpath(work_dir, work))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot use work folder '%s'", work_dir);
	if ((rc = path_join(log_path, sizeof(log_path), work, GS_CRIU_RESTORE_LOG, err)) ||
	    (rc = path_join(pidfile, sizeof(pidfile), work, GS_CRIU_RESTORE_PIDFILE, err)) ||
	    (rc = path_join(rec_path, sizeof(rec_path), dir, GS_CRIU_DUMP_ARGS, err)))
		return rc;
	unlink(log_path);
	unlink(pidfile);

	char *recorded = read_small_file(rec_path, 64 * 1024);
	/* connections that come back established need CRIU's lock: nftables where iptables is not on PATH */
	if ((opts.tcp == GS_CRIU_TCP_ESTABLISHED || gs_criu_args_has(recorded, "--tcp-established")) &&
	    !gs_criu_args_has(recorded, "--network-lock=skip") && !gs_criu_args_has(recorded, "--network-lock=nftables") &&
	    !on_path("iptables-restore") && nft_lock_works(c))
		opts.nft_network_lock = true;
	struct gs_argv args = { 0 };
	rc = gs_criu_restore_args(c, dir, log_path, pidfile, &opts, recorded, &args, err);
	free(recorded);
	if (rc)
		return rc;
	pr_info("restoring from %s", dir);
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res) {
		gs_argv_free(&args);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	double limit = run_timeout(c, o->timeout_s);
	char what[48], kept[PATH_MAX], note[PATH_MAX + 16];
	snprintf(what, sizeof(what), "restore-%d", o->image_pid > 0 ? (int)o->image_pid : 0);
	/* Tasks created from here on are this restore's: a failure kills the one at the image's PID. */
	unsigned long long started = gs_criu_boot_ticks();
	/* A signal handler kills that PID blindly: only where nothing else holds it now. */
	if (o->image_pid > 0 && pid_unused(o->image_pid))
		restoring_pid = o->image_pid;
	/*
	 * Another try only when a PID we need is held by a zombie about to be
	 * reaped, or a port by TIME_WAIT connections about to expire; each PID
	 * and the port once (a zombie may hold a PID first and TIME_WAIT the
	 * port next).
	 */
	/* each PID once: the tasks a failed try leaves are zombies under init, as the dumped tree's were */
	bool waited_port = false;
	pid_t waited_pids[64];
	size_t nwaited = 0;
	for (;;) {
		/*
		 * No umask here: restored processes would keep criu's if CRIU did not
		 * restore theirs. gpusnap's process group: a shell job restored into a
		 * group of criu's own would be orphaned, stopped, when criu exits.
		 */
		if (o->lazy && (rc = lazy_start(c, dir, images_fd, work, limit, o->image_pid, o->lazy, err))) {
			o->lazy->start_failed = true;
			restore_failed_cleanup(o, started);
			gs_argv_free(&args);
			free(res);
			return rc;
		}
		if (o->lazy && o->before_restore && (rc = o->before_restore(o->before_ctx, err))) {
			gs_criu_lazy_stop(o->lazy);
			restore_failed_cleanup(o, started);
			gs_argv_free(&args);
			free(res);
			return rc;
		}
		rc = run_criu(args.v, limit, GS_RUN_SHARE_GROUP, images_fd, res, err);
		if (o->lazy && (rc || res->timed_out || !WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0))
			gs_criu_lazy_stop(o->lazy); /* a try that failed: the next starts its own */
		if (rc) {
			restore_failed_cleanup(o, started);
			gs_argv_free(&args);
			free(res);
			return gs_err_wrap(err, "criu restore%s", from);
		}
		if (res->timed_out) {
			restore_failed_cleanup(o, started);
			gs_argv_free(&args);
			free(res);
			keep_log(c, log_path, what, kept, sizeof(kept));
			return gs_fail(err, GS_E_TIMEOUT, "criu restore%s ran past %g s (%s) and was killed%s", from,
				       limit, GS_CRIU_TIMEOUT_ENV, log_note(kept, note, sizeof(note)));
		}
		if (WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0)
			break;
		char *errors = read_log_errors(log_path);
		pid_t busy = errors ? gs_criu_log_pid_in_use(errors) : -1;
		/*
		 * A port the dumped process listened on, still held by its own closed
		 * connections in TIME_WAIT (60 s on Linux): a listener that did not set
		 * SO_REUSEADDR (NCCL's bootstrap, PyTorch's store) cannot be bound
		 * again until they expire, however CRIU sets its options. Wait once.
		 */
		int port = errors && strstr(errors, "Address already in use") ? log_busy_port(log_path) : 0;
		int waiting = port > 0 && !waited_port ? time_wait_on(port) : 0;
		if (waiting > 0) {
			waited_port = true;
			pr_warn("port %d of the restored process is held by %d connection%s in TIME_WAIT that it closed when "
				"it was dumped; restoring again once they expire (up to %d s)",
				port, waiting, waiting == 1 ? "" : "s", TIME_WAIT_MAX_S);
			double deadline = gs_now() + TIME_WAIT_MAX_S;
			while (time_wait_on(port) > 0 && gs_now() < deadline && !interrupted)
				sleep(1);
			if (!interrupted && time_wait_on(port) == 0) {
				free(errors);
				unlink(pidfile);
				continue;
			}
		}
		bool waited_pid = false;
		for (size_t i = 0; i < nwaited; i++)
			waited_pid |= waited_pids[i] == busy;
		if (busy > 0 && !waited_pid && nwaited < sizeof(waited_pids) / sizeof(waited_pids[0]) && is_zombie(busy)) {
			waited_pids[nwaited++] = busy;
			pr_info("pid %d is held by a zombie; waiting for it to be reaped", (int)busy);
			if (wait_pid_free(busy, GONE_TIMEOUT_S)) {
				free(errors);
				unlink(pidfile);
				continue;
			}
		}
		restore_failed_cleanup(o, started);
		gs_argv_free(&args);
		keep_log(c, log_path, what, kept, sizeof(kept));
		log_note(kept, note, sizeof(note));
		if (busy > 0)
			rc = pid_in_use_error(busy, kept[0] ? note : "", err);
		else {
			char cause[GS_ERR_MSG_MAX - 128];
			failure_cause(errors, res, cause, sizeof(cause));
			rc = gs_fail(err, GS_E_CRIU, "criu restore%s failed: %s%s%s", from, cause, root_hint(),
				     kept[0] ? note : "");
		}
		free(errors);
		free(res);
		return rc;
	}
	gs_argv_free(&args);
	free(res);
	char *pidtext = read_small_file(pidfile, 64);
	char *end = NULL;
	long pid = pidtext ? strtol(pidtext, &end, 10) : 0;
	if (!pidtext || end == pidtext || pid <= 0 || pid > INT_MAX || (*end && *end != '\n')) {
		free(pidtext);
		if (o->lazy)
			gs_criu_lazy_stop(o->lazy);
		restore_failed_cleanup(o, started);
		keep_log(c, log_path, what, kept, sizeof(kept));
		return gs_fail(err, GS_E_CRIU, "criu restore%s reported success but wrote no pid%s", from,
			       log_note(kept, note, sizeof(note)));
	}
	free(pidtext);
	/* from here the caller holds the restored process (and kills it on its own failures) */
	restoring_pid = 0;
	if (restored_pid)
		*restored_pid = (pid_t)pid;
	pr_info("restored %ld from %s", pid, dir);
	return 0;
}
