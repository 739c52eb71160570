#!/usr/bin/env bash
# t52-driver-peer.sh - what the driver path can give back of a process on two
# GPUs (2 GPUs; the fake driver's refusal is tests/cli/t4042). Without the agent
# gpusnap refuses a process holding memory on several GPUs (exit 6), because the
# driver checkpoints some such processes and then cannot restore them. This
# test keeps that refusal honest and records which processes the driver does
# restore, with the peer app (tests/gpu/apps/peer.cu, data on GPU 1, a scratch
# buffer on GPU 0):
#  - peer access on: the plain suspend is refused, nothing moves, the app's
#    peer reads, writes and copies still work;
#  - peer access turned off before `suspend --multi-gpu-driver`: the resume's
#    outcome is a FINDING line; if it resumed, peer access turned on again
#    works and every buffer verifies;
#  - peer access on through `suspend --multi-gpu-driver`: the resume's outcome
#    is a FINDING line.
# Whatever the driver does, gpusnap must stay truthful: a resume that worked
# leaves the data intact, one that failed leaves `state` saying suspended with
# the failed resume as its fault (the stranded process the refusal prevents).
# t50, t51 and t83 answer the third case, two GPUs with no peer access.
. "$(dirname "$0")/lib.sh"
gs_test_init t52-driver-peer
require_gpus 2 "peer access needs 2 GPUs"
require_app peer

peer_ok() { # NAME WHEN
  local cmd word
  for cmd in peer-read:PEERREAD peer-write:PEERWRITE peer-copy:PEERCOPY; do
    word=${cmd#*:} cmd=${cmd%%:*}
    if app_cmd "$1" "$cmd" "$word" 120 && [[ $REPLY_LINE == "$word OK"* ]]; then
      pass "$2: $cmd ($REPLY_LINE)"
    else
      fail "$2: $cmd: ${REPLY_LINE:-no answer}"
      app_show_stderr "$1"
      return 1
    fi
  done
}

app_start on 120 "$app" --size 256M --seed 52 || finish
app_cmd on canpeer CANPEER || { fail "no answer to canpeer"; finish; }
if [ "$REPLY_LINE" != "CANPEER 1" ]; then
  skip "the GPUs cannot access each other: $REPLY_LINE"
  finish
fi
pid=${APP_PID[on]}
check "the app holds memory on 2 GPUs" test "$(pid_gpu_uuids "$pid" | wc -l)" -ge 2
gs_run suspend "$pid"
expect_rc 6 "peer access on: a plain driver-path suspend is refused"
check "... naming gpusnap run and --multi-gpu-driver" grep -q -- "--multi-gpu-driver" <<<"$GS_ERR"
expect_state "$pid" running "it runs on"
peer_ok on "after the refusal"

# Peer access off at the checkpoint.
app_start off 120 "$app" --size 256M --seed 53 || finish
app_reply_ok off peer-off "PEEROFF OK" 60 "peer access turned off" || finish
if driver_multi_gpu_cycle off "peer access turned off before the checkpoint"; then
  app_reply_ok off peer-on "PEERON OK" 60 "peer access turned on again after the resume" &&
    peer_ok off "peer access off through the cycle, on again"
  app_verify off "every buffer on GPU 1 after the cycle"
  app_quit off
else
  gs_kill_pid "${APP_PID[off]}"
  app_forget off
fi

# Peer access on at the checkpoint.
if driver_multi_gpu_cycle on "peer access on at the checkpoint"; then
  peer_ok on "peer access on through the cycle"
  app_verify on "every buffer on GPU 1 after the cycle"
  app_quit on
else
  gs_kill_pid "${APP_PID[on]}"
  app_forget on
fi
finish
