/*
 * op_lock.c - the per-process operation lock and the record of an operation
 * at work (see op_lock.h).
 */
#define LOG_PREFIX "op-lock: "
#include "cli/op_lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "core/control_socket.h"

/* A record is a few lines; the longest are two sentences and a path. */
#define RECORD_MAX (2 * GS_ERR_MSG_MAX + PATH_MAX + 512)
/* Tries to open and lock a lock file that a finishing holder is unlinking at the same moment. */
#define LOCK_ATTEMPTS 10

struct op_key {
	pid_t pid;
	unsigned long long start;
	int fd; /* the locked file, -1 when not held */
	char lock_path[PATH_MAX];
	char rec_path[PATH_MAX];
};

struct cli_op {
	char action[16];
	char run_dir[PATH_MAX - 64];
	struct op_key keys[2]; /* [0] what was locked at begin; [1] restore: the restored process */
	int nkeys;
	double since;
	unsigned long long my_start;
	struct cli_op_record left; /* a killed operation's record found at begin */
	bool has_left, leaving;
	struct cli_op_record now; /* what this operation records */
};

static void key_paths(const char *run_dir, struct op_key *k)
{
	snprintf(k->lock_path, sizeof(k->lock_path), "%s/op-%d-%llu.lock", run_dir, (int)k->pid, k->start);
	snprintf(k->rec_path, sizeof(k->rec_path), "%s/op-%d-%llu.rec", run_dir, (int)k->pid, k->start);
}

/* Sentences and paths go one to a line: a line break inside one would end it early. */
static void put_line(FILE *f, const char *key, const char *value)
{
	if (!value || !*value)
		return;
	fprintf(f, "%s ", key);
	for (const char *p = value; *p; p++)
		fputc(*p == '\n' ? ' ' : *p, f);
	fputc('\n', f);
}

