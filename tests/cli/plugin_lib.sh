# shellcheck shell=bash
# plugin_lib.sh - helpers for the CRIU plugin's tests (t600N-criu-plugin-*.sh),
# sourced after lib.sh: the plugin alone in a plugin folder of the test's, and
# plain criu runs with it (what a container engine does), no gpusnap command.

# plugin_env: $PLUGIN_DIR holds gpusnap_criu.so and nothing else (built without sanitizers in a
# sanitizer build: criu cannot load their runtime).
plugin_env() {
  local so=$GPUSNAP_BUILD/src/criu_plugin/gpusnap_criu.so
  [ -f "$so" ] || { echo "not ok - no $so"; exit 1; }
  PLUGIN_DIR=$TEST_TMP/plugins
  mkdir -p "$PLUGIN_DIR"
  cp "$so" "$PLUGIN_DIR/"
}

# criu_dump DIR PID [ARGS...]: criu dump of PID's tree into DIR (created) with the plugin; log in
# DIR/dump.log; exit status in $RC.
criu_dump() {
  local dir=$1 pid=$2
  shift 2
  mkdir -p "$dir"
  RC=0
  CRIU_LOG=$dir/dump.log
  "$GPUSNAP_CRIU" dump --tree "$pid" --images-dir "$dir" --libdir "$PLUGIN_DIR" --log-file dump.log -v4 "$@" \
    >"$TEST_TMP/criu.out" 2>&1 || RC=$?
}
# criu_restore DIR [ARGS...]: criu restore -d from DIR with the plugin; log in $TEST_TMP/restore.log
# (the image directory stays as it was); the restored root's PID in $RPID; exit status in $RC.
criu_restore() {
  local dir=$1
  shift
  RC=0
  RPID=
  CRIU_LOG=$TEST_TMP/restore.log
  rm -f "$TEST_TMP/restore.pid"
  "$GPUSNAP_CRIU" restore --images-dir "$dir" --work-dir "$TEST_TMP" --libdir "$PLUGIN_DIR" -d \
    --pidfile "$TEST_TMP/restore.pid" --log-file restore.log -v4 "$@" >"$TEST_TMP/criu.out" 2>&1 || RC=$?
  # shellcheck disable=SC2034 # RPID is for the test
  [ -s "$TEST_TMP/restore.pid" ] && RPID=$(cat "$TEST_TMP/restore.pid")
  return 0
}
# agent_says PID STATE: the agent of PID says STATE (`gpusnap state --json`) within 30 s; else what it said
agent_says() {
  local i st
  for ((i = 0; i < 300; i++)); do
    "$GPUSNAP_BIN" state --json "$1" >"$TEST_TMP/state.json" 2>/dev/null &&
      st=$(json_get "$TEST_TMP/state.json" "['agent']['state']" 2>/dev/null) && [ "$st" = "$2" ] && return 0
    sleep 0.1
  done
  echo "    the agent of $1 says ${st:-?}, not $2"
  return 1
}
# log_has FILE TEXT: FILE contains TEXT (shown when not)
log_has() { grep -qF -- "$2" "$1" || { echo "    $1 lacks '$2'"; grep -i "gpusnap\|error" "$1" | tail -n 5 | sed 's/^/    /'; return 1; }; }
# log_soon FILE TEXT [N]: FILE holds TEXT (fixed string) N times (default 1) within 30 s, as a line
# that a helper the plugin left behind writes after criu returned; else its last lines of gpusnap's
log_soon() {
  local i
  for ((i = 0; i < 3000; i++)); do
    [ "$(grep -cF -- "$2" "$1" 2>/dev/null)" -ge "${3:-1}" ] 2>/dev/null && return 0
    sleep 0.01
  done
  echo "    $1 lacks '$2' (${3:-1} times)"
  grep -i gpusnap "$1" | tail -n 5 | sed 's/^/    /'
  return 1
}
# rc_ok: the last criu run exited 0
# (shown when not: CRIU's output and the errors its log names, which say why)
rc_ok() {
  [ "$RC" = 0 ] && return 0
  echo "    criu exit $RC"
  tail -n 3 "$TEST_TMP/criu.out" | sed 's/^/    /'
  [ -f "${CRIU_LOG:-}" ] && grep -E 'Error|error|gpusnap' "$CRIU_LOG" | tail -n 8 | sed 's/^/    log: /'
  return 1
}
rc_failed() { [ "$RC" != 0 ]; }
