/*
 * criu.h - driving the criu command (CRIU >= 4.2) to dump
 * a process tree's CPU state into a folder of CRIU images and to restore it from there.
 *
 * gpusnap runs criu as a child process (never through a shell), in a process group
 * of its own, with a time limit, and reads criu's own log file to explain a failure
 * in one line. Which criu: $GPUSNAP_CRIU, else the first `criu` on PATH;
 * scripts/get-criu.sh provides one (docs/CRIU.md). Every dump and restore names a
 * plugin folder of gpusnap's own (gs_criu_set_home), so CRIU never loads the
 * plugins of its default folder. The pure parts (version decision, log reading,
 * argument building) are exposed so they can be tested without CRIU.
 *
 * Threads: one gs_criu is used by one thread at a time; gs_criu_interrupt is the
 * one function meant for a signal handler.
 */
#ifndef GPUSNAP_CRIU_CRIU_H
#define GPUSNAP_CRIU_CRIU_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"
#include "criu/run.h"

/*
 * The oldest CRIU gpusnap accepts, one version on every kernel: from Linux 6.16 on
 * the kernel refuses SO_PASSCRED/SO_PASSSEC on sockets other than AF_UNIX and
 * AF_NETLINK, and CRIU before 4.2 fails to dump any process holding an inet socket
 * ("Can't get 1:16 opt: Operation not supported"); CRIU 3.x fails on 6.x kernels.
 * A minimum that held on one kernel and not on the next would be a trap on upgrade.
 */
#define GS_CRIU_MIN_MAJOR 4
#define GS_CRIU_MIN_MINOR 2
#define GS_CRIU_MIN_TEXT "4.2" /* the same, for messages */
/*
 * What a user is told to do when criu is missing or too old: the CRIU that `make
 * test` fetched (scripts/get-criu.sh puts it in .cache/criu of the source tree).
 */
#define GS_CRIU_HOWTO                                                                              \
	"run scripts/get-criu.sh (it puts one in .cache/criu of the source tree) and set "         \
	"GPUSNAP_CRIU=.cache/criu/bin/criu, or install criu >= " GS_CRIU_MIN_TEXT " on PATH"

/*
 * Every dump, restore and check runs at most this long unless GPUSNAP_CRIU_TIMEOUT
 * (seconds, > 0) says otherwise; criu is then killed with its process group.
 */
#define GS_CRIU_TIMEOUT_S 600.0
#define GS_CRIU_TIMEOUT_ENV "GPUSNAP_CRIU_TIMEOUT"
/* Logs of failed criu runs kept in the home's logs/ folder; older ones are deleted. */
#define GS_CRIU_LOGS_KEPT 20
/* The folders in gpusnap's home for criu (gs_criu_set_home). */
#define GS_CRIU_PLUGIN_SUBDIR "plugins"
#define GS_CRIU_LOG_SUBDIR "logs"

/* Files gpusnap keeps next to CRIU's images (in the images folder, or restore's work_dir). */
#define GS_CRIU_DUMP_LOG "dump.log"
#define GS_CRIU_RESTORE_LOG "restore.log"
#define GS_CRIU_RESTORE_PIDFILE "restore.pid"
/* In a lazy restore's work folder: the daemon's log, and the socket through which criu restore reaches it. */
#define GS_CRIU_LAZY_LOG "lazy-pages.log"
#define GS_CRIU_LAZY_SOCKET "lazy-pages.socket" /* CRIU's own name, in its --work-dir */
/* The arguments a dump ran with, one per line, so restore can repeat the flags it needs. */
#define GS_CRIU_DUMP_ARGS "gpusnap-criu-dump.args"

struct gs_criu {
	char path[PATH_MAX]; /* what is executed: a criu binary or a wrapper script */
	int major, minor, patch;
	char version[32]; /* as criu printed it, "4.2.1" */
	double timeout_s; /* limit of each run: GPUSNAP_CRIU_TIMEOUT, else GS_CRIU_TIMEOUT_S */
	/* Set by gs_criu_set_home; "" before: dump and restore refuse to run then. */
	char plugin_dir[PATH_MAX]; /* --libdir of every dump and restore */
	char log_dir[PATH_MAX];    /* where the logs of failed runs are kept */
};

