#!/usr/bin/env bash
# t32-agent-admission.sh - a suspend asks for host memory only for what it
# will hold (issue 24): a plain CUDA process (the pattern app) allocates
# 32 GiB in 1 GiB allocations and writes 3 GiB of it (--zero-percent 90, as a
# framework that preallocates and writes little). Under a
# GPUSNAP_HOST_MEMORY_LIMIT of 8 GiB, which the full size exceeds, the
# suspend is admitted: the agent's zero scan finds the rest zero on the GPU
# before the pool is asked for, admitted_bytes and held_bytes are about the
# written bytes, and the host's MemAvailable falls by about that much (not
# by 32 GiB); every byte verifies after resume. Under a limit of 2 GiB the
# same process is refused (exit 13, one line naming needed, zero and the
# limit) and runs on with its data.
# gpu-test-limit: 360
. "$(dirname "$0")/lib.sh"
gs_test_init t32-agent-admission

jget() { json_get "$GS_OUT" "$1"; }
avail() { awk '/^MemAvailable:/ {print $2 * 1024}' /proc/meminfo; }
written=$((3 << 30))
slack=$((1 << 30)) # the driver's copy of the context, the runtime's own blocks, the page cache's drift

GPUSNAP_HOST_MEMORY_LIMIT=8G GPUSNAP_HOST_MEMORY_MARGIN=0 app_start a 300 "$GPUSNAP" run -- "$GS_APPS/pattern" \
  --size 32G --alloc-size 1G --zero-percent 90 --seed 32 || finish
pid=${APP_PID[a]}
for cycle in 1 2; do
  before=$(avail)
  gs_run suspend "$pid" --json
  expect_rc 0 "cycle $cycle: 32 GiB with 3 GiB written admitted under an 8 GiB limit" || break
  after=$(avail)
  admitted=$(jget processes.0.agent.admitted_bytes) held=$(jget processes.0.data.held_bytes) zero=$(jget processes.0.data.zero_bytes)
  log "cycle $cycle: admitted $admitted, held $held, zero $zero, MemAvailable $before -> $after"
  check "cycle $cycle: admitted about the written bytes ($admitted)" between "${admitted:-0}" "$written" $((written + slack))
  check "cycle $cycle: held about the written bytes ($held)" between "${held:-0}" "$written" $((written + slack))
  check "cycle $cycle: 29 GiB left zero on the GPU ($zero)" [ "${zero:-0}" -ge $((29 << 30)) ]
  check "cycle $cycle: the data stayed in host memory" [ "$(jget processes.0.data.where)" == host-memory ]
  check "cycle $cycle: host memory fell by about the written bytes ($((before - after)) bytes)" \
    [ $((before - after)) -le $((written + slack)) ]
  check "cycle $cycle: VRAM of the process is 0" [ "$(pid_vram_mib "$pid")" == 0 ]
  gs_run resume "$pid" --json
  expect_rc 0 "cycle $cycle: resume" || break
  app_verify a "32 GiB, 29 of them zero, after cycle $cycle"
done
app_quit a

GPUSNAP_HOST_MEMORY_LIMIT=2G GPUSNAP_HOST_MEMORY_MARGIN=0 app_start r 300 "$GPUSNAP" run -- "$GS_APPS/pattern" \
  --size 32G --alloc-size 1G --zero-percent 90 --seed 33 || finish
pid=${APP_PID[r]}
vram=$(pid_vram_mib "$pid")
gs_run suspend "$pid"
expect_rc 13 "the same under a 2 GiB limit is refused"
check "one line naming needed, zero and the limit" \
  [ "$(wc -l <<<"$GS_ERR")" = 1 ] && grep -q "needed (.* more are zero and stay on the GPU), 2.00 GiB available (GPUSNAP_HOST_MEMORY_LIMIT)" <<<"$GS_ERR"
# nothing was released: the VRAM is what it was, or a little more (the zero scan's kernel module stays loaded)
now=$(pid_vram_mib "$pid")
check "its VRAM stayed ($now MiB, was $vram)" between "${now:-0}" "$vram" $((vram + 64))
expect_state "$pid" running "state after the refusal"
app_verify r "32 GiB after the refused suspend"
app_quit r
finish
