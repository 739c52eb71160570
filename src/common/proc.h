/*
 * proc.h - facts about Linux processes read from /proc and kill(2):
 * does a PID exist, may we act on it, its command name, its descendants.
 */
#ifndef GPUSNAP_COMMON_PROC_H
#define GPUSNAP_COMMON_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

/*
 * Whether pid is a process that can still run: GS_PROC_LIVES; GS_PROC_NONE
 * when no such PID exists; GS_PROC_ZOMBIE when it has ended and its parent
 * (*zombie_parent, where not NULL) has not reaped it yet. A zombie is gone:
 * it has no memory, no GPU state and no agent, only its PID and its record
 * in /proc, so every "does the process exist" of gpusnap asks this (or
 * gs_proc_alive, gs_proc_check), never kill(pid, 0) alone.
 */
enum gs_proc_life { GS_PROC_NONE = 0, GS_PROC_LIVES, GS_PROC_ZOMBIE };
int gs_proc_life(pid_t pid, pid_t *zombie_parent);
/* gs_proc_life(pid) == GS_PROC_LIVES: pid exists (ours or another user's) and is no zombie. */
bool gs_proc_alive(pid_t pid);
/*
 * 0 if pid lives (gs_proc_life) and we may signal it; GS_E_NO_PROCESS (no
 * such PID, or a zombie: "process N has ended (a zombie ...)") or
 * GS_E_PERMISSION with err set.
 */
int gs_proc_check(pid_t pid, struct gs_err *err);
/*
 * Short command name (comm) as the process set it, "?" if unreadable:
 * prctl(PR_SET_NAME) puts anything there, so JSON takes it as it is and a
 * terminal or a log line only through gs_printable (printable.h).
 */
void gs_proc_comm(pid_t pid, char *buf, size_t n);
/* The fields of /proc/PID/stat gpusnap uses. */
struct gs_proc_stat {
	char state; /* 'R', 'S', 'Z', ... */
	pid_t ppid, pgrp, session;
	int tty_nr;
	unsigned long long start_time; /* clock ticks after boot: with the PID, names one process */
};
/* Reads /proc/PID/stat (comm may hold spaces and parentheses). 0, or -1 if unreadable. */
int gs_proc_read_stat(pid_t pid, struct gs_proc_stat *st);
/* PID's start time (struct gs_proc_stat), or 0 when no such process can be read. */
unsigned long long gs_proc_start_time(pid_t pid);
/* The same for thread tid of process pid (/proc/PID/task/TID/stat): a thread's own state. */
int gs_proc_read_task_stat(pid_t pid, pid_t tid, struct gs_proc_stat *st);
/*
 * True when every thread of pid is stopped: by SIGSTOP, SIGTSTP and the
 * like ('T'), or, with traced_too, by a tracer ('t'). Such a process runs
 * none of its code, the gpusnap agent's threads included, until it
 * continues.
 */
bool gs_proc_all_stopped(pid_t pid, bool traced_too);
/*
 * True when pid's cgroup is frozen (`docker pause`, `podman pause`, a
 * freezer of cgroup v1 or v2): its threads run nothing until it is thawed.
 * cgroup gets the cgroup's path (as /proc/PID/cgroup names it).
 */
bool gs_proc_frozen(pid_t pid, char *cgroup, size_t n);
/* What keeps a process from running its code (gs_proc_halted). */
enum gs_proc_halt { GS_PROC_RUNS = 0, GS_PROC_STOPPED, GS_PROC_FROZEN };
/*
 * Whether pid is held: its cgroup frozen (gs_proc_frozen, asked first), or
 * every thread stopped (gs_proc_all_stopped). why gets what holds it
 * ("stopped (SIGSTOP or SIGTSTP)", with traced_too "..., or a debugger
 * holds it)", "frozen (its cgroup PATH is: a paused container)") and until
 * what lets it go on ("it continues (kill -CONT PID)", "it is thawed
 * (unpause it)"), for the callers' messages.
 */