enum gs_criu_shell_job {
	/* --shell-job when the process is not the leader of its own session and
	 * process group, or has a controlling terminal (CRIU refuses those otherwise). */
	GS_CRIU_SHELL_JOB_AUTO = 0,
	GS_CRIU_SHELL_JOB_ON,
	GS_CRIU_SHELL_JOB_OFF,
};

enum gs_criu_tcp {
	GS_CRIU_TCP_REFUSE = 0,  /* CRIU's default: a dump with an established connection fails */
	GS_CRIU_TCP_ESTABLISHED, /* --tcp-established: connections saved and restored (needs a network lock) */
	GS_CRIU_TCP_CLOSE,       /* --tcp-close: connections restored closed (peers see a reset) */
};

/* A zeroed struct is the default for each. */
struct gs_criu_dump_opts {
	bool leave_running; /* --leave-running: the process continues after the dump */
	enum gs_criu_shell_job shell_job;
	enum gs_criu_tcp tcp;
	bool no_file_locks;            /* leave out --file-locks (on by default: held locks are saved) */
	bool skip_network_lock;        /* --network-lock=skip (gs_criu_dump sets it from gs_criu_tcp_plan) */
	bool nft_network_lock;         /* --network-lock=nftables (likewise) */
	const char *libdir;            /* --libdir: folder of CRIU plugins (*.so); NULL: the home's plugins/ */
	double timeout_s;              /* kill criu after this long; <= 0: the criu's timeout_s */
	const char *const *extra_args; /* NULL-terminated, appended as given; NULL: none */
};

/*
 * A `criu lazy-pages` daemon serving one restore's CPU memory
 * (gs_criu_restore_opts.lazy): criu restore --lazy-pages brings the process
 * back with its private anonymous memory empty and hands the daemon a
 * userfaultfd of it; the daemon puts each page in on first touch and all the
 * others in the background, reading the same images, and exits once every
 * page is in. Until then the process's memory is incomplete: a daemon that
 * dies leaves pages that read as zeros, so its end must be checked
 * (gs_criu_lazy_check) and a process whose daemon failed killed.
 */
struct gs_criu_lazy {
	struct gs_run_proc proc; /* the daemon; proc.pid 0 when none runs */
	double started;          /* gs_now() when it was started */
	double ended;            /* gs_now() when it was seen to end; 0 before */
	int rc;                  /* how it ended: 0 (every page in), GS_E_CRIU or GS_E_TIMEOUT; set with ended */
	char msg[GS_ERR_MSG_MAX]; /* rc's one line */
	char why[GS_ERR_MSG_MAX]; /* how it ended, for msg: "killed by signal 9: <its log's error> (log: ...)" */
	char log_path[PATH_MAX];
	char log_dir[PATH_MAX];  /* the criu's, where a failed daemon's log is kept */
	double timeout_s;        /* its limit (the criu's timeout) */
	pid_t served;            /* the restored root whose pages it serves, for messages */
	bool start_failed;       /* gs_criu_restore failed because the daemon did not start (nothing was restored) */
};

struct gs_criu_restore_opts {
	/* Flags added to those the dump recorded in GS_CRIU_DUMP_ARGS (--shell-job,
	 * --file-locks, --tcp-*), which restore repeats by itself. */
	bool shell_job;
	enum gs_criu_tcp tcp;
	const char *libdir;            /* --libdir: folder of CRIU plugins; NULL: the home's plugins/ */
	const char *work_dir;          /* where restore.log and restore.pid go; NULL: the images folder */
	double timeout_s;              /* kill criu after this long; <= 0: the criu's timeout_s */
	const char *const *extra_args; /* NULL-terminated, appended as given; NULL: none */
	bool leave_stopped;            /* --leave-stopped: the process comes back stopped (SIGSTOP) */
	/* --network-lock=nftables: established connections restored on a host without iptables-restore
	 * (gs_criu_restore sets it where CRIU can lock with nftables there) */
	bool nft_network_lock;
	/*
	 * The PID of the image's root task (the dumped process's, from the manifest),
	 * or 0 if unknown. When criu fails, runs past its time or is interrupted
	 * (gs_criu_interrupt), the task it left at that PID (half restored: it may
	 * hang in the image's files, and it outlives criu) is killed, if it was
	 * created by this restore.
	 */
	pid_t image_pid;
	/*
	 * Non-NULL: restore with --lazy-pages, a `criu lazy-pages` daemon started
	 * for it first (its socket and log in work_dir, which must be given and
	 * private), ready before criu restore runs. On success the daemon runs on
	 * in *lazy, serving the pages: the caller checks it (gs_criu_lazy_check)
	 * and ends it (gs_criu_lazy_stop); on failure none is left.
	 */
	struct gs_criu_lazy *lazy;
	/*
	 * A lazy restore: called once its daemon listens, before criu restore
	 * runs (at each try): what must be done before the daemon may serve a
	 * page (gpusnap restore's checksum pass over CRIU's files, run while
	 * the daemon starts). Non-zero fails the restore with err as it set
	 * it, the daemon stopped. NULL: none.
	 */
	int (*before_restore)(void *ctx, struct gs_err *err);
	void *before_ctx;
};

