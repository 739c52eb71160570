#!/usr/bin/env bash
# t4008 - a suspend waits for the GPU work of every context of the app, and
# never longer than --timeout, on the host-memory fake driver
# (tests/fake/fake_vmm_driver.c: kernels that run for a while, until told, or
# until another process reaches the same step; tests/agent/ctx_app.c):
#  - a kernel in a second context writes a block: the suspend waits for it,
#    so its bytes are in the copy and it does not lose its memory under it;
#  - the first context (current at the first allocation) destroyed: suspend
#    and resume go on in the other one, cycle after cycle;
#  - a kernel that never ends: suspend --timeout fails in time (exit 9)
#    naming the GPU work, the app runs on; a second suspend while it still
#    runs fails the same way; once it ends, suspend and resume work;
#  - --timeout 0 is no limit on the agent path too, also while an app thread
#    is inside the driver;
#  - the contexts' stacks: a suspend sets every context's stack limit to 0
#    for the driver's checkpoint and the resume gives each its own back (a
#    --keep-context suspend, or GPUSNAP_SHRINK_STACK=0, leaves them);
#  - --tree over two ranks whose collectives wait for each other: every gate
#    closes before any rank waits, so neither waits for a peer it stopped;
#    the suspend succeeds (or, if a rank was caught mid-step, rolls both back
#    within --timeout) and both go on after the resume.
# Needs GPUSNAP_BUILD (set by ctest), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/ctx_app
fake_agent_env

cleanup_apps() {
  kill_our_apps ctx_app
  cleanup_test
}
trap cleanup_apps EXIT

reply_is() { # TITLE COMMAND WANT
  app_cmd "$2"
  case $REPLY in "$3"*) pass "$1 ($REPLY)" ;; *) fail "$1" "$REPLY" "agent log: $(tail -n 5 "$GPUSNAP_AGENT_LOG")" ;; esac
}

# ---- work in a second context ----
start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
reply_is "a second context" ctx2 CTX2
t_launch=$EPOCHREALTIME
reply_is "a kernel in it, writing block B for 300 ms" "kernel 300" "LAUNCHED 0"
run_gpusnap suspend --json "$APP"; expect "suspend while it runs" 0
t_suspended=$EPOCHREALTIME
sync_s=$(jget "['processes'][0]['agent']['sync_s']")
# The kernel was launched after t_launch: a suspend that waited for its end returns 0.3 s after that at
# the earliest, however late it began on a loaded machine (its sync_s alone shrinks by any such delay).
check "the suspend waited for the kernel (sync $sync_s s, returned $(python3 -c "print(round($t_suspended - $t_launch, 3))") s after the launch)" \
  python3 -c 'import sys; sys.exit(not (float(sys.argv[1]) > 0 and float(sys.argv[3]) - float(sys.argv[2]) >= 0.3))' \
  "$sync_s" "$t_launch" "$t_suspended"
check "the memory was released" test "$(phys)" = 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "block B holds what the kernel wrote"
reply_is "the kernel's context reports no error" sync "SYNC 0"

# ---- the first context destroyed ----
reply_is "the first context is destroyed" destroy1 "DESTROYED 0"
for cycle in 1 2; do
  run_gpusnap suspend "$APP"; expect "suspend $cycle without the first context" 0
  check "cycle $cycle released the memory" test "$(phys)" = 0
  run_gpusnap resume "$APP"; expect "resume $cycle without the first context" 0
  check "cycle $cycle mapped it again" test "$(phys)" = "$phys0"
  verify_ok "the data after cycle $cycle"
done
quit_app "the app exits cleanly"

# ---- the contexts' stacks ----
stack() { cat "$FAKE_CUDA_DIR/$APP.stack" 2>/dev/null || echo none; }
start_app
reply_is "the first context's stack set to 4096" "stack 4096" "STACK SET 0"
reply_is "a second context" ctx2 CTX2
check "the contexts hold 4096 + 1024 bytes of stack per thread ($(stack))" test "$(stack)" = 5120
run_gpusnap suspend --json "$APP"; expect "suspend" 0
n=$(jget "['processes'][0]['agent']['stacks_shrunk']")
check "the suspend shrank both contexts' stacks ($n)" test "$n" = 2
check "while suspended they hold none ($(stack))" test "$(stack)" = 0
run_gpusnap resume "$APP"; expect "resume" 0
check "after the resume each has its own again ($(stack))" test "$(stack)" = 5120
reply_is "the second context (current) says 1024" stack "STACK 1024"
verify_ok "the data after the cycle"
run_gpusnap suspend --keep-context --json "$APP"; expect "suspend --keep-context" 0
n=$(jget "['processes'][0]['agent'].get('stacks_shrunk', 0)")
check "a --keep-context suspend leaves the stacks ($n shrunk, $(stack))" test "$n" = 0 -a "$(stack)" = 5120
run_gpusnap resume "$APP"; expect "resume" 0
reply_is "still 1024 after it" stack "STACK 1024"
quit_app "the app exits cleanly after the stack cycles"
GPUSNAP_SHRINK_STACK=0 start_app
run_gpusnap suspend --json "$APP"; expect "suspend with GPUSNAP_SHRINK_STACK=0" 0
n=$(jget "['processes'][0]['agent']['stacks_shrunk']")
check "GPUSNAP_SHRINK_STACK=0 leaves the stack ($n shrunk, $(stack))" test "$n" = 0 -a "$(stack)" = 1024
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after that cycle"
quit_app "the app exits cleanly"

