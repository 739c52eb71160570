/*
 * proc.c - process facts from /proc (see proc.h).
 */
#include "common/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/util.h"
#include "common/settings.h"

/*
 * A zombie: the process has ended and only its exit status waits for its
 * parent. /proc/PID/stat says Z (or X) for the main thread; a main thread
 * that called pthread_exit says Z too while other threads run on, so the
 * process counts as ended only when none of its threads runs.
 */
static bool ended_zombie(pid_t pid, const struct gs_proc_stat *main_st)
{
	if (main_st->state != 'Z' && main_st->state != 'X')
		return false;
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return true;
	bool ended = true;
	struct dirent *de;
	while (ended && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		struct gs_proc_stat st;
		if (gs_proc_read_task_stat(pid, (pid_t)atoi(de->d_name), &st) == 0 && st.state != 'Z' && st.state != 'X')
			ended = false;
	}
	closedir(d);
	return ended;
}

int gs_proc_life(pid_t pid, pid_t *zombie_parent)
{
	if (zombie_parent)
		*zombie_parent = 0;
	if (pid <= 0 || (kill(pid, 0) && errno != EPERM))
		return GS_PROC_NONE;
	struct gs_proc_stat st;
	if (gs_proc_read_stat(pid, &st))
		return GS_PROC_NONE; /* ended (and reaped) meanwhile */
	if (!ended_zombie(pid, &st))
		return GS_PROC_LIVES;
	if (zombie_parent)
		*zombie_parent = st.ppid;
	return GS_PROC_ZOMBIE;
}

bool gs_proc_alive(pid_t pid)
{
	return gs_proc_life(pid, NULL) == GS_PROC_LIVES;
}

int gs_proc_check(pid_t pid, struct gs_err *err)
{
	pid_t parent;
	switch (gs_proc_life(pid, &parent)) {
	case GS_PROC_NONE:
		return gs_fail(err, GS_E_NO_PROCESS, "no such process: %d", (int)pid);
	case GS_PROC_ZOMBIE:
		return gs_fail(err, GS_E_NO_PROCESS, "process %d has ended (a zombie its parent %d has not reaped yet)",
			       (int)pid, (int)parent);
	}
	if (kill(pid, 0) && errno == EPERM)
		return gs_fail(err, GS_E_PERMISSION, "permission denied for process %d (run as its user or root)", (int)pid);
	return 0;
}

