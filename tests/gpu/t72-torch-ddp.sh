#!/usr/bin/env bash
# t72-torch-ddp.sh - one-GPU torch.distributed training (NCCL, DistributedDataParallel, AdamW;
# tests/gpu/py/ddp_train.py), launched as users launch it, under gpusnap run:
#  - torchrun --standalone --nproc_per_node=1: the launcher hosts torch's TCPStore (libuv, PyTorch's
#    default) and its worker is a client of it. Neither holds an io_uring (the agent refused libuv's;
#    the uninterrupted twin, which hosts its own store without the agent, holds one);
#  - suspend --tree / resume --tree of the launcher's tree: the worker's VRAM 0, then training goes on;
#  - dump --tree of the launcher with no --tcp-* option: the store's connections (both ends in the
#    tree) are dumped as they are without a network lock; both processes gone; restore: they come
#    back, training goes on, and the launcher still runs 15 s later (its rendezvous heartbeat goes
#    through the restored connection; over a closed one torchrun killed its worker);
#  - dump --tree --leave-running (a periodic checkpoint) as training goes on, then kill -9 of the job
#    (a crash) and restore of the checkpoint: the job redoes the steps made since and equals the twin;
#  - a process that hosts the store itself (init_process_group over tcp://, world size 1): dump and
#    restore of that one process.
# After every step the parameters and optimizer state (sha256) and the loss equal an uninterrupted
# twin's (no agent). SKIP (visible) without PyTorch with NCCL or without torchrun; the dump parts
# SKIP without CRIU.
# gpu-test-limit: 420
. "$(dirname "$0")/lib.sh"
gs_test_init t72-torch-ddp
py=$(dirname "$0")/py/ddp_train.py
if ! python3 -c 'import torch, torch.distributed; assert torch.cuda.is_available() and torch.distributed.is_nccl_available()' 2>/dev/null; then
  skip "PyTorch with CUDA and NCCL is not installed here"
  finish
fi
command -v torchrun >/dev/null || { skip "no torchrun on PATH"; finish; }
log "torch $(python3 -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1)"
export CUBLAS_WORKSPACE_CONFIG=:4096:8 TORCH_NCCL_ENABLE_MONITORING=0 NCCL_DEBUG=WARN
# CRIU dumps the job: an open stderr file would grow between dump and restore
export GS_APP_STDERR=null
port=$((30500 + RANDOM % 1000))

app_start job 300 "$GPUSNAP" run -- torchrun --standalone --nproc_per_node=1 "$py" --seed 72 || finish
launcher=${APP_PID[job]}
worker=$(awk '{ print $2 }' <<<"$REPLY_LINE")
[[ $worker =~ ^[0-9]+$ ]] || { fail "no pid of the worker in '$REPLY_LINE'"; finish; }
gs_track_pid "$worker"
check_eq "the worker is the launcher's child" "$(awk '{ print $3 }' <<<"$REPLY_LINE")" "$launcher"
app_start twin 300 python3 "$py" --port "$port" --seed 72 || finish
log "job: torchrun $launcher, worker $worker; twin ${APP_PID[twin]}"

app_cmd job fds FDS 60 && check_eq "io_uring descriptors of the worker and of torchrun under the agent" "$REPLY_LINE" "FDS 0 0"
app_cmd twin fds FDS 60 && log "io_uring descriptors of the twin (it hosts its store without the agent): ${REPLY_LINE#FDS }"

# steps N WHAT [JOB]: N optimizer steps on JOB (default job) and the twin; loss, parameters and state equal
steps() {
  local n=$1 what=$2 name=${3:-job} a b
  app_cmd "$name" "step $n" STEP 240 || { fail "$what: $name did not step"; app_show_stderr "$name"; return 1; }
  a=$REPLY_LINE
  app_cmd twin "step $n" STEP 240 || { fail "$what: the twin did not step"; app_show_stderr twin; return 1; }
  check_eq "$what: step count and loss equal the twin's" "$a" "$REPLY_LINE"
  app_cmd "$name" digest DIGEST 120 && a=$REPLY_LINE
  app_cmd twin digest DIGEST 120 && b=$REPLY_LINE
  check_eq "$what: parameters and optimizer state equal the twin's" "${a:-none}" "${b:-no twin digest}"
}
steps 5 "before any suspend" || finish

b=$(pid_vram_mib "$worker")
before=$(gpus_used_mib)
gs_run suspend --tree --json "$launcher"
expect_rc 0 "suspend --tree of torchrun's tree" || finish
expect_json_process "$worker" suspended "the worker"
expect_vram_released worker "$worker" "$b" "$before" 0
gs_run resume --tree --json "$launcher"
expect_rc 0 "resume --tree" || finish
expect_json_process "$worker" running "the worker after resume"
steps 5 "after suspend and resume" || finish