# ---- a kernel that never ends ----
start_app
reply_is "a kernel that runs until told" hang "LAUNCHED 0"
t0=$(date +%s.%N)
run_gpusnap suspend --timeout 2 "$APP"
t1=$(date +%s.%N)
expect "suspend --timeout 2 gives up" 9 "GPU work still running on GPU 0 after 2.0 s"
check "within the timeout (took $(python3 -c "print(round($t1 - $t0, 1))") s)" python3 -c "import sys; sys.exit(not $t1 - $t0 < 8)"
check "it says the app runs on" grep -q "the app was left running" "$ERR_TXT"
reply_is "the gate is open again: the app calls the driver" ctx2 CTX2
verify_ok "the data is the app's"
run_gpusnap state "$APP"
check "state says running ($(cat "$OUT_TXT"))" grep -qx running "$OUT_TXT"
run_gpusnap suspend --timeout 1 "$APP"
expect "a second suspend while the work still runs gives up too" 9 "still running"
touch "$FAKE_CUDA_DIR/$APP.kernel-done"
run_gpusnap suspend "$APP"; expect "suspend once the work ended" 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after the cycle"
quit_app "the app exits cleanly after the timeouts"

# ---- --timeout 0: no limit, also for an app thread inside the driver ----
start_app
reply_is "a kernel that runs until told" hang "LAUNCHED 0"
echo sync >&3 # the app's thread waits inside cuCtxSynchronize (the fake says so with a file)
for _ in $(seq 3000); do [ -e "$FAKE_CUDA_DIR/$APP.kernel-waiting" ] && break; sleep 0.01; done
check "the app's thread waits inside the driver" test -e "$FAKE_CUDA_DIR/$APP.kernel-waiting"
("$GPUSNAP_BIN" suspend --timeout 0 "$APP" >"$TEST_TMP/s0.out" 2>"$TEST_TMP/s0.err"; echo $? >"$TEST_TMP/s0.rc") &
s0=$!
sleep 2.5
check "suspend --timeout 0 still waits after 2.5 s ($(cat "$TEST_TMP/s0.err" 2>/dev/null))" test ! -e "$TEST_TMP/s0.rc"
touch "$FAKE_CUDA_DIR/$APP.kernel-done"
wait "$s0"
check "then it succeeds (rc $(cat "$TEST_TMP/s0.rc"): $(cat "$TEST_TMP/s0.err"))" test "$(cat "$TEST_TMP/s0.rc")" = 0
run_gpusnap resume "$APP"; expect "resume" 0
for _ in $(seq 300); do grep -q '^SYNC' "$TEST_TMP/app.out" && break; sleep 0.1; done
check "the app's synchronize returned ($(grep '^SYNC' "$TEST_TMP/app.out"))" grep -qx "SYNC 0" "$TEST_TMP/app.out"
verify_ok "the data after the cycle"
quit_app "the app exits cleanly after --timeout 0"

