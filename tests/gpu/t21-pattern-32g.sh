#!/usr/bin/env bash
# t21-pattern-32g.sh - a process holding 32 GiB of pattern (2 GiB allocations):
# suspend (VRAM -> 0), resume, verify bit for bit.
. "$(dirname "$0")/lib.sh"
gs_test_init t21-pattern-32g

free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | tr -d ' ')
if ! [[ $free =~ ^[0-9]+$ ]] || [ "$free" -lt $((33 * 1024)) ]; then
  skip "GPU 0 has '$free' MiB free, 33 GiB needed"
  finish
fi
app_start p 300 "$GS_APPS/pattern" --size 32G --alloc-size 2G --seed 21 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 32768
suspend_checked p 32768 || finish
resume_checked p || finish
app_verify p "32 GiB pattern after resume"
app_quit p
finish
