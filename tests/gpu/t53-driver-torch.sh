#!/usr/bin/env bash
# t53-driver-torch.sh - which PyTorch processes on two GPUs the driver path
# gives back (2 GPUs; t52 asks the same of a plain CUDA app with peer access).
# The driver was seen to checkpoint a PyTorch process holding tensors on both
# GPUs with peer copies between them and then refuse every resume
# (CUDA_ERROR_INVALID_VALUE), while t52's CUDA app with peer access on resumes.
# Each variant of tests/gpu/py/two_gpus.py runs in a fresh process without the
# agent, its check run once (so PyTorch enables what the variant uses), then
# `suspend --multi-gpu-driver` and `resume`; the outcome is a FINDING line:
#  - tensors on both GPUs, nothing crossing between them; the same with pinned
#    host memory (cudaHostAlloc, portable to both contexts) copied to and from each;
#  - peer copies (contiguous and through PyTorch's copy kernel) and an
#    all-reduce by copies, with the caching allocator (cudaMalloc);
#  - the same with expandable segments (PyTorch's cuMemCreate memory, its peer
#    access set with cuMemSetAccess);
#  - an all-reduce through NCCL inside the process.
# Whatever the driver does, gpusnap's account must be true: after a resume the
# results are bit-identical; after a failed one `state` says suspended with
# the failed resume as its fault (the process is then ended).
# gpu-test-limit: 420
. "$(dirname "$0")/lib.sh"
gs_test_init t53-driver-torch
require_gpus 2 "a process on two GPUs needs 2 GPUs"
py=$(dirname "$0")/py/two_gpus.py
require_torch 2

# NAME ALLOC_CONF WHAT TWO_GPUS.PY ARGS...
variant() {
  local name=$1 conf=$2 what=$3
  shift 3
  if [ "$conf" == default ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=$conf; fi
  app_start "$name" 240 python3 "$py" "$@" || return
  if ! app_reply_ok "$name" check "CHECK OK*" 180 "$what: results before the checkpoint"; then
    app_quit "$name" 60
    return
  fi
  if driver_multi_gpu_cycle "$name" "$what"; then
    app_reply_ok "$name" check "CHECK OK*" 180 "$what: the same results after the driver's resume"
    app_quit "$name" 60
  else
    gs_kill_pid "${APP_PID[$name]}"
    app_forget "$name"
  fi
}

variant apart default "tensors on both GPUs, nothing crossing" --collective none --no-peer-copies
variant pinned default "tensors on both GPUs and pinned host memory, no peer copies" --collective none --no-peer-copies \
  --pinned
variant copies default "peer copies and an all-reduce by copies (cudaMalloc)" --collective copy
variant expandable expandable_segments:True "peer copies and an all-reduce by copies (expandable segments)" \
  --collective copy
variant nccl default "an all-reduce through NCCL in one process (cudaMalloc)" --collective nccl --no-peer-copies
unset PYTORCH_CUDA_ALLOC_CONF
finish
