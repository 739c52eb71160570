#!/usr/bin/env bash
# t81-counter-dump.sh - the counter app (value in GPU memory, one line per tick
# appended to a file; no stdin, its own session) is dumped and is gone, the
# file stops growing; restored, it goes on from where it was: the file runs
# 1, 2, 3, ... with no reset or gap. Killed and restored again from the same
# image, it starts over from the dumped value (the next line is that value + 1).
. "$(dirname "$0")/lib.sh"
gs_test_init t81-counter-dump
export GS_APP_STDERR=null
require_criu

values=$GS_WORK/counter.values
img=$GS_WORK/img
rm -f "$values"
setsid "$GS_APPS/counter" --no-stdin --out "$values" --quiet </dev/null >/dev/null 2>/dev/null &
pid=$!
GS_EXTRA_PIDS+=("$pid")
gs_track_pid "$pid"
lines() { wc -l <"$values" 2>/dev/null || echo 0; }
for ((i = 0; i < 300; i++)); do [ "$(lines)" -ge 10 ] && break; sleep 0.1; done
check "counter is counting ($(lines) lines)" test "$(lines)" -ge 10

dump_checked "$pid" "$img" driver || finish
n=$(lines)
sleep 1.5
check_eq "lines in the counter's file after the dump" "$(lines)" "$n"
v=$(tail -n 1 "$values")

restore_checked "$img" "$pid" || finish
sleep 1.5
check "counter goes on after restore ($n -> $(lines) lines)" test "$(lines)" -gt "$n"
if awk 'NR != $1 { bad = 1; exit } END { exit bad }' "$values"; then
  pass "the counter's file runs 1..$(lines) with no reset or gap"
else
  fail "the counter's file is not 1, 2, 3, ...: $(awk 'NR != $1 { print "line " NR " holds " $1; exit }' "$values")"
fi

gs_kill_pid "$pid"
check "restored counter is gone" wait_pid_gone "$pid"
m=$(lines)
restore_checked "$img" "$pid" || finish
sleep 1.5
check_eq "first value after the second restore" "$(sed -n "$((m + 1))p" "$values")" "$((v + 1))"
gs_kill_pid "$pid"
finish
