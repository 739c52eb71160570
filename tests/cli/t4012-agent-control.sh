#!/usr/bin/env bash
# t4012 - the agent's control server and an app's life around it
# (tests/agent/control_app.c on the fake driver):
#  - a thread whose first allocation is under way when a suspend starts does
#    not time the suspend out (it used to wait for the lock the suspend holds,
#    inside the gate the suspend waits on), and waits at the gate afterwards;
#  - a client that connects and says nothing delays no one: `state` answers
#    at once (it used to wait 10 s and fail with the GPU-work timeout's exit 9);
#  - one operation at a time: a second suspend while one runs is refused at
#    once ("busy: a suspend is under way", exit 6) while `state` answers;
#  - fork: the child has none of the parent's staging memory (MADV_DONTFORK)
#    nor its mappings and descriptors of the GPU's device files (memory of
#    its own there, which the child's write does not carry to the file;
#    /dev/null under the descriptor's number; GPUSNAP_FORK_DROP_DEVICE=0
#    keeps them),
#    its agent owns nothing of the parent's (state, suspend and resume of the
#    child), the parent's socket does not stay connectable through the child
#    once the parent is gone, and sockets of processes that are gone are
#    removed by the next agent;
#  - an app that closes every descriptor at its start (close_range, closefrom,
#    the raw system call, a close() loop) is still reached through its agent;
#  - an app stopped by SIGSTOP: a suspend is refused at once (exit 6, the
#    cause named) rather than waiting for its agent, `state` says it is
#    stopped and why; once it continues, suspend and resume work;
#  - `run --reserve` beyond the host's memory is refused (exit 13) and the
#    agent warns about a GPUSNAP_RESERVE set by hand beyond it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/control_app
fake_agent_env
sock() { echo "$GPUSNAP_RUN_DIR/agent-$1.sock"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_agent_log PATTERN: the agent's log ($GPUSNAP_AGENT_LOG) gets a line matching PATTERN (30 s at most)
wait_agent_log() {
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q "$1" "$GPUSNAP_AGENT_LOG" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
vmsize_kb() { awk '/^VmSize:/ {print $2}' "/proc/$1/status"; }
# wait_line PATTERN [SECONDS]: the app's output gets a line matching PATTERN
wait_line() {
  local i
  for ((i = 0; i < ${2:-5} * 10; i++)); do
    grep -q "$1" "$TEST_TMP/app.out" && return 0
    sleep 0.1
  done
  return 1
}
# start_with VAR=VALUE...: start_app with these in the app's environment only
start_with() {
  local kv
  for kv in "$@"; do export "${kv?}"; done
  start_app
  for kv in "$@"; do unset "${kv%%=*}"; done
}

# -- a first allocation under way when a suspend starts
start_with GPUSNAP_FAULT=agent-alloc=hold:2
app_cmd alloc-thread
check "a thread starts its first allocation ($REPLY)" test "$REPLY" = STARTED
# the allocation is inside the gate once the fault point says so, held there for 2 s
wait_agent_log "injected at 'agent-alloc'" || fail "the allocation did not reach the gate" "$(tail -n 2 "$TEST_TMP/app.out")"
t0=$(now_ms)
run_gpusnap suspend --timeout 20 "$APP"
expect "a suspend during a thread's first allocation succeeds" 0
check "... without waiting out its 20 s timeout ($(($(now_ms) - t0)) ms)" test $(($(now_ms) - t0)) -lt 15000
check "the allocating thread waits at the gate while suspended" sh -c "! grep -q '^ALLOC' '$TEST_TMP/app.out'"
run_gpusnap resume "$APP"; expect "resume" 0
check "the allocating thread goes on after the resume" wait_line '^ALLOC OK'
verify_ok "its memory holds its data"
quit_app "the app exits cleanly"

# -- concurrent clients, one operation at a time
start_with GPUSNAP_FAULT=agent-operation@1=hold:8
app_cmd alloc-thread
wait_line '^ALLOC OK' || fail "the app's allocation" "$(tail -n 2 "$TEST_TMP/app.out")"
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
open(sys.argv[2], "w").close()
time.sleep(12)' "$(sock "$APP")" "$TEST_TMP/silent.connected" &
silent=$!
TEST_PIDS+=("$silent")
for _ in $(seq 300); do [ -e "$TEST_TMP/silent.connected" ] && break; sleep 0.1; done
check "a silent client is connected" test -e "$TEST_TMP/silent.connected"
t0=$(now_ms)
run_gpusnap state "$APP"
expect "state with a silent client connected" 0 running
check "... answers at once, not after an I/O timeout ($(($(now_ms) - t0)) ms)" test $(($(now_ms) - t0)) -lt 5000
kill "$silent" 2>/dev/null
"$GPUSNAP_BIN" suspend "$APP" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
bg=$!
# the suspend is under way once the agent holds it (8 s, before its work)
wait_agent_log "injected at 'agent-operation'" || fail "the suspend did not reach the agent" "$(cat "$TEST_TMP/bg.err")"
t0=$(now_ms)
run_gpusnap state "$APP"; expect "state while a suspend is under way" 0
check "... answers at once, not after an I/O timeout ($(($(now_ms) - t0)) ms)" test $(($(now_ms) - t0)) -lt 5000
run_gpusnap suspend "$APP"; expect "a second gpusnap suspend meanwhile is refused at once (operation lock)" 6 "cannot suspend process $APP now"
# a client that does not share the command's lock (another run directory) meets the agent's own rule
mkdir -p -m 700 "$TEST_TMP/other-run"
GPUSNAP_RUN_DIR=$TEST_TMP/other-run run_gpusnap suspend "$APP"
expect "a second suspend past the lock is refused at once by the agent" 6 "busy: a suspend is under way"
rc=0; wait "$bg" || rc=$?
check "the first suspend succeeds (rc $rc: $(cat "$TEST_TMP/bg.err"))" test "$rc" = 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after the cycle"
quit_app "the app exits cleanly"

# -- fork
# a file of the test's stands for a GPU device file that the driver maps shared in the parent
devfile=$TEST_TMP/nvidia0
head -c 65536 /dev/zero >"$devfile"
start_with GPUSNAP_RESERVE=256M GPUSNAP_DEVICE_PATH_PREFIX="$TEST_TMP/nvidia" CONTROL_APP_DEVICE_FILE="$devfile"
app_cmd alloc-thread
wait_line '^ALLOC OK' || fail "the app's allocation" "$(tail -n 2 "$TEST_TMP/app.out")"
sleep 0.5 # the reserved pool is mapped at the first allocation
app_cmd fork-child
child=${REPLY#CHILD }
TEST_PIDS+=("$child")
check "a fork child ($REPLY)" alive "$child"
for _ in $(seq 300); do [ -S "$(sock "$child")" ] && break; sleep 0.1; done
check "the child has a control socket of its own" test -S "$(sock "$child")"
for _ in $(seq 300); do [ -e "$FAKE_CUDA_DIR/$child" ] && break; sleep 0.1; done
check "the child wrote where the device file was mapped, and lives" test -e "$FAKE_CUDA_DIR/$child" -a -d "/proc/$child"
check "the parent maps the device file" grep -q "$devfile" "/proc/$APP/maps"
check "the child maps it no more (the agent put memory of its own there)" sh -c "! grep -q '$devfile' /proc/$child/maps"
check "the child's write did not reach the device file" test "$(od -An -tx1 -N1 "$devfile" | tr -d ' ')" = 00
fd_names() { find "/proc/$1/fd" -mindepth 1 -printf '%l\n' 2>/dev/null; }
check "the parent has the device file open" sh -c "$(declare -f fd_names); fd_names $APP | grep -qx '$devfile'"
check "the child has it open no more (its number names /dev/null)" \
  sh -c "$(declare -f fd_names); ! fd_names $child | grep -qx '$devfile'"
parent_kb=$(vmsize_kb "$APP") child_kb=$(vmsize_kb "$child")
check "the child has none of the parent's 256 MiB of staging memory (parent $parent_kb kB, child $child_kb kB)" \
  test $((parent_kb - child_kb)) -gt $((200 << 10))
run_gpusnap state --json "$APP"
parent_allocs=$(jget "['agent']['allocations']")
run_gpusnap state --json "$child"; expect "state of the child" 0
check "the child's agent owns none of the parent's allocations ($(jget "['agent']['allocations']"), parent $parent_allocs)" \
  test "$(jget "['agent']['allocations']")" = 0 -a "$parent_allocs" = 1
run_gpusnap suspend "$child"; expect "suspend of the child" 0
check "the child lives on" alive "$child"
run_gpusnap resume "$child"; expect "resume of the child" 0
verify_ok "the parent's data is untouched"
app_cmd fork-exit
exited=${REPLY#EXITED }
check "a child that left through _exit left its socket behind ($REPLY)" test -S "$(sock "$exited")"
app_cmd fork-return
returned=${REPLY#RETURNED }
check "a child that left through exit() removed its socket ($REPLY)" test ! -e "$(sock "$returned")"
parent=$APP
kill -9 "$parent" # before its stdin closes: at the end of its input it would leave through exit()
wait "$parent" 2>/dev/null
exec 3>&-
check "the parent's socket file is left behind" test -S "$(sock "$parent")"
python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])' "$(sock "$parent")" 2>"$TEST_TMP/connect.err"
check "nobody can connect to it, though its child lives ($(tail -n 1 "$TEST_TMP/connect.err"))" \
  grep -q ConnectionRefused "$TEST_TMP/connect.err"
start_app
check "the next agent removed the stale socket of the parent" test ! -e "$(sock "$parent")"
check "... and of the child that left through _exit" test ! -e "$(sock "$exited")"
check "... but not the live child's" test -S "$(sock "$child")"
quit_app "the next app exits cleanly"
kill -9 "$child"

# -- an app that closes every descriptor at its start (daemons, sandboxes)
# close_range/closefrom through libc: the agent keeps its socket, eventfd and log open.
# The raw system call and a close() loop (then files on the old numbers): the control
# server finds its descriptors gone (it looks every 0.5 s) and listens anew.
agent_path_now() { # the agent answers gpusnap state
  run_gpusnap state --json "$APP"
  [ "$RC" = 0 ] && [ "$(jget "['path']")" = agent ]
}
for how in close_range closefrom syscall loop; do
  start_with CONTROL_APP_CLOSE_ALL=$how
  if [ "$how" = close_range ] || [ "$how" = closefrom ]; then
    check "$how: the agent answers at once" agent_path_now
    check "$how: its descriptors were never lost" sh -c "! grep -q 'listening anew' '$TEST_TMP/agent.log'"
  else
    for _ in $(seq 300); do agent_path_now && break; sleep 0.1; done
    # (its log went with the app's close: the descriptor of GPUSNAP_AGENT_LOG is closed too)
    check "$how: the agent answers again" agent_path_now
  fi
  app_cmd alloc-thread
  wait_line '^ALLOC OK' || fail "$how: the app's allocation" "$(tail -n 2 "$TEST_TMP/app.out")"
  run_gpusnap suspend --json "$APP"; expect "$how: suspend" 0
  check "$how: the suspend took the agent path" test "$(jget "['processes'][0]['path']")" = agent
  run_gpusnap resume "$APP"; expect "$how: resume" 0
  verify_ok "$how: the data after a cycle"
  quit_app "$how: the app exits cleanly"
  rm -f "$TEST_TMP/agent.log"
done

# -- GPUSNAP_FORK_DROP_DEVICE=0: a fork child keeps what it inherits
start_with GPUSNAP_DEVICE_PATH_PREFIX="$TEST_TMP/nvidia" CONTROL_APP_DEVICE_FILE="$devfile" GPUSNAP_FORK_DROP_DEVICE=0
app_cmd fork-child
kept=${REPLY#CHILD }
TEST_PIDS+=("$kept")
for _ in $(seq 300); do [ -e "$FAKE_CUDA_DIR/$kept" ] && break; sleep 0.1; done
check "with GPUSNAP_FORK_DROP_DEVICE=0 the child still maps the device file" grep -q "$devfile" "/proc/$kept/maps"
check "... and its write reached it" test "$(od -An -tx1 -N1 "$devfile" | tr -d ' ')" = ab
kill -9 "$kept"
quit_app "the app exits cleanly"

# -- an app stopped by a signal (a supervisor's SIGSTOP): its agent cannot answer; said at once
start_app
app_cmd alloc-thread
wait_line '^ALLOC OK' || fail "the app's allocation" "$(tail -n 2 "$TEST_TMP/app.out")"
kill -STOP "$APP"
check "the process is stopped" wait_stopped "$APP"
t0=$(now_ms)
run_gpusnap suspend "$APP"
expect "a suspend of a stopped app is refused" 6 "process $APP is stopped (SIGSTOP or SIGTSTP"
check "... at once ($(($(now_ms) - t0)) ms), in one line" sh -c "[ $(($(now_ms) - t0)) -lt 10000 ] && [ \$(grep -c . '$ERR_TXT') = 1 ]"
run_gpusnap state --json "$APP"; expect "state of the stopped app answers" 0
check "... stopped, with its agent, and why (JSON)" \
  sh -c "[ '$(jget "['state']") $(jget "['path']")' = 'stopped agent' ] && echo '$(jget "['stopped']")' | grep -q 'answer for it once it continues'"
kill -CONT "$APP"
run_gpusnap suspend "$APP"; expect "once it continues, the suspend works" 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after the cycle"
quit_app "the app exits cleanly"

# -- --reserve beyond the host's memory
run_gpusnap run --reserve 1000T -- sh -c 'echo ran'
expect "run --reserve beyond the host's memory is refused" 13 "is more than the host memory available"
check "... before the command runs" test ! -s "$OUT_TXT"
run_gpusnap run --reserve 1M -- "$TEST_TMP/no-such-command"
expect "run --reserve 1M gets as far as starting the command" 2 "cannot run '$TEST_TMP/no-such-command'"
asan=$(ldd "$GPUSNAP_BUILD/libgpusnap.so" | awk '/libasan/ {print $3; exit}')
GPUSNAP_AGENT_LOG=$TEST_TMP/reserve.log GPUSNAP_RESERVE=1000T LD_PRELOAD="${asan:+$asan }$GPUSNAP_BUILD/libgpusnap.so" \
  ASAN_OPTIONS=detect_leaks=0 /usr/bin/env true
check "the agent warns about GPUSNAP_RESERVE beyond the host's memory" \
  grep -q "GPUSNAP_RESERVE=1000T .* is more than the host memory available" "$TEST_TMP/reserve.log"
test_done
