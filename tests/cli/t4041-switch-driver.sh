#!/usr/bin/env bash
# t4041 - gpusnap switch on the driver path (fake libcuda): one process
# suspended and another resumed as one command. Checks:
#  - the switch both ways, one after the other and with the halves at once
#    (--overlap always), each with one line per process and --json;
#  - every refusal before anything moves, one line, its exit code, nothing
#    changed: the same PID twice, OUT not running, IN not suspended, a PID
#    that does not exist, not a number, not a CUDA process, a missing PID, a
#    bad --overlap, a process another gpusnap is at work on;
#  - OUT's suspend failing: both stay as they were (also when IN's resume ran
#    meanwhile: IN is suspended again);
#  - IN's resume failing for lack of GPU memory: tried again until --timeout,
#    then OUT runs again and IN stays suspended; a shortage that passes is
#    waited out (the switch succeeds, its retries counted); SIGINT during
#    that wait undoes the switch;
#  - a failure after both halves: both put back; an undo that cannot suspend
#    IN again leaves the switch standing, exit 17, the line and gpusnap state
#    naming what each process is and the command that puts it right;
#  - SIGINT/SIGTERM between the halves and after both: undone, gpusnap ends by
#    the signal; a second gpusnap meanwhile is refused naming the switch;
#  - kill -9 of gpusnap between the halves: state names what it left, resume
#    puts OUT back.
. "$(dirname "$0")/lib.sh"

fake_cuda_env

states() { echo "$(fake_state "$1") $(fake_state "$2")"; }

start_cuda_proc; a=$NEWPID
start_cuda_proc; b=$NEWPID
run_gpusnap suspend "$b"; expect "process b is suspended first" 0

# ---- the switch both ways ----
run_gpusnap switch "$a" "$b"; expect "switch a out, b in" 0
check "a is suspended, b runs ($(states "$a" "$b"))" [ "$(states "$a" "$b")" = "2 0" ]
check "one line per process and a total" \
  sh -c "grep -q '^suspended $a (sleep) \[driver\]' '$OUT_TXT' && grep -q '^resumed $b (sleep) \[driver\]' '$OUT_TXT' && grep -q '^total .* one after the other' '$OUT_TXT'"
check "without NVML nor an agent the halves go one after the other" [ ! -s "$ERR_TXT" ]
run_gpusnap switch --overlap always --json "$b" "$a"; expect "switch b out, a in, the halves at once" 0
check "b is suspended, a runs ($(states "$a" "$b"))" [ "$(states "$a" "$b")" = "0 2" ]
check "JSON: order together, both driver path, states" [ "$(json_get "$OUT_TXT" '["order"],d["out"]["pid"],d["out"]["path"],d["out"]["state_after"],d["in"]["pid"],d["in"]["state_after"],d["undone"]')" = "('together', $b, 'driver', 'suspended', $a, 'running', False)" ]
run_gpusnap switch --overlap never --json "$a" "$b"; expect "switch --overlap never" 0
check "JSON: order out-first" [ "$(json_get "$OUT_TXT" '["order"],d["order_why"]')" = "('out-first', '--overlap never')" ]
check "a is suspended, b runs" [ "$(states "$a" "$b")" = "2 0" ]

# ---- refusals: nothing moves ----
refused() { # TITLE CODE TEXT ARGS...
  local title=$1 code=$2 text=$3
  shift 3
  local before
  before=$(states "$a" "$b")
  run_gpusnap switch "$@"; expect "$title" "$code" "$text"
  check "... one line" one_line
  check "... nothing changed" [ "$(states "$a" "$b")" = "$before" ]
}
refused "the same process twice" 2 "OUT_PID and IN_PID are the same process ($b)" "$b" "$b"
refused "OUT not running" 6 "process $a is suspended, not running" "$a" "$b"
start_cuda_proc; c=$NEWPID
refused "IN running" 6 "process $c is running, not suspended" "$b" "$c"
refused "a PID that does not exist" 3 "2147483600" "$b" 2147483600
refused "OUT not a number" 2 "'x' is not a process ID" x "$a"
sleep 300 & plain=$!; TEST_PIDS+=("$plain")
refused "IN not a CUDA process" 4 "$plain" "$b" "$plain"
refused "one PID only" 2 "OUT_PID and IN_PID are needed" "$b"
refused "three PIDs" 2 "only OUT_PID and IN_PID are taken" "$b" "$a" "$c"
refused "--overlap sometimes" 2 "--overlap takes auto, always or never, not 'sometimes'" --overlap sometimes "$b" "$a"
refused "--keep-context without the agent" 16 "--keep-context needs the gpusnap agent" --keep-context "$b" "$a"
run_gpusnap switch --json "$a" "$c"; expect "a refusal with --json" 6
check "... the document says both processes as they are" [ "$(json_get "$OUT_TXT" '["ok"],d["error"],d["out"]["state_after"],d["in"]["state_after"]')" = "(False, 'state', 'suspended', 'running')" ]

# ---- OUT's suspend fails: both as they were ----
FAKE_CUDA_FAIL_CHECKPOINT=$b run_gpusnap switch "$b" "$a"
expect "OUT's checkpoint fails" 1 "process $b runs on, process $a stays suspended"
check "... one line" one_line
check "... b runs, a suspended" [ "$(states "$a" "$b")" = "2 0" ]
FAKE_CUDA_FAIL_CHECKPOINT=$b run_gpusnap switch --overlap always --json "$b" "$a"
expect "OUT's checkpoint fails while IN's resume ran" 1 "undone, process $b runs on, process $a stays suspended"
check "... IN was suspended again (a suspended, b runs)" [ "$(states "$a" "$b")" = "2 0" ]
check "... JSON says undone" [ "$(json_get "$OUT_TXT" '["undone"],d["out"]["state_after"],d["in"]["state_after"]')" = "(True, 'running', 'suspended')" ]

