#!/usr/bin/env bash
# t68-jax-cupy.sh - JAX and CuPy, the two other frameworks on the GPU
# machine, under the agent (gpusnap run): a jitted MLP and its SGD step with
# XLA's allocator as it comes (75% of the GPU taken at start), and CuPy's
# cuBLAS, cuFFT, an NVRTC-compiled kernel and its memory pool, each holding 1
# GiB of seeded data besides. Every result computed again after two agent
# suspend/resume cycles (VRAM 0 while suspended), a --keep-context cycle, a
# --driver cycle, and a dump, kill and restore is bit-identical to the one
# computed before; JAX's never-written memory is found zero on the GPU by the
# dump. A framework that is not installed is a SKIP line.
# gpu-test-limit: 480
. "$(dirname "$0")/lib.sh"
gs_test_init t68-jax-cupy
py=$(dirname "$0")/py/jax_cupy.py
require_criu

check_ok() { app_reply_ok "$1" check "CHECK OK*" 180 "$2"; } # NAME WHAT

for fw in jax cupy; do
  if ! python3 -c "import $fw" 2>/dev/null; then
    skip "$fw is not installed here"
    continue
  fi
  app_start "$fw" 300 "$GPUSNAP" run -- python3 "$py" --framework "$fw" --seed 68 || continue
  pid=${APP_PID[$fw]}
  check_ok "$fw" "$fw: results before any suspend"
  expect_agent_releasable "$fw" "$pid" $((1 << 30))
  for cycle in 1 2; do
    agent_suspend_checked "$fw: agent suspend $cycle" "$pid" || break
    log "$fw: suspend $cycle: $(json_get "$GS_OUT" 'processes.0.agent.bytes') bytes, $(json_get "$GS_OUT" 'processes.0.agent.zero_bytes') of them zero, $(json_get "$GS_OUT" total_s) s"
    gs_run resume "$pid" --json
    expect_rc 0 "$fw: resume $cycle" || break
    check_ok "$fw" "$fw: bit-identical results after cycle $cycle"
  done
  gs_run suspend "$pid" --keep-context --json
  expect_rc 0 "$fw: suspend --keep-context"
  gs_run resume "$pid" --json
  expect_rc 0 "$fw: resume after --keep-context"
  check_ok "$fw" "$fw: bit-identical after a --keep-context cycle"
  gs_run suspend "$pid" --driver --json
  expect_rc 0 "$fw: suspend --driver (the driver moves everything)"
  gs_run resume "$pid" --json
  expect_rc 0 "$fw: resume after --driver"
  check_ok "$fw" "$fw: bit-identical after a --driver cycle"
  if dump_checked "$pid" "$GS_WORK/img-$fw" agent; then
    gz=$(json_get "$GS_OUT" gpu_zero_bytes)
    if [ "$fw" = jax ]; then
      # XLA took 75% of the GPU and wrote little of it: found zero on the GPU, never copied
      check "jax: the dump found the never-written memory on the GPU (${gz:-?} bytes)" [ "${gz:-0}" -ge $((32 << 30)) ]
    fi
    restore_checked "$GS_WORK/img-$fw" "$pid" && check_ok "$fw" "$fw: bit-identical after dump, kill and restore"
  fi
  app_quit "$fw" 60
done
finish
