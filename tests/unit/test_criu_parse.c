/*
 * test_criu_parse.c - the text side of driving CRIU, without CRIU: version parsing,
 * the version a kernel needs (4.2 from Linux 6.16 on), finding the cause of a failure in CRIU's log (past the harmless RLIMIT_NOFILE
 * line), the PID-in-use case, and the dump/restore command lines.
 */
#include <stdlib.h>

#include "criu/criu.h"
#include "test.h"

static const char dump_log_session[] =
	"(00.000000) Version: 4.1.1 (gitid 0)\n"
	"(00.041531) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"
	"(00.050000) Seized task 6307, state 1\n"
	"(00.055690) Error (criu/pstree.c:300): The root process 6307 is not a session leader. Consider using --shell-job option\n"
	"(00.055812) Error (criu/cr-dump.c:2111): Dumping FAILED.\n";

static const char restore_log_busy[] =
	"(00.033883) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"
	"(00.034700) Forking task with 6101 pid (flags 0x0)\n"
	"(00.034747) Error (criu/cr-restore.c:1230): Can't fork for 6101: File exists\n"
	"(00.034782) Error (criu/cr-restore.c:2320): Restoring FAILED.";

static void test_parse_version(void)
{
	int ma = -1, mi = -1, pa = -1;
	CHECK_INT(gs_criu_parse_version("Version: 4.1.1\n", &ma, &mi, &pa), 0);
	CHECK_INT(ma, 4);
	CHECK_INT(mi, 1);
	CHECK_INT(pa, 1);
	CHECK_INT(gs_criu_parse_version("Version: 4.0\nGitID: v4.0-12-gabcdef\n", &ma, &mi, &pa), 0);
	CHECK_INT(ma, 4);
	CHECK_INT(mi, 0);
	CHECK_INT(pa, 0);
	CHECK_INT(gs_criu_parse_version("some warning first\nVersion:  3.17.1\n", &ma, &mi, &pa), 0);
	CHECK_INT(ma, 3);
	CHECK_INT(mi, 17);
	CHECK_INT(pa, 1);
	CHECK_INT(gs_criu_parse_version("Version: 10.12.3-rc1\n", &ma, &mi, &pa), 0);
	CHECK_INT(ma, 10);
	CHECK_INT(mi, 12);
	CHECK_INT(pa, 3);
	CHECK_INT(gs_criu_parse_version("criu: command not found\n", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version("Version: four\n", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version("Version: 4\n", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version("", &ma, &mi, &pa), -1);
	CHECK_INT(gs_criu_parse_version(NULL, &ma, &mi, &pa), -1);
}

static void test_version_check(void)
{
	struct gs_err err = { 0 };
	/* one minimum, CRIU 4.2, on every kernel: 4.1 cannot dump an inet socket from Linux 6.16 on */
	struct gs_criu c = { .path = "/x/criu", .major = 4, .minor = 1, .patch = 1, .version = "4.1.1" };
	CHECK_INT(gs_criu_version_check(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "criu '/x/criu' is version 4.1.1; gpusnap needs CRIU >= 4.2");
	CHECK_CONTAINS(err.msg, "network socket on Linux 6.16");
	CHECK_CONTAINS(err.msg, "scripts/get-criu.sh");
	CHECK_CONTAINS(err.msg, "GPUSNAP_CRIU=.cache/criu/bin/criu");
	CHECK(!strchr(err.msg, '\n'));
	/* the message names one version only */
	CHECK(!strstr(err.msg, "4.0"));

	c = (struct gs_criu){ .path = "/x/criu", .major = 4, .minor = 2, .patch = 1, .version = "4.2.1" };
	CHECK_INT(gs_criu_version_check(&c, &err), 0);
	c = (struct gs_criu){ .path = "/x/criu", .major = 5, .minor = 0, .version = "5.0.0" };
	CHECK_INT(gs_criu_version_check(&c, &err), 0);
	c = (struct gs_criu){ .path = "/x/criu", .major = 4, .minor = 0, .version = "4.0.0" };
	CHECK_INT(gs_criu_version_check(&c, &err), GS_E_CRIU);
	c = (struct gs_criu){ .path = "/x/criu", .major = 3, .minor = 17, .patch = 1, .version = "3.17.1" };
	CHECK_INT(gs_criu_version_check(&c, &err), GS_E_CRIU);
	CHECK_CONTAINS(err.msg, "is version 3.17.1; gpusnap needs CRIU >= 4.2");
}

static void test_log_error_skips_rlimit_and_summary(void)
{
	char out[256];
	CHECK_INT(gs_criu_log_error(dump_log_session, out, sizeof(out)), 0);
	CHECK_STR(out, "The root process 6307 is not a session leader. Consider using --shell-job option");
	CHECK_INT(gs_criu_log_error(restore_log_busy, out, sizeof(out)), 0);
	CHECK_STR(out, "Can't fork for 6101: File exists");
}

/* Limits real apps meet (PyTorch jobs on the GPU machines) come with what to do. */
static void test_log_error_known_limits(void)
{
	char out[512];
	const char io_uring[] = "(00.12) Error (criu/proc_parse.c:502): Unknown shit 600 (anon_inode:[io_uring])\n"
				"(00.13) Error (criu/cr-dump.c:1440): Collect mappings (pid: 940) failed with -1\n";
	CHECK_INT(gs_criu_log_error(io_uring, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "Unknown shit 600 (anon_inode:[io_uring]): the process uses io_uring");
	CHECK_CONTAINS(out, "USE_LIBUV=0");
	const char bind[] = "(00.18)   6076: Error (criu/sk-inet.c:1059): inet: Can't bind inet socket (id 148): "
			    "Address already in use\n";
	CHECK_INT(gs_criu_log_error(bind, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "Can't bind inet socket (id 148): Address already in use: a port the process had bound");
	/* a log opened with `>` that grew after the dump: CRIU checks the size of all but write-only O_APPEND files */
	const char grown[] = "(00.30) Error (criu/files-reg.c:2187): File tmp/run/app.log has bad size 329 (expect 248)\n"
			     "(00.31) Error (criu/files.c:1285): Can't open file on restore\n";
	CHECK_INT(gs_criu_log_error(grown, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "File tmp/run/app.log has bad size 329 (expect 248): the process had this file open");
	CHECK_CONTAINS(out, "for appending (`>>`)");
	/* a cause with no known limit is left as CRIU wrote it */
	CHECK_INT(gs_criu_log_error(restore_log_busy, out, sizeof(out)), 0);
	CHECK_STR(out, "Can't fork for 6101: File exists");
}

/* A restore that could not bind a port: which port, and whether TIME_WAIT connections hold it. */
static void test_bind_busy_port(void)
{
	pid_t task = 0;
	int port = 0;
	CHECK(gs_criu_log_restore_port("(00.185366)   6034: inet: \tRestore: family AF_INET    type SOCK_STREAM    "
				       "proto IPPROTO_TCP      port 52707 state TCP_LISTEN       src_addr 192.0.2.2\n",
				       &task, &port));
	CHECK_INT(task, 6034);
	CHECK_INT(port, 52707);
	CHECK(!gs_criu_log_restore_port("(00.1)   6034: sockets: 11 restore sndbuf 3939840 rcv buf 131072\n", &task,
					&port));
	CHECK(!gs_criu_log_restore_port("(00.1)   6034: inet: \tRestore: family AF_INET port 70000 state\n", &task,
					&port));
	CHECK(gs_criu_log_bind_in_use("(00.185379)   6034: Error (criu/sk-inet.c:1059): inet: Can't bind inet socket "
				      "(id 106): Address already in use\n",
				      &task));
	CHECK_INT(task, 6034);
	CHECK(!gs_criu_log_bind_in_use("(00.1) Error (criu/files.c:1221): Unable to open fd=63 id=0x6a\n", &task));

	/* port 52707 = 0xCDE3; state 06 = TIME_WAIT, 0A = LISTEN, 01 = ESTABLISHED */
	const char tcp[] =
		"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
		"   0: 020000C0:CDE3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
		"   1: 020000C0:CDE3 020000C0:9A10 06 00000000:00000000 03:00001234 00000000     0        0 0 3\n"
		"   2: 020000C0:CDE3 020000C0:9A11 06 00000000:00000000 03:00001234 00000000     0        0 0 3\n"
		"   3: 020000C0:9A12 020000C0:CDE3 06 00000000:00000000 03:00001234 00000000     0        0 0 3\n"
		"   4: 020000C0:CDE3 020000C0:9A13 01 00000000:00000000 00:00000000 00000000     0        0 5 1\n";
	CHECK_INT(gs_net_tcp_time_wait(tcp, 52707), 2);
	CHECK_INT(gs_net_tcp_time_wait(tcp, 39442), 1);
	CHECK_INT(gs_net_tcp_time_wait(tcp, 80), 0);
	const char tcp6[] = "  sl  local_address                         remote_address                        st\n"
			    "   0: 0000000000000000FFFF0000020000C0:CDE3 0000000000000000FFFF0000020000C0:9A14 06 0\n";
	CHECK_INT(gs_net_tcp_time_wait(tcp6, 52707), 1);
	CHECK_INT(gs_net_tcp_time_wait("", 52707), 0);
}

static void test_log_error_none(void)
{
	char out[64] = "stale";
	const char only_noise[] =
		"(00.01) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n"
		"(00.02) Warn  (criu/kerndat.c:1285): Can't keep kdat cache on non-tempfs\n"
		"(00.03) Error (criu/cr-dump.c:2111): Dumping FAILED.\n";
	CHECK_INT(gs_criu_log_error(only_noise, out, sizeof(out)), -1);
	CHECK_STR(out, "");
	CHECK_INT(gs_criu_log_error("", out, sizeof(out)), -1);
	CHECK_INT(gs_criu_log_error(NULL, out, sizeof(out)), -1);
	/* "Error (" without the "):" form is not a CRIU error line */
	CHECK_INT(gs_criu_log_error("Error (nothing\n", out, sizeof(out)), -1);
}

static void test_log_error_forms(void)
{
	char out[256];
	/* from a restored task's restorer blob, CRLF, trailing spaces */
	CHECK_INT(gs_criu_log_error("pie: 6307: Error (criu/pie/restorer.c:1899): Unable to map vma  \r\n", out,
				    sizeof(out)),
		  0);
	CHECK_STR(out, "Unable to map vma");
	/* the first meaningful error is the cause, not the consequences after it */
	CHECK_INT(gs_criu_log_error("(1) Error (a.c:1): Can't lookup mount=21 for fd=3 path=/x\n"
				    "(2) Error (cr-dump.c:1600): Dump files (pid: 9) failed with -1\n",
				    out, sizeof(out)),
		  0);
	CHECK_STR(out, "Can't lookup mount=21 for fd=3 path=/x");
	/* truncated to the caller's buffer, still terminated */
	char small[8];
	CHECK_INT(gs_criu_log_error(dump_log_session, small, sizeof(small)), 0);
	CHECK_STR(small, "The roo");
}

static void test_pid_in_use(void)
{
	CHECK_INT(gs_criu_log_pid_in_use(restore_log_busy), 6101);
	CHECK_INT(gs_criu_log_pid_in_use(dump_log_session), -1);
	CHECK_INT(gs_criu_log_pid_in_use("Error (x.c:1): Can't fork for 77: Operation not permitted\n"), -1);
	CHECK_INT(gs_criu_log_pid_in_use(NULL), -1);
}

static void test_needs_shell_job(void)
{
	CHECK(!gs_criu_needs_shell_job(100, 100, 100, 0)); /* daemon: own session and group, no tty */
	CHECK(gs_criu_needs_shell_job(100, 99, 2529, 0));  /* started from a shell script */
	CHECK(gs_criu_needs_shell_job(100, 100, 2529, 0)); /* own group, shell's session */
	CHECK(gs_criu_needs_shell_job(100, 100, 100, 34816)); /* leader with a controlling terminal */
}

static char *joined(const struct gs_argv *a)
{
	static char buf[2048];
	buf[0] = '\0';
	for (size_t i = 0; i < a->n; i++) {
		if (i)
			strcat(buf, " ");
		strcat(buf, a->v[i]);
	}
	return buf;
}

static void test_dump_args(void)
{
	struct gs_criu c = { .path = "/opt/criu/bin/criu" };
	struct gs_err err = { 0 };
	struct gs_argv a = { 0 };
	CHECK_INT(gs_criu_dump_args(&c, 4242, "/img dir", "/img dir/dump.log", NULL, false, &a, &err), 0);
	CHECK_STR(joined(&a),
		  "/opt/criu/bin/criu dump --tree 4242 --images-dir /img dir --log-file /img dir/dump.log -v4 --file-locks");
	/* a path with a space stays one argument: no shell in between */
	CHECK_INT(a.n, 10);
	CHECK_STR(a.v[5], "/img dir");
	CHECK(a.v[a.n] == NULL);
	gs_argv_free(&a);

	const char *const extra[] = { "--ghost-limit", "64M", NULL };
	struct gs_criu_dump_opts o = {
		.leave_running = true,
		.tcp = GS_CRIU_TCP_CLOSE,
		.no_file_locks = true,
		.libdir = "/usr/lib/gpusnap/criu",
		.extra_args = extra,
	};
	CHECK_INT(gs_criu_dump_args(&c, 7, "/i", "/i/dump.log", &o, true, &a, &err), 0);
	CHECK_STR(joined(&a), "/opt/criu/bin/criu dump --tree 7 --images-dir /i --log-file /i/dump.log -v4 --shell-job "
			      "--tcp-close --leave-running --libdir /usr/lib/gpusnap/criu --ghost-limit 64M");
	gs_argv_free(&a);

	o = (struct gs_criu_dump_opts){ .tcp = GS_CRIU_TCP_ESTABLISHED };
	CHECK_INT(gs_criu_dump_args(&c, 7, "/i", "/i/dump.log", &o, false, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "--file-locks --tcp-established");
	CHECK(!strstr(joined(&a), "--network-lock"));
	gs_argv_free(&a);
	/* connections only between processes of the tree: no lock (criu.c, gs_criu_tcp_plan) */
	o.skip_network_lock = true;
	CHECK_INT(gs_criu_dump_args(&c, 7, "/i", "/i/dump.log", &o, false, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "--file-locks --tcp-established --network-lock=skip");
	gs_argv_free(&a);
	/* a connection to outside on a host without iptables: CRIU's nftables lock */
	o.skip_network_lock = false;
	o.nft_network_lock = true;
	CHECK_INT(gs_criu_dump_args(&c, 7, "/i", "/i/dump.log", &o, false, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "--file-locks --tcp-established --network-lock=nftables");
	gs_argv_free(&a);
	CHECK_INT(a.n, 0);
	CHECK(a.v == NULL);
}

static void test_restore_args(void)
{
	struct gs_criu c = { .path = "criu" };
	struct gs_err err = { 0 };
	struct gs_argv a = { 0 };
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/w/restore.log", "/w/restore.pid", NULL, NULL, &a, &err), 0);
	CHECK_STR(joined(&a), "criu restore --images-dir /i --restore-detached --pidfile /w/restore.pid --log-file "
			      "/w/restore.log -v4");
	gs_argv_free(&a);

	/* the flags the dump recorded come back; look-alikes do not */
	const char recorded[] = "criu\ndump\n--tree\n5\n--shell-job\n--file-locks\n--tcp-established\n--libdir\n/p\n";
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/i/restore.log", "/i/restore.pid", NULL, recorded, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --shell-job --file-locks --tcp-established");
	CHECK(!strstr(joined(&a), "--libdir"));
	gs_argv_free(&a);

	/* a lazy restore: --lazy-pages, and its daemon's command line */
	struct gs_criu_lazy lazy;
	struct gs_criu_restore_opts lo = { .lazy = &lazy };
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/w/restore.log", "/w/restore.pid", &lo, NULL, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --lazy-pages");
	gs_argv_free(&a);
	CHECK_INT(gs_criu_lazy_args(&c, "/proc/self/fd/6", "/w", "/w/lazy-pages.log", 9, &a, &err), 0);
	CHECK_STR(joined(&a), "criu lazy-pages --images-dir /proc/self/fd/6 --work-dir /w --log-file /w/lazy-pages.log "
			      "-v4 --status-fd 9");
	gs_argv_free(&a);

	/* a dump without a network lock: its restore takes none either */
	const char unlocked[] = "criu\ndump\n--tree\n5\n--tcp-established\n--network-lock=skip\n";
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", NULL, unlocked, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --tcp-established --network-lock=skip");
	gs_argv_free(&a);
	/* a dump locked with nftables: its restore locks with nftables too */
	const char nft[] = "criu\ndump\n--tree\n5\n--tcp-established\n--network-lock=nftables\n";
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", NULL, nft, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --tcp-established --network-lock=nftables");
	gs_argv_free(&a);
	/* dumped under iptables' lock, restored where only nftables is (gs_criu_restore decides) */
	const char locked[] = "criu\ndump\n--tree\n5\n--tcp-established\n";
	struct gs_criu_restore_opts no = { .nft_network_lock = true };
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", &no, locked, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --tcp-established --network-lock=nftables");
	gs_argv_free(&a);
	CHECK(gs_criu_args_has(locked, "--tcp-established"));
	CHECK(!gs_criu_args_has(locked, "--tcp-establishe"));
	CHECK(!gs_criu_args_has(NULL, "--tcp-established"));

	const char lookalike[] = "criu\ndump\n--shell-jobs\n/tmp/--file-locks\n--tcp-close\n--network-lock=skipped";
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", NULL, lookalike, &a, &err), 0);
	CHECK(!strstr(joined(&a), "--shell-job"));
	CHECK(!strstr(joined(&a), "--file-locks"));
	CHECK_CONTAINS(joined(&a), "-v4 --tcp-close");
	CHECK(!strstr(joined(&a), "--network-lock"));
	gs_argv_free(&a);

	const char *const extra[] = { "--manage-cgroups", "ignore", NULL };
	struct gs_criu_restore_opts o = { .shell_job = true, .libdir = "/plugins", .extra_args = extra };
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", &o, NULL, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "-v4 --shell-job --libdir /plugins --manage-cgroups ignore");
	CHECK(!strstr(joined(&a), "--leave-stopped"));
	gs_argv_free(&a);

	/* restore brings the process back stopped while it finishes (cmd_restore.c) */
	o.leave_stopped = true;
	CHECK_INT(gs_criu_restore_args(&c, "/i", "/l", "/p", &o, NULL, &a, &err), 0);
	CHECK_CONTAINS(joined(&a), "--libdir /plugins --leave-stopped --manage-cgroups ignore");
	gs_argv_free(&a);
}

int main(void)
{
	RUN(test_parse_version);
	RUN(test_version_check);
	RUN(test_log_error_skips_rlimit_and_summary);
	RUN(test_log_error_none);
	RUN(test_log_error_known_limits);
	RUN(test_bind_busy_port);
	RUN(test_log_error_forms);
	RUN(test_pid_in_use);
	RUN(test_needs_shell_job);
	RUN(test_dump_args);
	RUN(test_restore_args);
	return TEST_SUMMARY();
}