/*
 * Whether userfaultfd can serve a restore's pages here, as criu (run as
 * this user) would open it: GS_E_PERMISSION where it is for root only
 * (vm.unprivileged_userfaultfd 0, a user without CAP_SYS_PTRACE);
 * GS_E_CRIU where the kernel lacks it or the events CRIU's lazy restore
 * needs (fork, remap, remove, unmap: what `criu check --feature
 * uffd-noncoop` asks). 0 when it can. The one-line reason, without
 * "gpusnap: ", in why. Fault point GS_FI_CRIU_UFFD makes it say no, as a
 * kernel without it would.
 */
int gs_criu_uffd_usable(char *why, size_t n);

/*
 * How the daemon of a lazy restore is doing. wait: until it ends (at most
 * its limit, then it is killed: GS_E_TIMEOUT); else only a look. 0 when it
 * ended with every page in, or (without wait) still runs; GS_E_CRIU when it
 * failed or was killed, naming it, its status and its log's first error,
 * in err. The outcome is kept: asking again gives the same.
 */
int gs_criu_lazy_check(struct gs_criu_lazy *l, bool wait, struct gs_err *err);
/* Kills a daemon that still runs and waits for it; nothing when none runs. */
void gs_criu_lazy_stop(struct gs_criu_lazy *l);

/*
 * Finds criu ($GPUSNAP_CRIU, else PATH), runs `criu --version` and requires the
 * version gs_criu_version_check asks for on this kernel. GS_E_CRIU naming what was
 * found and what to do when it is missing or too old; GS_E_USAGE for a bad
 * GPUSNAP_CRIU_TIMEOUT.
 */
int gs_criu_find(struct gs_criu *c, struct gs_err *err);

/*
 * Gives criu a folder of gpusnap's own, dir (created 0700 if missing; it and its
 * subfolders must belong to this user and are made private), holding:
 *  - plugins/: the plugin folder every dump and restore passes as --libdir, so a
 *    plugin in CRIU's default folder (/usr/lib/criu, or $CRIU_LIBS_DIR), such as
 *    CRIU's cuda_plugin.so, is never loaded. Empty: gpusnap does the GPU part itself.
 *  - logs/: the log of each failed run, kept (the newest GS_CRIU_LOGS_KEPT) so the
 *    error message can name a log that still exists.
 * The command line uses its run directory's criu/ (docs/CRIU.md).
 */
int gs_criu_set_home(struct gs_criu *c, const char *dir, struct gs_err *err);

/*
 * Whether criu, run by this process as gpusnap runs it (no --unprivileged),
 * may dump and restore at all, asked before anything is touched. As root:
 * criu gets this process's bounding and inheritable capabilities (only the
 * ambient ones under SECBIT_NOROOT) and needs CAP_CHECKPOINT_RESTORE or
 * CAP_SYS_ADMIN, as criu's first check does; read with capget(2). As another
 * user, criu's capabilities come from its own file (setcap) and its mode from
 * its configuration files, which gpusnap cannot see: criu itself is asked
 * (`criu check --feature mnt_id`, a quick one past its rights checks).
 * GS_E_PERMISSION naming what is missing and what to do; 0 otherwise (other
 * failures of the probe are left to the real run).
 */
int gs_criu_check_rights(const struct gs_criu *c, struct gs_err *err);

