#!/usr/bin/env bash
# t99-agent-alignment.sh - the agent's device pointers are aligned at least as
# cudaMalloc's own on this driver: the align app (16 live allocations per size,
# 1..4096 bytes and 1 MiB) runs once without the agent and once under it;
# for every size the agent's alignment must be at least the driver's. The
# driver's figures are printed (min over 1..4096 and at 1 MiB) for
# src/core/suballoc.h, which assumes 512 bytes for every size.
. "$(dirname "$0")/lib.sh"
gs_test_init t99-agent-alignment

if [ ! -x "$GS_APPS/align" ]; then
  fail "missing $GS_APPS/align (build with -DGPUSNAP_GPU_APPS=ON)"
  finish
fi
"$GS_APPS/align" >"$GS_WORK/driver.txt" 2>"$GS_WORK/driver.err"
check "the align app runs without the agent (rc $?)" grep -q '^DONE' "$GS_WORK/driver.txt"
"$GPUSNAP" run -- "$GS_APPS/align" >"$GS_WORK/agent.txt" 2>"$GS_WORK/agent.err"
check "the align app runs under the agent (rc $?)" grep -q '^DONE' "$GS_WORK/agent.txt"
log_block "  stderr: " "$(cat "$GS_WORK/driver.err" "$GS_WORK/agent.err")"

# one line per size: SIZE DRIVER AGENT
join <(awk '$1 == "ALIGN" {print $2, $3}' "$GS_WORK/driver.txt" | sort -k1,1) \
  <(awk '$1 == "ALIGN" {print $2, $3}' "$GS_WORK/agent.txt" | sort -k1,1) | sort -n >"$GS_WORK/both.txt"
check_eq "sizes measured both ways" "$(wc -l <"$GS_WORK/both.txt")" 4097
log "cudaMalloc alone: smallest alignment over 1..4096 bytes $(awk '$1 <= 4096 {print $2}' "$GS_WORK/both.txt" | sort -n | head -n 1)," \
  "at 1 MiB $(awk '$1 == 1048576 {print $2}' "$GS_WORK/both.txt"); by size: $(awk '$1 <= 4096 {print $2}' "$GS_WORK/both.txt" | sort -n | uniq -c | tr -s ' \n' ' ')"
log "under the agent: by size: $(awk '$1 <= 4096 {print $3}' "$GS_WORK/both.txt" | sort -n | uniq -c | tr -s ' \n' ' '), at 1 MiB $(awk '$1 == 1048576 {print $3}' "$GS_WORK/both.txt")"
awk '$3 < $2' "$GS_WORK/both.txt" >"$GS_WORK/worse.txt"
log_block "  agent less aligned (size driver agent): " "$(head -n 20 "$GS_WORK/worse.txt")"
check_eq "sizes where the agent's pointers are less aligned than cudaMalloc's" "$(wc -l <"$GS_WORK/worse.txt")" 0
finish
