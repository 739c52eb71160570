#!/usr/bin/env bash
# t81-counter-dump.sh - the counter app (value in GPU memory, one line per tick
# appended to a file; no stdin, its own session) is dumped and is gone, the
# file stops growing; restored, it goes on from where it was: the file runs
# 1, 2, 3, ... with no reset or gap. Killed and restored again from the same
# image, it starts over from the dumped value (the next line is that value + 1).
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t81-counter-dump
export GS_APP_STDERR=null
require_criu

img=$GS_WORK/img
counter_start
pid=$COUNTER_PID

dump_checked "$pid" "$img" driver || finish
n=$(counter_lines)
sleep 1.5
check_eq "lines in the counter's file after the dump" "$(counter_lines)" "$n"
v=$(tail -n 1 "$COUNTER_VALUES")

restore_checked "$img" "$pid" || finish
sleep 1.5
check "counter goes on after restore ($n -> $(counter_lines) lines)" test "$(counter_lines)" -gt "$n"
counter_check_sequence

gs_kill_pid "$pid"
check "restored counter is gone" wait_pid_gone "$pid"
m=$(counter_lines)
restore_checked "$img" "$pid" || finish
sleep 1.5
check_eq "first value after the second restore" "$(sed -n "$((m + 1))p" "$COUNTER_VALUES")" "$((v + 1))"
gs_kill_pid "$pid"
finish
