#!/usr/bin/env bash
# t96-agent-zero.sh - all-zero GPU memory on the fast path: a pattern process
# holding 8 GiB of which 75% is zero (--zero-percent 75, as a framework's
# reserved but unused memory) is suspended: the agent keeps none of the zero
# chunks in host memory (zero_bytes >= 6 GiB, VRAM -> 0), resume sets them with
# a memset, and every byte verifies (the zeros and the pattern). Then the same
# with a reserved pool over two cycles (its bytes are the last cycle's where
# zero chunks were not copied), a --keep-context cycle, and
# GPUSNAP_ZERO_CHUNKS=0 (every chunk copied). The zero chunks are found on the
# GPU by the agent's own kernel before anything crosses PCIe (gpu_zero_bytes
# as large as zero_bytes), and with GPUSNAP_GPU_ZERO_SCAN=0 on the host after
# the copy (gpu_zero_bytes 0, the same zero_bytes).
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t96-agent-zero

zero_bytes() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["processes"][0]["agent"].get(sys.argv[2], -1))' "$GS_OUT" "${1:-zero_bytes}"; }

cycle() { # NAME WHAT MIN_ZERO_BYTES MAX_ZERO_BYTES [SUSPEND ARGS...]
  local name=$1 what=$2 lo=$3 hi=$4 pid=${APP_PID[$1]} z g
  shift 4
  gs_run suspend "$pid" --json "$@"
  expect_rc 0 "suspend $what" || return 1
  check "$what took the agent path" grep -q '"path":"agent"' <<<"$GS_OUT"
  z=$(zero_bytes)
  check "$what: $z bytes were zero and not copied (want $lo to $hi)" between "$z" "$lo" "$hi"
  g=$(zero_bytes gpu_zero_bytes)
  if [ "${GPUSNAP_GPU_ZERO_SCAN:-1}" = 0 ] || [ "$hi" = 0 ]; then
    check "$what: none found on the GPU ($g bytes)" [ "$g" -le 0 ]
  else
    check "$what: all of them found on the GPU, never copied ($g of $z bytes; scan $(json_get "$GS_OUT" processes.0.agent.zero_scan_s) s)" [ "$g" = "$z" ]
  fi
  [ "${1:-}" != --keep-context ] && check "$what: VRAM of the process is 0" [ "$(pid_vram_mib "$pid")" == 0 ]
  gs_run resume "$pid" --json
  expect_rc 0 "resume after $what" || return 1
  z=$(zero_bytes)
  check "$what: resume set $z zero bytes (want $lo to $hi)" between "$z" "$lo" "$hi"
  expect_state "$pid" running "state after resuming from $what"
  app_verify "$name" "8 GiB, 75% zero, after $what"
}

# 6 of the 8 allocations are zero; the runtime's own small blocks may add a zero chunk or two
six=$((6 << 30)) most=$(((6 << 30) + (64 << 20)))
app_start z 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --zero-percent 75 --seed 96 || finish
cycle z "an on-demand suspend" "$six" "$most" || finish
cycle z "a second on-demand suspend" "$six" "$most" || finish
cycle z "a keep-context suspend" "$six" "$most" --keep-context || finish
app_quit z

app_start r 180 "$GPUSNAP" run --reserve 9G -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --zero-percent 75 --seed 97 || finish
cycle r "a suspend into a reserved pool" "$six" "$most" || finish
cycle r "a second suspend into the reserved pool" "$six" "$most" || finish
app_quit r

export GPUSNAP_GPU_ZERO_SCAN=0
app_start h 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --zero-percent 75 --seed 99 || finish
cycle h "a suspend with GPUSNAP_GPU_ZERO_SCAN=0 (found on the host)" "$six" "$most" || finish
app_quit h
unset GPUSNAP_GPU_ZERO_SCAN

GPUSNAP_ZERO_CHUNKS=0 app_start o 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --zero-percent 75 --seed 98 || finish
cycle o "a suspend with GPUSNAP_ZERO_CHUNKS=0" 0 0 || finish
app_quit o
finish