# ---- --tree over two ranks of a collective ----
# Each rank holds its suspend's reply 2 s (fault point agent-reply): suspended
# one after the other, the second would by then have started a step the first
# can no longer join, and wait for it for ever.
export FAKE_COLL_SIZE=2 CTX_APP_COLL=1
# as start_app does: a sanitizer build's runtime has to come first, and `gpusnap run` puts the agent first
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then launch=(env LD_PRELOAD="$asan $GPUSNAP_BUILD/libgpusnap.so"); else launch=("$GPUSNAP_BIN" run --); fi
(close_inherited_fds && GPUSNAP_FAULT=agent-reply=hold:2 exec setsid bash -c '
  app=$1 dir=$2
  shift 2
  "$@" "$app" --signals >>"$dir/rank1.log" 2>&1 &
  "$@" "$app" --signals >>"$dir/rank2.log" 2>&1 &
  wait' ranks "$app" "$TEST_TMP" "${launch[@]}" </dev/null >/dev/null 2>&1) &
disown
for _ in $(seq 100); do
  r1=$(awk '/^READY/ {print $2; exit}' "$TEST_TMP/rank1.log" 2>/dev/null)
  r2=$(awk '/^READY/ {print $2; exit}' "$TEST_TMP/rank2.log" 2>/dev/null)
  [ -n "$r1" ] && [ -n "$r2" ] && break
  sleep 0.1
done
if [ -z "$r1" ] || [ -z "$r2" ]; then
  fail "the two ranks started" "$(cat "$TEST_TMP/rank1.log" "$TEST_TMP/rank2.log" 2>/dev/null)"
  test_done
  exit 1
fi
parent=$(cut -d' ' -f4 "/proc/$r1/stat")
steps() { # LOG: the step count of the rank's latest verify
  local p=$1 log=$2 before
  before=$(grep -c '^VERIFY' "$log")
  kill -USR1 "$p"
  for _ in $(seq 600); do [ "$(grep -c '^VERIFY' "$log")" -gt "$before" ] && break; sleep 0.05; done
  grep '^VERIFY' "$log" | tail -n 1 | awk '$2 == "OK" {print $5; exit} {print "fail"}'
}
# steps_past N: waits (30 s at most, a loaded machine steps slowly) until both ranks stepped past N;
# their counts in a1 and a2
steps_past() {
  local i
  for ((i = 0; i < 150; i++)); do
    a1=$(steps "$r1" "$TEST_TMP/rank1.log")
    a2=$(steps "$r2" "$TEST_TMP/rank2.log")
    case "$a1$a2" in *fail*) return ;; esac
    [ "${a1:-0}" -gt "$1" ] && [ "${a2:-0}" -gt "$1" ] && return
    sleep 0.2
  done
}
steps_past 1
check "both ranks step together ($a1, $a2)" test "${a1:-0}" -ge 2 -a "${a2:-0}" -ge 2
# a failure with every gate closed opens them all again
GPUSNAP_FAULT=suspend-after-gates run_gpusnap suspend --tree --timeout 5 "$parent"
expect "a failure once the gates are closed is reported" 1 "(injected): undone, the processes run on"
run_gpusnap state "$r1"; s1=$(cat "$OUT_TXT")
run_gpusnap state "$r2"; s2=$(cat "$OUT_TXT")
check "both ranks run again ($s1, $s2)" test "$s1" = running -a "$s2" = running
# gpusnap killed with every gate closed: the gates stay closed (state says so) until resume opens them
GPUSNAP_FAULT=suspend-after-gates=kill run_gpusnap suspend --tree --timeout 5 "$parent"
check "gpusnap was killed there (rc $RC)" test "$RC" = 137
run_gpusnap state "$r1"; s1=$(cat "$OUT_TXT")
check "state says gated ($s1)" test "$s1" = gated
g1=$(steps "$r1" "$TEST_TMP/rank1.log")
sleep 0.6
g2=$(steps "$r1" "$TEST_TMP/rank1.log")
check "the rank does not step while gated ($g1, $g2)" test "$g1" = "$g2"
run_gpusnap resume --tree "$parent"; expect "resume --tree opens the gates" 0
run_gpusnap state "$r2"; s2=$(cat "$OUT_TXT")
check "state says running again ($s2)" test "$s2" = running
for _ in $(seq 100); do # steps again: wait for it rather than for a guessed time
  g3=$(steps "$r1" "$TEST_TMP/rank1.log")
  [ "${g3:-0}" != fail ] && [ "${g3:-0}" -gt "${g2:-0}" ] && break
  sleep 0.1
done
check "the rank steps again ($g2 -> $g3)" test "${g3:-0}" != fail -a "${g3:-0}" -gt "${g2:-0}"
a1=$(steps "$r1" "$TEST_TMP/rank1.log")
a2=$(steps "$r2" "$TEST_TMP/rank2.log")
rc=9
for try in 1 2; do
  [ "$rc" = 9 ] || break
  t0=$(date +%s.%N)
  RC=0
  timeout 60 "$GPUSNAP_BIN" suspend --tree --timeout 5 "$parent" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
  rc=$RC
  t1=$(date +%s.%N)
  if [ "$rc" = 9 ]; then
    # a rank was caught between its step and its peer's: both are rolled back and step on
    run_gpusnap state "$r1"; s1=$(cat "$OUT_TXT")
    run_gpusnap state "$r2"; s2=$(cat "$OUT_TXT")
    check "try $try timed out and rolled both ranks back ($s1, $s2)" test "$s1" = running -a "$s2" = running
  fi
done
check "suspend --tree of two ranks waiting on each other returns (rc $rc after $(python3 -c "print(round($t1 - $t0, 1))") s: $(cat "$TEST_TMP/err"))" test "$rc" = 0
check "both ranks' memory is released" test "$(cat "$FAKE_CUDA_DIR/$r1.phys")" = 0 -a "$(cat "$FAKE_CUDA_DIR/$r2.phys")" = 0
run_gpusnap resume --tree "$parent"; expect "resume --tree" 0
n1=$a1 n2=$a2
steps_past "$((n1 > n2 ? n1 : n2))"
check "both ranks step on after the resume ($n1 -> $a1, $n2 -> $a2)" test "${a1:-0}" != fail -a "${a2:-0}" != fail -a "${a1:-0}" -gt "$n1" -a "${a2:-0}" -gt "$n2"
test_done
