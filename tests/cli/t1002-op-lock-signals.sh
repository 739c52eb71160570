#!/usr/bin/env bash
# t1002 - suspend and resume on the driver path (fake libcuda) against a
# second gpusnap, signals and kill -9:
#  - one operation per process: while a suspend is at work (held at a fault
#    point) a resume or a second suspend is refused at once (exit 6) naming
#    it, and `state` answers at once; --tree locks every process;
#  - SIGTERM, SIGINT, SIGHUP (to gpusnap or to its whole process group) at
#    each step of a suspend undo it: the process runs, gpusnap ends by the
#    signal after one line saying so; a signal during a resume lets it finish;
#  - kill -9 of gpusnap at each step: the next state, suspend and resume say
#    what the killed one left and resume puts the process back (a driver lock
#    left behind included);
#  - resume --image on a process without the agent is refused in one line.
. "$(dirname "$0")/lib.sh"

fake_cuda_env

# fast CMD...: runs gpusnap, fails the check if it took 4 s or more (not waiting out the 10 s hold; load adds less)
fast() {
  local t0 t1
  t0=$(date +%s%N)
  run_gpusnap "$@"
  t1=$(date +%s%N)
  [ $(((t1 - t0) / 1000000)) -lt 4000 ] || { echo "    took $(((t1 - t0) / 1000000)) ms"; return 1; }
}

# ---- one operation per process ----
start_cuda_proc; p=$NEWPID
bg_gpusnap suspend-after-driver=hold:10 suspend "$p"
check "the suspend reaches the driver's checkpoint" at_fault suspend-after-driver
check "a resume meanwhile is refused at once" fast resume "$p"
expect "resume while a suspend is at work" 6 "cannot resume process $p now: a gpusnap suspend (pid $BG) is working on process $p"
check "the refusal is one line" one_line
run_gpusnap suspend "$p"; expect "a second suspend meanwhile" 6 "a gpusnap suspend (pid $BG) is working on process $p"
check "state answers at once" fast state "$p"
expect "state while a suspend is at work" 0 "a gpusnap suspend (pid $BG) is working on process $p (step suspend"
run_gpusnap state --json "$p"; expect "state --json while a suspend is at work" 0
check "state JSON names the operation at work" [ "$(json_get "$OUT_TXT" '["operation"]["action"],d["operation"]["at_work"],d["operation"]["gpusnap_pid"]')" = "('suspend', True, $BG)" ]
bg_wait
check "the suspend itself succeeded (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "the process is suspended" [ "$(fake_state "$p")" = 2 ]
run_gpusnap state "$p"; expect "state after the suspend" 0 "suspended"
check "no operation is named once it ended" bash -c "! grep -q 'gpusnap suspend' '$ERR_TXT'"
run_gpusnap resume "$p"; expect "resume once the suspend ended" 0
check "the process runs" [ "$(fake_state "$p")" = 0 ]

# --tree: every process of the tree is locked; one busy process refuses the whole tree
bash -c 'sleep 300 & sleep 300 & wait' & parent=$!; TEST_PIDS+=("$parent")
for _ in $(seq 300); do [ "$(pgrep -P "$parent" | wc -l)" -ge 2 ] && break; sleep 0.1; done
kids=($(pgrep -P "$parent")); TEST_PIDS+=("${kids[@]}")
for k in "${kids[@]}"; do echo "0 0" >"$FAKE_CUDA_DIR/$k"; done
bg_gpusnap suspend-after-driver=hold:5 suspend "${kids[1]}"
at_fault suspend-after-driver
run_gpusnap suspend --tree "$parent"; expect "suspend --tree while one of the tree is busy" 6 "a gpusnap suspend (pid $BG) is working on process ${kids[1]}"
check "the other process of the tree was not touched" [ "$(fake_state "${kids[0]}")" = 0 ]
bg_wait
run_gpusnap resume "${kids[1]}"; expect "resume of the tree's busy process after its suspend" 0

# ---- signals during a suspend: undone, the process runs ----
sig_suspend() { # sig_suspend POINT SIGNAL RC: the signal comes at POINT
  local point=$1 sig=$2 rc=$3
  start_cuda_proc; p=$NEWPID
  bg_gpusnap "$point=hold:5" suspend "$p"
  at_fault "$point"
  kill "-$sig" "$BG"
  bg_wait
  check "SIG$sig at $point: gpusnap ends by the signal (rc $BG_RC)" [ "$BG_RC" = "$rc" ]
  check "SIG$sig at $point: the process runs (driver state $(fake_state "$p"))" [ "$(fake_state "$p")" = 0 ]
  check "SIG$sig at $point: one line says it was undone" \
    grep -q "^gpusnap: suspend of process $p interrupted by SIG$sig: undone, process $p runs on$" "$TEST_TMP/bg.err"
  check "SIG$sig at $point: no other error line" [ "$(grep -vc "injected at" "$TEST_TMP/bg.err")" = 1 ]
  run_gpusnap state "$p"; expect "SIG$sig at $point: state says running, nothing else" 0 "running"
  check "SIG$sig at $point: state has no note" [ ! -s "$ERR_TXT" ]
}
sig_suspend suspend-after-agent TERM 143
sig_suspend suspend-after-driver TERM 143
sig_suspend suspend-after-driver INT 130
sig_suspend suspend-after-driver HUP 129
# the signal delivered by the fault table at the exact step
start_cuda_proc; p=$NEWPID
GPUSNAP_FAULT=suspend-after-driver=term run_gpusnap suspend "$p"
check "SIGTERM at the driver's checkpoint: rc $RC" [ "$RC" = 143 ]
check "SIGTERM at the driver's checkpoint: undone" [ "$(fake_state "$p")" = 0 ]
# the whole process group of gpusnap gets the signal (a terminal's Ctrl-C, a service stop)
start_cuda_proc; p=$NEWPID
rm -f "$TEST_TMP/bg.err"
GPUSNAP_FAULT=suspend-after-driver=hold:5 setsid "$GPUSNAP_BIN" suspend "$p" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
at_fault suspend-after-driver
kill -TERM -- "-$BG"
bg_wait
check "SIGTERM to gpusnap's process group: rc $BG_RC" [ "$BG_RC" = 143 ]
check "SIGTERM to gpusnap's process group: the process runs" [ "$(fake_state "$p")" = 0 ]
# an injected failure after the driver's checkpoint is undone the same way
GPUSNAP_FAULT=suspend-after-driver run_gpusnap suspend "$p"
expect "a failure after the driver's checkpoint" 1 "failed at 'suspend-after-driver' (injected): undone, process $p runs on"
check "the failed suspend left the process running" [ "$(fake_state "$p")" = 0 ]