void gs_proc_comm(pid_t pid, char *buf, size_t n)
{
	char path[64], text[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	/* the whole name: it may hold newlines of its own, only the kernel's last one goes */
	ssize_t len = gs_read_small_file(path, text, sizeof(text));
	if (len <= 0) {
		snprintf(buf, n, "?");
		return;
	}
	if (text[len - 1] == '\n')
		text[--len] = '\0';
	snprintf(buf, n, "%s", text);
}

/* A stat file of /proc: a process's or one of its threads'. */
static int read_stat_file(const char *path, struct gs_proc_stat *st)
{
	char line[1024];
	if (gs_read_small_file(path, line, sizeof(line)) <= 0)
		return -1;
	/* comm may contain spaces and parentheses: the fields follow the last ')' (field 3 on) */
	char *p = strrchr(line, ')');
	if (!p || sscanf(p + 1, " %c %d %d %d %d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			 &st->state, &st->ppid, &st->pgrp, &st->session, &st->tty_nr, &st->start_time) != 6)
		return -1;
	return 0;
}

int gs_proc_read_stat(pid_t pid, struct gs_proc_stat *st)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return read_stat_file(path, st);
}

unsigned long long gs_proc_start_time(pid_t pid)
{
	struct gs_proc_stat st;
	return gs_proc_read_stat(pid, &st) ? 0 : st.start_time;
}

int gs_proc_read_task_stat(pid_t pid, pid_t tid, struct gs_proc_stat *st)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	return read_stat_file(path, st);
}

pid_t gs_proc_ppid(pid_t pid)
{
	struct gs_proc_stat st;
	return gs_proc_read_stat(pid, &st) ? -1 : st.ppid;
}

struct pid_pair {
	pid_t pid, ppid;
};

int gs_proc_tree(pid_t root, pid_t **out, size_t *count, struct gs_err *err)
{
	int rc = gs_proc_check(root, err);
	if (rc)
		return rc;
	DIR *d = opendir("/proc");
	if (!d)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read /proc");
	struct pid_pair *all = NULL;
	size_t nall = 0, capall = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid_t p = (pid_t)atoi(de->d_name);
		pid_t pp = gs_proc_ppid(p);
		if (pp < 0)
			continue;
		if (nall == capall) {
			capall = capall ? capall * 2 : 256;
			struct pid_pair *na = realloc(all, capall * sizeof(*na));
			if (!na) {
				free(all);
				closedir(d);
				return gs_fail(err, GS_E_FAILURE, "out of memory");
			}
			all = na;
		}
		all[nall++] = (struct pid_pair){ p, pp };
	}
	closedir(d);

	pid_t *tree = malloc(sizeof(pid_t) * (nall + 1));
	if (!tree) {
		free(all);
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	size_t n = 0;
	tree[n++] = root;
	for (size_t head = 0; head < n; head++)
		for (size_t i = 0; i < nall; i++)
			if (all[i].ppid == tree[head] && all[i].pid != root)
				tree[n++] = all[i].pid;
	free(all);
	*out = tree;
	*count = n;
	return 0;
}

bool gs_proc_all_stopped(pid_t pid, bool traced_too)
{
	/* the main thread first: a running one answers for a process of thousands of threads at once */
	struct gs_proc_stat main_st;
	if (gs_proc_read_stat(pid, &main_st) || (main_st.state != 'T' && !(traced_too && main_st.state == 't')))
		return false;
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	int threads = 0, stopped = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		struct gs_proc_stat st;
		threads++;
		if (gs_proc_read_task_stat(pid, (pid_t)atoi(de->d_name), &st) == 0 && (st.state == 'T' || (traced_too && st.state == 't')))
			stopped++;
	}
	closedir(d);
	return threads > 0 && stopped == threads;
}

/* Whether a freezer's state file reads frozen: v1 freezer.state FROZEN or FREEZING, v2 cgroup.events "frozen 1". */
static bool freezer_file_frozen(const char *path, bool v2)
{
	char buf[512];
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	if (!v2)
		return !strncmp(buf, "FROZEN", 6) || !strncmp(buf, "FREEZING", 8);
	return !strncmp(buf, "frozen 1", 8) || strstr(buf, "\nfrozen 1") != NULL;
}

bool gs_proc_frozen(pid_t pid, char *cgroup, size_t n)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool frozen = false;
	while (!frozen && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		/* "ID:CONTROLLERS:PATH": v2's line is "0::PATH", a v1 freezer's names it among its controllers */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *controllers = c1 + 1, *cg = c2 + 1;
		char file[4600];
		if (!*controllers) {
			/* v2: mounted at /sys/fs/cgroup, or at /sys/fs/cgroup/unified beside v1 */
			snprintf(file, sizeof(file), "/sys/fs/cgroup%s/cgroup.events", cg);
			frozen = freezer_file_frozen(file, true);
			snprintf(file, sizeof(file), "/sys/fs/cgroup/unified%s/cgroup.events", cg);
			frozen = frozen || freezer_file_frozen(file, true);
		} else {
			char list[256];
			snprintf(list, sizeof(list), ",%s,", controllers);
			if (!strstr(list, ",freezer,"))
				continue;
			snprintf(file, sizeof(file), "/sys/fs/cgroup/freezer%s/freezer.state", cg);
			frozen = freezer_file_frozen(file, false);
		}
		if (frozen && cgroup && n)
			snprintf(cgroup, n, "%s", cg);
	}
	fclose(f);
	return frozen;
}

