#!/usr/bin/env bash
# t4040 - gpusnap switch on the agent path: two apps under the agent
# (tests/agent/agent_app.c) on the host-memory fake driver take turns, their
# data checked through their own pointers each time one comes back. Checks:
#  - six turns, the halves at once (--overlap always: IN's resume on a second
#    thread while OUT's suspend runs) and one after the other, each app's data
#    bit for bit after each; --json says agent path, bytes moved, order;
#  - a --keep-context turn;
#  - mixed paths: an agent app switched with a process without the agent
#    (driver path), both ways;
#  - OUT's suspend failing in its agent (agent-copy-out in OUT's app): both
#    as they were, data intact, also when IN's resume ran meanwhile;
#  - IN's resume failing for lack of GPU memory in its agent
#    (agent-recreate in IN's app): tried again until --timeout, then OUT runs
#    again with its data and IN stays suspended (its context off the GPU
#    again), and a later switch brings IN back whole;
#  - SIGINT after both halves: undone, both apps' data intact;
#  - the storage tier: OUT spilled (--spill-only, and GPUSNAP_SPILL_DIR with
#    host memory short) and brought back from the spill by the next switch,
#    the spill removed; a switch undone after OUT spilled takes OUT's data
#    back from the spill.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app

# start_named NAME [ENV=VALUE...]: an app under the agent, its PID in $NAME, its output in $TEST_TMP/NAME.log
start_named() {
  local name=$1
  shift
  log=$TEST_TMP/$name.log
  if [ $# -gt 0 ]; then
    # shellcheck disable=SC2163 # the words are NAME=VALUE, exported as such
    (export "$@"; start_app; echo "$PID" >"$TEST_TMP/$name.pid")
    PID=$(cat "$TEST_TMP/$name.pid")
  else
    start_app
  fi
  printf -v "$name" '%s' "$PID"
}
# use NAME: verify_ok and signal_reply speak to that app
# shellcheck disable=SC2034 # log is fake_agent.sh's
use() { PID=${!1}; log=$TEST_TMP/$1.log; }
# data_ok NAME TITLE: the app's data is bit for bit what it wrote
data_ok() { use "$1"; verify_ok "$2"; }
st() { fake_state "$1"; }

start_named A
start_named B
data_ok A "A's data after setup"
data_ok B "B's data after setup"
run_gpusnap suspend "$B"; expect "B is suspended first" 0

# ---- turns ----
out=$A in=$B
for turn in 1 2 3 4 5 6; do
  overlap=always
  [ $((turn % 2)) = 0 ] && overlap=auto
  run_gpusnap switch --overlap "$overlap" --json "$out" "$in"; expect "turn $turn: switch $out out, $in in (--overlap $overlap)" 0
  check "turn $turn: out suspended, in runs ($(st "$out") $(st "$in"))" [ "$(st "$out") $(st "$in")" = "2 0" ]
  want=together
  [ "$overlap" = auto ] && want="out-first"
  check "turn $turn: JSON says agent path both ways, order $want" \
    [ "$(json_get "$OUT_TXT" '["out"]["path"],d["in"]["path"],d["order"]')" = "('agent', 'agent', '$want')" ]
  check "turn $turn: the agents moved data both ways" [ "$(json_get "$OUT_TXT" '["out"]["data_bytes"]>0 and d["in"]["data_bytes"]>0')" = True ]
  if [ "$in" = "$A" ]; then data_ok A "turn $turn: A's data is back bit for bit"; else data_ok B "turn $turn: B's data is back bit for bit"; fi
  t=$out out=$in in=$t
done

# ---- --keep-context ----
run_gpusnap switch --keep-context --json "$out" "$in"; expect "switch --keep-context" 0
check "... OUT kept its context: the driver sees it running, the agent holds its data" \
  [ "$(st "$out") $(json_get "$OUT_TXT" '["out"]["state_after"]')" = "0 suspended" ]
run_gpusnap switch "$in" "$out"; expect "switch back to the process that kept its context" 0
if [ "$out" = "$A" ]; then data_ok A "A's data after the --keep-context turn"; else data_ok B "B's data after the --keep-context turn"; fi
# now $out runs and $in is suspended
run_gpusnap switch "$out" "$in"; expect "and back again" 0
if [ "$in" = "$A" ]; then data_ok A "A's data"; else data_ok B "B's data"; fi
running=$in

# ---- mixed: an agent app and a process without the agent ----
start_cuda_proc; c=$NEWPID
run_gpusnap suspend "$c"; expect "the process without the agent is suspended (driver path)" 0
run_gpusnap switch --json "$running" "$c"; expect "switch the agent app out, the driver-path process in" 0
check "... JSON: agent out, driver in" [ "$(json_get "$OUT_TXT" '["out"]["path"],d["in"]["path"]')" = "('agent', 'driver')" ]
check "... states" [ "$(st "$running") $(st "$c")" = "2 0" ]
run_gpusnap switch --overlap always "$c" "$running"; expect "and back, the halves at once" 0
check "... states" [ "$(st "$running") $(st "$c")" = "0 2" ]
if [ "$running" = "$A" ]; then data_ok A "A's data after the mixed turns"; else data_ok B "B's data after the mixed turns"; fi

# from here A runs and B is suspended
if [ "$running" != "$A" ]; then run_gpusnap switch "$B" "$A"; expect "A runs, B suspended" 0; fi

# ---- OUT's suspend fails in its agent ----
kill -9 "$A" 2>/dev/null
start_named A GPUSNAP_FAULT=agent-copy-out@1
run_gpusnap switch "$A" "$B"; expect "OUT's agent fails its copy-out" 16 "process $A runs on, process $B stays suspended"
check "... A runs, B suspended" [ "$(st "$A") $(st "$B")" = "0 2" ]
data_ok A "... A's data intact"
kill -9 "$A" 2>/dev/null
start_named A GPUSNAP_FAULT=agent-copy-out@1
run_gpusnap switch --overlap always --json "$A" "$B"; expect "OUT's agent fails while IN's resume runs" 16 "undone, process $A runs on, process $B stays suspended"
check "... A runs, B suspended again" [ "$(st "$A") $(st "$B")" = "0 2" ]
check "... JSON: undone" [ "$(json_get "$OUT_TXT" '["undone"],d["in"]["state_after"]')" = "(True, 'suspended')" ]
data_ok A "... A's data intact"
run_gpusnap switch "$A" "$B"; expect "the same switch again works" 0
data_ok B "... B's data is back bit for bit after its resume, suspend and resume"
run_gpusnap switch "$B" "$A"; expect "and back" 0
data_ok A "... A's data"

# ---- IN's resume fails for lack of GPU memory in its agent ----
kill -9 "$B" 2>/dev/null
start_named B GPUSNAP_FAULT=agent-recreate@1+
run_gpusnap suspend "$B"; expect "B (its every re-creation failing) is suspended" 0
run_gpusnap switch --timeout 1 --json "$A" "$B"
expect "no room for IN's data within --timeout" 14 "not enough free GPU memory on GPU 0 to resume"
check "... undone: A runs, B suspended as it was (driver: checkpointed)" [ "$(st "$A") $(st "$B")" = "0 2" ]
check "... tried again" [ "$(json_get "$OUT_TXT" '["retries"]>0')" = True ]
data_ok A "... A's data intact"
kill -9 "$B" 2>/dev/null
start_named B GPUSNAP_FAULT=agent-recreate@1
run_gpusnap suspend "$B"; expect "B (its first re-creation failing) is suspended" 0
run_gpusnap switch --json "$A" "$B"; expect "a shortage that passes is waited out" 0
check "... one retry" [ "$(json_get "$OUT_TXT" '["retries"]')" = 1 ]
data_ok B "... B's data bit for bit"

# ---- SIGINT after both halves ----
bg_gpusnap switch-after-both=hold:4 switch "$B" "$A"
at_fault switch-after-both
kill -INT "$BG"
bg_wait
check "SIGINT after both halves: rc $BG_RC" [ "$BG_RC" = 130 ]
check "... undone: B runs, A suspended" [ "$(st "$B") $(st "$A")" = "0 2" ]
check "... one line says so" grep -q "interrupted by SIGINT: undone, process $B runs on, process $A stays suspended$" "$TEST_TMP/bg.err"
data_ok B "... B's data after the undo"
run_gpusnap switch "$B" "$A"; expect "the switch afterwards" 0
data_ok A "... A's data after a switch, its undo and a switch"

# ---- the storage tier: OUT goes to a spill directory, the next switch brings it back from there ----
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"
run_gpusnap switch --spill-only --spill "$spill" --json "$A" "$B"; expect "switch --spill-only: A spilled, B in" 0
check "... A's data is in the spill directory" test -n "$(find "$spill" -name 'gpusnap-'"$A"'-*' -maxdepth 1)"
run_gpusnap state -v "$A"; expect "state of the spilled A" 0 "suspended"
check "... says where its data is" grep -q "^data: spilled to $spill, " "$OUT_TXT"
data_ok B "... B's data"
run_gpusnap switch "$B" "$A"; expect "switch back: A from its spill" 0
check "... the spill is removed (in the background)" eventually 30 empty_dir "$spill"
data_ok A "... A's data bit for bit after the spill"
# host memory short for A (its agent reads the limit): GPUSNAP_SPILL_DIR is used by itself
kill -9 "$A" 2>/dev/null
start_named A GPUSNAP_HOST_MEMORY_LIMIT=1M
data_ok A "A, restarted with 1 MiB of host memory for its suspends"
GPUSNAP_SPILL_DIR=$spill run_gpusnap switch "$A" "$B"
expect "GPUSNAP_SPILL_DIR with host memory short: A spilled by itself" 0
check "... into the spill directory" test -n "$(find "$spill" -name 'gpusnap-'"$A"'-*' -maxdepth 1)"
run_gpusnap switch "$B" "$A"; expect "and back from it" 0
data_ok A "... A's data after the spill the setting chose"
GPUSNAP_FAULT=switch-after-both run_gpusnap switch --spill-only --spill "$spill" "$A" "$B"
expect "a failure after A spilled and B came in: undone" 1 "undone, process $A runs on, process $B stays suspended"
check "... A's spill is removed by the undo, and B is back in host memory, not spilled" \
  eventually 30 empty_dir "$spill"
data_ok A "... A's data, taken back from its spill"
run_gpusnap switch --spill "$TEST_TMP/none" "$A" "$B"; expect "a missing spill directory: refused" 2 "nothing was done"
check "... nothing moved: A runs, B suspended" [ "$(st "$A") $(st "$B")" = "0 2" ]
test_done
