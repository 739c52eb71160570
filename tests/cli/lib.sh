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
# wait_stopped PID [SECONDS]: waits (default 10 s) until every thread of PID is in group stop ('T'):
# a SIGSTOP reaches the threads one by one, and a loaded machine can take a while over it.
wait_stopped() {
  local i t steps=$((${2:-10} * 100)) all
  for ((i = 0; i < steps; i++)); do
    all=1
    for t in /proc/"$1"/task/*/stat; do
      [ "$(sed 's/.*) //' "$t" 2>/dev/null | cut -d' ' -f1)" = T ] || all=0
    done
    [ "$all" = 1 ] && return 0
    sleep 0.01
  done
  return 1
}
# alive PID: PID exists and is not a zombie.
alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }
# gone_or_zombie PID: PID ends (or is a zombie) within 5 s
gone_or_zombie() { local i; for ((i = 0; i < 500; i++)); do alive "$1" || return 0; sleep 0.01; done; return 1; }

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

# have_criu: as require_criu, but says only whether CRIU can be used here (for a test's optional part)
have_criu() {
  [ "$(id -u)" = 0 ] || return 1
  if [ -z "${GPUSNAP_CRIU:-}" ]; then
    "${GPUSNAP_SRC:?GPUSNAP_SRC not set}/scripts/get-criu.sh" >"$TEST_TMP/get-criu.log" 2>&1 || return 1
    export GPUSNAP_CRIU=$GPUSNAP_SRC/.cache/criu/bin/criu
  fi
  "$GPUSNAP_CRIU" check >"$TEST_TMP/check.log" 2>&1
}

# errors FILE: FILE without the fault table's own lines (GPUSNAP_FAULT's "fault: injected at ...").
errors() { grep -v "fault: injected at" "$1"; }
# one_line: the last run_gpusnap's stderr is a single line.
one_line() { [ "$(wc -l <"$ERR_TXT")" = 1 ] || { echo "    stderr: $(cat "$ERR_TXT")"; return 1; }; }
# one_error: the last run_gpusnap's stderr is a single line besides the fault table's.
one_error() { [ "$(errors "$ERR_TXT" | wc -l)" = 1 ] || { echo "    stderr: $(cat "$ERR_TXT")"; return 1; }; }

# bg_gpusnap FAULT ARGS...: gpusnap in the background with GPUSNAP_FAULT=FAULT, its output in
# $TEST_TMP/bg.out and bg.err (removed first: at_fault must not find an earlier run's lines); BG is its PID.
bg_gpusnap() {
  local fault=$1
  shift
  rm -f "$TEST_TMP/bg.out" "$TEST_TMP/bg.err"
  GPUSNAP_FAULT=$fault "$GPUSNAP_BIN" "$@" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
  BG=$!
}
# bg_wait: waits for BG; BG_RC is its exit status.
# shellcheck disable=SC2034 # BG_RC is for the test
bg_wait() { BG_RC=0; wait "$BG" || BG_RC=$?; }
# at_fault POINT [SECONDS]: 0 once the background gpusnap reached the fault point POINT (default: wait up to 30 s), else 1.
at_fault() {
  local i steps=$((${2:-30} * 100))
  for ((i = 0; i < steps; i++)); do
    grep -q "injected at '$1'" "$TEST_TMP/bg.err" 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# ---- the fake libcuda (tests/fake/fake_cuda.c) and the CPU processes it stands in for ----

# fake_cuda_env [criu]: the CLI on the fake libcuda, its state files in $FAKE_CUDA_DIR. With
# criu: root and a usable CRIU (else the test skips), and a copy CRIU restored looks checkpointed
# to the fake, as with the real driver (FAKE_CUDA_CRIU=1).
# shellcheck disable=SC2120 # criu is optional
fake_cuda_env() {
  [ "${1:-}" != criu ] || require_criu
  export GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA
  export FAKE_CUDA_DIR=$TEST_TMP/fake
  mkdir -p "$FAKE_CUDA_DIR"
  if [ "${1:-}" = criu ]; then
    export FAKE_CUDA_CRIU=1
    chmod 700 "$TEST_TMP"
  fi
}
# Closes every descriptor above 2 of the calling (sub)shell.
close_inherited_fds() {
  local fd
  for fd in "/proc/$BASHPID/fd"/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done
  return 0
}

# start_cuda_proc [GPUS] -> NEWPID: a sleeping process registered in the fake libcuda as a running
# CUDA process on GPUS (default 0; "0,1": two), killed at the end. A session of its own: CRIU cannot
# dump a process whose session leader is outside its PID namespace, as the test's is when the whole
# run is in one (CI's container); setsid execs in place (the shell's jobs lead no group), so $! is
# sleep. No inherited descriptors: CRIU would have to dump ctest's log and the test's files with it.
# shellcheck disable=SC2120 # GPUS is optional
start_cuda_proc() {
  (close_inherited_fds && exec setsid sleep 300 </dev/null >/dev/null 2>&1) &
  NEWPID=$!
  TEST_PIDS+=("$NEWPID")
  echo "0 ${1:-0}" >"$FAKE_CUDA_DIR/$NEWPID"
}
# start_sleep_tree -> TREE_PARENT TREE_CHILD: a shell in a session of its own with one sleeping child (no
# inherited descriptors, as start_cuda_proc), both killed at the end; the caller registers either in the fake
# libcuda as it needs. Fails the test if the child does not appear.
start_sleep_tree() {
  (close_inherited_fds && exec setsid bash -c 'sleep 300 & wait' </dev/null >/dev/null 2>&1) &
  TREE_PARENT=$!
  TEST_PIDS+=("$TREE_PARENT")
  TREE_CHILD=""
  local i
  for ((i = 0; i < 500; i++)); do TREE_CHILD=$(pgrep -P "$TREE_PARENT" -x sleep) && break; sleep 0.01; done
  check "the tree is up ($TREE_PARENT, $TREE_CHILD)" [ -n "$TREE_CHILD" ]
  TEST_PIDS+=("$TREE_CHILD")
}
# fake_state [PID]: the fake driver's state of PID (default $PID): 0 running, 1 locked, 2 checkpointed.
# shellcheck disable=SC2120 # PID is optional
fake_state() { cut -d' ' -f1 "$FAKE_CUDA_DIR/${1:-$PID}"; }

# fake_criu NAME BODY: $TEST_TMP/NAME, a criu that answers --version and check as $GPUSNAP_CRIU (the
# real one) does and runs the shell code BODY for everything else.
fake_criu() {
  # shellcheck disable=SC2016 # "$1" and "$@" are the fake criu's own
  printf '#!/bin/sh\ncase "$1" in --version|check) exec "%s" "$@";; esac\n%s\n' "$GPUSNAP_CRIU" "$2" >"$TEST_TMP/$1"
  chmod 755 "$TEST_TMP/$1"
}

# kill_test_procs NAME: kills the processes called NAME that this test started (an argument of theirs
# lies under $TEST_TMP): restores reuse PIDs, so a PID alone does not say whose a process is.
kill_test_procs() {
  local p
  for p in $(pgrep -x "$1"); do
    tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$TEST_TMP" && kill -9 "$p"
  done
  return 0
}

# wait_lines FILE N: 0 once FILE has N lines or more (up to 30 s: a loaded machine only delays it), else 1.
wait_lines() {
  local i
  for ((i = 0; i < 3000; i++)); do
    [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -ge "$2" ] && return 0
    sleep 0.01
  done
  return 1
}
# eventually SECONDS CMD...: CMD succeeds within SECONDS (tried every 50 ms): for what gpusnap
# finishes in the background, as the removal of a spill a resume read back (src/cli/spill.c).
eventually() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.05
  done
}
# empty_dir DIR: nothing in DIR
empty_dir() { [ -z "$(ls -A "$1")" ]; }
# grows FILE: FILE gets 5 lines more within 30 s (the counter writing it runs).
grows() { local n; n=$(wc -l <"$1"); wait_lines "$1" $((n + 5)); }
# last_count LOG: the counter's latest number in LOG, a moment after it was asked.
last_count() { sleep 0.1; tail -n 1 "$1"; }
# counts_on_from LOG VALUE: the counter writing LOG goes on from VALUE (its memory came back): the lines
# after the last VALUE are VALUE+1, VALUE+2, VALUE+3, within 30 s.
counts_on_from() {
  local n want got
  n=$(grep -n "^$2\$" "$1" | tail -n 1 | cut -d: -f1)
  wait_lines "$1" $((n + 5)) || return 1
  want="$(($2 + 1)) $(($2 + 2)) $(($2 + 3))"
  got=$(sed -n "$((n + 1)),$((n + 3))p" "$1" | tr '\n' ' ')
  [ "$got" = "$want " ] || { echo "    got '$got', want '$want '"; return 1; }
}
# start_counter LOG -> NEWPID: tests/apps/cpu_counter, a daemon counting into LOG, registered in the
# fake libcuda as a CUDA process on GPU 0; returns once LOG has 10 lines.
start_counter() {
  NEWPID=$("$GPUSNAP_BUILD/tests/apps/cpu_counter" --daemon "$1")
  echo "0 0" >"$FAKE_CUDA_DIR/$NEWPID"
  wait_lines "$1" 10
}

# ---- images ----

# sums DIR: a checksum line for each file under DIR; where the test sets SUMS_ENTRIES (a find -printf
# format, e.g. '%p %m\n'), a line for each entry under DIR too (its mode, its type: what the test compares).
sums() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
  [ -z "${SUMS_ENTRIES:-}" ] || (cd "$1" && find . -printf "$SUMS_ENTRIES" | sort)
}
# tmp_dirs DIR: the temporary directories of dumps to DIR, not published yet (.DIR.tmp-*).
tmp_dirs() { find "$(dirname "$1")" -maxdepth 1 -name ".$(basename "$1").tmp-*"; }

# settled LOG: prints "lines last" once LOG stopped growing (the counter writing it is frozen or gone)
settled() {
  local a b
  a=$(wc -l <"$1"); sleep 0.1; b=$(wc -l <"$1")
  [ "$a" = "$b" ] && echo "$b $(tail -n 1 "$1")"
}
# continues LOG N VALUE: lines N+1.. are VALUE+1, VALUE+2, ... (the memory came back)
continues() {
  local log=$1 n=$2 value=$3 i want="" got
  wait_lines "$log" $((n + 10)) || return 1
  got=$(sed -n "$((n + 1)),$((n + 10))p" "$log" | tr '\n' ' ')
  for ((i = 1; i <= 10; i++)); do want+="$((value + i)) "; done
  [ "$got" = "$want" ] || { echo "    got '$got', want '$want'"; return 1; }
}
