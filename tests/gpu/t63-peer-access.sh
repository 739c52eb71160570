#!/usr/bin/env bash
# t63-peer-access.sh - peer access between two GPUs under the agent (2 GPUs;
# the fake driver's version is tests/cli/t4014). The agent backs cudaMalloc
# with cuMemCreate + cuMemMap, which cudaDeviceEnablePeerAccess does not
# reach by itself: the agent grants each peer access to its mappings. The peer
# app (tests/gpu/apps/peer.cu) enables peer access both ways, then a kernel on
# GPU 0 reads GPU 1's buffers in place and copies them, writes into GPU 1's
# memory, and cudaMemcpyPeer copies them, every word checked:
#  - alone (the app and the machine's peer access are sound);
#  - under the agent, for buffers allocated before and after the enable
#    (small ones sub-allocated from slabs, a large one of its own);
#  - after a suspend (VRAM 0 on both GPUs) and resume: the re-created memory
#    is reachable from the peer again.
. "$(dirname "$0")/lib.sh"
gs_test_init t63-peer-access
require_gpus 2 "peer access needs 2 GPUs"
require_app peer

cmd_ok() { # NAME COMMAND WORD WHAT
  if app_cmd "$1" "$2" "$3" 120 && [[ $REPLY_LINE == "$3 OK"* ]]; then
    pass "$4 ($REPLY_LINE)"
    return 0
  fi
  fail "$4: ${REPLY_LINE:-no answer}"
  app_show_stderr "$1"
  return 1
}
peer_checks() { # NAME WHEN
  cmd_ok "$1" peer-read PEERREAD "$2: a kernel on GPU 0 reads GPU 1's buffers, in place and copied"
  cmd_ok "$1" peer-write PEERWRITE "$2: a kernel on GPU 0 writes GPU 1's memory"
  cmd_ok "$1" peer-copy PEERCOPY "$2: cudaMemcpyPeer from GPU 1 to GPU 0"
}

app_start alone 120 "$app" --size 256M || finish
app_cmd alone canpeer CANPEER || { fail "no answer to canpeer"; finish; }
if [ "$REPLY_LINE" != "CANPEER 1" ]; then
  skip "GPU 0 and GPU 1 cannot access each other's memory on this machine ($REPLY_LINE)"
  app_quit alone
  finish
fi
peer_checks alone "without the agent"
app_quit alone

app_start p 180 "$GPUSNAP" run -- "$app" --size 256M || finish
pid=${APP_PID[p]}
peer_checks p "under the agent, memory allocated before the enable"
cmd_ok p alloc-new ALLOC "allocations on GPU 1 after the enable"
peer_checks p "under the agent, memory allocated after the enable too"
gs_run suspend "$pid" --json
expect_rc 0 "agent suspend of the two-GPU process" || finish
check "the agent moved the data" grep -q '"path":"agent"' <<<"$GS_OUT"
check "VRAM 0 while suspended" [ "$(pid_vram_mib "$pid")" == 0 ]
resume_checked p || finish
app_verify p "GPU 1's buffers after the cycle"
peer_checks p "after a suspend and resume (re-created memory)"
app_quit p
finish
