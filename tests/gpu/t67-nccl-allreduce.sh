#!/usr/bin/env bash
# t67-nccl-allreduce.sh - a two-rank torch.distributed job (NCCL, one GPU per
# rank, tests/gpu/py/nccl_allreduce.py) under the agent: the ranks exchange
# cuMem buffers as file descriptors (NCCL_CUMEM_ENABLE=1; NVLS off), and
# gpusnap suspends and resumes the whole job with --tree. An uninterrupted
# twin job (also two ranks, without the agent) runs the same all-reduce loop;
# after each suspend/resume cycle the two jobs' results must be equal. Checks:
#  - suspend --tree of rank 0 (rank 1 is its child): both suspended, each
#    holds 0 MiB in nvidia-smi;
#  - resume --tree: more all-reduce steps, digests equal to the twin's (two
#    cycles, the second with --keep-context);
#  - suspending one rank alone is refused (exit 6), the job goes on;
#  - dump --tree of the whole job (with CRIU, no --tcp-* option: the
#    ranks' loopback connections to torch's store have both ends in the job,
#    so they are dumped as they are, without a network lock): both ranks
#    gone; restore brings them back with their PIDs, and more all-reduce
#    steps give the twin's results; a suspend/resume --tree cycle of the
#    restored job too.
# SKIP (visible) with fewer than 2 GPUs or without PyTorch; the dump part
# SKIPs without CRIU.
# gpu-test-limit: 570
. "$(dirname "$0")/lib.sh"
gs_test_init t67-nccl-allreduce
require_gpus 2 "a two-rank NCCL job needs 2 GPUs"
py=$(dirname "$0")/py/nccl_allreduce.py
if ! python3 -c 'import torch, torch.distributed; assert torch.cuda.is_available() and torch.distributed.is_nccl_available()' 2>/dev/null; then
  skip "PyTorch with CUDA and NCCL is not installed here"
  finish
fi
log "torch $(python3 -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1)"
export NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=1 TORCH_NCCL_ENABLE_MONITORING=0 NCCL_DEBUG=WARN
# CRIU dumps the job: an open stderr file would grow between dump and restore
export GS_APP_STDERR=null
# torch's TCPStore runs on libuv (its default), whose io_uring the agent refuses so that CRIU can
# dump the job (agent_io_uring.h; before, the job needed USE_LIBUV=0)
port=$((29500 + RANDOM % 1000))

app_start job 300 "$GPUSNAP" run -- python3 "$py" --port "$port" --seed 67 || finish
r0=${APP_PID[job]}
r1=$(awk '{ print $3 }' <<<"$REPLY_LINE")
[[ $r1 =~ ^[0-9]+$ ]] || { fail "no pid of rank 1 in '$REPLY_LINE'"; finish; }
gs_track_pid "$r1"
app_start twin 300 python3 "$py" --port $((port + 1)) --seed 67 || finish
t1=$(awk '{ print $3 }' <<<"$REPLY_LINE")
[[ $t1 =~ ^[0-9]+$ ]] && gs_track_pid "$t1"
log "job: ranks $r0 $r1; twin: ranks ${APP_PID[twin]} $t1"

# steps N WHAT: N all-reduce steps on both jobs, then their digests must be equal
steps() {
  local n=$1 what=$2 a b
  app_cmd job "step $n" STEP 240 || { fail "$what: the job did not step"; app_show_stderr job; return 1; }
  app_cmd twin "step $n" STEP 240 || { fail "$what: the twin did not step"; app_show_stderr twin; return 1; }
  app_cmd job digest DIGEST 120 && a=$REPLY_LINE
  app_cmd twin digest DIGEST 120 && b=$REPLY_LINE
  check_eq "$what: the job's all-reduce results equal the twin's" "${a:-none}" "${b:-no twin digest}"
}
steps 20 "before any suspend" || finish
gs_run state "$r0" -v
log "rank 0: $GS_OUT"

kept_vram() { # WHAT [SUSPEND ARGS...]
  [ $# -gt 1 ] && log "$1: VRAM with the contexts kept: rank 0 $(pid_vram_mib "$r0") MiB, rank 1 $(pid_vram_mib "$r1") MiB"
  return 0
}
cycle() { # WHAT [SUSPEND ARGS...]
  tree_cycle "$1" "$r0" "$r1" 0 kept_vram "${@:2}" || return 1
  steps 20 "$1: after resume"
}
cycle "first cycle" || finish
cycle "keep-context cycle" --keep-context || finish

gs_run suspend "$r0" --json
expect_rc 6 "suspending rank 0 alone is refused"
log "refusal: $GS_ERR"
steps 5 "after the refusal"

# dump --tree of the whole job, both ranks gone, restore: the all-reduce goes on as the twin's
require_criu
img=$GS_WORK/job-img
GS_CMD_TIMEOUT=300 gs_run dump --tree --json -D "$img" "$r0"
if ! expect_rc 0 "dump --tree of the job"; then
  log_criu_tail
  steps 5 "after the failed dump (the job must run on)"
  app_quit job 120
  app_quit twin 120
  finish
fi
check_eq "the dump took the tree" "$(json_get "$GS_OUT" tree)" true
check_eq "rank 1 took the agent path" "$(json_get "$GS_OUT" "processes[pid=$r1].path")" agent
check "the ranks' connections to the store were dumped as they are, without a network lock" \
  grep -qx -e --network-lock=skip "$img/cpu/gpusnap-criu-dump.args"
log "dump --tree: shared memory $(json_get "$GS_OUT" shared_memory), GPU data $(json_get "$GS_OUT" gpu_data_bytes) B, agents $(json_get "$GS_OUT" times.agents_s) s, CRIU $(json_get "$GS_OUT" times.criu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
check "rank 0 is gone after the dump" wait_pid_gone "$r0"
check "rank 1 is gone after the dump" wait_pid_gone "$r1"
restore_job "restore of the job" "$img" job twin
check "rank 0 runs again" pid_alive "$r0"
check "rank 1 runs again" pid_alive "$r1"
steps 20 "after the restore" || finish
cycle "cycle of the restored job" || finish

app_quit job 120
app_quit twin 120
finish