/* Runs `criu check`; GS_E_CRIU with criu's complaint when the kernel lacks something. */
int gs_criu_check(const struct gs_criu *c, struct gs_err *err);

/*
 * What a dump does with the connected TCP sockets of pid's tree
 * (common/tcp_conns.h), asked: the --tcp-* the user gave.
 *  - --tcp-close: closed, as asked (inside counts those between processes
 *    of the tree, which the dump warns about).
 *  - Every connection between two processes of the tree (torch's TCPStore
 *    and its clients, torchrun and its workers): --tcp-established
 *    without a network lock, asked or not: both ends come back as they were
 *    and no peer outside can meet a missing socket meanwhile.
 *  - A connection to outside the tree: GS_E_CRIU unless --tcp-established
 *    was asked. CRIU then locks the network meanwhile: with iptables-restore
 *    where it is on PATH (CRIU's default), else through its own libnftables
 *    where c's CRIU and the kernel support that (`criu check --feature
 *    network_lock_nftables`; nft_network_lock), else GS_E_CRIU.
 * The message names the process and the connection. c may be NULL (no
 * nftables asked of it).
 */
struct gs_criu_tcp_plan {
	enum gs_criu_tcp tcp;
	bool skip_network_lock;
	bool nft_network_lock;
	size_t inside, outside; /* connections found, by where the other end is */
};
int gs_criu_tcp_plan(const struct gs_criu *c, pid_t pid, enum gs_criu_tcp asked, struct gs_criu_tcp_plan *plan,
		     struct gs_err *err);

/*
 * Checks what CRIU needs of the process before anything is stopped: that it
 * exists, that its session leader lives in its PID namespace (session ID 0
 * as seen from here; CRIU cannot dump such a process, --shell-job or not),
 * gs_criu_check_io_uring of its tree and gs_criu_tcp_plan for tcp (its plan
 * in *plan unless NULL). GS_E_NO_PROCESS or GS_E_CRIU with a one-line
 * message saying what to do.
 */
int gs_criu_dumpable(const struct gs_criu *c, pid_t pid, enum gs_criu_tcp tcp, struct gs_criu_tcp_plan *plan,
		     struct gs_err *err);

/*
 * CRIU cannot dump an io_uring instance: GS_E_CRIU naming the first process
 * of root's tree that holds one (libuv's event loops set one up; the agent
 * keeps them from the app, agent_io_uring.h), 0 when none does.
 */
int gs_criu_check_io_uring(pid_t root, struct gs_err *err);

/*
 * Dumps the process tree rooted at pid into images_dir (created 0700 if missing).
 * The log is images_dir/dump.log (-v4). Without leave_running the process is gone
 * afterwards (criu kills it; this waits up to 5 s for it to disappear). On failure
 * GS_E_CRIU (GS_E_NO_PROCESS, GS_E_PERMISSION, GS_E_TIMEOUT where they fit) with
 * CRIU's first meaningful error line and the path of the log's copy kept in the
 * home's logs/ (none named when no log could be kept). Refuses (GS_E_FAILURE)
 * before gs_criu_set_home unless o->libdir names the plugin folder.
 */
int gs_criu_dump(const struct gs_criu *c, pid_t pid, const char *images_dir,
		 const struct gs_criu_dump_opts *o, struct gs_err *err);

/*
 * Restores the process tree from images_dir, detached (-d): the processes run on
 * after criu exits, as children of init. *restored_pid gets the root's PID, which
 * is the PID it had when dumped (CRIU restores PIDs); that PID must be free, else
 * GS_E_CRIU naming who holds it. opts may be NULL. On failure (GS_E_TIMEOUT when
 * criu ran past its time) the task left at o->image_pid is killed (see there) and
 * the message names the kept log, as for a dump.
 */
int gs_criu_restore(const struct gs_criu *c, const char *images_dir, const struct gs_criu_restore_opts *o,
		    pid_t *restored_pid, struct gs_err *err);

/*
 * For a signal handler of a command that ends on the signal (async-signal-safe:
 * only kill(2)): kills the criu now running, with its process group, and, during
 * a restore, the task at the restore's image_pid. A restored task sits in a
 * session of its own and outlives criu, so the second kill is what stops it.
 * Does nothing when no criu runs.
 */
void gs_criu_interrupt(void);

