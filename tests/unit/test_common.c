/*
 * test_common.c - unit tests of src/common: options, sizes, JSON, errors, /proc helpers, growing arrays.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/json.h"
#include "common/options.h"
#include "common/proc.h"
#include "common/util.h"
#include "test.h"
#include "common/settings.h"

static void test_parse_size(void)
{
	uint64_t v = 0;
	CHECK_INT(gs_parse_size("40G", &v), 0);
	CHECK(v == 40ULL << 30);
	CHECK_INT(gs_parse_size("512MiB", &v), 0);
	CHECK(v == 512ULL << 20);
	CHECK_INT(gs_parse_size("7", &v), 0);
	CHECK(v == 7);
	CHECK_INT(gs_parse_size("1KB", &v), 0);
	CHECK(v == 1024);
	CHECK_INT(gs_parse_size("-1G", &v), -1);
	CHECK_INT(gs_parse_size("12X", &v), -1);
	CHECK_INT(gs_parse_size("", &v), -1);
	CHECK_INT(gs_parse_size("99999999999T", &v), -1);
	/* what strtoull takes but no user means: white space, a sign, hex */
	v = 5;
	CHECK_INT(gs_parse_size(" 7", &v), -1);
	CHECK_INT(gs_parse_size(" -1", &v), -1);
	CHECK_INT(gs_parse_size("+7", &v), -1);
	CHECK_INT(gs_parse_size("0x10", &v), -1);
	CHECK_INT(gs_parse_size("7 ", &v), -1);
	CHECK(v == 5);
}

/* Seconds, ints and PIDs are plain decimal: hex, white space, '+', exponents, inf and nan are refused. */
static void test_parse_numbers(void)
{
	double d = -1;
	CHECK_INT(gs_parse_seconds("5", &d), 0);
	CHECK(d == 5);
	CHECK_INT(gs_parse_seconds("0.25", &d), 0);
	CHECK(d == 0.25);
	CHECK_INT(gs_parse_seconds("0", &d), 0);
	CHECK(d == 0);
	CHECK_INT(gs_parse_seconds("2.", &d), 0);
	CHECK(d == 2);
	static const char *const bad_seconds[] = { "0x10", " 5",  "5 ",  "+5", "-1", "1e3", "inf", "nan", "NAN",
						   "infinity", ".5", "",   ".",  "5s", "\t5", "0x1p3", "1,5" };
	for (size_t i = 0; i < sizeof(bad_seconds) / sizeof(bad_seconds[0]); i++) {
		d = 42;
		if (gs_parse_seconds(bad_seconds[i], &d) != -1 || d != 42)
			fprintf(stderr, "gs_parse_seconds took '%s'\n", bad_seconds[i]);
		CHECK(d == 42);
	}
	int n = 0;
	CHECK_INT(gs_parse_int("-3", &n), 0);
	CHECK_INT(n, -3);
	CHECK_INT(gs_parse_int("17", &n), 0);
	CHECK_INT(n, 17);
	static const char *const bad_ints[] = { "0x10", " 1", "1 ", "+1", "1.0", "1e2", "", "-", "--1", "99999999999" };
	for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++) {
		n = 42;
		if (gs_parse_int(bad_ints[i], &n) != -1)
			fprintf(stderr, "gs_parse_int took '%s'\n", bad_ints[i]);
		CHECK_INT(n, 42);
	}
	int pid = 0;
	CHECK_INT(gs_parse_pid("1234", &pid), 0);
	CHECK_INT(pid, 1234);
	CHECK_INT(gs_parse_pid(" 1234", &pid), -1);
	CHECK_INT(gs_parse_pid("+1234", &pid), -1);
	CHECK_INT(gs_parse_pid("0x10", &pid), -1);
	CHECK_INT(gs_parse_pid("0", &pid), -1);
}

