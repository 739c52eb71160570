/*
 * test_criu_fake.c - gpusnap's CRIU driving against a fake criu (a shell script this
 * test writes), so finding, version checks (by kernel), failure messages and the
 * kept logs they name, the PID-in-use case, the plugin folder, time limits (criu's
 * whole process group killed), interruption, the criu-run fault point and the
 * child-process plumbing are tested where CRIU is absent.
 * The real CRIU is exercised by tests/cli/t5001-criu-cpu.sh, t5003-criu-plugin.sh,
 * t5004-criu-limits.sh and t5007-criu-sockets.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/util.h"
#include "criu/criu.h"
#include "criu/run.h"
#include "test.h"
#include "common/settings.h"

static char tmp[256];
static char fake[320];
static char args_file[320];
static char home[320];
static char child_file[320];

static const char fake_script[] =
	"#!/bin/sh\n"
	"mode=${FAKE_CRIU_MODE:-ok}\n"
	"if [ \"$1\" = --version ]; then\n"
	"  case $mode in\n"
	"  old) echo 'Version: 3.17.1' ;;\n"
	"  broken) echo \"criu: version 'GLIBC_2.38' not found\" >&2; exit 1 ;;\n"
	"  *) echo \"Version: ${FAKE_CRIU_VERSION:-4.2.1}\"; echo 'GitID: v4' ;;\n"
	"  esac\n"
	"  exit 0\n"
	"fi\n"
	"log=; pidfile=; prev=\n"
	"for a in \"$@\"; do\n"
	"  case $prev in --log-file) log=$a ;; --pidfile) pidfile=$a ;; esac\n"
	"  prev=$a\n"
	"done\n"
	"printf '%s\\n' \"$@\" >\"$FAKE_CRIU_ARGS\"\n"
	"case $mode in\n"
	"ok) [ -z \"$pidfile\" ] || echo 4321 >\"$pidfile\" ;;\n"
	"nopid) ;;\n"
	"fail) { echo \"(00.01) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\"\n"
	"        echo \"(00.02) Error (criu/sk-unix.c:5): Can't dump unix socket 1234\"\n"
	"        echo '(00.03) Error (criu/cr-dump.c:2111): Dumping FAILED.'; } >\"$log\"; exit 1 ;;\n"
	"busy) echo \"(00.02) Error (criu/cr-restore.c:1230): Can't fork for $FAKE_CRIU_BUSY: File exists\" >\"$log\"; exit 1 ;;\n"
	"nolog) echo 'criu: unrecognized option --foo' >&2; exit 1 ;;\n"
	/* a child in criu's group, as criu's own helpers would be: a time-out must kill it too */
	"hang) sleep 30 & echo $! >\"$FAKE_CRIU_CHILD\"; exec sleep 30 ;;\n"
	"pgid) echo \"$$ $(cut -d' ' -f5 /proc/$$/stat)\" >\"$FAKE_CRIU_CHILD\" ;;\n"
	"esac\n"
	"exit 0\n";

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_INT(write(fd, text, strlen(text)), (long long)strlen(text));
	close(fd);
}

