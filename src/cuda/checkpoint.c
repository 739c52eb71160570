/*
 * checkpoint.c - suspend/resume through cuCheckpointProcess* with rollback
 * (see checkpoint.h for the guarantees).
 */
#define LOG_PREFIX "checkpoint: "
#include "cuda/checkpoint.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"

volatile int gs_ckpt_current_phase;

const char *gs_ckpt_phase_name(enum gs_ckpt_phase p)
{
	switch (p) {
	case GS_PHASE_LOCK: return "lock";
	case GS_PHASE_CHECKPOINT: return "checkpoint";
	case GS_PHASE_RESTORE: return "restore";
	case GS_PHASE_UNLOCK: return "unlock";
	case GS_PHASE_ROLLBACK: return "rollback";
	default: return "idle";
	}
}

static void set_phase(enum gs_ckpt_phase p) { __atomic_store_n(&gs_ckpt_current_phase, (int)p, __ATOMIC_RELAXED); }

static int driver_error(struct gs_cuda *cu, struct gs_err *err, CUresult r, pid_t pid, const char *what)
{
	char b[160];
	int code = GS_E_FAILURE;
	if (r == CUDA_ERROR_NOT_PERMITTED)
		code = GS_E_PERMISSION;
	else if (r == CUDA_ERROR_NOT_SUPPORTED)
		code = GS_E_DRIVER_OLD;
	/* the checkpoint API is there (checked first): the process holds something this driver cannot checkpoint */
	const char *hint = r == CUDA_ERROR_NOT_SUPPORTED && !strcmp(what, "checkpoint")
				   ? " (this driver cannot checkpoint what the process holds, e.g. managed memory or memory "
				     "shared with another process)"
				   : "";
	return gs_fail(err, code, "%s of process %d failed: %s%s", what, (int)pid, gs_cuda_strerror(cu, r, b, sizeof(b)),
		       hint);
}

/*
 * The driver's checkpoint calls need the process to run: on one stopped by
 * SIGSTOP (a supervisor's) cuCheckpointProcessGetState returns only after
 * minutes, with an error, and cuCheckpointProcessLock does not return whatever
 * its timeout (docs/DESIGN.md, "The driver path"). Refused at once instead.
 * Only a group stop: gpusnap's own restore holds processes traced while the
 * driver works on them. A frozen cgroup (a paused container) stops its
 * processes the same way. Any stopped process is refused so, CUDA or not:
 * what holds the GPU's device files cannot tell (a process the driver holds
 * checkpointed holds none).
 */
static int refuse_stopped(pid_t pid, struct gs_err *err)
{
	char why[320], until[64];
	if (!gs_proc_halted(pid, false, why, sizeof(why), until, sizeof(until)))
		return 0;
	return gs_fail(err, GS_E_STATE, "process %d is %s: the driver cannot reach its GPU state until %s", (int)pid, why,
		       until);
}

int gs_ckpt_get_state(struct gs_cuda *cu, pid_t pid, CUprocessState *state, struct gs_err *err)
{
	int rc = gs_proc_check(pid, err);
	if (rc || (rc = refuse_stopped(pid, err)))
		return rc;
	if ((rc = gs_cuda_require_checkpoint(cu, err)))
		return rc;
	CUresult r = cu->cuCheckpointProcessGetState((int)pid, state);
	if (r == CUDA_SUCCESS)
		return 0;
	char comm[64];
	gs_proc_comm(pid, comm, sizeof(comm));
	if (r == CUDA_ERROR_NOT_PERMITTED)
		return gs_fail(err, GS_E_PERMISSION, "permission denied for process %d (%s)", (int)pid, comm);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		return driver_error(cu, err, r, pid, "querying the state");
	/* The driver answers INVALID_VALUE / NOT_INITIALIZED / NOT_FOUND for processes it does not know. */
	return gs_fail(err, GS_E_NOT_CUDA, "process %d (%s) is not a CUDA process", (int)pid, comm);
}

int gs_ckpt_restore_thread(struct gs_cuda *cu, pid_t pid, pid_t *tid, struct gs_err *err)
{
	if (!cu->cuCheckpointProcessGetRestoreThreadId)
		return gs_fail(err, GS_E_DRIVER_OLD, "this driver does not name its restore thread");
	int t = 0;
	CUresult r = cu->cuCheckpointProcessGetRestoreThreadId((int)pid, &t);
	if (r != CUDA_SUCCESS || t <= 0)
		return gs_fail(err, GS_E_NOT_CUDA, "the driver names no restore thread in process %d (error %d)", (int)pid,
			       (int)r);
	*tid = (pid_t)t;
	return 0;
}

