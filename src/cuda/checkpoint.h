/*
 * checkpoint.h - the driver path: suspend and resume whole processes through
 * the CUDA driver's checkpoint API (cuCheckpointProcess*), one process or a
 * set of them (a process tree) treated as one unit.
 *
 * Guarantees, which the command line promises its users:
 * - suspend locks every process before checkpointing any; if any step fails,
 *   every process is brought back to running (restored and unlocked) and the
 *   error names the process and the cause;
 * - resume restores every process before unlocking any; if one restore fails
 *   the ones already restored are checkpointed again, so the set stays
 *   suspended and can be resumed again (with a corrected GPU map, say).
 */
#ifndef GPUSNAP_CUDA_CHECKPOINT_H
#define GPUSNAP_CUDA_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "cuda/driver.h"

struct gs_ckpt_proc {
	pid_t pid;
	CUprocessState state_before, state_after;
	bool state_known;
	double lock_s, checkpoint_s, restore_s, unlock_s;
};

/*
 * The driver path's refusal of a process with GPU memory on several GPUs
 * (on_gpu_mask: bit i for GPU i): the driver checkpoints such a process, but
 * some it cannot restore (driver 580: a PyTorch process with peer copies
 * between its GPUs, CUDA_ERROR_INVALID_VALUE on every resume, NVIDIA's
 * cuda-checkpoint alike), so the suspend could never be undone; a plain CUDA
 * process with peer access on restores (tests/gpu/t52). Nothing outside the
 * process tells the two apart, hence the refusal of every such process,
 * unless allowed (GPUSNAP_MULTI_GPU_DRIVER, --multi-gpu-driver). A process
 * with the agent is not refused: its memory is released before the driver
 * checkpoints the contexts, and such a process on two GPUs with peer access
 * on resumed (docs/reliability.md). 0, or GS_E_STATE with the one-line
 * reason in err.
 */
int gs_ckpt_refuse_multi_gpu(pid_t pid, uint64_t on_gpu_mask, bool allowed, struct gs_err *err);

/* The phase now running, for progress display; written by the driver path, read by any thread. */
enum gs_ckpt_phase { GS_PHASE_IDLE, GS_PHASE_LOCK, GS_PHASE_CHECKPOINT, GS_PHASE_RESTORE, GS_PHASE_UNLOCK, GS_PHASE_ROLLBACK };
const char *gs_ckpt_phase_name(enum gs_ckpt_phase p);
extern volatile int gs_ckpt_current_phase;

/*
 * Driver state of one process. GS_E_NOT_CUDA when the driver does not know
 * the process, GS_E_NO_PROCESS / GS_E_PERMISSION from the process check.
 */
int gs_ckpt_get_state(struct gs_cuda *cu, pid_t pid, CUprocessState *state, struct gs_err *err);

/* timeout_s: lock timeout, 0 = wait as long as it takes. procs[i].pid set by the caller. */
int gs_ckpt_suspend(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n, double timeout_s, struct gs_err *err);

/* pairs may be NULL (same GPUs). */
int gs_ckpt_resume(struct gs_cuda *cu, struct gs_ckpt_proc *procs, int n, CUcheckpointGpuPair *pairs, unsigned npairs,
		   struct gs_err *err);

/* The lower-level steps, for callers that interleave their own work (the agent fast path, CRIU). */
int gs_ckpt_lock(struct gs_cuda *cu, pid_t pid, double timeout_s, double *secs, struct gs_err *err);
int gs_ckpt_checkpoint(struct gs_cuda *cu, pid_t pid, double *secs, struct gs_err *err);
int gs_ckpt_restore(struct gs_cuda *cu, pid_t pid, CUcheckpointGpuPair *pairs, unsigned npairs, double *secs,
		    struct gs_err *err);
int gs_ckpt_unlock(struct gs_cuda *cu, pid_t pid, double *secs, struct gs_err *err);
/*
 * The thread of pid on which the driver carries out checkpoint and restore
 * (it must run for them, also while the app's threads are held stopped).
 * GS_E_NOT_CUDA if the driver names none, GS_E_DRIVER_OLD without the call.
 */
int gs_ckpt_restore_thread(struct gs_cuda *cu, pid_t pid, pid_t *tid, struct gs_err *err);

#endif
