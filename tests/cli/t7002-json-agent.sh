#!/usr/bin/env bash
# t7002 - the --json documents of the agent path validate against docs/json:
# an app under the agent (tests/agent/agent_app.c on the host-memory fake
# driver, as t4002) through state (with PID, and the list, whose entry has
# the agent's part), suspend (the agent's timings and counters), a refused
# second suspend, suspend --keep-context (gated, then suspended), resume,
# switch with a process without the agent, both ways;
# with CRIU a dump and restore on the agent path (its ring and timings), and
# dump --leave-running through the dump's copy in memory and without it.
# Skips (77) without python3-jsonschema or the agent.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
schemas=$src/docs/json
. "$(dirname "$0")/json_lib.sh"
json_lib_init

app=$build/tests/agent/agent_app
fake_agent_env

start_app
verify_ok "the app's data after allocation"
run_gpusnap state --json "$APP"; expect "state --json of the app" 0
valid state "... running, with the agent's part"
check "... path agent" [ "$(json_get "$OUT_TXT" '["path"],d["agent"]["state"]')" = "('agent', 'running')" ]
run_gpusnap suspend --json "$APP"; expect "suspend --json (agent)" 0
valid suspend "... the agent's timings and counters"
check "... the agent's report" [ "$(json_get "$OUT_TXT" '["processes"][0]["path"],"copy_out_s" in d["processes"][0]["agent"]')" = "('agent', True)" ]
run_gpusnap state --json; expect "state --json lists the suspended app" 0
valid state "... the list"
check "... the app in it, with the agent's part" \
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit([x["agent"]["state"] for x in d["processes"] if x["pid"] == int(sys.argv[2])] != ["suspended"])' "$OUT_TXT" "$APP"
run_gpusnap suspend --json "$APP"; expect "suspend --json again: refused" 6
valid suspend "... refused"
run_gpusnap resume --json "$APP"; expect "resume --json (agent)" 0
valid resume "... resumed"
verify_ok "the app's data after the resume"
run_gpusnap suspend --json --keep-context "$APP"; expect "suspend --json --keep-context" 0
valid suspend "... keep-context"
run_gpusnap state --json "$APP"; expect "state --json after --keep-context" 0
valid state "... the agent holds the data, the driver runs it"
run_gpusnap resume --json "$APP"; expect "resume --json after --keep-context" 0
valid resume "... resumed"
start_cuda_proc; other=$NEWPID
run_gpusnap suspend "$other"; expect "a process without the agent suspended" 0
run_gpusnap switch --json --overlap always "$APP" "$other"; expect "switch --json, the app out (agent), the other in (driver)" 0
valid switch "... with the agent's data_bytes"
check "... agent out, driver in" [ "$(json_get "$OUT_TXT" '["out"]["path"],d["in"]["path"],"data_bytes" in d["out"]')" = "('agent', 'driver', True)" ]
run_gpusnap switch --json "$other" "$APP"; expect "switch --json back" 0
valid switch "... the app in"
verify_ok "the app's data after the switches"
quit_app "the app ends well"

if have_criu; then
  export FAKE_CUDA_CRIU=1
  chmod 700 "$TEST_TMP"
  cleanup_apps() {
    kill_our_apps agent_app
    cleanup_test
  }
  trap cleanup_apps EXIT
  APP_IO=signals
  log=$TEST_TMP/app.log
  start_app
  run_gpusnap dump --json -D "$TEST_TMP/img" "$PID"; expect "dump --json (agent)" 0
  valid dump "... agent path, streamed"
  check "... agent path" [ "$(json_get "$OUT_TXT" '["path"]')" = agent ]
  run_gpusnap restore --json -D "$TEST_TMP/img"; expect "restore --json (agent)" 0
  valid restore "... the agent's load"
  check "... ring and agent timings" [ "$(json_get "$OUT_TXT" '["path"],"ring_prepared" in d')" = "('agent', True)" ]
  verify_ok "the app's data after the restore"
  # --leave-running: through the dump's copy in memory, then without room for it
  run_gpusnap dump --json --leave-running -D "$TEST_TMP/img" "$PID"; expect "dump --json --leave-running (agent)" 0
  valid dump "... staged"
  check "... staged, what the pause copied" [ "$(json_get "$OUT_TXT" '["staged"],d["stop_copy_bytes"]>0,"stage_write_s" in d["times"]')" = "(True, True, True)" ]
  GPUSNAP_STAGE_DIR=$TEST_TMP run_gpusnap dump --json --leave-running -D "$TEST_TMP/img" "$PID"
  expect "dump --json --leave-running, no memory for the copy" 0
  valid dump "... not staged"
  check "... not staged, and why" [ "$(json_get "$OUT_TXT" '["staged"],"no_stage" in d')" = "(False, True)" ]
else
  echo "SKIP: no usable CRIU here: the agent's dump and restore documents are not checked"
fi

test_done