int gs_ckpt_lock(struct gs_cuda *cu, pid_t pid, double timeout_s, double *secs, struct gs_err *err)
{
	CUcheckpointLockArgs args;
	memset(&args, 0, sizeof(args));
	double ms = timeout_s * 1000.0;
	args.timeoutMs = ms > 4e9 ? 4000000000u : (unsigned)(ms + 0.5);
	if (timeout_s > 0 && args.timeoutMs == 0)
		args.timeoutMs = 1;
	int rc = refuse_stopped(pid, err);
	if (rc)
		return rc;
	double t0 = gs_now();
	CUresult r = cu->cuCheckpointProcessLock((int)pid, &args);
	*secs = gs_now() - t0;
	if (r == CUDA_SUCCESS)
		return 0;
	if (r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_TIMEOUT)
		return gs_fail(err, GS_E_TIMEOUT,
			       "lock of process %d timed out after %.1f s (GPU work still running); the process keeps running",
			       (int)pid, timeout_s);
	if (r == CUDA_ERROR_ILLEGAL_STATE)
		return gs_fail(err, GS_E_STATE, "process %d is not running (already locked or suspended)", (int)pid);
	return driver_error(cu, err, r, pid, "lock");
}

int gs_ckpt_checkpoint(struct gs_cuda *cu, pid_t pid, double *secs, struct gs_err *err)
{
	CUcheckpointCheckpointArgs args;
	memset(&args, 0, sizeof(args));
	double t0 = gs_now();
	CUresult r = cu->cuCheckpointProcessCheckpoint((int)pid, &args);
	*secs = gs_now() - t0;
	return r == CUDA_SUCCESS ? 0 : driver_error(cu, err, r, pid, "checkpoint");
}

int gs_ckpt_restore(struct gs_cuda *cu, pid_t pid, CUcheckpointGpuPair *pairs, unsigned npairs, double *secs,
		    struct gs_err *err)
{
	CUcheckpointRestoreArgs args;
	memset(&args, 0, sizeof(args));
	args.gpuPairs = npairs ? pairs : NULL;
	args.gpuPairsCount = npairs;
	if (npairs && cu->driver_version < GS_DRIVER_REMAP_MIN)
		return gs_fail(err, GS_E_DRIVER_OLD, "NVIDIA driver too old for --map: GPU remapping needs driver 580 or newer");
	double t0 = gs_now();
	CUresult r = cu->cuCheckpointProcessRestore((int)pid, &args);
	*secs = gs_now() - t0;
	if (r == CUDA_SUCCESS)
		return 0;
	if (npairs && r == CUDA_ERROR_INVALID_VALUE) {
		char b[160];
		return gs_fail(err, GS_E_GPU_MAP, "the driver refused the GPU map for process %d: %s", (int)pid,
			       gs_cuda_strerror(cu, r, b, sizeof(b)));
	}
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return gs_fail(err, GS_E_NO_VRAM, "not enough free GPU memory to restore process %d", (int)pid);
	return driver_error(cu, err, r, pid, "restore");
}

int gs_ckpt_unlock(struct gs_cuda *cu, pid_t pid, double *secs, struct gs_err *err)
{
	CUcheckpointUnlockArgs args;
	memset(&args, 0, sizeof(args));
	double t0 = gs_now();
	CUresult r = cu->cuCheckpointProcessUnlock((int)pid, &args);
	*secs = gs_now() - t0;
	return r == CUDA_SUCCESS ? 0 : driver_error(cu, err, r, pid, "unlock");
}

static void read_after(struct gs_cuda *cu, struct gs_ckpt_proc *p)
{
	p->state_known = cu->cuCheckpointProcessGetState((int)p->pid, &p->state_after) == CUDA_SUCCESS;
}

/* Brings procs[0..n) back to running after a failed suspend; best effort, each failure logged. */
static void suspend_rollback(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n)
{
	set_phase(GS_PHASE_ROLLBACK);
	for (int i = 0; i < n; i++) {
		CUprocessState st;
		struct gs_err e = { 0 };
		double s;
		if (cu->cuCheckpointProcessGetState((int)procs[i].pid, &st) != CUDA_SUCCESS)
			continue;
		if (st == CU_PROCESS_STATE_CHECKPOINTED && gs_ckpt_restore(cu, procs[i].pid, NULL, 0, &s, &e))
			pr_err("rollback: %s", e.msg);
		if (cu->cuCheckpointProcessGetState((int)procs[i].pid, &st) == CUDA_SUCCESS && st == CU_PROCESS_STATE_LOCKED &&
		    gs_ckpt_unlock(cu, procs[i].pid, &s, &e))
			pr_err("rollback: %s", e.msg);
		read_after(cu, &procs[i]);
	}
}

