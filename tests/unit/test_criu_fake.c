/*
 * test_criu_fake.c - gpusnap's CRIU driving against a fake criu (a shell script this
 * test writes), so finding, version checks, failure messages, the PID-in-use case,
 * time limits and the child-process plumbing are tested where CRIU is absent.
 * The real CRIU is exercised by tests/cli/t5001-criu-cpu.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "criu/criu.h"
#include "criu/run.h"
#include "test.h"

static char tmp[256];
static char fake[320];
static char args_file[320];

static const char fake_script[] =
	"#!/bin/sh\n"
	"mode=${FAKE_CRIU_MODE:-ok}\n"
	"if [ \"$1\" = --version ]; then\n"
	"  case $mode in\n"
	"  old) echo 'Version: 3.17.1' ;;\n"
	"  broken) echo \"criu: version 'GLIBC_2.38' not found\" >&2; exit 1 ;;\n"
	"  *) echo 'Version: 4.1.1'; echo 'GitID: v4.1.1' ;;\n"
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
	"hang) exec sleep 30 ;;\n"
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
	write_file(fake, fake_script, 0755);
	setenv("FAKE_CRIU_ARGS", args_file, 1);
	setenv("GPUSNAP_CRIU", fake, 1);
}

static void find_ok(struct gs_criu *c)
{
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "ok", 1);
	int rc = gs_criu_find(c, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  %s\n", err.msg);
}

static void test_find_env(void)
{
	struct gs_criu c;
	find_ok(&c);
	CHECK_STR(c.version, "4.1.1");
	CHECK_STR(c.path, fake);
	CHECK_INT(c.major, 4);
	CHECK_INT(c.minor, 1);
}

static void test_find_too_old_or_broken(void)
{
	struct gs_criu c;
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "old", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "version 3.17.1");
	CHECK_CONTAINS(err.msg, ">= 4.0");
	CHECK_CONTAINS(err.msg, "scripts/get-criu.sh");
	CHECK_CONTAINS(err.msg, fake);

	setenv("FAKE_CRIU_MODE", "broken", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "GLIBC_2.38");
	CHECK_CONTAINS(err.msg, "exit status 1");

	setenv("GPUSNAP_CRIU", "/nonexistent/criu", 1);
	CHECK_INT(gs_criu_find(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "GPUSNAP_CRIU='/nonexistent/criu'");
	setenv("GPUSNAP_CRIU", fake, 1);
	setenv("FAKE_CRIU_MODE", "ok", 1);
}

static void test_find_on_path(void)
{
	char *old_path = strdup(getenv("PATH") ? getenv("PATH") : "");
	struct gs_criu c;
	struct gs_err err = { 0 };
	unsetenv("GPUSNAP_CRIU");
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
	CHECK_CONTAINS(err.msg, "CRIU >= 4.0");
	rmdir(empty);

	setenv("PATH", old_path, 1);
	free(old_path);
	setenv("GPUSNAP_CRIU", fake, 1);
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
	char want[8192];
	snprintf(want, sizeof(want), "%s\n%s", c.path, args);
	snprintf(rec, sizeof(rec), "%s/%s", img, GS_CRIU_DUMP_ARGS);
	CHECK_STR(read_file(rec), want);
	free(args);
	CHECK_INT(stat(rec, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0600);
}

static void test_dumpable(void)
{
	struct gs_err err = { 0 };
	CHECK_INT(gs_criu_dumpable(getpid(), &err), 0);
	CHECK_INT(gs_criu_dumpable(2147483600, &err), GS_E_NO_PROCESS);
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
	CHECK_CONTAINS(err.msg, "dump.log");
	CHECK(!strstr(err.msg, "RLIMIT"));
	CHECK(!strstr(err.msg, "FAILED"));
	CHECK(!strchr(err.msg, '\n'));

	setenv("FAKE_CRIU_MODE", "nolog", 1);
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "unrecognized option --foo");

	setenv("FAKE_CRIU_MODE", "ok", 1);
	CHECK_INT(gs_criu_dump(&c, 2147483600, img, &o, &err), GS_E_NO_PROCESS);

	/* an images "folder" that is a file */
	char file[400];
	snprintf(file, sizeof(file), "%s/args", tmp);
	CHECK_INT(gs_criu_dump(&c, getpid(), file, &o, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "is not a folder");
}

static void test_dump_timeout(void)
{
	struct gs_criu c;
	find_ok(&c);
	char img[400];
	snprintf(img, sizeof(img), "%s/img-hang", tmp);
	struct gs_criu_dump_opts o = { .leave_running = true, .timeout_s = 0.3 };
	struct gs_err err = { 0 };
	setenv("FAKE_CRIU_MODE", "hang", 1);
	double t0 = gs_now();
	CHECK_INT(gs_criu_dump(&c, getpid(), img, &o, &err), GS_E_TIMEOUT);
	CHECK(gs_now() - t0 < 5.0);
	CHECK_CONTAINS(err.msg, "was killed");
	setenv("FAKE_CRIU_MODE", "ok", 1);
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

	setenv("FAKE_CRIU_MODE", "nopid", 1);
	CHECK_INT(gs_criu_restore(&c, img, NULL, &pid, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "left no pid");

	char busy[32];
	snprintf(busy, sizeof(busy), "%d", (int)getpid());
	setenv("FAKE_CRIU_BUSY", busy, 1);
	setenv("FAKE_CRIU_MODE", "busy", 1);
	CHECK_INT(gs_criu_restore(&c, img, NULL, &pid, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "is in use by 'test_criu_fake'");
	CHECK_CONTAINS(err.msg, busy);

	setenv("FAKE_CRIU_MODE", "ok", 1);
	char none[400];
	snprintf(none, sizeof(none), "%s/work", tmp); /* exists, but holds no inventory.img */
	CHECK_INT(gs_criu_restore(&c, none, NULL, &pid, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no inventory.img");
	snprintf(none, sizeof(none), "%s/missing", tmp);
	CHECK_INT(gs_criu_restore(&c, none, NULL, &pid, &err), GS_E_IMAGE);
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
	char *linger[] = { "/bin/sh", "-c", "sleep 3 & echo started", NULL };
	double t0 = gs_now();
	CHECK_INT(gs_run(linger, 10, 0, &res, &err), 0);
	CHECK(gs_now() - t0 < 2.0);
	CHECK_STR(res.output, "started\n");

	/* GS_RUN_PRIVATE_FILES: what the child creates is owner-only */
	char *um[] = { "/bin/sh", "-c", "umask", NULL };
	CHECK_INT(gs_run(um, 10, GS_RUN_PRIVATE_FILES, &res, &err), 0);
	CHECK_STR(res.output, "0077\n");
	mode_t old = umask(022);
	CHECK_INT(gs_run(um, 10, 0, &res, &err), 0);
	CHECK_STR(res.output, "0022\n");
	umask(old);

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
	RUN(test_dump_ok_records_args);
	RUN(test_dumpable);
	RUN(test_dump_failures);
	RUN(test_dump_timeout);
	RUN(test_restore);
	RUN(test_run_plumbing);
	cleanup();
	return TEST_SUMMARY();
}
