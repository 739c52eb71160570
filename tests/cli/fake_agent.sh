# shellcheck shell=bash
# fake_agent.sh - helpers for the CLI tests that run an app under the agent
# on the host-memory fake driver (tests/fake/fake_vmm_driver.c): t4002-t4006.
# Sourced after lib.sh. The test sets $app and calls fake_agent_env. Two ways
# to talk to the app:
#  - fifo (default): commands on a fifo held open on fd 3, answers in
#    $TEST_TMP/app.out (app_cmd, verify_ok, quit_app);
#  - APP_IO=signals, for apps CRIU dumps: a daemon of its own session with no
#    stdin, SIGUSR1 asks it to verify, its stdout is $log (start_app,
#    verify_ok).
# PID (also APP) is the app's process once start_app returns.
# shellcheck disable=SC2154 # app and log are the sourcing test's

# fake_agent_env [criu]: the fake driver for the CLI and the agent, its state files in
# $FAKE_CUDA_DIR; skips without the agent or python3. With criu: CRIU must be usable too.
fake_agent_env() {
  [ -f "$GPUSNAP_BUILD/libgpusnap.so" ] || skip "libgpusnap.so was not built (the agent is x86-64 only)"
  command -v python3 >/dev/null || skip "python3 is needed to read the JSON outcomes"
  fake_cuda_env "${1:-}"
  # the same state files, the host-memory fake driver instead of the plain fake libcuda
  export GPUSNAP_LIBCUDA=$GPUSNAP_BUILD/tests/agent/libfakevmm.so
  # fresh "device memory" holds stale bytes, as a GPU's does: memory a resume or restore left unset shows
  export FAKE_VMM_DIRTY_FRESH=1
  export GPUSNAP_AGENT_LOG=$TEST_TMP/agent.log
  [ -e "$GPUSNAP_LIBCUDA" ] || { echo "not ok - missing $GPUSNAP_LIBCUDA"; exit 1; }
  [ -e "$app" ] || { echo "not ok - missing $app"; exit 1; }
}

# signals_app_env NAME [criu]: the app is tests/agent/NAME, talked to by signals (APP_IO=signals,
# its stdout $log), on the fake driver (fake_agent_env [criu]); at exit every process of it
# (restored ones too) is killed, after the test's cleanup_more if it has one, with the test's.
signals_app_env() {
  : "${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}"
  app=$GPUSNAP_BUILD/tests/agent/$1
  log=$TEST_TMP/app.log
  APP_IO=signals
  SIGNALS_APP=$1
  fake_agent_env "${2:-}"
  trap cleanup_apps EXIT
}
# The set-up of the image-series tests (t5032 incremental, t5035 store, t5036 gc): the
# agent app under CRIU answering on signals, its 32 MiB block of which 8 MiB stay zero
# until flip fills them (or empties them again), two IO threads; S, an empty series
# folder; MT, the manifest tool; valid (json_lib.sh) where python3-jsonschema is, else a
# visible SKIP line for each document. The caller then starts the app (start_app).
series_setup() {
  signals_app_env agent_app criu
  export AGENT_APP_BIG_MB=32 AGENT_APP_ZERO_MB=8 GPUSNAP_IO_THREADS=2
  MT=$(dirname "${BASH_SOURCE[0]}")/manifest_tool.py
  schemas=${GPUSNAP_SRC:?GPUSNAP_SRC not set}/docs/json
  . "$(dirname "${BASH_SOURCE[0]}")/json_lib.sh"
  if (json_lib_init) >/dev/null; then json_lib_init; else valid() { echo "SKIP: no python3-jsonschema: $2 not validated"; }; fi
  S=$TEST_TMP/series
  mkdir -p "$S"
}
# The series app's zero-flip: "ZERO 1" once its block is filled, "ZERO 0" once emptied.
flip() { signal_reply USR2 ZERO; }
# How many objects the chunk store at $1 holds.
objects() { find "$1/objects" -type f | wc -l; }
cleanup_apps() {
  kill_our_apps "$SIGNALS_APP"
  [ "$(type -t cleanup_more)" != function ] || cleanup_more
  cleanup_test
}

