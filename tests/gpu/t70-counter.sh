#!/usr/bin/env bash
# t70-counter.sh - the counter app (state in GPU memory, a tick every 100 ms):
# suspended, it stops counting; resumed, it goes on from where it was (never
# from 0), and the values in its file run 1, 2, 3, ... without a gap or reset.
. "$(dirname "$0")/lib.sh"
gs_test_init t70-counter

values=$GS_WORK/counter.values
rm -f "$values"
app_start c 120 "$GS_APPS/counter" --out "$values" --quiet || finish
V=
value() { V=; app_cmd c value VALUE 10 && V=${REPLY_LINE#VALUE }; } # sets V
sleep 1.5
value; v1=$V
log "counter before suspend: $v1"
check "counter is counting before suspend ($v1)" test "${v1:-0}" -gt 3
suspend_checked c 256 || finish
value; v2=$V
lines2=$(wc -l <"$values")
sleep 2
value; v3=$V
lines3=$(wc -l <"$values")
check_eq "counter while suspended (2 s apart)" "$v3" "$v2"
check_eq "lines in the counter's file while suspended" "$lines3" "$lines2"
resume_checked c || finish
sleep 1.5
value; v4=$V
check "counter goes on after resume ($v3 -> $v4)" test "${v4:-0}" -gt "${v3:-0}"
counter_check_sequence "$values"
app_verify c "counter app"
app_quit c
finish
