#!/usr/bin/env bash
# t6004-criu-plugin-leave-running - a criu dump through gpusnap_criu.so that
# exits 0 never leaves a process without its GPU (the app of t6002-criu-plugin-agent
# under the agent, host-memory fake driver, the real CRIU 4):
#  - the plugin's leave_running setting against what criu was told is refused
#    at init, before anything moves, one line in CRIU's log naming the setting
#    and where it came from: `no` (variable or file) against --leave-running
#    (the process would run on without its GPU state, its next CUDA call
#    waiting forever), `yes` against a criu that ends the tasks; the app runs
#    on with its data each time. A setting that agrees with criu is fine;
#  - criu --leave-stopped of a tree with a CUDA process is refused before
#    anything moves (the process would stay stopped without its GPU state);
#  - the agent's reload after a --leave-running dump fails (fault point
#    agent-recreate in the app): criu's log says so, `gpusnap state` says the
#    resume failed and names the published image (never the /proc/self/fd
#    path the plugin passed), and a plain `gpusnap resume PID` brings the data
#    back from it.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/plugin_lib.sh"

signals_app_env agent_app criu
plugin_env
export AGENT_APP_BIG_MB=20

# agent_is STATE: the agent of $PID says STATE within 30 s
agent_is() { agent_says "$PID" "$1"; }
not_off() { ! grep -q "is off the GPU" "$1/dump.log"; }
# refused TITLE DIR TEXT: the last criu dump (into DIR) failed at the plugin's init with TEXT in its log, before
# any process left the GPU; the app runs on with its data
refused() {
  check "$1: criu dump fails" rc_failed
  check "$1: CRIU's log says why" log_has "$2/dump.log" "$3"
  check "$1: ... in one line of the plugin's" test "$(grep -c 'gpusnap: refusing the dump' "$2/dump.log")" = 1
  check "$1: before any process left the GPU" not_off "$2"
  check "$1: the app runs on" alive "$PID"
  check "$1: its agent is running" agent_is running
  verify_ok "$1: its data"
}

start_app
verify_ok "the app's data after allocation"

# ---- the leave_running setting against criu's --leave-running ----
GPUSNAP_PLUGIN_LEAVE_RUNNING=no criu_dump "$TEST_TMP/c1" "$PID" --leave-running
refused "GPUSNAP_PLUGIN_LEAVE_RUNNING=no, criu --leave-running" "$TEST_TMP/c1" \
  "refusing the dump: the leave_running setting says no (GPUSNAP_PLUGIN_LEAVE_RUNNING), but criu was told --leave-running (the tasks run on) (CRIU's options)"

printf '# the site default\nleave_running = no\n' >"$PLUGIN_DIR/gpusnap_criu.conf"
chmod 644 "$PLUGIN_DIR/gpusnap_criu.conf"
criu_dump "$TEST_TMP/c2" "$PID" --leave-running
refused "leave_running = no in the plugin's file, criu --leave-running" "$TEST_TMP/c2" \
  "the leave_running setting says no (leave_running in '$PLUGIN_DIR/gpusnap_criu.conf' line 2), but criu was told --leave-running"
rm -f "$PLUGIN_DIR/gpusnap_criu.conf"

# ---- the opposite: the setting says yes, criu ends the tasks ----
GPUSNAP_PLUGIN_LEAVE_RUNNING=yes criu_dump "$TEST_TMP/c3" "$PID"
refused "GPUSNAP_PLUGIN_LEAVE_RUNNING=yes, criu without --leave-running" "$TEST_TMP/c3" \
  "the leave_running setting says yes (GPUSNAP_PLUGIN_LEAVE_RUNNING), but criu was told to end the tasks after the dump"

# ---- --leave-stopped: refused for a tree with a CUDA process ----
criu_dump "$TEST_TMP/c4" "$PID" --leave-stopped
check "criu dump --leave-stopped fails" rc_failed
check "... CRIU's log names the process and why" log_has "$TEST_TMP/c4/dump.log" \
  "criu --leave-stopped would leave CUDA process $PID stopped without its GPU state"
check "... before any process left the GPU" not_off "$TEST_TMP/c4"
check "... the app runs on, not stopped" test "$(awk '{print $3}' "/proc/$PID/stat")" != T
check "... its agent is running" agent_is running
verify_ok "its data after the refused --leave-stopped dump"

# ---- a setting that agrees with criu ----
GPUSNAP_PLUGIN_LEAVE_RUNNING=yes criu_dump "$TEST_TMP/c5" "$PID" --leave-running
check "GPUSNAP_PLUGIN_LEAVE_RUNNING=yes with criu --leave-running: the dump succeeds" rc_ok
check "... the app runs on" alive "$PID"
check "... its agent took its data back" agent_is running
verify_ok "its data after the agreeing dump"
kill -9 "$PID"; wait_gone "$PID"

# ---- the agent's reload after a --leave-running dump fails ----
GPUSNAP_FAULT=agent-recreate start_app
verify_ok "the second app's data after allocation"
img=$TEST_TMP/lr
criu_dump "$img" "$PID" --leave-running
check "criu dump --leave-running succeeds" rc_ok
check "CRIU's log says the reload failed and where the data is" \
  log_soon "$img/dump.log" "process $PID did not resume after the dump"
check "... naming the published image and the plain resume" \
  log_has "$img/dump.log" "its GPU data is in '$img/gpusnap/$PID' (gpusnap resume $PID)"
check "the app stays suspended (its agent holds the data released)" agent_is suspended
run_gpusnap state "$PID"
expect "state says the resume after the dump failed" 0 "the last resume failed"
check "... and names the published image" grep -qF "its GPU data is in the image at '$img/gpusnap/$PID'" "$OUT_TXT"
check "... never a descriptor's path" bash -c "! grep -q /proc/self/fd '$OUT_TXT' '$ERR_TXT'"
run_gpusnap resume "$PID"
expect "gpusnap resume PID brings it back from the published image" 0 "resumed $PID"
check "its agent is running" agent_is running
verify_ok "its data after the resume"
run_gpusnap state "$PID"
expect "state after the resume: running, nothing failed" 0 "running"
check "... the failure is no longer said" bash -c "! grep -q 'resume failed' '$OUT_TXT'"

test_done