# a signal during a resume: it is finished
run_gpusnap suspend "$p"; expect "suspend before an interrupted resume" 0
bg_gpusnap resume-after-driver=hold:5 resume "$p"
at_fault resume-after-driver
kill -TERM "$BG"
bg_wait
check "SIGTERM during a resume: it finished (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "SIGTERM during a resume: the process runs" [ "$(fake_state "$p")" = 0 ]
check "SIGTERM during a resume: says it was finished" grep -q "SIGTERM came when the resume of process $p could no longer be undone; it was finished" "$TEST_TMP/bg.err"

# ---- kill -9 of gpusnap ----
start_cuda_proc; p=$NEWPID
GPUSNAP_FAULT=suspend-after-driver=kill run_gpusnap suspend "$p"
check "kill -9 after the driver's checkpoint (rc $RC)" [ "$RC" = 137 ]
check "the process is left suspended, whole" [ "$(fake_state "$p")" = 2 ]
run_gpusnap state "$p"; expect "state names the killed suspend" 0 "process $p was left suspended by a gpusnap suspend"
check "state says what to do" grep -q "gpusnap resume $p puts it back" "$ERR_TXT"
run_gpusnap state --json "$p"; expect "state --json after the killed suspend" 0
check "state JSON: a killed operation, not one at work" [ "$(json_get "$OUT_TXT" '["operation"]["action"],d["operation"]["at_work"]')" = "('suspend', False)" ]
run_gpusnap suspend "$p"; expect "a new suspend is refused, saying why" 6 "was left suspended by a gpusnap suspend"
check "the refusal is one line" one_line
run_gpusnap state "$p"; expect "the record survives a refused operation" 0 "was left suspended by a gpusnap suspend"
run_gpusnap resume "$p"; expect "resume after the killed suspend" 0
check "the process runs again" [ "$(fake_state "$p")" = 0 ]
run_gpusnap state "$p"; expect "state after the resume" 0 "running"
check "the record is gone after the resume" [ ! -s "$ERR_TXT" ]

GPUSNAP_FAULT=suspend-after-agent=kill run_gpusnap suspend "$p"
check "kill -9 before the driver (rc $RC)" [ "$RC" = 137 ]
check "the driver never got the process" [ "$(fake_state "$p")" = 0 ]
run_gpusnap state "$p"; expect "state of a process a killed suspend never touched" 0 "running"
check "nothing to say about it" [ ! -s "$ERR_TXT" ]
# the driver lock of a gpusnap killed between the driver's lock and checkpoint (the fake's state 1)
echo "1 0" >"$FAKE_CUDA_DIR/$p"
run_gpusnap resume "$p"; expect "resume releases the lock a killed gpusnap left" 0 "released the driver lock"
check "the process runs" [ "$(fake_state "$p")" = 0 ]
echo "1 0" >"$FAKE_CUDA_DIR/$p"
run_gpusnap resume "$p"; expect "a lock no killed gpusnap left is not taken for one" 6 "not suspended (it is locked)"
echo "0 0" >"$FAKE_CUDA_DIR/$p"

run_gpusnap suspend "$p"; expect "suspend before a killed resume" 0
GPUSNAP_FAULT=resume-after-driver=kill run_gpusnap resume "$p"
check "kill -9 of a resume after the driver (rc $RC)" [ "$RC" = 137 ]
check "the driver part was done: the process runs" [ "$(fake_state "$p")" = 0 ]
run_gpusnap resume "$p"; expect "resume again: nothing is suspended" 6 "is not suspended"

# a PID whose process is gone: the record of a killed operation explains it
start_cuda_proc; q=$NEWPID
GPUSNAP_FAULT=suspend-after-driver=kill run_gpusnap suspend "$q"
kill -9 "$q"; wait_gone "$q"
run_gpusnap state "$q"; expect "state of a gone process" 3 "no such process: $q"

# ---- resume --image needs the agent ----
run_gpusnap suspend "$p"; expect "suspend (driver path)" 0
run_gpusnap resume --image "$TEST_TMP" "$p"
expect "resume --image of a process without the agent is refused" 16 "--image: process $p runs without the gpusnap agent"
check "the refusal is one line" one_line
check "the process stays suspended" [ "$(fake_state "$p")" = 2 ]
run_gpusnap resume "$p"; expect "resume without --image" 0

test_done
