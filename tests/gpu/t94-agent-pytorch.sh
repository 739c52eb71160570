#!/usr/bin/env bash
# t94-agent-pytorch.sh - a PyTorch model (random weights built in the test)
# under the agent gives bit-identical outputs, and a CUDA graph captured before
# the suspend replays identically, after agent suspend/resume cycles (and a
# keep-context cycle), with each allocator backend: the default caching
# allocator, expandable_segments:True (the app's own cuMemCreate/cuMemMap,
# released through the agent's virtual handles) and cudaMallocAsync.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t94-agent-pytorch
py=$(dirname "$0")/py/torch_model.py
require_torch

for conf in default expandable_segments:True backend:cudaMallocAsync; do
  name=${conf%%:*}
  if [ "$conf" == default ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=$conf; fi
  app_start "$name" 240 "$GPUSNAP" run -- python3 "$py" --seed 94 || continue
  pid=${APP_PID[$name]}
  app_cmd "$name" check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]] && pass "$conf: outputs before suspend" ||
    fail "$conf: check before suspend: $REPLY_LINE"
  # every backend's memory is releasable by the agent: expandable segments (the app's
  # own cuMemCreate/cuMemMap) through virtual handles, at least one 20 MiB segment
  expect_agent_releasable "$conf: the model's memory" "$pid" $((16 << 20))
  for cycle in 1 2; do
    agent_suspend_checked "$conf: agent suspend $cycle" "$pid" || break
    gs_run resume "$pid" --json
    expect_rc 0 "$conf: resume $cycle" || break
    if app_cmd "$name" check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]]; then
      pass "$conf: outputs and graph replay bit-identical after cycle $cycle"
    else
      fail "$conf: after cycle $cycle: $REPLY_LINE"
    fi
    app_cmd "$name" churn CHURN 120 || fail "$conf: allocator churn after cycle $cycle"
  done
  gs_run suspend "$pid" --keep-context --json
  expect_rc 0 "$conf: keep-context suspend"
  log "$conf: VRAM with the context kept: $(pid_vram_mib "$pid") MiB"
  gs_run resume "$pid" --json
  expect_rc 0 "$conf: resume after keep-context"
  app_cmd "$name" check CHECK 120 && [[ $REPLY_LINE == "CHECK OK"* ]] && pass "$conf: identical after keep-context" ||
    fail "$conf: after keep-context: $REPLY_LINE"
  gs_run state -v "$pid"
  log "$conf: $GS_OUT"
  app_quit "$name" 60
done
unset PYTORCH_CUDA_ALLOC_CONF
finish