# start_app [ARGS...]: $app under the agent (gpusnap run), talked to as APP_IO says.
# A sanitizer build's runtime has to come first, and `gpusnap run` puts the agent first.
start_app() {
  local asan agent=$GPUSNAP_BUILD/libgpusnap.so
  asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
  if [ "${APP_IO:-fifo}" = signals ]; then
    # a daemon of its own session (CRIU dumps whole sessions): setsid execs in place, so
    # $! is the app; none of the descriptors this shell inherited (ctest -j leaves its own
    # log open in tests): CRIU would refuse to restore a file that changed size since
    : >"$log"
    if [ -n "$asan" ]; then
      (close_inherited_fds && LD_PRELOAD="$asan $agent" exec setsid "$app" --signals "$@" </dev/null >>"$log" 2>"$TEST_TMP/app.err") &
    else
      (close_inherited_fds && exec setsid "$GPUSNAP_BIN" run -- "$app" --signals "$@" </dev/null >>"$log" 2>"$TEST_TMP/app.err") &
    fi
    disown
    for _ in $(seq 300); do
      PID=$(awk '/^READY/ {print $2; exit}' "$log")
      [ -n "$PID" ] && APP=$PID && return 0
      sleep 0.1
    done
  else
    rm -f "$TEST_TMP/app.in" "$TEST_TMP/app.out"
    mkfifo "$TEST_TMP/app.in"
    # APP_SETSID=1: a session of its own (CRIU cannot dump a process whose session leader is outside its
    # PID namespace, as a test's is when the whole run is in one); setsid execs in place here, so $! is the app
    local session=()
    [ "${APP_SETSID:-0}" = 1 ] && session=(setsid)
    if [ -n "$asan" ]; then
      LD_PRELOAD="$asan $agent" "${session[@]}" "$app" "$@" <"$TEST_TMP/app.in" >"$TEST_TMP/app.out" 2>"$TEST_TMP/app.err" &
    else
      "${session[@]}" "$GPUSNAP_BIN" run -- "$app" "$@" <"$TEST_TMP/app.in" >"$TEST_TMP/app.out" 2>"$TEST_TMP/app.err" &
    fi
    APP=$!
    PID=$APP
    TEST_PIDS+=("$APP")
    exec 3>"$TEST_TMP/app.in"
    for _ in $(seq 200); do
      grep -q '^READY' "$TEST_TMP/app.out" 2>/dev/null && return 0
      kill -0 "$APP" 2>/dev/null || break
      sleep 0.1
    done
  fi
  echo "the app did not start: $(cat "$TEST_TMP/app.err")"
  exit 1
}

# app_cmd CMD (fifo): sends CMD, sets REPLY to the app's answer line
app_cmd() {
  local before
  before=$(wc -l <"$TEST_TMP/app.out")
  echo "$1" >&3
  REPLY=
  for _ in $(seq 300); do
    if [ "$(wc -l <"$TEST_TMP/app.out")" -gt "$before" ]; then
      REPLY=$(tail -n 1 "$TEST_TMP/app.out")
      return 0
    fi
    kill -0 "$APP" 2>/dev/null || break
    sleep 0.1
  done
  REPLY="(no answer to $1; app stderr: $(tail -n 3 "$TEST_TMP/app.err"))"
}

# quit_app TITLE (fifo): the app exits with status 0
quit_app() {
  echo quit >&3
  exec 3>&-
  local rc=0
  wait "$APP" || rc=$?
  check "$1 (rc $rc)" test "$rc" = 0
}

# signal_reply SIG PREFIX: sends SIG to the app (APP_IO=signals) and prints the
# line starting with PREFIX it adds to $log in answer: the latest one, "(no
# answer)" after 30 s, or "(no process PID)"
signal_reply() {
  local sig=$1 prefix=$2 before
  before=$(grep -c "^$prefix" "$log")
  if ! kill "-$sig" "$PID" 2>/dev/null; then
    echo "(no process $PID)"
    return
  fi
  for _ in $(seq 300); do
    [ "$(grep -c "^$prefix" "$log")" -gt "$before" ] && break
    sleep 0.1
  done
  if [ "$(grep -c "^$prefix" "$log")" -gt "$before" ]; then
    grep "^$prefix" "$log" | tail -n 1
  else
    echo "(no answer)"
  fi
}