int gs_ckpt_suspend(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n, double timeout_s, struct gs_err *err)
{
	int rc = 0;
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_get_state(cu, procs[i].pid, &procs[i].state_before, err)))
			return rc;
		if (procs[i].state_before != CU_PROCESS_STATE_RUNNING)
			return gs_fail(err, GS_E_STATE, "process %d is already %s", (int)procs[i].pid,
				       gs_cuda_state_name(procs[i].state_before));
	}
	set_phase(GS_PHASE_LOCK);
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_lock(cu, procs[i].pid, timeout_s, &procs[i].lock_s, err))) {
			suspend_rollback(cu, procs, i);
			read_after(cu, &procs[i]);
			goto out;
		}
	}
	set_phase(GS_PHASE_CHECKPOINT);
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_checkpoint(cu, procs[i].pid, &procs[i].checkpoint_s, err))) {
			suspend_rollback(cu, procs, n);
			if (n > 1 || procs[0].state_after == CU_PROCESS_STATE_RUNNING)
				gs_err_wrap(err, "suspend undone, processes left running");
			goto out;
		}
	}
	for (int i = 0; i < n; i++)
		read_after(cu, &procs[i]);
out:
	set_phase(GS_PHASE_IDLE);
	return rc;
}

/* Checkpoints again the processes of a set that were restored before a later one failed. */
static void resume_rollback(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n)
{
	set_phase(GS_PHASE_ROLLBACK);
	for (int i = 0; i < n; i++) {
		struct gs_err e = { 0 };
		double s;
		if (gs_ckpt_checkpoint(cu, procs[i].pid, &s, &e))
			pr_err("rollback: %s", e.msg);
		read_after(cu, &procs[i]);
	}
}

int gs_ckpt_resume(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n, CUcheckpointGpuPair *pairs, unsigned npairs,
		   struct gs_err *err)
{
	int rc = 0;
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_get_state(cu, procs[i].pid, &procs[i].state_before, err)))
			return rc;
		if (procs[i].state_before != CU_PROCESS_STATE_CHECKPOINTED)
			return gs_fail(err, GS_E_STATE, "process %d is not suspended (it is %s)", (int)procs[i].pid,
				       gs_cuda_state_name(procs[i].state_before));
	}
	set_phase(GS_PHASE_RESTORE);
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_restore(cu, procs[i].pid, pairs, npairs, &procs[i].restore_s, err))) {
			read_after(cu, &procs[i]);
			resume_rollback(cu, procs, i);
			if (procs[i].state_known && procs[i].state_after == CU_PROCESS_STATE_CHECKPOINTED)
				gs_err_wrap(err, "nothing resumed, still suspended (resume again)");
			goto out;
		}
	}
	set_phase(GS_PHASE_UNLOCK);
	for (int i = 0; i < n; i++) {
		if ((rc = gs_ckpt_unlock(cu, procs[i].pid, &procs[i].unlock_s, err))) {
			read_after(cu, &procs[i]);
			goto out;
		}
	}
	for (int i = 0; i < n; i++)
		read_after(cu, &procs[i]);
out:
	set_phase(GS_PHASE_IDLE);
	return rc;
}

int gs_ckpt_refuse_multi_gpu(pid_t pid, uint64_t on_gpu_mask, bool allowed, struct gs_err *err)
{
	if (allowed || __builtin_popcountll(on_gpu_mask) < 2)
		return 0;
	char gpus[96] = "";
	size_t len = 0;
	for (int i = 0; i < 64 && len < sizeof(gpus) - 8; i++)
		if (on_gpu_mask & (1ULL << i))
			len += (size_t)snprintf(gpus + len, sizeof(gpus) - len, "%s%d", len ? ", " : "", i);
	return gs_fail(err, GS_E_STATE,
		       "process %d holds GPU memory on GPUs %s, and the driver cannot restore some such processes "
		       "(a PyTorch process with peer copies stays suspended for good): start it with gpusnap run, or, "
		       "if a suspend and resume of its kind worked, allow it with --multi-gpu-driver "
		       "(GPUSNAP_MULTI_GPU_DRIVER=1)",
		       (int)pid, gpus);
}