enum gs_proc_halt gs_proc_halted(pid_t pid, bool traced_too, char *why, size_t nwhy, char *until, size_t nuntil)
{
	char cg[256];
	if (gs_proc_frozen(pid, cg, sizeof(cg))) {
		snprintf(why, nwhy, "frozen (its cgroup %s is: a paused container)", cg);
		snprintf(until, nuntil, "it is thawed (unpause it)");
		return GS_PROC_FROZEN;
	}
	if (!gs_proc_all_stopped(pid, traced_too))
		return GS_PROC_RUNS;
	snprintf(why, nwhy, "stopped (SIGSTOP or SIGTSTP%s)", traced_too ? ", or a debugger holds it" : "");
	snprintf(until, nuntil, "it continues (kill -CONT %d)", (int)pid);
	return GS_PROC_STOPPED;
}

int gs_proc_maps_contain(pid_t pid, const char *const *needles)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char *line = NULL; /* getline: a path may be longer than any fixed buffer */
	size_t cap = 0;
	int found = 0;
	while (!found && getline(&line, &cap, f) > 0)
		for (const char *const *n = needles; *n && !found; n++)
			found = strstr(line, *n) != NULL;
	free(line);
	fclose(f);
	return found;
}

int gs_proc_tree_find(pid_t pid, bool (*match)(pid_t process, void *arg), void *arg, pid_t *found,
		      struct gs_err *err)
{
	pid_t *all;
	size_t n;
	*found = 0;
	int rc = gs_proc_tree(pid, &all, &n, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < n && !*found; i++)
		if (match(all[i], arg))
			*found = all[i];
	free(all);
	return 0;
}

bool gs_proc_has_open_file(pid_t pid, const char *prefix)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	size_t plen = strlen(prefix);
	while (!found && (de = readdir(d))) {
		char link[300], target[512];
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		found = strncmp(target, prefix, plen) == 0;
	}
	closedir(d);
	return found;
}

int gs_proc_status_ids(pid_t pid, uid_t *uid, pid_t *nspid)
{
	char path[64], text[8192];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (gs_read_small_file(path, text, sizeof(text)) < 0)
		return -1;
	unsigned ruid, euid;
	const char *u = strstr(text, "\nUid:");
	if (!u || sscanf(u + 5, "%u %u", &ruid, &euid) != 2)
		return -1;
	*uid = euid;
	*nspid = pid;
	const char *ns = strstr(text, "\nNSpid:");
	if (ns) {
		const char *p = ns + 7;
		int v;
		int used;
		while (sscanf(p, "%d%n", &v, &used) == 1) {
			*nspid = v; /* the last value is the pid in the process's own namespace */
			p += used;
		}
	}
	return 0;
}

const char *gs_gpu_device_prefix(void)
{
	return gs_setting_str(GS_S_DEVICE_PATH_PREFIX);
}

bool gs_proc_holds_gpu_device(pid_t pid)
{
	const char *prefix = gs_gpu_device_prefix();
	if (gs_proc_has_open_file(pid, prefix))
		return true;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	int n = gs_maps_find(fd, prefix, NULL, 0);
	close(fd);
	return n > 0;
}

/* Parses a hexadecimal number at *p, moving *p past it; false when there is none. */
static bool parse_hex(const char **p, const char *end, uintptr_t *v)
{
	const char *s = *p;
	uintptr_t x = 0;
	while (s < end) {
		int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
		if (d < 0)
			break;
		x = x << 4 | (uintptr_t)d;
		s++;
	}
	if (s == *p)
		return false;
	*p = s;
	*v = x;
	return true;
}

/* Skips n blank-separated fields (and the blanks after each). */
static const char *skip_fields(const char *s, const char *end, int n)
{
	for (int i = 0; i < n; i++) {
		while (s < end && *s != ' ')
			s++;
		while (s < end && *s == ' ')
			s++;
	}
	return s;
}

/*
 * One line "start-end perms offset dev inode   path" (the path may be cut
 * short where the line was longer than the buffer: only its start is
 * compared). 1 when it matches, 0 when not, -1 when it does not parse.
 */
