#!/usr/bin/env bash
# t4030 - the storage tier of suspend on the host-memory fake
# driver: `suspend --spill-only DIR` streams the app's GPU data into an image
# in DIR/gpusnap-PID-START/image (the agent writes through a passed
# descriptor into a folder that is the process owner's only below a 0700
# one), releases the GPU memory and the driver checkpoints the rest; `state`
# says where the data is, with and without a PID; resume reads it back bit
# for bit and removes it. GPUSNAP_SPILL_DIR is used only when host memory is
# short (GPUSNAP_HOST_MEMORY_LIMIT): a suspend that fits stays in memory,
# one that does not spills, and a rollback after a spill (a fault after the
# agent's part) reads it back; a --keep-context spill. The JSON documents
# validate against docs/json.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/json_lib.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
counter() { jget "['processes'][0]['agent']['$1']"; }
# the documents against docs/json where python3-jsonschema is (json_lib.sh), else said
schemas=$GPUSNAP_SRC/docs/json
if (json_lib_init) >/dev/null; then json_lib_init; else valid() { echo "SKIP: no python3-jsonschema: $2 not validated"; }; fi
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"
export AGENT_APP_BIG_MB=24 AGENT_APP_ZERO_MB=64

start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')

# ---- --spill-only: always to disk ----
run_gpusnap suspend --json --spill-only --spill "$spill" "$APP"; expect "suspend --spill-only" 0
valid suspend "suspend --spill-only"
check "the agent spilled (spilled $(counter spilled))" test "$(counter spilled)" = 1
check "the JSON says where the data went ($(jget "['processes'][0]['data']"))" \
  test "$(jget "['processes'][0]['data']['where']")" = spill -a "$(jget "['processes'][0]['data']['dir']")" = "$spill"
held=$(jget "['processes'][0]['data']['held_bytes']")
zero=$(jget "['processes'][0]['data']['zero_bytes']")
check "it held the data less the zero block ($held held, $zero zero)" test "${zero:-0}" -ge $((64 << 20)) -a "${held:-0}" -gt 0
check "all physical memory released ($(phys))" test "$(phys)" = 0
check "the driver holds the process" test "$(fake_state)" = 2
check "the image is published in the process's folder" test -f "$folder/image/manifest.json" -o -d "$folder/image"
check "no temporary directory is left" test -z "$(find "$folder" -maxdepth 1 -name '.image.tmp-*')"
check "the process's folder is 0700, the spill directory's user's" test "$(stat -c '%a %u' "$folder")" = "700 $(id -u)"
run_gpusnap state "$APP"; expect "state of the spilled process" 0 "suspended"
check "its first line is the state alone" test "$(head -n 1 "$OUT_TXT")" = suspended
check "a note says the data is spilled" grep -q "^gpusnap: note: the GPU data of process $APP is spilled to $spill (" "$ERR_TXT"
run_gpusnap state -v "$APP"; expect "state -v of the spilled process" 0 "suspended"
check "state -v says the data is spilled to the directory" grep -q "^data: spilled to $spill, " "$OUT_TXT"
run_gpusnap state --json "$APP"; expect "state --json" 0
valid state "state --json of the spilled process"
check "state --json: where spill, dir, bytes" test "$(jget "['data']['where']")" = spill -a "$(jget "['data']['dir']")" = "$spill" -a "$(jget "['data']['bytes']")" = "$held"
run_gpusnap state; expect "state without a PID" 0
check "the host summary names the spill directory" grep -q "^host: .* spilled to $spill (1 process)" "$OUT_TXT"
run_gpusnap state --json; expect "state --json without a PID" 0
valid state "state --json without a PID"
check "the JSON summary counts the spill ($(jget "['host']"))" test "$(jget "['host']['spill'][0]['bytes']")" = "$held"
run_gpusnap resume --json "$APP"; expect "resume from the spill" 0
check "resume re-created the physical memory" test "$(phys)" = "$phys0"
check "the driver runs the process again" test "$(fake_state)" = 0
verify_ok "the data after spill and resume, bit for bit"
check "the spill folder is removed" test ! -e "$folder"
check "the spill record is removed" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"

# ---- --keep-context: the data spilled, the context kept (the driver not asked) ----
run_gpusnap suspend --json --keep-context --spill-only --spill "$spill" "$APP"; expect "suspend --keep-context --spill-only" 0
check "it spilled" test "$(jget "['processes'][0]['data']['where']")" = spill
check "the driver still runs the process (context kept)" test "$(fake_state)" = 0
check "all physical memory released" test "$(phys)" = 0
run_gpusnap resume "$APP"; expect "resume after --keep-context" 0
verify_ok "the data after a --keep-context spill"
check "the spill folder is removed" test ! -e "$folder"

# ---- the human outcome says where the data went ----
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "suspend --spill-only (human)" 0
check "it says how much went to the spill directory ($(cat "$OUT_TXT"))" grep -q "B spilled to $spill (.* zero left out)" "$OUT_TXT"
run_gpusnap resume "$APP"; expect "resume (human)" 0
verify_ok "the data after it"

# ---- GPUSNAP_SPILL_DIR: only when host memory is short ----
export GPUSNAP_SPILL_DIR=$spill
run_gpusnap suspend --json "$APP"; expect "suspend with GPUSNAP_SPILL_DIR and host memory to spare" 0
check "it stayed in host memory (spilled $(counter spilled))" test "$(counter spilled)" = 0
check "the JSON says host memory" test "$(jget "['processes'][0]['data']['where']")" = host-memory
run_gpusnap resume "$APP"; expect "resume" 0
run_gpusnap suspend "$APP"; expect "the same, human" 0
check "it says how much is in host memory ($(cat "$OUT_TXT"))" grep -q "B in host memory (.* zero left out)" "$OUT_TXT"
check "no spill folder is left" test ! -e "$folder"
run_gpusnap state -v "$APP"; expect "state -v" 0
check "state -v says host memory" grep -q "^data: in host memory, " "$OUT_TXT"
run_gpusnap state; expect "state without a PID" 0
check "the host summary counts it in host memory" grep -q "^host: .* of suspended GPU data in host memory (1 process)$" "$OUT_TXT"
run_gpusnap resume "$APP"; expect "resume from host memory" 0
verify_ok "the data after a suspend into host memory"
quit_app "the app exits cleanly"
# the agent reads its settings at the app's start: an app whose host memory is short
export GPUSNAP_HOST_MEMORY_LIMIT=16M GPUSNAP_HOST_MEMORY_MARGIN=0
start_app
phys0=$(phys)
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')
run_gpusnap suspend --json "$APP"; expect "suspend with GPUSNAP_SPILL_DIR when host memory is short" 0
check "it spilled (spilled $(counter spilled))" test "$(counter spilled)" = 1
check "the image is in the spill directory" test -d "$folder/image"
check "the agent's log says why" grep -q "spilling to disk what it does not hold (not enough host memory to hold the GPU data" "$GPUSNAP_AGENT_LOG"
run_gpusnap resume "$APP"; expect "resume from the spill" 0
verify_ok "the data after a spill for want of memory"
check "the spill folder is removed" test ! -e "$folder"
# a rollback after the agent spilled (a fault after its part): the data comes back from the spill
spill_rolled_back "$folder" "$phys0" spill
unset GPUSNAP_SPILL_DIR GPUSNAP_HOST_MEMORY_LIMIT GPUSNAP_HOST_MEMORY_MARGIN
quit_app "the app exits cleanly"
test_done