static char *read_file(const char *path)
{
	static char buf[8192];
	buf[0] = '\0';
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return buf;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	return buf;
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "%s/gpusnap-criu-fake-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(fake, sizeof(fake), "%s/criu", tmp);
	snprintf(args_file, sizeof(args_file), "%s/args", tmp);
	snprintf(home, sizeof(home), "%s/home", tmp);
	snprintf(child_file, sizeof(child_file), "%s/child", tmp);
	write_file(fake, fake_script, 0755);
	setenv("FAKE_CRIU_ARGS", args_file, 1);
	setenv("FAKE_CRIU_CHILD", child_file, 1);
	setenv("GPUSNAP_CRIU", fake, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	unsetenv(GS_CRIU_TIMEOUT_ENV);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	unsetenv("FAKE_CRIU_VERSION");
}

static void find_ok(struct gs_criu *c)
{
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "ok", 1);
	int rc = gs_criu_find(c, &err);
	if (!rc)
		rc = gs_criu_set_home(c, home, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  %s\n", err.msg);
}

/* The number of *.log files in the home's logs folder. */
static int kept_logs(void)
{
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/%s", home, GS_CRIU_LOG_SUBDIR);
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += strlen(e->d_name) > 4 && !strcmp(e->d_name + strlen(e->d_name) - 4, ".log");
	if (d)
		closedir(d);
	return n;
}

/* The log path an error message names ("(log: PATH)"), or "" when it names none. */
static const char *named_log(const char *msg)
{
	static char path[512];
	path[0] = '\0';
	const char *p = strstr(msg, "(log: ");
	if (p) {
		snprintf(path, sizeof(path), "%s", p + 6);
		char *end = strrchr(path, ')');
		if (end)
			*end = '\0';
	}
	return path;
}

static void test_find_env(void)
{
	struct gs_criu c;
	find_ok(&c);
	CHECK_STR(c.version, "4.2.1");
	CHECK_STR(c.path, fake);
	CHECK_INT(c.major, 4);
	CHECK_INT(c.minor, 2);
	CHECK(c.timeout_s == GS_CRIU_TIMEOUT_S);
	char want[400];
	snprintf(want, sizeof(want), "%s/plugins", home);
	CHECK_STR(c.plugin_dir, want);
}

static void test_find_too_old_or_broken(void)
{
	struct gs_criu c;
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "old", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "version 3.17.1");
	CHECK_CONTAINS(err.msg, "needs CRIU >= 4.2");
	CHECK_CONTAINS(err.msg, "scripts/get-criu.sh");
	CHECK_CONTAINS(err.msg, fake);

	/* 4.1 cannot dump sockets on a kernel >= 6.16: refused on every kernel, one minimum */
	setenv("FAKE_CRIU_MODE", "ok", 1);
	setenv("FAKE_CRIU_VERSION", "4.1.1", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "is version 4.1.1; gpusnap needs CRIU >= 4.2 (older ones cannot dump a process holding a network socket");
	unsetenv("FAKE_CRIU_VERSION");

	setenv("FAKE_CRIU_MODE", "broken", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "GLIBC_2.38");
	CHECK_CONTAINS(err.msg, "exit status 1");

	setenv("GPUSNAP_CRIU", "/nonexistent/criu", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "GPUSNAP_CRIU='/nonexistent/criu'");
	setenv("GPUSNAP_CRIU", fake, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

static void test_find_on_path(void)
{
	char *old_path = strdup(getenv("PATH") ? getenv("PATH") : "");
	struct gs_criu c;
	struct gs_err err = { 0 };
	unsetenv("GPUSNAP_CRIU");
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	char path[600];
	snprintf(path, sizeof(path), "/nonexistent-dir:%s:/usr/bin", tmp);
	setenv("PATH", path, 1);
	CHECK_INT(gs_criu_find(&c, &err), 0);
	CHECK_STR(c.path, fake);

	char empty[300];
	snprintf(empty, sizeof(empty), "%s/empty", tmp);
	mkdir(empty, 0700);
	setenv("PATH", empty, 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "criu not found on PATH");
	CHECK_CONTAINS(err.msg, "gpusnap needs CRIU >= 4.2: ");
	/* what to set: the criu `make test` fetched into the source tree, by its path where it is there */
	CHECK_CONTAINS(err.msg, "GPUSNAP_CRIU=");
	CHECK_CONTAINS(err.msg, ".cache/criu/bin/criu");
	rmdir(empty);

	setenv("PATH", old_path, 1);
	free(old_path);
	setenv("GPUSNAP_CRIU", fake, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
}

static void test_timeout_env(void)
{
	struct gs_criu c;
	struct gs_err err = { 0 };
	const char *bad[] = { "abc", "0", "-5", "10s", "nan" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* a command refuses it at its start (common/settings.h), before it looks for criu */
		setenv(GS_CRIU_TIMEOUT_ENV, bad[i], 1);
		gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
		CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), GS_E_USAGE);
		CHECK_CONTAINS(err.msg, GS_CRIU_TIMEOUT_ENV "='");
		CHECK_CONTAINS(err.msg, "' is not a number of seconds > 0");
	}
	setenv(GS_CRIU_TIMEOUT_ENV, "2.5", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_criu_find(&c, &err), 0);
	CHECK(c.timeout_s == 2.5);
	unsetenv(GS_CRIU_TIMEOUT_ENV);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
}

static void test_home(void)
{
	struct gs_criu c;
	struct gs_err err = { 0 };
	CHECK_INT(gs_criu_find(&c, &err), 0);
	/* no home, no plugin folder: criu would load its default folder's plugins, so nothing runs */
	char img[400];
	snprintf(img, sizeof(img), "%s/img-nohome", tmp);
	unlink(args_file);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, NULL, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "no plugin folder");
	CHECK_INT(gs_criu_restore(&c, img, NULL, NULL, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "no plugin folder");
	CHECK(access(args_file, F_OK) != 0); /* criu never ran */

	char h[400], sub[450];
	snprintf(h, sizeof(h), "%s/home-open", tmp);
	mkdir(h, 0755);
	CHECK_INT(gs_criu_set_home(&c, h, &err), 0);
	struct stat st;
	CHECK_INT(stat(h, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0700); /* made private */
	snprintf(sub, sizeof(sub), "%s/plugins", h);
	CHECK_INT(stat(sub, &st), 0);
	CHECK(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	snprintf(sub, sizeof(sub), "%s/logs", h);
	CHECK_INT(stat(sub, &st), 0);
	CHECK(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);

	/* a plugins "folder" that is a link to elsewhere, or a file, is refused */
	snprintf(h, sizeof(h), "%s/home-link", tmp);
	mkdir(h, 0700);
	snprintf(sub, sizeof(sub), "%s/plugins", h);
	CHECK_INT(symlink("/usr/lib", sub), 0);
	CHECK_INT(gs_criu_set_home(&c, h, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "is not a folder");
	if (geteuid() == 0) {
		/* root's criu loads what is in plugins/: a folder of another user is refused */
		snprintf(h, sizeof(h), "%s/home-other", tmp);
		mkdir(h, 0700);
		CHECK_INT(chown(h, 65534, 65534), 0);
		CHECK_INT(gs_criu_set_home(&c, h, &err), GS_E_PERMISSION);
		CHECK_CONTAINS(err.msg, "belongs to uid 65534");
	}
}

static void test_dump_ok_records_args(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400], rec[450];
	snprintf(img, sizeof(img), "%s/img-ok", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true, .shell_job = GS_CRIU_SHELL_JOB_ON };
	struct gs_err err = { 0 };
	int rc = gs_criu_dump(&c, getpid(), img, &o, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  %s\n", err.msg);
	struct stat st;
	CHECK_INT(stat(img, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0700);
	/* the fake saw its arguments without argv[0]; the record has all of them */
	char *args = strdup(read_file(args_file));
	CHECK(!strncmp(args, "dump\n--tree\n", 12));
	CHECK_CONTAINS(args, "\n--leave-running\n");
	CHECK_CONTAINS(args, "\n--shell-job\n");
	CHECK_CONTAINS(args, img);
	/* gpusnap's own plugin folder, never CRIU's default one */
	char libdir[500];
	snprintf(libdir, sizeof(libdir), "\n--libdir\n%s/plugins\n", home);
	CHECK_CONTAINS(args, libdir);
	char want[8192];
	snprintf(want, sizeof(want), "%s\n%s", c.path, args);
	snprintf(rec, sizeof(rec), "%s/%s", img, GS_CRIU_DUMP_ARGS);
	CHECK_STR(read_file(rec), want);
	free(args);
	CHECK_INT(stat(rec, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0600);

	/* a caller's plugin folder replaces the home's */
	o.libdir = "/opt/gpusnap/criu-plugins";
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), 0);
	CHECK_CONTAINS(read_file(args_file), "\n--libdir\n/opt/gpusnap/criu-plugins\n");
	CHECK(!strstr(read_file(args_file), "/plugins\n--"));
}

static void test_dumpable(void)
{
	struct gs_err err = { 0 };
	CHECK_INT(gs_criu_dumpable(NULL, getpid(), GS_CRIU_TCP_REFUSE, NULL, &err), 0);
	CHECK_INT(gs_criu_dumpable(NULL, 2147483600, GS_CRIU_TCP_REFUSE, NULL, &err), GS_E_NO_PROCESS);
}

static void test_dump_failures(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400];
	snprintf(img, sizeof(img), "%s/img-fail", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };

	setenv("FAKE_CRIU_MODE", "fail", 1);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "Can't dump unix socket 1234");
	CHECK(!strstr(err.msg, "RLIMIT"));
	CHECK(!strstr(err.msg, "FAILED"));
	CHECK(!strchr(err.msg, '\n'));
	/* the log it names is a copy in the home's logs/, which outlives the images folder */
	char kept[512];
	snprintf(kept, sizeof(kept), "%s", named_log(err.msg));
	char prefix[500];
	snprintf(prefix, sizeof(prefix), "%s/logs/dump-%d-", home, (int)getpid());
	CHECK(!strncmp(kept, prefix, strlen(prefix)));
	char rm[600];
	snprintf(rm, sizeof(rm), "rm -rf '%s'", img);
	CHECK_INT(system(rm), 0);
	CHECK_CONTAINS(read_file(kept), "Can't dump unix socket 1234");
	struct stat st;
	CHECK_INT(stat(kept, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0600);

	/* no log written: none is named */
	setenv("FAKE_CRIU_MODE", "nolog", 1);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "unrecognized option --foo");
	CHECK(!strstr(err.msg, "log:"));

	setenv("FAKE_CRIU_MODE", "ok", 1);
	CHECK_INT(gs_criu_dump(&c, 2147483600, img, &o, &err), GS_E_NO_PROCESS);

	/* an images "folder" that is a file */
	char file[400];
	snprintf(file, sizeof(file), "%s/args", tmp);
	CHECK_INT(gs_criu_dump(&c, getpid(), file, &o, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "is not a folder");
}

static void test_logs_bounded(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400];
	snprintf(img, sizeof(img), "%s/img-many", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "fail", 1);
	for (int i = 0; i < GS_CRIU_LOGS_KEPT + 5; i++)
		CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	CHECK_INT(kept_logs(), GS_CRIU_LOGS_KEPT);
	/* the newest, the one just named, is among them */
	CHECK(named_log(err.msg)[0] && access(named_log(err.msg), R_OK) == 0);
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

/* True if pid no longer runs (gone, or a zombie), waiting up to 30 s (a loaded machine is slow, never that slow). */
static bool ends(pid_t pid)
{
	for (int i = 0; i < 3000; i++) {
		char path[64], text[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if (gs_read_small_file(path, text, sizeof(text)) < 0)
			return true;
		const char *st = strrchr(text, ')');
		if (st && st[1] == ' ' && st[2] == 'Z')
			return true;
		usleep(10000);
	}
	return false;
}

static pid_t child_from_fake(void)
{
	for (int i = 0; i < 3000; i++) {
		int pid = atoi(read_file(child_file));
		if (pid > 0)
			return pid;
		usleep(10000);
	}
	return -1;
}

static void test_dump_timeout(void)
{
	struct gs_criu c;
	setenv(GS_CRIU_TIMEOUT_ENV, "0.3", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	find_ok(&c);
	unsetenv(GS_CRIU_TIMEOUT_ENV);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	char img[400];
	snprintf(img, sizeof(img), "%s/img-hang", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };
	unlink(child_file);
	setenv("FAKE_CRIU_MODE", "hang", 1);
	double t0 = gs_now();
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_TIMEOUT);
	CHECK(gs_now() - t0 < 5.0);
	CHECK_CONTAINS(err.msg, "ran past 0.3 s (" GS_CRIU_TIMEOUT_ENV ") and was killed");
	/* criu's whole process group went: the helper it started too */
	pid_t helper = child_from_fake();
	CHECK(helper > 0);
	CHECK(helper > 0 && ends(helper));

	/* the caller's own limit wins over the criu's */
	find_ok(&c);
	setenv("FAKE_CRIU_MODE", "hang", 1);
	o.timeout_s = 0.2;
	t0 = gs_now();
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_TIMEOUT);
	CHECK(gs_now() - t0 < 5.0);
	CHECK_CONTAINS(err.msg, "ran past 0.2 s");
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

/* criu runs in a process group of its own: Ctrl-C at gpusnap's terminal does not reach it */
static void test_own_process_group(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400];
	snprintf(img, sizeof(img), "%s/img-pgid", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };
	unlink(child_file);
	setenv("FAKE_CRIU_MODE", "pgid", 1);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), 0);
	int pid = 0, pgid = 0;
	CHECK_INT(sscanf(read_file(child_file), "%d %d", &pid, &pgid), 2);
	CHECK(pid > 0);
	CHECK_INT(pgid, pid);
	CHECK(pgid != getpgrp());
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

/* Interrupts once the fake criu runs (it has written its helper's pid): an interrupt before criu started does nothing. */
static void *interrupt_soon(void *arg)
{
	(void)arg;
	child_from_fake();
	gs_criu_interrupt();
	return NULL;
}

/* Whether a lazy restore can have userfaultfd: the kernel asked as criu would open it. */
static void test_uffd_usable(void)
{
	char why[256] = "";
	int rc = gs_criu_uffd_usable(why, sizeof(why));
	/* root here: usable, or a kernel without it, said in one line */
	CHECK(rc == 0 || (rc == GS_E_CRIU && strstr(why, "userfaultfd")));
	CHECK_INT(gs_fault_configure("criu-uffd"), 0);
	CHECK_INT(gs_criu_uffd_usable(why, sizeof(why)), GS_E_CRIU);
	CHECK_CONTAINS(why, "no userfaultfd (injected)");
	CHECK_INT(gs_fault_configure(""), 0);
	/* another user, where vm.unprivileged_userfaultfd is 0: for root only */
	FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
	int open_to_users = f ? fgetc(f) == '1' : 1;
	if (f)
		fclose(f);
	if (rc || geteuid() != 0 || open_to_users)
		return;
	pid_t child = fork();
	if (child == 0) {
		char w[256];
		_exit(setgid(65534) || setuid(65534) ? 99 : gs_criu_uffd_usable(w, sizeof(w)) == GS_E_PERMISSION &&
							     strstr(w, "vm.unprivileged_userfaultfd") ? 0 : 1);
	}
	int st = 0;
	CHECK(child > 0 && waitpid(child, &st, 0) == child);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void make_images(char *img, size_t n, const char *name, const char *recorded);

/*
 * gs_criu_interrupt (a signal handler's call) stops a running criu: a dump's
 * with its whole process group, a restore's criu itself (it runs in
 * gpusnap's group, run.h GS_RUN_SHARE_GROUP; what it restored is killed at
 * the image's PID).
 */
static void test_interrupt(void)
{
	struct gs_criu c;
	find_ok(&c);
	gs_criu_interrupt(); /* nothing runs: nothing happens */
	char img[400];
	snprintf(img, sizeof(img), "%s/img-int-dump", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };
	unlink(child_file);
	setenv("FAKE_CRIU_MODE", "hang", 1);
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, interrupt_soon, NULL), 0);
	double t0 = gs_now();
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	pthread_join(t, NULL);
	CHECK(gs_now() - t0 < 5.0);
	CHECK_CONTAINS(err.msg, "killed by signal 9");
	pid_t helper = child_from_fake();
	CHECK(helper > 0 && ends(helper));

	make_images(img, sizeof(img), "img-int", NULL);
	pid_t pid = 0;
	unlink(child_file);
	CHECK_INT(pthread_create(&t, NULL, interrupt_soon, NULL), 0);
	t0 = gs_now();
	CHECK_INT(gs_criu_restore(&c, img, NULL, &pid, &err), GS_E_CRIU);
	pthread_join(t, NULL);
	CHECK(gs_now() - t0 < 5.0);
	CHECK_CONTAINS(err.msg, "killed by signal 9");
	helper = child_from_fake();
	if (helper > 0)
		kill(helper, SIGKILL); /* a stand-in's own child, not a restored task: not the interrupt's to find */
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

/* GS_FI_CRIU_RUN: criu "fails" without running */
static void test_fault_criu_run(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400];
	snprintf(img, sizeof(img), "%s/img-fault", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true };
	struct gs_err err = { 0 };
	CHECK_INT(gs_fault_configure("criu-run"), 0);
	unlink(args_file);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "criu dump of");
	CHECK_CONTAINS(err.msg, "criu failed without running");
	CHECK(!strstr(err.msg, "log:")); /* criu wrote no log, so none is named */
	CHECK(access(args_file, F_OK) != 0);
	/* the point fires once (@1): the next run is real */
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), 0);
	CHECK(access(args_file, F_OK) == 0);
	CHECK_INT(gs_fault_configure("criu-run@1+"), 0);
	CHECK_INT(gs_criu_check(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "criu check failed");
	CHECK_INT(gs_fault_configure(""), 0);
}

