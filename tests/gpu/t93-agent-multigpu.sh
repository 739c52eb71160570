#!/usr/bin/env bash
# t93-agent-multigpu.sh - a process using two GPUs under the agent: suspended
# (both GPUs' data moved by the agent, VRAM 0), resumed and verified on both;
# then resumed with the GPUs swapped (--map 0=1 --map 1=0) and verified again.
. "$(dirname "$0")/lib.sh"
gs_test_init t93-agent-multigpu
require_gpus 2 "a two-GPU process needs 2 GPUs"

app_start m 180 "$GPUSNAP" run -- "$GS_APPS/multigpu" --size 2G --seed 93 || finish
pid=${APP_PID[m]}
gs_run suspend "$pid" --json
expect_rc 0 "agent suspend of a two-GPU process" || finish
check "the agent moved the data" grep -q '"path":"agent"' <<<"$GS_OUT"
check "VRAM 0 while suspended" [ "$(pid_vram_mib "$pid")" == 0 ]
resume_checked m || finish
app_verify m "2 GiB on each GPU after an agent cycle" || finish

before=$(pid_gpu_uuids "$pid" | sort | tr '\n' ' ')
gs_run suspend "$pid" --json
expect_rc 0 "agent suspend before the swap" || finish
resume_checked m --map 0=1 --map 1=0 || finish
app_verify m "data on both GPUs after resuming with the GPUs swapped"
log "GPUs of the process before: $before, after: $(pid_gpu_uuids "$pid" | sort | tr '\n' ' ')"
app_quit m
finish