static int write_record(const char *path, const struct cli_op_record *r, unsigned long long holder_start)
{
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fprintf(f, "action %s\nholder %d %llu\nsince %.3f\nstep %s\n", r->action, (int)r->holder, holder_start, r->since,
		r->step);
	if (r->restored_start)
		fprintf(f, "restored %llu\n", r->restored_start);
	put_line(f, "image", r->image);
	put_line(f, "alive", r->if_alive);
	put_line(f, "gone", r->if_gone);
	bool bad = ferror(f) != 0;
	if (fclose(f) || bad || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* 0 and *r filled from the record at path; -1 if there is none (or it cannot be read). */
static int read_record(const char *path, struct cli_op_record *r)
{
	char *text = malloc(RECORD_MAX);
	if (!text)
		return -1;
	memset(r, 0, sizeof(*r));
	if (gs_read_small_file(path, text, RECORD_MAX) <= 0) {
		free(text);
		return -1;
	}
	unsigned long long holder_start = 0;
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *value = strchr(line, ' ');
		if (!value)
			continue;
		*value++ = '\0';
		if (!strcmp(line, "action"))
			snprintf(r->action, sizeof(r->action), "%s", value);
		else if (!strcmp(line, "step"))
			snprintf(r->step, sizeof(r->step), "%s", value);
		else if (!strcmp(line, "holder")) {
			int pid = 0;
			if (sscanf(value, "%d %llu", &pid, &holder_start) == 2)
				r->holder = pid;
		} else if (!strcmp(line, "since"))
			r->since = atof(value);
		else if (!strcmp(line, "restored"))
			r->restored_start = strtoull(value, NULL, 10);
		else if (!strcmp(line, "image"))
			snprintf(r->image, sizeof(r->image), "%s", value);
		else if (!strcmp(line, "alive"))
			snprintf(r->if_alive, sizeof(r->if_alive), "%s", value);
		else if (!strcmp(line, "gone"))
			snprintf(r->if_gone, sizeof(r->if_gone), "%s", value);
	}
	free(text);
	/* a gpusnap that ended is no holder, a zombie one too (its lock went with its descriptors) */
	r->holder_alive = r->holder > 0 && holder_start && gs_proc_start_time(r->holder) == holder_start &&
			  gs_proc_alive(r->holder);
	return r->action[0] ? 0 : -1;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_op_describe(pid_t pid, const struct cli_op_record *rec, bool process_alive, char *out, size_t n)
{
	if (rec->holder_alive) {
		double t = wall_now() - rec->since;
		snprintf(out, n, "a gpusnap %s (pid %d) is working on process %d (step %s, for %.0f s)", rec->action,
			 (int)rec->holder, (int)pid, rec->step, t > 0 ? t : 0);
		return;
	}
	snprintf(out, n, "%s", process_alive ? rec->if_alive : rec->if_gone);
}

/* Takes k's lock without waiting: 0, 1 when another holds it, -1 on an error (errno). */
static int lock_key(struct op_key *k)
{
	for (int attempt = 0; attempt < LOCK_ATTEMPTS; attempt++) {
		int fd = open(k->lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -1;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			int e = errno;
			close(fd);
			if (e == EWOULDBLOCK)
				return 1;
			errno = e;
			return -1;
		}
		/* the holder before us unlinks the file as it ends: a lock on an unlinked file keeps nobody out */
		struct stat held, named;
		if (fstat(fd, &held) == 0 && stat(k->lock_path, &named) == 0 && held.st_ino == named.st_ino &&
		    held.st_dev == named.st_dev) {
			k->fd = fd;
			return 0;
		}
		close(fd);
	}
	errno = EAGAIN;
	return -1;
}

static void unlock_key(struct op_key *k)
{
	if (k->fd < 0)
		return;
	unlink(k->lock_path);
	close(k->fd);
	k->fd = -1;
}

static int busy_error(pid_t pid, const struct op_key *k, const char *action, struct gs_err *err)
{
	struct cli_op_record r;
	char what[GS_ERR_MSG_MAX];
	if (read_record(k->rec_path, &r) == 0 && r.holder_alive)
		cli_op_describe(pid, &r, true, what, sizeof(what));
	else
		snprintf(what, sizeof(what), "another gpusnap is working on process %d", (int)pid);
	return gs_fail(err, GS_E_STATE, "cannot %s process %d now: %s; try again when it has finished", action, (int)pid,
		       what);
}

/*
 * Whether a killed operation's record (its holder dead) still has something to
 * tell about a process that is gone: a sentence for that case, and the image
 * it names, where it names one, still there.
 */
static bool tells_something(const struct cli_op_record *r)
{
	struct stat st;
	return r->if_gone[0] && (!r->image[0] || lstat(r->image, &st) == 0);
}

/*
 * The key an entry of the run directory belongs to: "op-PID-START" followed
 * by ".lock", ".rec" or ".rec.tmp-WRITER"; false for any other name.
 */
static bool parse_key_name(const char *name, pid_t *pid, unsigned long long *start)
{
	int p = 0, used = 0;
	unsigned long long st = 0;
	if (sscanf(name, "op-%d-%llu%n", &p, &st, &used) != 2 || p <= 0 || name[3] < '1' || name[3] > '9')
		return false;
	const char *rest = name + used;
	if (strcmp(rest, ".lock") && strcmp(rest, ".rec") && strncmp(rest, ".rec.tmp-", 9))
		return false;
	*pid = p;
	*start = st;
	return true;
}

/*
 * Removes what killed operations left for processes that are gone: the lock
 * file, half-written records, and the record once it has nothing left to tell
 * (tells_something). Never touches the key of a live process (its start time
 * names it: a reused PID is another key), a key whose lock is held (an
 * operation at work, this one's included), a record whose holder still runs,
 * or anything but plain files (lock_key opens with O_NOFOLLOW; unlink removes
 * a link, never what it points to). Each key is handled under its own lock,
 * so no operation that begins on it meanwhile loses what it reads.
 */
static void sweep_gone(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		pid_t pid;
		unsigned long long start;
		if (!parse_key_name(de->d_name, &pid, &start))
			continue;
		if (start && gs_proc_start_time(pid) == start)
			continue; /* the process runs: its records are its own */
		struct op_key k = { .pid = pid, .start = start, .fd = -1 };
		key_paths(run_dir, &k);
		if (lock_key(&k))
			continue; /* an operation at work holds it, or it cannot be opened: not ours to judge */
		struct stat st;
		struct cli_op_record r;
		if (lstat(k.rec_path, &st) == 0 && S_ISREG(st.st_mode) && read_record(k.rec_path, &r) == 0 &&
		    !r.holder_alive && !tells_something(&r))
			unlink(k.rec_path);
		/* under the key's lock nobody writes its record: a temporary one is a killed writer's */
		char prefix[PATH_MAX];
		int plen = snprintf(prefix, sizeof(prefix), "op-%d-%llu.rec.tmp-", (int)pid, start);
		if (!strncmp(de->d_name, prefix, (size_t)plen) && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			unlinkat(dirfd(d), de->d_name, 0);
		unlock_key(&k); /* removes the lock file, as every operation does at its end */
	}
	closedir(d);
}

int cli_op_begin(pid_t pid, bool image_pid, const char *action, struct cli_op **out, struct cli_op_record *left,
		 struct gs_err *err)
{
	*out = NULL;
	if (left)
		memset(left, 0, sizeof(*left));
	struct cli_op *op = calloc(1, sizeof(*op));
	if (!op)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int rc = gs_ctl_run_dir(op->run_dir, sizeof(op->run_dir), err);
	if (rc) {
		free(op);
		return rc;
	}
	snprintf(op->action, sizeof(op->action), "%s", action);
	struct op_key *k = &op->keys[0];
	k->pid = pid;
	k->fd = -1;
	k->start = image_pid ? 0 : gs_proc_start_time(pid);
	if (!image_pid && !k->start) {
		free(op);
		return gs_fail(err, GS_E_NO_PROCESS, "no such process: %d", (int)pid);
	}
	key_paths(op->run_dir, k);
	int r = lock_key(k);
	if (r) {
		rc = r > 0 ? busy_error(pid, k, action, err)
			   : gs_fail_errno(err, GS_E_FAILURE, errno, "cannot lock '%s'", k->lock_path);
		free(op);
		return rc;
	}
	op->nkeys = 1;
	/* leftovers of operations on processes that are gone go now (this key is held: it stays) */
	sweep_gone(op->run_dir);
	op->since = wall_now();
	op->my_start = gs_proc_start_time(getpid());
	if (read_record(k->rec_path, &op->left) == 0 && !op->left.holder_alive) {
		op->has_left = true;
		if (left)
			*left = op->left;
	}
	/*
	 * The first record names this operation at once, for anyone who finds the
	 * process locked; until its first step it keeps what a killed one left,
	 * which still holds should this gpusnap die in its checks too.
	 */
	struct cli_op_record *now = &op->now;
	if (op->has_left)
		*now = op->left;
	snprintf(now->action, sizeof(now->action), "%s", action);
	snprintf(now->step, sizeof(now->step), "checks");
	now->holder = getpid();
	now->since = op->since;
	now->restored_start = 0;
	if (write_record(k->rec_path, now, op->my_start))
		pr_warn("cannot write '%s': %s", k->rec_path, strerror(errno));
	*out = op;
	return 0;
}

static void write_all(struct cli_op *op)
{
	for (int i = 0; i < op->nkeys; i++)
		if (write_record(op->keys[i].rec_path, &op->now, op->my_start))
			pr_warn("cannot write '%s': %s", op->keys[i].rec_path, strerror(errno));
}

static void set_text(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

void cli_op_step(struct cli_op *op, const char *step, const char *image, const char *if_alive, const char *if_gone)
{
	if (!op)
		return;
	set_text(op->now.step, sizeof(op->now.step), step);
	set_text(op->now.image, sizeof(op->now.image), image);
	set_text(op->now.if_alive, sizeof(op->now.if_alive), if_alive);
	set_text(op->now.if_gone, sizeof(op->now.if_gone), if_gone);
	write_all(op);
}

void cli_op_restored(struct cli_op *op, pid_t pid)
{
	if (!op || op->nkeys > 1)
		return;
	struct op_key *k = &op->keys[1];
	k->pid = pid;
	k->fd = -1;
	k->start = gs_proc_start_time(pid);
	op->now.restored_start = k->start;
	if (!k->start)
		return;
	key_paths(op->run_dir, k);
	/* nobody else can know the new process yet; a lock held all the same is only reported */
	if (lock_key(k)) {
		pr_warn("cannot lock '%s'", k->lock_path);
		return;
	}
	op->nkeys = 2;
}

void cli_op_leave(struct cli_op *op, const char *image, const char *if_alive, const char *if_gone)
{
	if (!op)
		return;
	op->leaving = true;
	set_text(op->now.image, sizeof(op->now.image), image);
	set_text(op->now.if_alive, sizeof(op->now.if_alive), if_alive);
	set_text(op->now.if_gone, sizeof(op->now.if_gone), if_gone);
	/* no holder: the record is a left one from now on */
	op->now.holder = 0;
	snprintf(op->now.step, sizeof(op->now.step), "ended");
}

void cli_op_end(struct cli_op *op, bool ok)
{
	if (!op)
		return;
	for (int i = 0; i < op->nkeys; i++) {
		struct op_key *k = &op->keys[i];
		if (op->leaving)
			write_record(k->rec_path, &op->now, 0);
		else if (!ok && i == 0 && op->has_left)
			write_record(k->rec_path, &op->left, 0);
		else
			unlink(k->rec_path);
		unlock_key(k);
	}
	free(op);
}

/*
 * The record of pid in dir with start time want_start, or (any_start: the
 * process is gone) the latest of its PID that has something to say; 1 and
 * *best filled if found.
 */
static int find_in_dir(const char *dir, pid_t pid, unsigned long long want_start, bool any_start,
		       struct cli_op_record *best)
{
	char prefix[32];
	int plen = snprintf(prefix, sizeof(prefix), "op-%d-", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, (size_t)plen))
			continue;
		char *end;
		unsigned long long start = strtoull(de->d_name + plen, &end, 10);
		if (strcmp(end, ".rec") || (!any_start && start != want_start))
			continue;
		char path[PATH_MAX];
		struct cli_op_record r;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (read_record(path, &r))
			continue;
		/* a process that is gone: the latest record that has something to say about it */
		if (any_start && !r.holder_alive && !r.if_gone[0])
			continue;
		if (!found || r.since > best->since)
			*best = r;
		found = 1;
	}
	closedir(d);
	return found;
}

int cli_op_find(pid_t pid, struct cli_op_record *rec)
{
	char dir[PATH_MAX];
	if (gs_ctl_run_dir(dir, sizeof(dir), NULL))
		return 0;
	unsigned long long start = gs_proc_start_time(pid);
	return find_in_dir(dir, pid, start, start == 0, rec);
}

void cli_op_explain_gone(pid_t pid, struct gs_err *err)
{
	struct cli_op_record r;
	if (!err || err->code != GS_E_NO_PROCESS || !cli_op_find(pid, &r))
		return;
	char what[GS_ERR_MSG_MAX];
	cli_op_describe(pid, &r, false, what, sizeof(what));
	if (!what[0])
		return;
	size_t len = strlen(err->msg);
	snprintf(err->msg + len, sizeof(err->msg) - len, "; %s", what);
}
