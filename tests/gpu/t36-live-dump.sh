#!/usr/bin/env bash
# t36-live-dump.sh - periodic `gpusnap dump --leave-running` of processes
# that keep working (the live dump through the dump's own copy in memory,
# docs/DESIGN.md "The dump's own copy"):
#  1. the inference server of t85 (tests/gpu/py/server.py) answers a steady
#     stream of requests (server_client.py's hammer, every answer compared
#     with an uninterrupted twin's) while it is dumped GPUSNAP_T36_DUMPS times
#     (default 5) with --leave-running and --tcp-close (the running server
#     keeps its connections; the image has them closed, the client reconnects
#     to the restored one): every dump staged, its paused_s and the longest wait
#     for an answer reported, every answer equal to the twin's; then the last
#     image restores a server that answers as the twin;
#  2. a training process (tests/gpu/py/train_live.py, deterministic) is dumped
#     with --leave-running while it trains, three times per round of steps
#     (GPUSNAP_T36_STEPS, default 16000: each dump ends before the round does,
#     checked), and its final weights and optimizer state equal those of a twin
#     trained without a dump, bit for bit; the last image restores it
#     mid-training and it trains on to the same weights as the twin.
# gpu-test-limit: 480
. "$(dirname "$0")/lib.sh"
gs_test_init t36-live-dump
export GS_APP_STDERR=null # CRIU restores a process only if its regular files kept their size
require_torch
require_criu
dumps=${GPUSNAP_T36_DUMPS:-5}
steps=${GPUSNAP_T36_STEPS:-16000}
img=$GS_WORK/img

live_dump() { # PID DIR WHAT [DUMP ARGS...]: dump --leave-running, staged, the process alive after it; PAUSED
  gs_run dump --leave-running --json -D "$2" "$1" "${@:4}"
  expect_rc 0 "$3: dump --leave-running" || return 1
  PAUSED=$(json_get "$GS_OUT" times.paused_s)
  log "$3: paused $PAUSED s, staged $(json_get "$GS_OUT" staged), copied $(json_get "$GS_OUT" stop_copy_bytes) B in the pause, image written $(json_get "$GS_OUT" times.stage_write_s 2>/dev/null) s after it, total $(json_get "$GS_OUT" times.total_s) s"
  check_eq "$3: the pause copied into the dump's memory (staged)" "$(json_get "$GS_OUT" staged)" true
  check "$3: the process runs on" pid_alive "$1"
}

# ---- 1. a server under load ----
server_pair_start 36 || finish
pid=${APP_PID[srv]}
server_client_start 36 --wait-s 150 || finish
client_same_as_twin "before any dump"
app_cmd client hammer-start HAMMER 10 || finish
pauses=()
for ((d = 1; d <= dumps; d++)); do
  app_cmd client next ANSWERED 150 || { fail "the stream stopped before dump $d"; break; }
  live_dump "$pid" "$img" "server dump $d" --tcp-close || break
  pauses+=("$PAUSED")
  if ! app_cmd client next ANSWERED 150 || [[ $REPLY_LINE == *TIMEOUT* || $REPLY_LINE == *ERROR* ]]; then
    fail "server dump $d: no answer after it: $REPLY_LINE"
  fi
  sleep 3
done
if app_cmd client hammer-stop STOPPED 200; then
  stream=$REPLY_LINE
  max_s=$(sed -n 's/.* max_s=\([0-9.]*\).*/\1/p' <<<"$stream")
  log "server: paused_s ${pauses[*]}; longest wait for an answer ${max_s} s ($stream)"
  # shellcheck disable=SC2016 # $1 is bash -c's
  check "every answer during the live dumps equal to the twin's ($stream)" \
    bash -c '[[ $1 == *" diff=0 "* ]] && [[ $1 != *error=* ]]' _ "$stream"
else
  fail "the client does not stop its stream"
fi
echo "t36 server: paused_s ${pauses[*]}; longest wait for an answer ${max_s:-?} s" >>"$GS_WORK/t36-summary.txt"
gs_run inspect --verify "$img"
expect_rc 0 "the last live image verifies"
app_quit srv 60 || gs_kill_pid "$pid"
wait_pid_gone "$pid"
restore_checked "$img" "$pid" && client_same_as_twin "the server restored from the last live image"

# ---- 2. training with periodic live dumps ----
py=$GS_SRC/tests/gpu/py/train_live.py
app_start train 240 "$GPUSNAP" run -- python3 "$py" --seed 36 --steps "$steps" || finish
app_start twin_train 240 "$GPUSNAP" run -- python3 "$py" --seed 36 --steps "$steps" || finish
tpid=${APP_PID[train]}
rounds=3
for ((r = 1; r <= rounds; r++)); do
  app_send train train
  app_send twin_train train
  for k in 1 2 3; do
    live_dump "$tpid" "$GS_WORK/train-img" "training round $r, dump $k" || break 2
    # the round's TRAINED line not yet written: the dump was taken and ended while it trained
    check "training round $r, dump $k: taken while the round trained" app_quiet train
  done
  app_expect train TRAINED 600 || { fail "training round $r did not end"; break; }
  app_expect twin_train TRAINED 600 || { fail "the twin's round $r did not end"; break; }
done
app_cmd train digest DIGEST 120 && a=$REPLY_LINE
app_cmd twin_train digest DIGEST 120 && b=$REPLY_LINE
check_eq "final weights and optimizer state after live dumps equal the uninterrupted twin's" "${a:-none}" "${b:-missing}"
# the last image: taken during round 3; restored, it trains its remaining steps and one more round, as the twin
app_quit train 60 || gs_kill_pid "$tpid"
wait_pid_gone "$tpid"
app_expect train BYE 10 >/dev/null # the ended process's last line, before the restored one's
if restore_checked "$GS_WORK/train-img" "$tpid"; then
  app_expect train TRAINED 600 # the round the dump interrupted, finished by the restored process
  app_cmd train train TRAINED 600
  app_cmd twin_train train TRAINED 600
  app_cmd train digest DIGEST 120 && a=$REPLY_LINE
  app_cmd twin_train digest DIGEST 120 && b=$REPLY_LINE
  check_eq "restored mid-training from a live image, it trains on to the twin's weights" "${a:-none}" "${b:-missing}"
fi
finish
