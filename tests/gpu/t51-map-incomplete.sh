#!/usr/bin/env bash
# t51-map-incomplete.sh - a process using both GPUs (multigpu app), suspended,
# then resumed with a map that covers only GPU 0 (--map 0=1): gpusnap must refuse
# with exit 10, the process must stay suspended, and a resume without a map must
# bring it back with its data on both GPUs intact. Without the agent a process on
# two GPUs is refused first (exit 6: the driver cannot restore one with peer
# access between its GPUs); this app enables none, so --multi-gpu-driver.
. "$(dirname "$0")/lib.sh"
gs_test_init t51-map-incomplete
require_gpus 2 "--map needs 2 GPUs"

app_start m 120 "$GS_APPS/multigpu" --size 1G --seed 51 || finish
pid=${APP_PID[m]}
ngpus_used=$(pid_gpu_uuids "$pid" | wc -l)
if [ "$ngpus_used" -gt 0 ]; then
  check "multigpu holds memory on >= 2 GPUs ($ngpus_used)" test "$ngpus_used" -ge 2
fi
gs_run suspend "$pid"
expect_rc 6 "a driver-path suspend of a process on two GPUs is refused"
check "... naming --multi-gpu-driver" grep -q -- "--multi-gpu-driver" <<<"$GS_ERR"
expect_state "$pid" running "it runs on"
suspend_checked m 2048 --multi-gpu-driver || finish
gs_run resume "$pid" --json --map 0=1
expect_rc 10 "resume with a map that leaves GPU 1 out"
if [ -n "$GS_ERR$GS_OUT" ]; then
  pass "the refusal says why: $(head -n 1 <<<"${GS_ERR:-$GS_OUT}")"
else
  fail "the refused map printed no message"
fi
expect_state "$pid" suspended "still suspended after the refused map"
resume_checked m || finish
app_verify m "1 GiB on each GPU after resume without a map"
app_quit m
finish