static void make_images(char *img, size_t n, const char *name, const char *recorded)
{
	snprintf(img, n, "%s/%s", tmp, name);
	mkdir(img, 0700);
	char path[600];
	snprintf(path, sizeof(path), "%s/inventory.img", img);
	write_file(path, "", 0600);
	if (recorded) {
		snprintf(path, sizeof(path), "%s/%s", img, GS_CRIU_DUMP_ARGS);
		write_file(path, recorded, 0600);
	}
}

static void test_restore(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400], work[400];
	struct gs_err err = { 0 };
	pid_t pid = 0;
	make_images(img, sizeof(img), "img-r", "criu\ndump\n--shell-job\n");
	snprintf(work, sizeof(work), "%s/work", tmp);
	mkdir(work, 0700);
	struct gs_criu_restore_opts o = { .work_dir = work };
	int rc = gs_criu_restore(&c, img, &o, &pid, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  %s\n", err.msg);
	CHECK_INT(pid, 4321);
	char *args = read_file(args_file);
	CHECK(!strncmp(args, "restore\n--images-dir\n", 21));
	CHECK_CONTAINS(args, "\n--restore-detached\n");
	CHECK_CONTAINS(args, "\n--shell-job\n");
	CHECK_CONTAINS(args, work); /* log and pidfile go to the work folder */
	char libdir[500];
	snprintf(libdir, sizeof(libdir), "\n--libdir\n%s/plugins\n", home);
	CHECK_CONTAINS(args, libdir);

	setenv("FAKE_CRIU_MODE", "nopid", 1);
	CHECK_INT(gs_criu_restore(&c, img, NULL, &pid, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "wrote no pid");

	char busy[32];
	snprintf(busy, sizeof(busy), "%d", (int)getpid());
	setenv("FAKE_CRIU_BUSY", busy, 1);
	setenv("FAKE_CRIU_MODE", "busy", 1);
	/* image_pid is this very process, older than the restore: it must survive the failure */
	o.image_pid = getpid();
	CHECK_INT(gs_criu_restore(&c, img, &o, &pid, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "is in use by 'test_criu_fake'");
	CHECK_CONTAINS(err.msg, busy);
	/* the log it names was in the work folder: the kept copy outlives that folder */
	char kept[512];
	snprintf(kept, sizeof(kept), "%s", named_log(err.msg));
	CHECK(strstr(kept, "/logs/restore-") != NULL);
	char rm[600];
	snprintf(rm, sizeof(rm), "rm -rf '%s'", work);
	CHECK_INT(system(rm), 0);
	CHECK_CONTAINS(read_file(kept), "Can't fork for");

	setenv("FAKE_CRIU_MODE", "ok", 1);
	char none[400];
	snprintf(none, sizeof(none), "%s/home", tmp); /* exists, but holds no inventory.img */
	CHECK_INT(gs_criu_restore(&c, none, NULL, &pid, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no inventory.img");
	snprintf(none, sizeof(none), "%s/missing", tmp);
	CHECK_INT(gs_criu_restore(&c, none, NULL, &pid, &err), GS_E_IMAGE);
}

/* What a failed restore left at the image's PID is killed; an older process there never is. */
static void test_kill_leftover(void)
{
	unsigned long long before = gs_criu_boot_ticks();
	CHECK(before > 0);
	pid_t young = fork();
	if (young == 0) {
		pause();
		_exit(0);
	}
	CHECK(gs_criu_kill_leftover(young, before));
	int status = 0;
	CHECK_INT(waitpid(young, &status, 0), young);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	pid_t old = fork();
	if (old == 0) {
		pause();
		_exit(0);
	}
	usleep(50 * 1000);
	/* a restore that started after it: not its task */
	CHECK(!gs_criu_kill_leftover(old, gs_criu_boot_ticks() + 100));
	CHECK_INT(kill(old, 0), 0);
	kill(old, SIGKILL);
	waitpid(old, &status, 0);
	CHECK(!gs_criu_kill_leftover(old, before)); /* gone */
	CHECK(!gs_criu_kill_leftover(0, before));
}

static void test_run_plumbing(void)
{
	struct gs_run_result res;
	struct gs_err err = { 0 };

	/* no descriptor of ours reaches the child */
	int fd = open("/dev/null", O_RDONLY); /* deliberately without O_CLOEXEC */
	CHECK(fd >= 0);
	CHECK(dup2(fd, 37) == 37);
	char *fds[] = { "/bin/sh", "-c", "for f in /proc/$$/fd/*; do echo \"fd ${f##*/}\"; done", NULL };
	CHECK_INT(gs_run(fds, 10, 0, &res, &err), 0);
	CHECK_CONTAINS(res.output, "fd 2\n");
	CHECK(!strstr(res.output, "fd 37\n"));
	close(37);
	close(fd);

	/* LD_PRELOAD is not passed on */
	setenv("LD_PRELOAD", "/nonexistent/libgpusnap.so", 1);
	char *env[] = { "/bin/sh", "-c", "echo \"[${LD_PRELOAD-unset}] $FAKE_CRIU_MODE\"", NULL };
	int rc = gs_run(env, 10, 0, &res, &err);
	unsetenv("LD_PRELOAD");
	CHECK_INT(rc, 0);
	CHECK_STR(res.output, "[unset] ok\n");

	/* the tail of long output is kept */
	char *lots[] = { "/bin/sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done; exit 3", NULL };
	CHECK_INT(gs_run(lots, 30, 0, &res, &err), 0);
	CHECK(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 3);
	size_t len = strlen(res.output);
	CHECK(len > 1000 && len < GS_RUN_OUTPUT_MAX);
	CHECK(len >= 9 && !strcmp(res.output + len - 9, "line2999\n"));

	/* done when the child exits, even while something it started holds the output pipe */
	char *linger[] = { "/bin/sh", "-c", "sleep 30 & echo started", NULL };
	double t0 = gs_now();
	CHECK_INT(gs_run(linger, 60, 0, &res, &err), 0);
	CHECK(gs_now() - t0 < 20.0); /* not the 30 s of what it left running */
	CHECK_STR(res.output, "started\n");

	/* GS_RUN_PRIVATE_FILES: what the child creates is owner-only */
	char *um[] = { "/bin/sh", "-c", "umask", NULL };
	CHECK_INT(gs_run(um, 10, GS_RUN_PRIVATE_FILES, &res, &err), 0);
	CHECK_STR(res.output, "0077\n");
	mode_t old = umask(022);
	CHECK_INT(gs_run(um, 10, 0, &res, &err), 0);
	CHECK_STR(res.output, "0022\n");
	umask(old);

	/* a helper alongside (criu lazy-pages): looked at while it runs, kept descriptors, waited for */
	int ready[2];
	CHECK(pipe2(ready, O_CLOEXEC) == 0);
	char arg[160];
	/* its output first: once "up" is read, it is in the output file */
	snprintf(arg, sizeof(arg), "echo kept-fd-%d; echo up >&%d; exec %d>&-; sleep 30", ready[1], ready[1], ready[1]);
	char *along[] = { "/bin/sh", "-c", arg, NULL };
	struct gs_run_proc p;
	CHECK_INT(gs_run_spawn(along, GS_RUN_PRIVATE_FILES, &ready[1], 1, &p, &err), 0);
	close(ready[1]);
	char up[8] = "";
	CHECK(read(ready[0], up, sizeof(up) - 1) == 3); /* the descriptor reached it under its number */
	close(ready[0]);
	CHECK_STR(up, "up\n");
	CHECK(p.pid > 0 && gs_run_child() == 0); /* not the child a signal handler would kill */
	CHECK_INT(gs_run_wait(&p, -1, &res, &err), GS_RUN_STILL);
	gs_run_kill(&p);
	CHECK_INT(gs_run_wait(&p, 0, &res, &err), 0);
	CHECK(WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGKILL);
	snprintf(arg, sizeof(arg), "kept-fd-%d\n", ready[1]);
	CHECK_STR(res.output, arg);
	CHECK_INT(p.pid, 0);
	/* and one that ends by itself, past its limit: killed */
	char *slow[] = { "/bin/sh", "-c", "exec sleep 30", NULL };
	CHECK_INT(gs_run_spawn(slow, 0, NULL, 0, &p, &err), 0);
	CHECK_INT(gs_run_wait(&p, 0.2, &res, &err), 0);
	CHECK(res.timed_out);

	char *missing[] = { "/nonexistent/criu", "--version", NULL };
	CHECK_INT(gs_run(missing, 10, 0, &res, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "No such file or directory");

	char st[64];
	CHECK_STR(gs_run_status_str(256, st, sizeof(st)), "exit status 1");
	CHECK_STR(gs_run_status_str(9, st, sizeof(st)), "killed by signal 9");
}

static void cleanup(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
}

int main(void)
{
	/*
	 * The dumps below name this process. Where the test runs in a session whose
	 * leader is outside its PID namespace (some CI containers), gpusnap refuses
	 * to dump it, as CRIU would fail: a session of its own makes it dumpable.
	 */
	setsid();
	setup();
	RUN(test_find_env);
	RUN(test_find_too_old_or_broken);
	RUN(test_find_on_path);
	RUN(test_timeout_env);
	RUN(test_home);
	RUN(test_dump_ok_records_args);
	RUN(test_dumpable);
	RUN(test_dump_failures);
	RUN(test_logs_bounded);
	RUN(test_dump_timeout);
	RUN(test_own_process_group);
	RUN(test_interrupt);
	RUN(test_fault_criu_run);
	RUN(test_uffd_usable);
	RUN(test_restore);
	RUN(test_kill_leftover);
	RUN(test_run_plumbing);
	cleanup();
	return TEST_SUMMARY();
}