static void test_options(void)
{
	bool json = false, tree = false;
	double timeout = 0;
	const char *dir = NULL;
	struct gs_string_list maps = { 0 };
	const struct gs_option opts[] = {
		GS_OPT_BOOL_(0, "json", &json, "json"),
		GS_OPT_BOOL_('t', "tree", &tree, "tree"),
		GS_OPT_SECONDS_(0, "timeout", &timeout, "SECONDS", "timeout"),
		GS_OPT_STRING_('D', "dir", &dir, "DIR", "dir"),
		GS_OPT_LIST_(0, "map", &maps, "FROM=TO", "map"),
		GS_OPT_END_(),
	};
	char *argv[] = { "resume", "--json", "1234", "--timeout=2.5", "-D", "/tmp/x", "--map", "0=1", "--map=1=0", "-t", NULL };
	int nargs = 0;
	struct gs_err err = { 0 };
	CHECK_INT(gs_parse_options(10, argv, opts, 0, &nargs, &err), 0);
	CHECK(json);
	CHECK(tree);
	CHECK(timeout == 2.5);
	CHECK_STR(dir, "/tmp/x");
	CHECK_INT(maps.count, 2);
	CHECK_STR(maps.items[0], "0=1");
	CHECK_STR(maps.items[1], "1=0");
	CHECK_INT(nargs, 1);
	CHECK_STR(argv[0], "1234");
	gs_string_list_free(&maps);

	char *bad[] = { "suspend", "--nope", NULL };
	CHECK_INT(gs_parse_options(2, bad, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "unknown option '--nope'");

	char *badnum[] = { "suspend", "--timeout", "soon", NULL };
	CHECK_INT(gs_parse_options(3, badnum, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "expects seconds");

	char *missing[] = { "suspend", "--timeout", NULL };
	CHECK_INT(gs_parse_options(2, missing, opts, 0, &nargs, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "requires a value");

	char *help[] = { "suspend", "-h", NULL };
	CHECK_INT(gs_parse_options(2, help, opts, 0, &nargs, &err), GS_PARSE_HELP);
}

static void test_options_stop_at_command(void)
{
	bool json = false;
	const struct gs_option opts[] = { GS_OPT_BOOL_(0, "json", &json, "json"), GS_OPT_END_() };
	char *argv[] = { "run", "--json", "python3", "--json", "-c", "x", NULL };
	int nargs = 0;
	struct gs_err err = { 0 };
	CHECK_INT(gs_parse_options(6, argv, opts, GS_PARSE_STOP_AT_NON_OPTION, &nargs, &err), 0);
	CHECK(json);
	CHECK_INT(nargs, 4);
	CHECK_STR(argv[0], "python3");
	CHECK_STR(argv[1], "--json");
	CHECK_STR(argv[3], "x");
}

static void test_json(void)
{
	struct gs_json j;
	gs_json_init(&j);
	gs_json_object_begin(&j);
	gs_json_kv_string(&j, "name", "a\"b\\c\n");
	gs_json_kv_int(&j, "pid", -5);
	gs_json_key(&j, "list");
	gs_json_array_begin(&j);
	gs_json_uint(&j, 1);
	gs_json_bool(&j, true);
	gs_json_null(&j);
	gs_json_array_end(&j);
	gs_json_kv_double(&j, "t", 0.25);
	gs_json_object_end(&j);
	CHECK_STR(gs_json_finish(&j), "{\"name\":\"a\\\"b\\\\c\\n\",\"pid\":-5,\"list\":[1,true,null],\"t\":0.25}");
	gs_json_free(&j);

	gs_json_init(&j);
	gs_json_object_begin(&j);
	CHECK(gs_json_finish(&j) == NULL); /* unbalanced */
	gs_json_free(&j);
}

static void test_errors(void)
{
	struct gs_err err = { 0 };
	CHECK_INT(gs_fail(&err, GS_E_NO_PROCESS, "no such process: %d", 42), GS_E_NO_PROCESS);
	CHECK_STR(err.msg, "no such process: 42");
	gs_err_wrap(&err, "suspending %d", 42);
	CHECK_STR(err.msg, "suspending 42: no such process: 42");
	CHECK_INT(err.code, GS_E_NO_PROCESS);
	CHECK_STR(gs_exit_name(GS_E_TIMEOUT), "timeout");
	CHECK_INT(gs_exit_from_errno(ESRCH), GS_E_NO_PROCESS);
	CHECK_INT(gs_exit_from_errno(ENOSPC), GS_E_NO_SPACE);
}

static void test_proc(void)
{
	struct gs_err err = { 0 };
	CHECK_INT(gs_proc_check(getpid(), &err), 0);
	CHECK_INT(gs_proc_check(0x7ffffff0, &err), GS_E_NO_PROCESS);
	CHECK_CONTAINS(err.msg, "no such process");
	CHECK_INT(gs_proc_ppid(getpid()), getppid());
	struct gs_proc_stat self, again;
	CHECK_INT(gs_proc_read_stat(getpid(), &self), 0);
	CHECK_INT(self.ppid, getppid());
	CHECK_INT(self.state, 'R');
	CHECK(self.start_time > 0);
	CHECK_INT(gs_proc_read_stat(getpid(), &again), 0);
	CHECK(again.start_time == self.start_time); /* what names this process, with its PID */
	CHECK_INT(gs_proc_read_stat(0x7ffffff0, &again), -1);
	CHECK(gs_proc_start_time(getpid()) == self.start_time);
	CHECK(gs_proc_start_time(0x7ffffff0) == 0); /* no such process: 0, which names none */
	/* the PID a process sees for itself: ours here is our own; in a PID namespace of its own, its own */
	CHECK_INT(gs_proc_own_pid(getpid()), getpid());
	CHECK_INT(gs_proc_own_pid(0x7ffffff0), 0);
	if (access("/proc/self/ns/pid", F_OK) == 0 && geteuid() == 0) {
		int pfd[2];
		CHECK_INT(pipe(pfd), 0);
		pid_t outer = fork();
		if (outer == 0) { /* a child in a new PID namespace: its first child is 1 there */
			close(pfd[0]);
			int inner = -1;
			if (unshare(CLONE_NEWPID) == 0) {
				pid_t c = fork();
				if (c == 0) {
					pause();
					_exit(0);
				}
				inner = (int)c;
			}
			if (write(pfd[1], &inner, sizeof(inner)) < 0)
				_exit(1);
			if (inner > 0)
				waitpid(inner, NULL, 0);
			_exit(0);
		}
		close(pfd[1]);
		int inner = 0;
		CHECK(read(pfd[0], &inner, sizeof(inner)) == (ssize_t)sizeof(inner));
		close(pfd[0]);
		if (inner > 0) {
			CHECK_INT(gs_proc_own_pid(inner), 1);
			kill(inner, SIGKILL);
		} else {
			printf("SKIP: no PID namespace can be made here: gs_proc_own_pid is checked in ours only\n");
		}
		waitpid(outer, NULL, 0);
	}

	pid_t child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	pid_t *tree = NULL;
	size_t n = 0;
	CHECK_INT(gs_proc_tree(getpid(), &tree, &n, &err), 0);
	CHECK(n >= 2);
	CHECK_INT(tree[0], getpid());
	bool found = false;
	for (size_t i = 0; i < n; i++)
		found |= tree[i] == child;
	CHECK(found);
	free(tree);
	/* a group stop, as a supervisor's SIGSTOP makes one, and back */
	CHECK(!gs_proc_all_stopped(child, true));
	CHECK(!gs_proc_all_stopped(getpid(), true));
	kill(child, SIGSTOP);
	int status = 0;
	CHECK_INT(waitpid(child, &status, WUNTRACED), child);
	CHECK(WIFSTOPPED(status));
	CHECK(gs_proc_all_stopped(child, false));
	CHECK(!gs_proc_frozen(child, NULL, 0)); /* stopped, not frozen: its cgroup is ours, which runs */
	kill(child, SIGCONT);
	CHECK_INT(waitpid(child, &status, WCONTINUED), child);
	CHECK(!gs_proc_all_stopped(child, false));
	kill(child, SIGKILL);
	/* killed, not reaped yet: a zombie, which is gone to every check (its PID still answers kill(2)) */
	siginfo_t si;
	CHECK_INT(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
	CHECK_INT(kill(child, 0), 0);
	pid_t parent = 0;
	CHECK_INT(gs_proc_life(child, &parent), GS_PROC_ZOMBIE);
	CHECK_INT(parent, getpid());
	CHECK(!gs_proc_alive(child));
	struct gs_err zerr = { 0 };
	CHECK_INT(gs_proc_check(child, &zerr), GS_E_NO_PROCESS);
	CHECK(strstr(zerr.msg, "has ended (a zombie its parent") != NULL);
	waitpid(child, NULL, 0);
	CHECK_INT(gs_proc_life(child, &parent), GS_PROC_NONE);
	CHECK_INT(gs_proc_life(getpid(), NULL), GS_PROC_LIVES);
	CHECK(gs_proc_alive(getpid()));
}

static void test_format_bytes(void)
{
	char b[32];
	CHECK_STR(gs_format_bytes(3, b, sizeof(b)), "3 B");
	CHECK_STR(gs_format_bytes(1536ULL << 20, b, sizeof(b)), "1.50 GiB");
	CHECK_INT(gs_round_up(5, 4), 8);
	int pid;
	CHECK_INT(gs_parse_pid("123", &pid), 0);
	CHECK_INT(pid, 123);
	CHECK_INT(gs_parse_pid("12a", &pid), -1);
	CHECK_INT(gs_parse_pid("0", &pid), -1);
}

static void test_grow_array(void)
{
	int *a = NULL;
	size_t cap = 0;
	for (size_t n = 0; n < 1000; n++) {
		CHECK_INT(gs_grow_array((void **)&a, &cap, n, sizeof(*a), 4), 0);
		CHECK(cap > n);
		a[n] = (int)n;
	}
	CHECK_INT(cap, 1024); /* 4, doubled */
	int bad = 0;
	for (size_t n = 0; n < 1000; n++)
		bad += a[n] != (int)n;
	CHECK_INT(bad, 0);
	/* room already: nothing moves */
	int *before = a;
	CHECK_INT(gs_grow_array((void **)&a, &cap, 10, sizeof(*a), 4), 0);
	CHECK(a == before && cap == 1024);
	/* a size that would overflow is refused and leaves the array as it was */
	size_t huge = SIZE_MAX / 2 + 1;
	CHECK_INT(gs_grow_array((void **)&a, &huge, huge, sizeof(*a), 4), -1);
	CHECK(a == before);
	free(a);
}

static void test_read_small_file(void)
{
	char path[] = "/tmp/gpusnap-small-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_INT((int)write(fd, "ab\0cdef\n", 8), 8);
	close(fd);
	char buf[16];
	CHECK_INT((int)gs_read_small_file(path, buf, sizeof(buf)), 8);
	CHECK(!memcmp(buf, "ab\0cdef\n", 9)); /* inner NUL kept, terminated */
	char tiny[4];
	CHECK_INT((int)gs_read_small_file(path, tiny, sizeof(tiny)), 3);
	CHECK(!memcmp(tiny, "ab\0", 4));
	unlink(path);
	CHECK_INT((int)gs_read_small_file(path, buf, sizeof(buf)), -1);
}

static void test_all_zero(void)
{
	static unsigned char buf[4096 + 17];
	CHECK(gs_all_zero(buf, 0));
	CHECK(gs_all_zero(buf, 5));
	CHECK(gs_all_zero(buf, sizeof(buf)));
	size_t where[] = { 0, 7, 15, 16, 17, 4095, sizeof(buf) - 1 };
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		buf[where[i]] = 1;
		CHECK(!gs_all_zero(buf, sizeof(buf)));
		CHECK(gs_all_zero(buf, where[i])); /* everything before it is zero */
		buf[where[i]] = 0;
	}
}


/* A /proc/PID/maps text in a memfd, read back through gs_maps_find. */
static int maps_fd(const char *text)
{
	int fd = memfd_create("maps", 0);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	return fd;
}

static void test_maps_find(void)
{
	/* a line longer than the scanner's buffer first (a long path, matching), then the usual kinds */
	size_t longlen = 20000;
	char *text = malloc(longlen + 1024);
	CHECK(text != NULL);
	int n = sprintf(text, "7f0000000000-7f0000001000 rw-s 00000000 00:06 143                        /dev/nvidia-uvm");
	memset(text + n, 'x', longlen);
	strcpy(text + n + longlen,
	       "\n00400000-00420000 r--p 00000000 fe:00 79246                              /usr/bin/python3.12\n"
	       "00ba7000-00bab000 rw-p 00000000 00:00 0 \n"
	       "7ff81e0cd000-7ff81e0dd000 -w-s 00000000 00:06 143                        /dev/nvidia0\n"
	       "7ff81e0dd000-7ff81e0de000 r--p 00000000 fe:00 12 /lib/dev/nvidia.so\n"
	       "7ff900000000-7ff900200000 rw-s 00000000 00:06 142                        /dev/nvidiactl");
	int fd = maps_fd(text);
	struct gs_maps_entry e[4];
	CHECK_INT(gs_maps_find(fd, "/dev/nvidia", e, 4), 3);
	CHECK(e[0].start == 0x7f0000000000 && e[0].end == 0x7f0000001000);
	CHECK(e[0].prot == (PROT_READ | PROT_WRITE) && e[0].shared);
	CHECK(e[1].start == 0x7ff81e0cd000 && e[1].end == 0x7ff81e0dd000 && e[1].prot == PROT_WRITE && e[1].shared);
	/* the last line has no newline */
	CHECK(e[2].start == 0x7ff900000000 && e[2].end == 0x7ff900200000);
	close(fd);
	/* more than fits: the count is all of them, out[] holds the first */
	fd = maps_fd(text);
	CHECK_INT(gs_maps_find(fd, "/dev/nvidia", e, 1), 3);
	CHECK(e[0].start == 0x7f0000000000);
	close(fd);
	fd = maps_fd(text);
	CHECK_INT(gs_maps_find(fd, "/usr/bin/", NULL, 0), 1);
	close(fd);
	fd = maps_fd("");
	CHECK_INT(gs_maps_find(fd, "/dev/nvidia", e, 4), 0);
	close(fd);
	fd = maps_fd("not a maps line\n");
	CHECK_INT(gs_maps_find(fd, "/dev/nvidia", e, 4), -1);
	close(fd);
	free(text);
	/* descriptors: two of a file under the prefix are found, by number */
	char tmpl[] = "/tmp/gpusnap-fds-XXXXXX";
	int a = mkstemp(tmpl);
	CHECK(a >= 0);
	int b = open(tmpl, O_RDONLY);
	int fds[1];
	CHECK_INT(gs_fds_find(tmpl, fds, 1), 2);
	CHECK(fds[0] == a || fds[0] == b);
	CHECK_INT(gs_fds_find("/nonexistent/device", fds, 1), 0);
	close(a);
	close(b);
	unlink(tmpl);
	/* this process maps no GPU device file here, whatever the prefix names */
	setenv("GPUSNAP_DEVICE_PATH_PREFIX", "/nonexistent/device", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK(!gs_proc_holds_gpu_device(getpid()));
	unsetenv("GPUSNAP_DEVICE_PATH_PREFIX");
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_STR(gs_gpu_device_prefix(), "/dev/nvidia");
}

int main(void)
{
	RUN(test_parse_size);
	RUN(test_parse_numbers);
	RUN(test_options);
	RUN(test_options_stop_at_command);
	RUN(test_json);
	RUN(test_errors);
	RUN(test_proc);
	RUN(test_format_bytes);
	RUN(test_grow_array);
	RUN(test_read_small_file);
	RUN(test_all_zero);
	RUN(test_maps_find);
	return TEST_SUMMARY();
}
