#!/usr/bin/env bash
# t4034 - a suspend split between host memory and the spill directory
# on the host-memory fake driver: an app whose host memory holds
# only part of its data (GPUSNAP_HOST_MEMORY_LIMIT in the app's environment:
# the agent reads it) suspended with --spill keeps the plan's first chunks
# in host memory and streams the rest into the spill image in one pass.
# Checks: --json and `state` (with and without a PID, -v, --json) show both
# parts and the directory; the image holds only the spilled chunks and is
# refused by inspect and restore as the partial image it is; resume brings
# both parts back bit for bit and removes the spill; a rollback after a split
# (a fault after the agent's part) takes both back; a spill part that does
# not fit on its file system rolls the whole suspend back (exit 13, nothing
# left); a damaged spilled chunk is refused on resume naming the chunk, the
# process stays suspended with both parts kept, and resumes once the file is
# whole; a switch whose OUT splits, and back; the process killed while
# split: the next command removes its spill. The JSON documents validate
# against docs/json.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/json_lib.sh"

signals_app_env agent_app
fake_agent_env
schemas=$GPUSNAP_SRC/docs/json
if (json_lib_init) >/dev/null; then json_lib_init; else valid() { echo "SKIP: no python3-jsonschema: $2 not validated"; }; fi
MNT=
cleanup_more() { [ -z "$MNT" ] || umount "$MNT" 2>/dev/null; }
trap 'cleanup_more; cleanup_test' EXIT
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"
export AGENT_APP_BIG_MB=24 AGENT_APP_ZERO_MB=64
data() { jget "['processes'][0]['data']['$1']"; }
# start_named NAME [ENV=VALUE...]: an app under the agent, its PID in $NAME, its output in $TEST_TMP/NAME.log
start_named() {
  local name=$1
  shift
  log=$TEST_TMP/$name.log
  # shellcheck disable=SC2163 # the words are NAME=VALUE, exported as such
  (if [ $# -gt 0 ]; then export "$@"; fi; start_app; echo "$PID" >"$TEST_TMP/$name.pid")
  PID=$(cat "$TEST_TMP/$name.pid")
  APP=$PID
  printf -v "$name" '%s' "$PID"
}
# use NAME: verify_ok, phys and fake_state speak to that app
# shellcheck disable=SC2034 # log is fake_agent.sh's
use() { PID=${!1}; APP=$PID; log=$TEST_TMP/$1.log; }

# the agent reads its settings at the app's start: this app's host memory holds 16 MiB
start_named A GPUSNAP_HOST_MEMORY_LIMIT=16M GPUSNAP_HOST_MEMORY_MARGIN=0
phys0=$(phys)
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')
verify_ok "the app's data after allocation"

# ---- a split suspend and its resume ----
run_gpusnap suspend --json --spill "$spill" "$APP"; expect "suspend --spill with host memory for part of it" 0
valid suspend "the split suspend"
mem=$(data memory_bytes) spilled=$(data spilled_bytes) held=$(data held_bytes) zero=$(data zero_bytes)
check "the JSON says split, the directory ($(jget "['processes'][0]['data']"))" \
  test "$(data where)" = split -a "$(data dir)" = "$spill"
check "part in host memory, within the limit ($mem)" test "${mem:-0}" -gt 0 -a "${mem:-0}" -le $((16 << 20))
check "the rest spilled ($spilled)" test "${spilled:-0}" -gt 0
check "held is both ($held = $mem + $spilled)" test "$held" = $((mem + spilled))
check "the zero block was left on the GPU ($zero)" test "${zero:-0}" -ge $((64 << 20))
check "all physical memory released ($(phys))" test "$(phys)" = 0
check "the driver holds the process" test "$(fake_state)" = 2
check "the agent's log says why it spilled" grep -q "spilling to disk what it does not hold (not enough host memory" "$GPUSNAP_AGENT_LOG"
stored=$(find "$folder/image" -type f -name '*.img' ! -name manifest.img -printf '%s\n' | awk '{s += $1} END {print s + 0}')
check "the image's data files hold the spilled part, not the whole ($stored bytes for $spilled spilled, $held held)" \
  test "$stored" -ge "$spilled" -a "$stored" -lt $((spilled + (1 << 20)))
run_gpusnap inspect "$folder/image"
expect "inspect refuses the partial image" 11 "holds only part of a process's GPU data"
run_gpusnap state "$APP"; expect "state of the split process" 0 "suspended"
check "its first line is the state alone" test "$(head -n 1 "$OUT_TXT")" = suspended
check "a note says the spilled part" grep -q "^gpusnap: note: the GPU data of process $APP is spilled to $spill (" "$ERR_TXT"
run_gpusnap state -v "$APP"; expect "state -v" 0
check "state -v names both parts" grep -q "^data: in host memory, .*, and spilled to $spill, " "$OUT_TXT"
run_gpusnap state --json "$APP"; expect "state --json" 0
valid state "state --json of the split process"
check "state --json: split, both parts ($(jget "['data']"))" \
  test "$(jget "['data']['where']")" = split -a "$(jget "['data']['memory_bytes']")" = "$mem" \
  -a "$(jget "['data']['spilled_bytes']")" = "$spilled" -a "$(jget "['data']['bytes']")" = "$held"
run_gpusnap state; expect "state without a PID" 0
check "the host summary counts both parts" \
  grep -q "^host: .* of suspended GPU data in host memory (1 process); .* spilled to $spill (1 process)$" "$OUT_TXT"
run_gpusnap state --json; expect "state --json without a PID" 0
valid state "state --json without a PID"
check "the JSON summary: memory and spill ($(jget "['host']"))" \
  test "$(jget "['host']['memory_bytes']")" = "$mem" -a "$(jget "['host']['spill'][0]['bytes']")" = "$spilled"
run_gpusnap resume --json "$APP"; expect "resume of the split process" 0
valid resume "the resume"
check "the physical memory is back" test "$(phys)" = "$phys0"
check "the driver runs the process again" test "$(fake_state)" = 0
verify_ok "the data after a split suspend and resume, bit for bit"
check "the spill folder is removed" test ! -e "$folder"
check "the spill record is removed" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
run_gpusnap suspend "$APP"; expect "a suspend without a spill directory is still refused" 13 "not enough host memory"
check "refused: the app runs on" test "$(fake_state)" = 0

# ---- a rollback after a split: both parts come back ----
spill_rolled_back "$folder" "$phys0" split --spill "$spill"

# ---- the spill part does not fit on its file system: the whole suspend is rolled back ----
small=$TEST_TMP/small
mkdir -p "$small"
if mount -t tmpfs -o size=8m,mode=0700 tmpfs "$small" 2>/dev/null; then
  MNT=$small
  run_gpusnap suspend --spill "$small" "$APP"
  expect "a split whose spill part fills its file system is rolled back" 13 "No space left on device: nothing was spilled, process $APP runs on with its data on the GPU"
  check "full: one line" one_line
  check "full: the driver runs the process" test "$(fake_state)" = 0
  check "full: the physical memory stayed" test "$(phys)" = "$phys0"
  check "full: nothing left on the small file system" test -z "$(ls -A "$small")"
  check "full: no spill record" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
  verify_ok "full: the data"
  umount "$small" && MNT=
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk case of a split is not tested"
fi

# ---- a damaged spilled chunk: refused naming it, both parts kept ----
run_gpusnap suspend --json --spill "$spill" "$APP"; expect "split again" 0
check "it split" test "$(data where)" = split
file=$(find "$folder/image" -type f -name '*.img' ! -name manifest.img -size +1M | head -n 1)
check "the spill has a data file ($file)" test -n "$file"
spill_damaged_resume "$folder" "$file" "resume from a damaged spilled chunk is refused"
run_gpusnap state -v "$APP"; expect "state after the refused resume" 0 "suspended (the last resume failed"
check "state says both parts are kept" grep -q "^data: in host memory, .*, and spilled to $spill, " "$OUT_TXT"
check "the fault says where the data is" grep -q "host memory and the spill image" "$OUT_TXT"
cp "$TEST_TMP/whole" "$file"
run_gpusnap resume "$APP"; expect "resume once the file is whole again" 0
check "the physical memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the repaired split"
check "the spill folder is removed" test ! -e "$folder"

# ---- a switch whose OUT splits, and back ----
start_named B
verify_ok "B's data after setup"
run_gpusnap suspend "$B"; expect "B suspended into host memory" 0
run_gpusnap switch --spill "$spill" "$A" "$B"; expect "switch A (split) out, B in" 0
use A
check "A is suspended, split ($(phys) physical)" test "$(phys)" = 0 -a "$(fake_state)" = 2
check "A's spill folder is there" test -d "$folder/image"
run_gpusnap state --json "$A"; expect "state of A" 0
check "state says A is split" test "$(jget "['data']['where']")" = split
run_gpusnap switch "$B" "$A"; expect "switch B out, A (split) in" 0
use A
check "A runs again" test "$(fake_state)" = 0 -a "$(phys)" = "$phys0"
verify_ok "A's data after the switches, bit for bit"
check "A's spill folder is removed" test ! -e "$folder"
run_gpusnap resume "$B"; expect "B resumed" 0
use B
verify_ok "B's data after the switches"

# ---- killed while split: the next command removes the spill (the host memory part went with the process) ----
run_gpusnap suspend --spill "$spill" "$A"; expect "split once more" 0
check "A's spill folder is there" test -d "$folder/image"
kill -9 "$A"
for _ in $(seq 100); do kill -0 "$A" 2>/dev/null || break; sleep 0.1; done
run_gpusnap state; expect "the next command" 0
check "the killed process's spill folder is removed" test ! -e "$folder"
check "its spill record is removed" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
check "the spill directory stays" test -d "$spill"
test_done
