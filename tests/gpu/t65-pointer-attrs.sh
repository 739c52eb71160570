#!/usr/bin/env bash
# t65-pointer-attrs.sh - pointer attributes of cudaMalloc memory under the
# agent answer as the driver's do for its own cudaMalloc (one GPU; the fake
# driver's version is tests/cli/t4014): the ptrattr app (blocks of 1 byte to
# 3 MiB, the small ones sub-allocated by the agent from shared slabs) checks,
# for a pointer inside each block, range start and size (the block, not the
# slab), buffer ids of their own, device, memory type, context, through
# cuPointerGetAttribute, cuPointerGetAttributes, cuMemGetAddressRange and
# cudaPointerGetAttributes:
#  - alone (what the driver answers for cudaMalloc holds);
#  - under the agent, before and after a suspend and resume (buffer ids kept);
#  - where the driver calls cudaMalloc memory GPUDirect RDMA capable, the
#    agent's is too (it asks for gpuDirectRDMACapable).
. "$(dirname "$0")/lib.sh"
gs_test_init t65-pointer-attrs
app=$GS_APPS/ptrattr
if [ ! -x "$app" ]; then
  fail "missing $app (build with -DGPUSNAP_GPU_APPS=ON)"
  finish
fi

attrs_ok() { # NAME WHAT -> sets RDMA
  RDMA=
  if app_cmd "$1" attrs ATTRS && [[ $REPLY_LINE == "ATTRS OK"* ]]; then
    RDMA=${REPLY_LINE##*rdma=}
    pass "$2 ($REPLY_LINE)"
    return 0
  fi
  fail "$2: ${REPLY_LINE:-no answer}"
  app_show_stderr "$1"
  return 1
}

app_start alone 60 "$app" || finish
attrs_ok alone "cudaMalloc's pointer attributes without the agent"
rdma_driver=$RDMA
app_quit alone

app_start agent 120 "$GPUSNAP" run -- "$app" || finish
pid=${APP_PID[agent]}
attrs_ok agent "the same answers under the agent (sub-allocated blocks answer for the block)"
if [ "$rdma_driver" = 1 ]; then
  check_eq "the agent's memory is GPUDirect RDMA capable, as cudaMalloc's is here" "$RDMA" 1
else
  log "note: cudaMalloc memory is not GPUDirect RDMA capable on this machine (rdma=$rdma_driver): nothing to compare"
fi
gs_run suspend "$pid" --json
expect_rc 0 "agent suspend" || finish
check "the agent moved the data" grep -q '"path":"agent"' <<<"$GS_OUT"
resume_checked agent || finish
attrs_ok agent "after a suspend and resume: the same ranges and buffer ids"
app_verify agent "the blocks after the cycle"
app_quit agent
finish