static int parse_maps_line(const char *s, const char *end, const char *prefix, size_t plen, struct gs_maps_entry *e)
{
	if (!parse_hex(&s, end, &e->start) || s == end || *s++ != '-' || !parse_hex(&s, end, &e->end) ||
	    end - s < 6 || *s++ != ' ')
		return -1;
	e->prot = (s[0] == 'r' ? PROT_READ : 0) | (s[1] == 'w' ? PROT_WRITE : 0) | (s[2] == 'x' ? PROT_EXEC : 0);
	e->shared = s[3] == 's';
	s = skip_fields(s, end, 4); /* perms, offset, dev, inode */
	return (size_t)(end - s) >= plen && memcmp(s, prefix, plen) == 0;
}

int gs_maps_find(int fd, const char *prefix, struct gs_maps_entry *out, int max)
{
	char buf[8192];
	size_t have = 0, plen = strlen(prefix);
	bool skipping = false; /* the rest of a line too long for buf, already looked at */
	int found = 0;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		have += (size_t)r;
		size_t at = 0;
		for (;;) {
			char *nl = memchr(buf + at, '\n', have - at);
			bool cut = !nl && have == sizeof(buf) && at == 0; /* a line longer than buf */
			bool last = !nl && r == 0 && at < have;         /* the text's last line, without a newline */
			if (!nl && !cut && !last)
				break;
			const char *end = nl ? nl : buf + have;
			if (!skipping) {
				struct gs_maps_entry e;
				int m = parse_maps_line(buf + at, end, prefix, plen, &e);
				if (m < 0)
					return -1;
				if (m && found < max)
					out[found] = e;
				found += m;
			}
			skipping = cut;
			at = nl ? (size_t)(nl - buf) + 1 : have;
			if (!nl)
				break;
		}
		memmove(buf, buf + at, have - at);
		have -= at;
		if (r == 0)
			return found;
	}
}

/* The record getdents64(2) fills in (the kernel's struct linux_dirent64). */
struct dirent64_record {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

int gs_fds_find(const char *prefix, int *out, int max)
{
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	size_t plen = strlen(prefix);
	int found = 0;
	char buf[4096] __attribute__((aligned(8)));
	long n;
	while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			const struct dirent64_record *d = (const void *)(buf + off);
			off += d->reclen;
			int fd = 0;
			const char *c = d->name;
			for (; *c >= '0' && *c <= '9' && fd < 100000000; c++)
				fd = fd * 10 + (*c - '0');
			if (*c || c == d->name || fd == dir)
				continue; /* "." and ".." */
			/* "/proc/self/fd/" and the number, built by hand: snprintf is not async-signal-safe */
			char link[40] = "/proc/self/fd/", digits[12];
			int nd = 0;
			for (int v = fd; nd == 0 || v; v /= 10)
				digits[nd++] = (char)('0' + v % 10);
			size_t at = strlen(link);
			while (nd)
				link[at++] = digits[--nd];
			link[at] = '\0';
			char target[512];
			ssize_t len = readlink(link, target, sizeof(target));
			if (len >= (ssize_t)plen && memcmp(target, prefix, plen) == 0) {
				if (found < max)
					out[found] = fd;
				found++;
			}
		}
	}
	close(dir);
	return n < 0 ? -1 : found;
}

void gs_proc_fault_in_environ(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	/* env_start and env_end are fields 50 and 51 (proc(5)); the comm, field 2, ends at the last ')' */
	char *p = strrchr(buf, ')');
	unsigned long long start = 0, end = 0;
	for (int field = 3; p && field <= 51; field++) {
		p = strchr(p + 1, ' ');
		if (p && field == 50)
			start = strtoull(p + 1, NULL, 10);
		if (p && field == 51)
			end = strtoull(p + 1, NULL, 10);
	}
	if (!start || end <= start || end - start > (1u << 20))
		return;
	size_t len = (size_t)(end - start);
	void *to = malloc(len);
	if (!to)
		return;
	struct iovec local = { to, len }, remote = { (void *)(uintptr_t)start, len };
	ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	(void)r;
	free(to);
}

pid_t gs_proc_own_pid(pid_t pid)
{
	uid_t uid;
	pid_t own = 0;
	return gs_proc_status_ids(pid, &uid, &own) ? 0 : own;
}