# ---- IN's resume fails for lack of GPU memory ----
FAKE_CUDA_NO_VRAM=$a run_gpusnap switch --timeout 1 --json "$b" "$a"
expect "no room on the GPU for IN within --timeout" 14 "not enough free GPU memory to restore process $a: undone, process $b runs on, process $a stays suspended"
check "... b runs, a suspended" [ "$(states "$a" "$b")" = "2 0" ]
check "... tried more than once" [ "$(json_get "$OUT_TXT" '["retries"]>0')" = True ]
rm -f "$FAKE_CUDA_DIR/$a.novram"
FAKE_CUDA_NO_VRAM=$a:2 run_gpusnap switch --json "$b" "$a"
expect "a shortage that passes (two refusals) is waited out" 0
check "... two retries counted" [ "$(json_get "$OUT_TXT" '["retries"]')" = 2 ]
check "... b suspended, a runs" [ "$(states "$a" "$b")" = "0 2" ]

# SIGINT while IN waits for room: undone, the signal named
rm -f "$FAKE_CUDA_DIR/$b.novram"
FAKE_CUDA_NO_VRAM=$b bg_gpusnap "" switch --timeout 60 "$a" "$b"
for _ in $(seq 3000); do [ -s "$FAKE_CUDA_DIR/$b.novram" ] && break; sleep 0.01; done
kill -INT "$BG"
bg_wait
check "SIGINT while IN waits for room: gpusnap ends by it (rc $BG_RC)" [ "$BG_RC" = 130 ]
check "... undone: a runs, b suspended ($(states "$a" "$b"))" [ "$(states "$a" "$b")" = "0 2" ]
check "... one line says so" grep -q "^gpusnap: switch of process $a out and $b in interrupted by SIGINT: undone, process $a runs on, process $b stays suspended$" "$TEST_TMP/bg.err"

# ---- a failure after both halves; an undo that fails ----
GPUSNAP_FAULT=switch-after-both run_gpusnap switch "$a" "$b"
expect "a failure after both halves" 1 "failed at 'switch-after-both' (injected): undone, process $a runs on, process $b stays suspended"
check "... a runs, b suspended" [ "$(states "$a" "$b")" = "0 2" ]
GPUSNAP_FAULT=switch-after-both,suspend-after-driver@2 run_gpusnap switch "$a" "$b"
expect "an undo that cannot suspend IN again" 17 "could not be undone, so the switch stands: process $a is suspended, process $b runs (gpusnap switch $b $a puts them back)"
check "... one error line besides the undo's own" [ "$(errors "$ERR_TXT" | grep -vc "cannot suspend process $b again")" = 1 ]
check "... a suspended, b runs" [ "$(states "$a" "$b")" = "2 0" ]
run_gpusnap state "$a"; expect "state names what the switch left on OUT" 0 "process $a was left suspended by a gpusnap switch"
check "... and the command" grep -q "gpusnap resume $a puts it back" "$ERR_TXT"
run_gpusnap switch "$b" "$a"; expect "the switch back puts them where they were" 0
check "... a runs, b suspended" [ "$(states "$a" "$b")" = "0 2" ]
run_gpusnap state "$a"; expect "state after the switch back" 0 "running"
check "... no note left" [ ! -s "$ERR_TXT" ]

# ---- signals ----
sig_switch() { # POINT SIG RC OVERLAP
  local point=$1 sig=$2 rc=$3
  bg_gpusnap "$point=hold:4" switch --overlap "$4" "$a" "$b"
  at_fault "$point"
  if [ "$point" = switch-after-out ]; then
    run_gpusnap suspend "$b"
    expect "SIG$sig at $point: a second gpusnap meanwhile is refused naming the switch" 6 "a gpusnap switch (pid $BG) is working on process $b"
  fi
  kill "-$sig" "$BG"
  bg_wait
  check "SIG$sig at $point: gpusnap ends by the signal (rc $BG_RC)" [ "$BG_RC" = "$rc" ]
  check "SIG$sig at $point: a runs, b suspended ($(states "$a" "$b"))" [ "$(states "$a" "$b")" = "0 2" ]
  check "SIG$sig at $point: one line says it was undone" \
    grep -q "^gpusnap: switch of process $a out and $b in interrupted by SIG$sig: undone, process $a runs on, process $b stays suspended$" "$TEST_TMP/bg.err"
  check "SIG$sig at $point: no other error line" [ "$(grep -vc "injected at" "$TEST_TMP/bg.err")" = 1 ]
}
sig_switch switch-after-out INT 130 never
sig_switch switch-after-both INT 130 never
sig_switch switch-after-both TERM 143 always

# ---- kill -9 between the halves ----
GPUSNAP_FAULT=switch-after-out=kill run_gpusnap switch --overlap never "$a" "$b"
check "kill -9 between the halves (rc $RC)" [ "$RC" = 137 ]
check "... a is left suspended, b suspended" [ "$(states "$a" "$b")" = "2 2" ]
run_gpusnap state "$a"; expect "state names the killed switch" 0 "process $a was being suspended by a gpusnap switch"
run_gpusnap resume "$a"; expect "resume puts OUT back" 0
check "... a runs" [ "$(fake_state "$a")" = 0 ]
run_gpusnap switch "$a" "$b"; expect "the next switch works" 0
check "... a suspended, b runs" [ "$(states "$a" "$b")" = "2 0" ]
test_done
