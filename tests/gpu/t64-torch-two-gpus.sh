#!/usr/bin/env bash
# t64-torch-two-gpus.sh - one PyTorch process on two GPUs under the agent
# (2 GPUs): tensors on both GPUs, peer copies both ways (contiguous, and
# transposed so PyTorch's copy kernel reads the peer's memory through peer
# access), and an all-reduce over both GPUs inside the process
# (tests/gpu/py/two_gpus.py), every result equal bit for bit to a
# recomputation on the host:
#  - before a suspend, and after each of two suspend/resume cycles (VRAM 0);
#  - with the default caching allocator (cudaMalloc: the agent grants peer
#    access itself) and expandable segments (PyTorch's own cuMemMap memory,
#    whose peer access it sets with cuMemSetAccess, replayed by the agent);
#  - the all-reduce through NCCL (torch.cuda.nccl, one process, both GPUs),
#    and by peer copies and an add. Where the driver refuses to checkpoint a
#    process with NCCL's memory, the suspend must be undone with the app
#    running and its data intact; the NCCL case is then a SKIP line saying so.
# gpu-test-limit: 480
. "$(dirname "$0")/lib.sh"
gs_test_init t64-torch-two-gpus
require_gpus 2 "a process on two GPUs needs 2 GPUs"
py=$(dirname "$0")/py/two_gpus.py
require_torch 2

check_ok() { app_reply_ok "$1" check "CHECK OK*" 180 "$2"; } # NAME WHAT

for conf in default expandable_segments:True; do
  if [ "$conf" == default ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=$conf; fi
  for coll in nccl copy; do
    name=${conf%%:*}-$coll
    app_start "$name" 240 "$GPUSNAP" run -- python3 "$py" --collective "$coll" || continue
    pid=${APP_PID[$name]}
    check_ok "$name" "$conf, $coll: tensors, peer copies and all-reduce on two GPUs under the agent" ||
      { app_quit "$name" 60; continue; }
    for cycle in 1 2; do
      gs_run suspend "$pid" --json
      if [ "$GS_RC" != 0 ] && [ "$coll" == nccl ] && grep -q "suspend undone, processes left running" <<<"$GS_ERR"; then
        log "$conf, nccl: the suspend was refused and undone: $(head -n 1 <<<"$GS_ERR")"
        expect_state "$pid" running "$conf, nccl: a refused suspend leaves the app running"
        check_ok "$name" "$conf, nccl: results after the refused suspend"
        skip "$conf, nccl: the driver refuses to checkpoint this process with NCCL's memory ($(head -n 1 <<<"$GS_ERR"))"
        break
      fi
      expect_rc 0 "$conf, $coll: agent suspend $cycle" || break
      check "$conf, $coll: suspend $cycle took the agent path" grep -q '"path":"agent"' <<<"$GS_OUT"
      check "$conf, $coll: VRAM 0 while suspended" [ "$(pid_vram_mib "$pid")" == 0 ]
      resume_checked "$name" || break
      check_ok "$name" "$conf, $coll: the same results after cycle $cycle" || break
    done
    gs_run state -v "$pid"
    log "$conf, $coll: $GS_OUT"
    app_quit "$name" 60
  done
done
unset PYTORCH_CUDA_ALLOC_CONF
finish
