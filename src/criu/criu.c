/*
 * criu.c - finding criu and running its dump, restore and check (see criu.h).
 *
 * criu reports through its log file, not its exit status: on failure the log's
 * first meaningful error line becomes the one-line gs_err message, with the log's
 * path for the rest.
 */
#define LOG_PREFIX "criu: "
#include "criu/criu.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "criu/run.h"

#define VERSION_TIMEOUT_S 30.0
#define CHECK_TIMEOUT_S 120.0
/* How long dump waits for the process criu killed to be reaped, and restore for a zombie holding its PID. */
#define GONE_TIMEOUT_S 5.0
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

static int search_path(char *out, size_t n)
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
		int w = len ? snprintf(cand, sizeof(cand), "%.*s/criu", (int)len, p) : snprintf(cand, sizeof(cand), "./criu");
		if (w > 0 && (size_t)w < sizeof(cand) && is_executable_file(cand)) {
			snprintf(out, n, "%s", cand);
			return 0;
		}
		if (!colon)
			return -1;
		p = colon + 1;
	}
}

int gs_criu_find(struct gs_criu *c, struct gs_err *err)
{
	memset(c, 0, sizeof(*c));
	const char *env = getenv("GPUSNAP_CRIU");
	if (env && *env) {
		if (!is_executable_file(env))
			return gs_fail(err, GS_E_CRIU, "GPUSNAP_CRIU='%s' is not an executable file; %s", env,
				       GS_CRIU_HOWTO);
		snprintf(c->path, sizeof(c->path), "%s", env);
	} else if (search_path(c->path, sizeof(c->path)) != 0) {
		return gs_fail(err, GS_E_CRIU, "criu not found on PATH; gpusnap needs CRIU >= %d.%d: %s",
			       GS_CRIU_MIN_MAJOR, GS_CRIU_MIN_MINOR, GS_CRIU_HOWTO);
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
	if (ma < GS_CRIU_MIN_MAJOR || (ma == GS_CRIU_MIN_MAJOR && mi < GS_CRIU_MIN_MINOR))
		return gs_fail(err, GS_E_CRIU, "criu '%s' is version %s; gpusnap needs CRIU >= %d.%d: %s", c->path,
			       c->version, GS_CRIU_MIN_MAJOR, GS_CRIU_MIN_MINOR, GS_CRIU_HOWTO);
	pr_debug("using criu %s at %s", c->version, c->path);
	return 0;
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

int gs_criu_check(const struct gs_criu *c, struct gs_err *err)
{
	char *argv[] = { (char *)c->path, "check", NULL };
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int rc = gs_run(argv, CHECK_TIMEOUT_S, 0, res, err);
	if (rc) {
		free(res);
		return gs_err_wrap(err, "criu check");
	}
	if (res->timed_out || !WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0) {
		char cause[256];
		failure_cause(NULL, res, cause, sizeof(cause));
		rc = gs_fail(err, GS_E_CRIU, "criu check failed: %s%s", res->timed_out ? "timed out" : cause,
			     root_hint());
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

int gs_criu_dumpable(pid_t pid, struct gs_err *err)
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
	return 0;
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

int gs_criu_dump(const struct gs_criu *c, pid_t pid, const char *images_dir, const struct gs_criu_dump_opts *o,
		 struct gs_err *err)
{
	static const struct gs_criu_dump_opts defaults;
	if (!o)
		o = &defaults;
	int rc = gs_criu_dumpable(pid, err);
	if (rc)
		return rc;
	rc = ensure_dir(images_dir, err);
	if (rc)
		return rc;
	char dir[PATH_MAX], log_path[PATH_MAX], rec_path[PATH_MAX];
	if (!realpath(images_dir, dir))
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
	rc = gs_criu_dump_args(c, pid, dir, log_path, o, shell_job, &args, err);
	if (rc)
		return rc;
	rc = write_args_record(rec_path, &args, err);
	if (rc) {
		gs_argv_free(&args);
		return rc;
	}
	pr_info("dumping %d into %s%s", (int)pid, dir, shell_job ? " (shell job)" : "");
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res) {
		gs_argv_free(&args);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	/* Images hold the process's memory, which may be secret: owner-only files. */
	rc = gs_run(args.v, o->timeout_s, GS_RUN_PRIVATE_FILES, res, err);
	gs_argv_free(&args);
	if (rc) {
		free(res);
		return gs_err_wrap(err, "criu dump of %d", (int)pid);
	}
	if (res->timed_out) {
		free(res);
		return gs_fail(err, GS_E_TIMEOUT,
			       "criu dump of %d ran past %.0f s and was killed; the process may be left stopped or "
			       "killed (log: %s)",
			       (int)pid, o->timeout_s, log_path);
	}
	if (!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0) {
		char *errors = read_log_errors(log_path);
		char cause[320];
		failure_cause(errors, res, cause, sizeof(cause));
		free(errors);
		free(res);
		return gs_fail(err, GS_E_CRIU, "criu dump of %d failed: %s%s (log: %s)", (int)pid, cause, root_hint(),
			       log_path);
	}
	free(res);
	if (!o->leave_running && !wait_pid_free(pid, GONE_TIMEOUT_S))
		pr_warn("process %d still exists (%s) %.0f s after criu dump; a restore needs its pid", (int)pid,
			is_zombie(pid) ? "a zombie its parent has not reaped" : "running", GONE_TIMEOUT_S);
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

static int pid_in_use_error(pid_t pid, const char *log_path, struct gs_err *err)
{
	char comm[64];
	struct gs_proc_stat st;
	gs_proc_comm(pid, comm, sizeof(comm));
	if (gs_proc_read_stat(pid, &st) != 0)
		return gs_fail(err, GS_E_CRIU,
			       "cannot restore: pid %d, which the image needs, was in use during the restore and is "
			       "free now; try again (log: %s)",
			       (int)pid, log_path);
	if (st.state == 'Z')
		return gs_fail(err, GS_E_CRIU,
			       "cannot restore: pid %d, which the image needs, is held by a zombie '%s' that its "
			       "parent %d has not reaped (log: %s)",
			       (int)pid, comm, (int)st.ppid, log_path);
	return gs_fail(err, GS_E_CRIU,
		       "cannot restore: pid %d, which the image needs, is in use by '%s' (the dumped process, or an "
		       "earlier restore of this image, still running?); stop it first (log: %s)",
		       (int)pid, comm, log_path);
}

int gs_criu_restore(const struct gs_criu *c, const char *images_dir, const struct gs_criu_restore_opts *o,
		    pid_t *restored_pid, struct gs_err *err)
{
	static const struct gs_criu_restore_opts defaults;
	if (!o)
		o = &defaults;
	char dir[PATH_MAX], work[PATH_MAX], inv[PATH_MAX], rec_path[PATH_MAX];
	char log_path[PATH_MAX], pidfile[PATH_MAX];
	if (!realpath(images_dir, dir))
		return gs_fail_errno(err, GS_E_IMAGE, errno, "no CRIU images at '%s'", images_dir);
	int rc;
	if ((rc = path_join(inv, sizeof(inv), dir, "inventory.img", err)))
		return rc;
	if (access(inv, R_OK) != 0)
		return gs_fail(err, GS_E_IMAGE, "'%s' holds no CRIU images (no inventory.img)", dir);
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
	struct gs_argv args = { 0 };
	rc = gs_criu_restore_args(c, dir, log_path, pidfile, o, recorded, &args, err);
	free(recorded);
	if (rc)
		return rc;
	pr_info("restoring from %s", dir);
	struct gs_run_result *res = malloc(sizeof(*res));
	if (!res) {
		gs_argv_free(&args);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	/* A second try only when the PID we need is held by a zombie about to be reaped. */
	for (int attempt = 0;; attempt++) {
		/* No umask here: restored processes would keep criu's if CRIU did not restore theirs. */
		rc = gs_run(args.v, o->timeout_s, 0, res, err);
		if (rc) {
			gs_argv_free(&args);
			free(res);
			return gs_err_wrap(err, "criu restore from '%s'", dir);
		}
		if (res->timed_out) {
			gs_argv_free(&args);
			free(res);
			return gs_fail(err, GS_E_TIMEOUT, "criu restore from '%s' ran past %.0f s and was killed (log: %s)",
				       dir, o->timeout_s, log_path);
		}
		if (WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0)
			break;
		char *errors = read_log_errors(log_path);
		pid_t busy = errors ? gs_criu_log_pid_in_use(errors) : -1;
		if (busy > 0 && attempt == 0 && is_zombie(busy)) {
			pr_info("pid %d is held by a zombie; waiting for it to be reaped", (int)busy);
			if (wait_pid_free(busy, GONE_TIMEOUT_S)) {
				free(errors);
				unlink(pidfile);
				continue;
			}
		}
		gs_argv_free(&args);
		if (busy > 0)
			rc = pid_in_use_error(busy, log_path, err);
		else {
			char cause[320];
			failure_cause(errors, res, cause, sizeof(cause));
			rc = gs_fail(err, GS_E_CRIU, "criu restore from '%s' failed: %s%s (log: %s)", dir, cause,
				     root_hint(), log_path);
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
		return gs_fail(err, GS_E_CRIU, "criu restore from '%s' reported success but left no pid in '%s'", dir,
			       pidfile);
	}
	free(pidtext);
	if (restored_pid)
		*restored_pid = (pid_t)pid;
	pr_info("restored %ld from %s", pid, dir);
	return 0;
}