# verify_ok TITLE: the app checks every block through its own pointers and answers VERIFY
verify_ok() {
  local reply=""
  if [ "${APP_IO:-fifo}" = signals ]; then
    reply=$(signal_reply USR1 VERIFY)
  else
    app_cmd verify
    reply=$REPLY
  fi
  case $reply in
    "VERIFY OK "*) pass "$1 ($reply)" ;;
    *) fail "$1" "$reply" "agent log: $(tail -n 5 "$GPUSNAP_AGENT_LOG" 2>/dev/null)" ;;
  esac
}

# kill_our_apps NAME: kills the processes called NAME that run on this test's fake driver
# (restores reuse PIDs, so the PID alone does not say whose a process is)
kill_our_apps() {
  local p
  for p in $(pgrep -x "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "FAKE_CUDA_DIR=$FAKE_CUDA_DIR" && kill -9 "$p"
  done
}

phys() { cat "$FAKE_CUDA_DIR/$PID.phys" 2>/dev/null || echo none; }
handles() { cat "$FAKE_CUDA_DIR/$PID.handles" 2>/dev/null || echo none; }
pinned() { cat "$FAKE_CUDA_DIR/$PID.pinned" 2>/dev/null || echo 0; }
jget() { json_get "$OUT_TXT" "$1" 2>/dev/null; }

# agent_field NAME: a field of the agent in `gpusnap state --json` of the app
agent_field() {
  run_gpusnap state --json "$APP"
  jget "['agent']['$1']"
}
# reply_ok TITLE COMMAND WORD: the app answers COMMAND with "WORD OK ..."
reply_ok() {
  app_cmd "$2"
  case $REPLY in "$3 OK"*) pass "$1" ;; *) fail "$1" "$REPLY" "agent log: $(tail -n 3 "$GPUSNAP_AGENT_LOG" 2>/dev/null)" ;; esac
}

# spill_damaged_resume FOLDER FILE WHAT: the spill tests' damaged chunk (t4032, t4034): FILE, a data file of
# the spill in FOLDER, is kept as $TEST_TMP/whole and overwritten at 4096; resume must refuse it (11, WHAT)
# naming the chunk in one line, its memory not back and the spill kept.
spill_damaged_resume() {
  local folder=$1 file=$2
  cp "$file" "$TEST_TMP/whole"
  printf 'XXXXXXXX' | dd of="$file" bs=1 seek=4096 conv=notrunc 2>/dev/null
  run_gpusnap resume "$APP"
  expect "$3" 11
  # which chunk lies there is the writer threads' order
  check "it names the chunk ($(cat "$ERR_TXT"))" \
    grep -q "image '$folder/image': chunk [0-9]* (allocation [0-9]*, offset [0-9]*, [0-9]* bytes) in '$(basename "$file")' at 4096 is corrupt" "$ERR_TXT"
  check "damaged: one line" one_line
  check "damaged: its memory is not back" test "$(phys)" = 0
  check "damaged: the spill stays" test -f "$file"
}

# spill_rolled_back FOLDER PHYS0 WHAT [SUSPEND_ARGS...]: the spill tests' rollback (t4030, t4034): a suspend
# failing after the agent spilled (GPUSNAP_FAULT=suspend-after-agent, the second spill the agent logged) is
# undone: the driver runs the process, its physical memory is PHYS0 again, the data verifies, FOLDER is gone.
spill_rolled_back() {
  local folder=$1 phys0=$2 what=$3
  shift 3
  GPUSNAP_FAULT=suspend-after-agent run_gpusnap suspend "$@" "$APP"
  check "a suspend failing after the agent's $what fails (rc $RC)" test "$RC" -ne 0
  check "the agent had spilled ($(grep -c "spilling to disk what it does not hold" "$GPUSNAP_AGENT_LOG") spills logged)" \
    test "$(grep -c "spilling to disk what it does not hold" "$GPUSNAP_AGENT_LOG")" = 2
  check "undone: the driver runs the process" test "$(fake_state)" = 0
  check "undone: the physical memory is back" test "$(phys)" = "$phys0"
  verify_ok "the data after the rolled back $what"
  check "undone: the spill folder is removed" test ! -e "$folder"
}
