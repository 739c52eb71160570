/*
 * op_lock.h - one gpusnap operation per process at a time, and what an
 * operation that was killed left behind.
 *
 * suspend, resume and dump lock the process they act on, restore the PID its
 * image needs (and the restored process once it exists): an exclusive flock()
 * on <run dir>/op-<pid>-<start>.lock, where start is the process's start time
 * (0 for "the PID an image needs"), so a reused PID is another key and a
 * gpusnap that dies in any way, kill -9 included, releases its lock. A second
 * operation on the same process fails at once (GS_E_STATE) naming the one at
 * work.
 *
 * Beside its lock the holder keeps a record, <run dir>/op-<pid>-<start>.rec,
 * replaced whole (rename) at each step: the operation, the holder's PID and
 * start time, the step, where the process's GPU data is if not on the GPU,
 * and the two sentences a user needs if gpusnap dies at that step: one for
 * when the process still exists, one for when it is gone. It is removed when
 * the operation ends. A record whose holder is dead is a killed operation's:
 * the next command on the process (state, suspend, resume, dump, restore)
 * says what it left, and resume takes the GPU data from where it says.
 * The lock is per user, like the run directory: root's gpusnap and the
 * process owner's do not see each other's operations.
 *
 * Leftovers: every cli_op_begin removes, for processes that are gone (no
 * process with that PID and start time), the lock files and half-written
 * records killed operations left, and their records once these have nothing
 * left to tell (no sentence for a gone process, or the image it names is
 * gone too); never a key whose lock is held or whose holder still runs.
 */
#ifndef GPUSNAP_CLI_OP_LOCK_H
#define GPUSNAP_CLI_OP_LOCK_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/err.h"

/* What a record says; the sentences are complete, one line each. */
struct cli_op_record {
	char action[16];  /* "dump", "restore", ... */
	char step[32];    /* where the operation was */
	pid_t holder;     /* the gpusnap process that wrote it */
	bool holder_alive; /* that gpusnap still runs: the operation is at work */
	double since;     /* when the operation began (seconds since the epoch) */
	unsigned long long restored_start; /* restore: the start time of the process it brought back, 0 before */
	char image[PATH_MAX]; /* where the process's GPU data is ("" if on the GPU or with the driver) */
	char if_alive[GS_ERR_MSG_MAX]; /* what to tell while the process exists ("" if nothing to tell) */
	char if_gone[GS_ERR_MSG_MAX];  /* what to tell once it is gone */
};

struct cli_op;

/*
 * Locks process pid for action ("dump") without waiting; image_pid: the lock
 * of the PID an image needs (restore), not of a running process. GS_E_STATE
 * with a one-line message naming the operation at work when another gpusnap
 * holds it; GS_E_NO_PROCESS when pid does not exist (not for image_pid). A
 * record a killed operation left is copied into *left (left->action[0] is 0
 * when there was none) and kept until this operation ends well.
 */
int cli_op_begin(pid_t pid, bool image_pid, const char *action, struct cli_op **op, struct cli_op_record *left,
		 struct gs_err *err);
/*
 * Replaces the record: the step reached, where the GPU data is (NULL: on the
 * GPU or with the driver) and what to tell if gpusnap dies from here on
 * (one sentence each; NULL: nothing). Failures are logged, never fatal: the
 * record is advice, the lock is what keeps others out.
 */
void cli_op_step(struct cli_op *op, const char *step, const char *image, const char *if_alive, const char *if_gone);
/*
 * restore: the process it brought back. Takes that process's lock too (an
 * operation on it waits for the restore to end) and writes the record for
 * both keys from now on.
 */
void cli_op_restored(struct cli_op *op, pid_t pid);
/*
 * Ends the operation: ok removes the record (and a killed operation's it
 * found); otherwise the record that was there before is put back (the failed
 * operation undid its steps), unless the caller left one with
 * cli_op_leave. Releases the lock. NULL is allowed.
 */
void cli_op_end(struct cli_op *op, bool ok);
/*
 * For an operation that ends leaving the process in need of a command (its
 * GPU data in a kept image, say): the record stays with these sentences,
 * for the next command to repeat.
 */
void cli_op_leave(struct cli_op *op, const char *image, const char *if_alive, const char *if_gone);

/*
 * The record that concerns process pid as it is now (or, when it is gone,
 * the latest one for its PID), without locking anything: 1 and *rec filled
 * if there is one, 0 if none.
 */
int cli_op_find(pid_t pid, struct cli_op_record *rec);
/*
 * One line about rec for the user: "gpusnap dump (pid 12) is working on
 * process 34 (step criu, 3 s)" or the sentence for a killed operation;
 * process_alive picks which. Empty when there is nothing to say.
 */
void cli_op_describe(pid_t pid, const struct cli_op_record *rec, bool process_alive, char *out, size_t n);
/* Appends "; <what a killed operation left>" to err for a PID that is gone (after GS_E_NO_PROCESS). */
void cli_op_explain_gone(pid_t pid, struct gs_err *err);

#endif
