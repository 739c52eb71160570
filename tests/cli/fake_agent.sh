# shellcheck shell=bash
# fake_agent.sh - helpers for the CLI tests that run an app under the agent
# on the host-memory fake driver (tests/fake/fake_vmm_driver.c) and dump it
# with the real CRIU (t4004, t4006). Sourced after lib.sh. The test sets
# $app (the app, which takes --signals) and $log (its stdout), and calls
# fake_agent_env first.
# shellcheck disable=SC2154 # app and log are the sourcing test's

# fake_agent_env: the fake driver for the CLI and the agent, its state files in $FAKE_CUDA_DIR.
fake_agent_env() {
  export GPUSNAP_LIBCUDA=$GPUSNAP_BUILD/tests/agent/libfakevmm.so
  export FAKE_CUDA_DIR=$TEST_TMP/fake
  export FAKE_CUDA_CRIU=1
  export GPUSNAP_AGENT_LOG=$TEST_TMP/agent.log
  mkdir -p "$FAKE_CUDA_DIR"
  chmod 700 "$TEST_TMP"
  [ -e "$GPUSNAP_LIBCUDA" ] || { echo "not ok - missing $GPUSNAP_LIBCUDA"; exit 1; }
  [ -e "$app" ] || { echo "not ok - missing $app"; exit 1; }
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

# start_app: $app --signals under the agent, a daemon of its own session (CRIU dumps
# whole sessions): setsid execs in place, so $! is the app. Sets PID once it is READY.
# A sanitizer build's runtime has to come first, and `gpusnap run` puts the agent first.
start_app() {
  : >"$log"
  local asan agent=$GPUSNAP_BUILD/libgpusnap.so
  asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
  # none of the descriptors this shell inherited (ctest -j leaves its own log open in
  # tests): CRIU would refuse to restore a file that changed size since the dump
  if [ -n "$asan" ]; then
    (close_inherited_fds && LD_PRELOAD="$asan $agent" exec setsid "$app" --signals </dev/null >>"$log" 2>"$TEST_TMP/app.err") &
  else
    (close_inherited_fds && exec setsid "$GPUSNAP_BIN" run -- "$app" --signals </dev/null >>"$log" 2>"$TEST_TMP/app.err") &
  fi
  disown
  for _ in $(seq 300); do
    PID=$(awk '/^READY/ {print $2; exit}' "$log")
    [ -n "$PID" ] && return 0
    sleep 0.1
  done
  echo "the app did not start: $(cat "$TEST_TMP/app.err")"
  exit 1
}

# verify_ok TITLE: the app checks every block through its own pointers (SIGUSR1 -> a VERIFY line)
verify_ok() {
  local before reply=""
  before=$(grep -c '^VERIFY' "$log")
  if kill -USR1 "$PID" 2>/dev/null; then
    for _ in $(seq 300); do
      [ "$(grep -c '^VERIFY' "$log")" -gt "$before" ] && break
      sleep 0.1
    done
    reply=$(grep '^VERIFY' "$log" | tail -n 1)
    [ "$(grep -c '^VERIFY' "$log")" -gt "$before" ] || reply="(no answer)"
  else
    reply="(no process $PID)"
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

wait_gone() {
  local i
  for ((i = 0; i < 500; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.01
  done
  return 1
}
alive() { kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }
phys() { cat "$FAKE_CUDA_DIR/$PID.phys" 2>/dev/null || echo none; }
handles() { cat "$FAKE_CUDA_DIR/$PID.handles" 2>/dev/null || echo none; }
pinned() { cat "$FAKE_CUDA_DIR/$PID.pinned" 2>/dev/null || echo 0; }
jget() { json_get "$OUT_TXT" "$1" 2>/dev/null; }
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
tmp_dirs() { find "$(dirname "$1")" -maxdepth 1 -name ".$(basename "$1").tmp-*"; }
