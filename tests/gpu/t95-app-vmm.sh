#!/usr/bin/env bash
# t95-app-vmm.sh - the app's own VMM memory (cuMemCreate + cuMemMap, as
# PyTorch's expandable segments, vLLM and TensorRT-LLM use it) is released by
# the agent: vmm_app (tests/gpu/apps/vmm_app.cu) holds 6 GiB in 1 GiB handles
# plus a handle mapped twice, one mapped again elsewhere, one released while mapped, and
# one exported handle. Under `gpusnap run`:
#  - `state --json` counts the exported handle as not releasable;
#  - an agent suspend moves every releasable byte (the JSON says how many) and
#    VRAM goes to 0; resume verifies bit for bit, mappings and access included;
#  - a --keep-context suspend leaves only the context (and the exported
#    handle) in VRAM, which the driver path could not do for this memory;
#  - the same with 2 GiB in 20 MiB handles (PyTorch's segment size, ~100 handles);
#  - the app then unmaps and releases everything without an error.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t95-app-vmm
require_app vmm_app

# run_case NAME SIZE CHUNK: one process through the checks above
run_case() {
  local name=$1 size=$2 chunk=$3 pid releasable exported got before after
  app_start "$name" 180 "$GPUSNAP" run -- "$app" --size "$size" --chunk "$chunk" --seed 95 || return 1
  pid=${APP_PID[$name]}
  app_cmd "$name" sizes SIZES || { fail "$name: no answer to sizes"; return 1; }
  read -r _ _ releasable _ exported <<<"$REPLY_LINE"
  log "$name: $releasable releasable bytes, $exported exported"
  app_verify "$name" "$name: data before suspend" || return 1

  gs_run state "$pid" --json
  check_eq "$name: the agent's releasable bytes cover the app's handles" \
    "$(json_get "$GS_OUT" agent.bytes | awk -v r="$releasable" '{ print ($1 >= r && $1 < r + 67108864) ? "yes" : $1 }')" yes
  check_eq "$name: not releasable allocations (the exported handle)" "$(json_get "$GS_OUT" agent.unmanaged_allocations)" 1
  check_eq "$name: not releasable bytes" "$(json_get "$GS_OUT" agent.unmanaged_bytes)" "$exported"

  # the agent path: the app's handles are copied out and released
  vram_snapshot "$pid"
  before=$SNAP_PID_MIB
  gs_run suspend "$pid" --json
  expect_rc 0 "$name: agent suspend" || return 1
  check_eq "$name: suspend path" "$(json_get "$GS_OUT" processes.0.path)" agent
  got=$(json_get "$GS_OUT" processes.0.agent.bytes)
  check "$name: the agent moved the app's $releasable bytes (reported: $got)" \
    awk -v g="$got" -v r="$releasable" 'BEGIN { exit !(g >= r && g < r + 67108864) }'
  expect_state "$pid" suspended "$name: state after suspend"
  expect_vram_released "$name" "$pid" "$before" "$SNAP_GPU_MIB" $((releasable >> 20))
  resume_checked "$name" || return 1
  app_verify "$name" "$name: data after an agent suspend/resume" || return 1

  # keep-context: only the context and the exported handle stay
  vram_snapshot "$pid"
  before=$SNAP_PID_MIB
  gs_run suspend "$pid" --keep-context --json
  expect_rc 0 "$name: suspend --keep-context" || return 1
  after=$(pid_vram_mib "$pid")
  if [[ $before =~ ^[0-9]+$ ]] && [ "$before" -gt $((releasable >> 20)) ]; then
    check "$name: keep-context leaves the context and the exported handle (${after} MiB of ${before})" \
      [ "$after" -lt $((1024 + (exported >> 20))) ]
  else
    log "$name: nvidia-smi does not list pid $pid ('$before'): VRAM after keep-context not checked"
  fi
  resume_checked "$name" || return 1
  app_verify "$name" "$name: data after a keep-context cycle" || return 1

  if app_cmd "$name" cleanup CLEAN 120 && [[ $REPLY_LINE == "CLEAN OK" ]]; then
    pass "$name: the app unmapped and released everything"
  else
    fail "$name: cleanup: $REPLY_LINE"
  fi
  gs_run state "$pid" --json
  check_eq "$name: the exported handle is no longer counted after cleanup" \
    "$(json_get "$GS_OUT" agent.unmanaged_allocations)" 0
  check "$name: the agent holds nothing of the app's handles after cleanup" \
    awk -v b="$(json_get "$GS_OUT" agent.bytes)" 'BEGIN { exit !(b < 67108864) }'
  app_quit "$name"
}

run_case big 6G 1G
run_case segments 2G 20M
finish