enum gs_proc_halt gs_proc_halted(pid_t pid, bool traced_too, char *why, size_t nwhy, char *until, size_t nuntil);
/* Parent PID from /proc/PID/stat; -1 if unreadable. */
pid_t gs_proc_ppid(pid_t pid);
/*
 * pid followed by all its descendants, parents before children (breadth first).
 * *out is malloc'd. Returns 0 or an error code with err set.
 */
int gs_proc_tree(pid_t pid, pid_t **out, size_t *count, struct gs_err *err);
/*
 * The first process of pid's tree (in gs_proc_tree's order) for which
 * match(process, arg) is true, in *found; 0 there when none is. Returns 0 or
 * gs_proc_tree's error.
 */
int gs_proc_tree_find(pid_t pid, bool (*match)(pid_t process, void *arg), void *arg, pid_t *found,
		      struct gs_err *err);
/*
 * Whether the process maps a file whose path contains one of needles (a
 * NULL-terminated list, e.g. { "libcuda.so", NULL }): 1 if it does, 0 if
 * not, -errno if its maps cannot be read (-EACCES: another user's; -ENOENT:
 * gone).
 */
int gs_proc_maps_contain(pid_t pid, const char *const *needles);

/*
 * Effective uid and innermost pid (NSpid's last field: the pid the process
 * sees for itself in its own namespace) from /proc/<pid>/status; *nspid is
 * pid where the kernel shows no NSpid. 0, or -1 when the file is unreadable.
 */
int gs_proc_status_ids(pid_t pid, uid_t *euid, pid_t *nspid);
/* The PID pid has in its own namespace (gs_proc_status_ids' nspid), or 0 where /proc does not say. */
pid_t gs_proc_own_pid(pid_t pid);
/* True if the process has an open file whose path starts with prefix (e.g. "/dev/nvidia"). */
bool gs_proc_has_open_file(pid_t pid, const char *prefix);

/*
 * Where the GPU driver's device files are: "/dev/nvidia" (nvidiactl,
 * nvidia0, nvidia-uvm ...), or GPUSNAP_DEVICE_PATH_PREFIX where set (tests
 * without a GPU name a file of their own).
 */
const char *gs_gpu_device_prefix(void);
/* True if the process maps or has open a file whose path starts with gs_gpu_device_prefix(). */
bool gs_proc_holds_gpu_device(pid_t pid);

/* One mapping of a /proc/PID/maps text. */
struct gs_maps_entry {
	uintptr_t start, end;
	int prot; /* PROT_READ | PROT_WRITE | PROT_EXEC as the perms say */
	bool shared;
};
/*
 * Reads the /proc/PID/maps text on fd to its end and stores in out[] (up to
 * max) the mappings whose path starts with prefix. Returns how many there
 * are in all (more than max when out[] was too small), or -1 when a read
 * fails or a line does not parse. Async-signal-safe: read(2) and a buffer
 * on the stack, nothing allocated, no lock (the agent calls it in a fork
 * child of a threaded process).
 */
int gs_maps_find(int fd, const char *prefix, struct gs_maps_entry *out, int max);
/*
 * This process's descriptors whose file's path starts with prefix, in
 * out[] (up to max); returns how many there are in all, or -1 when
 * /proc/self/fd cannot be read. Async-signal-safe like gs_maps_find
 * (getdents64 and readlink, nothing allocated).
 */
int gs_fds_find(const char *prefix, int *out, int max);
/*
 * Brings pid's environment strings into its memory where they are not yet:
 * in a process restored with CRIU's lazy pages, until its lazy-pages daemon
 * has put that page in, /proc/PID/environ reads as empty (the kernel's read
 * of another process's memory there cannot wait for a userfaultfd page).
 * Reading the range with process_vm_readv can wait: the fault goes to the
 * daemon, which serves that page at once. Nothing for a process whose
 * environment is in memory; failures (no such process, not allowed) are
 * left to the read that follows.
 */
void gs_proc_fault_in_environ(pid_t pid);

#endif
