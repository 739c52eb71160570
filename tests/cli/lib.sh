# shellcheck shell=bash
# lib.sh - helpers for the command-line tests (tests/cli/t*.sh), in the
# spirit of git's test library: each check prints "ok" or "not ok" with its
# title; test_done prints "N passed, N failed" and sets the exit status.
# Sourced, not run. Expects GPUSNAP_BIN (set by ctest).
set -u
: "${GPUSNAP_BIN:?run through ctest (GPUSNAP_BIN unset)}"
TEST_PASSED=0
TEST_FAILED=0
TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpusnap-test.XXXXXX")
export GPUSNAP_RUN_DIR="$TEST_TMP/run"
TEST_PIDS=()
cleanup_test() {
  for p in "${TEST_PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
  rm -rf "$TEST_TMP"
}
trap cleanup_test EXIT

# wait_gone PID [SECONDS]: 0 once PID no longer exists (default: wait up to 10 s), else 1.
wait_gone() {
  local i steps=$((${2:-10} * 100))
  for ((i = 0; i < steps; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.01
  done
  return 1
}
# alive PID: PID exists and is not a zombie.
alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }

pass() { TEST_PASSED=$((TEST_PASSED + 1)); echo "ok - $1"; }
fail() { TEST_FAILED=$((TEST_FAILED + 1)); echo "not ok - $1"; shift; [ $# -gt 0 ] && printf '    %s\n' "$@"; }

# run_gpusnap ARGS...: runs the tool, output in $OUT_TXT / $ERR_TXT, exit code in $RC
run_gpusnap() {
  OUT_TXT=$TEST_TMP/out
  ERR_TXT=$TEST_TMP/err
  RC=0
  "$GPUSNAP_BIN" "$@" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
}

# expect TITLE CODE [STDERR_SUBSTRING]: checks the last run_gpusnap
expect() {
  local title=$1 code=$2 want=${3:-}
  if [ "$RC" -ne "$code" ]; then
    fail "$title" "exit code $RC, expected $code" "stderr: $(cat "$ERR_TXT")" "stdout: $(head -c 400 "$OUT_TXT")"
  elif [ -n "$want" ] && ! grep -qF -- "$want" "$ERR_TXT" "$OUT_TXT"; then
    fail "$title" "output lacks '$want'" "stderr: $(cat "$ERR_TXT")" "stdout: $(head -c 400 "$OUT_TXT")"
  else
    pass "$title"
  fi
}

# check TITLE COMMAND...: passes when COMMAND succeeds
check() {
  local title=$1
  shift
  if "$@"; then pass "$title"; else fail "$title" "command failed: $*"; fi
}

test_done() {
  echo "$TEST_PASSED passed, $TEST_FAILED failed"
  [ "$TEST_FAILED" -eq 0 ]
}

# Python 3 validates JSON where it exists; without it the JSON checks skip visibly.
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$@"; }

# skip REASON: the test cannot run here; ctest shows it as skipped (exit 77).
skip() {
  echo "SKIP: $*"
  exit 77
}

# require_criu: root and a usable CRIU (GPUSNAP_CRIU, else scripts/get-criu.sh's
# private copy), or the test skips visibly. Exports GPUSNAP_CRIU.
require_criu() {
  local src=${GPUSNAP_SRC:?GPUSNAP_SRC not set} rc=0
  [ "$(id -u)" = 0 ] || skip "criu needs root"
  if [ -z "${GPUSNAP_CRIU:-}" ]; then
    "$src/scripts/get-criu.sh" >"$TEST_TMP/get-criu.log" 2>&1 || rc=$?
    [ "$rc" = 3 ] && skip "cannot get CRIU: $(tail -n 1 "$TEST_TMP/get-criu.log")"
    [ "$rc" = 0 ] || { cat "$TEST_TMP/get-criu.log"; echo "not ok - scripts/get-criu.sh failed ($rc)"; exit 1; }
    export GPUSNAP_CRIU=$src/.cache/criu/bin/criu
  fi
  "$GPUSNAP_CRIU" check >"$TEST_TMP/check.log" 2>&1 || skip "criu check fails here: $(tail -n 1 "$TEST_TMP/check.log")"
}