/*
 * Kills the task at pid if it started at or after started_ticks (clock ticks since
 * boot, as /proc/PID/stat's start time; gs_criu_boot_ticks() before criu ran):
 * what a failed or interrupted restore left there, never an older process that
 * holds the PID. Waits up to 5 s for it to be gone (or a zombie). true if one was killed.
 */
bool gs_criu_kill_leftover(pid_t pid, unsigned long long started_ticks);
/* Clock ticks since boot now (CLOCK_BOOTTIME in /proc/PID/stat's unit). */
unsigned long long gs_criu_boot_ticks(void);

/* ---- pure helpers, exposed for tests ---- */

/* A growable NULL-terminated argument vector; each item is owned (malloc'd). */
struct gs_argv {
	char **v;
	size_t n, cap;
};
/* Appends a copy of s; -1 when out of memory. */
int gs_argv_add(struct gs_argv *a, const char *s);
void gs_argv_free(struct gs_argv *a);

/* Finds "Version: X.Y[.Z]" in `criu --version` output. 0 or -1. */
int gs_criu_parse_version(const char *text, int *major, int *minor, int *patch);


/*
 * Whether criu c (path and version filled in) is new enough. 0, or
 * GS_E_CRIU with one line naming the version found, the one needed, why, and
 * what to do.
 */
int gs_criu_version_check(const struct gs_criu *c, struct gs_err *err);

/*
 * The first meaningful "Error (...)" line of a CRIU log, without its timestamp and
 * source location ("The root process 6307 is not a session leader. ..."), into out.
 * Known harmless errors (RLIMIT_NOFILE) and summary lines ("Dumping FAILED.") are
 * skipped; 0 if one was found, -1 if none (out is then "").
 */
int gs_criu_log_error(const char *log_text, char *out, size_t n);

/* The PID that CRIU could not take in a "Can't fork for N: File exists" line; -1 if none. */
pid_t gs_criu_log_pid_in_use(const char *log_text);

/*
 * A socket CRIU could not bind on restore, from its log read line by line:
 * gs_criu_log_restore_port takes a task's "inet: Restore: ... port N ..."
 * line (*task, *port; false for any other line), gs_criu_log_bind_in_use its
 * "Can't bind inet socket (id N): Address already in use" line (*task). The
 * port is the one the task logged last before its failure.
 */
bool gs_criu_log_restore_port(const char *line, pid_t *task, int *port);
bool gs_criu_log_bind_in_use(const char *line, pid_t *task);
/*
 * How many TCP sockets in TIME_WAIT have the local port `port` in the text of
 * /proc/net/tcp or /proc/net/tcp6 (same format).
 */
int gs_net_tcp_time_wait(const char *proc_net_tcp, int port);

/* The flags decision for AUTO from /proc/PID/stat fields: pgrp, session, tty_nr. */
bool gs_criu_needs_shell_job(pid_t pid, pid_t pgrp, pid_t session, int tty_nr);

/* Builds the full criu dump command line (argv[0] = c->path). log_path absolute. */
int gs_criu_dump_args(const struct gs_criu *c, pid_t pid, const char *images_dir, const char *log_path,
		      const struct gs_criu_dump_opts *o, bool shell_job, struct gs_argv *out, struct gs_err *err);

/*
 * Builds the criu restore command line. recorded: the text of GS_CRIU_DUMP_ARGS
 * (NULL if absent); its --shell-job, --file-locks, --tcp-established, --tcp-close
 * and --network-lock=skip or =nftables are repeated.
 */
int gs_criu_restore_args(const struct gs_criu *c, const char *images_dir, const char *log_path,
			 const char *pidfile, const struct gs_criu_restore_opts *o, const char *recorded,
			 struct gs_argv *out, struct gs_err *err);
/* True when flag is one whole line of recorded (GS_CRIU_DUMP_ARGS' text; NULL: false). */
bool gs_criu_args_has(const char *recorded, const char *flag);
/*
 * Builds the `criu lazy-pages` command line of a lazy restore: its images,
 * work folder (where its socket goes), log, and --status-fd status_fd (criu
 * writes a byte there and closes it once it listens).
 */
int gs_criu_lazy_args(const struct gs_criu *c, const char *images_dir, const char *work_dir, const char *log_path,
		      int status_fd, struct gs_argv *out, struct gs_err *err);

#endif