require_criu
# ---- a periodic checkpoint, then a crash: the job comes back from the checkpoint ----
ckpt=$GS_WORK/job-ckpt
GS_CMD_TIMEOUT=300 gs_run dump --tree --leave-running --json -D "$ckpt" "$launcher"
if ! expect_rc 0 "dump --tree --leave-running of torchrun's tree (a periodic checkpoint)"; then
  log_criu_tail
  app_quit job 120
  app_quit twin 120
  finish
fi
log "checkpoint: the job stood still $(json_get "$GS_OUT" times.paused_s) s of a $(json_get "$GS_OUT" times.total_s) s dump"
steps 3 "after the checkpoint (the job ran on)" || finish
kill -9 "$worker" "$launcher" # the crash
check "the crash took torchrun" wait_pid_gone "$launcher"
check "... and its worker" wait_pid_gone "$worker"
restore_job "restore of the checkpoint after the crash" "$ckpt" job twin
check "torchrun runs again from the checkpoint" pid_alive "$launcher"
check "... and so does the worker" pid_alive "$worker"
# back at the checkpoint, 3 steps behind the twin: it makes them again, then both go on together
app_cmd job "step 3" STEP 240 || { fail "the job restored from the checkpoint did not step"; finish; }
app_cmd job digest DIGEST 120 && a=$REPLY_LINE
app_cmd twin digest DIGEST 120
check_eq "redoing the 3 steps after the checkpoint gives the twin's parameters and state" "${a:-none}" "$REPLY_LINE"
steps 5 "after the restore of the checkpoint" || finish
rm -rf "$ckpt"

img=$GS_WORK/job-img
GS_CMD_TIMEOUT=300 gs_run dump --tree --json -D "$img" "$launcher"
if ! expect_rc 0 "dump --tree of torchrun's tree, no --tcp-* option"; then
  log_criu_tail
  steps 5 "after the failed dump (the job must run on)"
  app_quit job 120
  app_quit twin 120
  finish
fi
log "dump --tree: GPU data $(json_get "$GS_OUT" gpu_data_bytes) B, agents $(json_get "$GS_OUT" times.agents_s) s, CRIU $(json_get "$GS_OUT" times.criu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
check_eq "the worker took the agent path" "$(json_get "$GS_OUT" "processes[pid=$worker].path")" agent
args=$img/cpu/gpusnap-criu-dump.args
check "the store's connections were dumped as they are (--tcp-established)" grep -qx -e --tcp-established "$args"
check "... without a network lock (both ends in the tree)" grep -qx -e --network-lock=skip "$args"
check "torchrun is gone after the dump" wait_pid_gone "$launcher"
check "the worker is gone after the dump" wait_pid_gone "$worker"
restore_job "restore of torchrun's tree" "$img" job twin
check "torchrun runs again" pid_alive "$launcher"
check "the worker runs again" pid_alive "$worker"
steps 5 "after dump and restore" || finish
sleep 15
check "torchrun still runs 15 s after the restore (its heartbeat through the restored connection)" pid_alive "$launcher"
check "... and so does the worker" pid_alive "$worker"
steps 5 "15 s after the restore" || finish
app_quit job 120

# ---- a process that hosts the store itself: one process dumped and restored ----
app_start solo 300 "$GPUSNAP" run -- python3 "$py" --port $((port + 1)) --seed 72 || finish
solo=${APP_PID[solo]}
app_cmd solo fds FDS 60 && check_eq "io_uring descriptors of the process hosting its store under the agent" "$(awk '{print $2}' <<<"$REPLY_LINE")" 0
# the twin has made 29 steps (1 at start, 3, 5 x 5): the solo process catches up, then both go on together
app_cmd solo "step 28" STEP 600 || { fail "the solo process did not step"; finish; }
app_cmd solo digest DIGEST 120 && a=$REPLY_LINE
app_cmd twin digest DIGEST 120
check_eq "the solo process caught up with the twin" "$a" "$REPLY_LINE"
img=$GS_WORK/solo-img
GS_CMD_TIMEOUT=300 gs_run dump --json -D "$img" "$solo"
expect_rc 0 "dump of the process hosting its store" || { app_quit solo 60; app_quit twin 60; finish; }
check "it is gone after the dump" wait_pid_gone "$solo"
GS_CMD_TIMEOUT=300 gs_run restore --json -D "$img"
expect_rc 0 "its restore" || { app_forget solo; app_quit twin 60; finish; }
APP_OWN[solo]=restored
steps 5 "the solo process after dump and restore" solo || finish
app_quit solo 120
app_quit twin 120
finish
