#!/usr/bin/env bash
# t68-jax-cupy.sh - the other Python GPU frameworks on the GPU machine,
# under the agent (gpusnap run): JAX (a jitted MLP and its SGD step with
# XLA's allocator as it comes, 75% of the GPU taken at start), CuPy (cuBLAS,
# cuFFT, an NVRTC-compiled kernel and its memory pool), Numba (a @cuda.jit
# kernel, cuda.reduce, its memory manager) and cuda.core (NVRTC through
# Program, launch(), stream-ordered memory, pinned host memory), each holding
# 1 GiB of seeded data besides (GPUSNAP_T68_FRAMEWORKS picks some). Every result computed again after two agent
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

# what says whether a framework can run here: its import, and for Numba a kernel compiled and launched
# (Numba 0.68's compiler fails with the GPU machine's NumPy 2.5: "module 'numpy' has no attribute 'row_stack'")
numba_probe='import numpy as np
from numba import cuda
@cuda.jit
def one(a):
    a[0] = 1
a = cuda.to_device(np.zeros(1, np.int32))
one[1, 1](a)
assert a.copy_to_host()[0] == 1'
declare -A probe=([jax]="import jax" [cupy]="import cupy" [numba]="$numba_probe" [cudacore]="import cuda.core")
for fw in ${GPUSNAP_T68_FRAMEWORKS:-jax cupy numba cudacore}; do
  if ! why=$(python3 -c "${probe[$fw]}" 2>&1); then
    skip "$fw cannot run here: $(tail -n 1 <<<"$why")"
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
