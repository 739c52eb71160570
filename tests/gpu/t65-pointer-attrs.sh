#!/usr/bin/env bash
# t65-pointer-attrs.sh - pointer attributes of cudaMalloc memory under the
# agent answer as for a cudaMalloc allocation (one GPU; the fake driver's
# version is tests/cli/t4014). The ptrattr app (blocks of 1 byte to 3 MiB;
# under the agent the small ones are sub-allocated from shared slabs and the
# large one is a rounded-up mapping) asks, for a pointer inside each block,
# cuPointerGetAttribute, cuPointerGetAttributes, cuMemGetAddressRange and
# cudaPointerGetAttributes, and reports each property (range: start at the
# block, size covering it and no other block; ids: buffer ids all differ;
# stable: as first answered; dev: device, memory type, context, pointer;
# all, addr, rt: the other calls agree; rdma: GPUDirect RDMA capable):
#  - alone, the driver's answers are logged (what cudaMalloc gives here);
#  - under the agent, before and after a suspend and resume, range, ids,
#    stable, dev, all and addr must hold, and rt and rdma wherever they held
#    for the driver's own cudaMalloc (the agent asks for gpuDirectRDMACapable).
. "$(dirname "$0")/lib.sh"
gs_test_init t65-pointer-attrs
require_app ptrattr

attrs() { # NAME -> ATTRS: the reply's KEY=VALUE words; 1 when the app answered OK
  ATTRS=
  if app_cmd "$1" attrs ATTRS && [[ $REPLY_LINE == "ATTRS OK"* ]]; then
    ATTRS=${REPLY_LINE#ATTRS OK * }
    return 0
  fi
  fail "$1: attrs: ${REPLY_LINE:-no answer}"
  app_show_stderr "$1"
  return 1
}
flag() { # KEY -> its value in ATTRS
  local w
  for w in $ATTRS; do [ "${w%%=*}" == "$1" ] && echo "${w#*=}" && return; done
  echo missing
}
agent_checks() { # WHEN
  local key
  for key in range ids stable dev all addr; do
    check_eq "$1: $key" "$(flag "$key")" 1
  done
  for key in rt rdma; do
    if [ "${driver[$key]}" == 1 ]; then
      check_eq "$1: $key (as for the driver's own cudaMalloc)" "$(flag "$key")" 1
    else
      log "note: $key does not hold for the driver's own cudaMalloc here (${driver[$key]}): not compared"
    fi
  done
}

declare -A driver
app_start alone 60 "$app" || finish
attrs alone || finish
log "cudaMalloc without the agent: $ATTRS"
for key in range ids stable dev all addr rt rdma; do driver[$key]=$(flag "$key"); done
[ "${driver[range]}${driver[ids]}" == 11 ] ||
  log "note: the driver's own answers break range or ids here (see $GS_WORK/alone.stderr): the agent is held to them anyway"
app_quit alone

app_start agent 120 "$GPUSNAP" run -- "$app" || finish
pid=${APP_PID[agent]}
attrs agent && log "under the agent: $ATTRS" && agent_checks "under the agent"
gs_run suspend "$pid" --json
expect_rc 0 "agent suspend" || finish
check "the agent moved the data" grep -q '"path":"agent"' <<<"$GS_OUT"
resume_checked agent || finish
attrs agent && log "after the cycle: $ATTRS" && agent_checks "after a suspend and resume"
app_verify agent "the blocks after the cycle"
app_quit agent
finish
