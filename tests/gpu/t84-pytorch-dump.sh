#!/usr/bin/env bash
# t84-pytorch-dump.sh - a PyTorch model (random weights built in the test,
# nothing downloaded) started with `gpusnap run` is dumped to files, is gone,
# is restored, and its outputs and a CUDA graph captured before the dump are
# bit-identical to the references taken before; a training step runs after
# the restore; a second restore from the same image is identical too.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t84-pytorch-dump
export GS_APP_STDERR=null
py=$(dirname "$0")/py/torch_model.py
require_torch
require_criu

img=$GS_WORK/img
app_start torch 240 "$GPUSNAP" run -- python3 "$py" --seed 84 || finish
pid=${APP_PID[torch]}
app_cmd torch check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]] && pass "outputs before the dump" ||
  fail "check before the dump: $REPLY_LINE"
dump_checked "$pid" "$img" agent || finish

restore_checked "$img" "$pid" || finish
if app_cmd torch check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]]; then
  pass "outputs and graph replay bit-identical after restore"
else
  fail "after restore: $REPLY_LINE"
fi
app_cmd torch churn CHURN 120 && pass "allocator churn after restore" || fail "allocator churn after restore: $REPLY_LINE"

gs_kill_pid "$pid"
check "first restored process is gone" wait_pid_gone "$pid"
restore_checked "$img" "$pid" || finish
if app_cmd torch check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]]; then
  pass "outputs bit-identical after a second restore from the same image"
else
  fail "after the second restore: $REPLY_LINE"
fi
app_quit torch 60
finish
