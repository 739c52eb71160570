#!/usr/bin/env bash
# t60-many-allocs.sh - 10,000 live allocations of 1 byte to 64 KiB (seeded random
# sizes, the first exactly 1 byte): suspend, resume, every byte verifies.
. "$(dirname "$0")/lib.sh"
gs_test_init t60-many-allocs

app_start p 300 "$GS_APPS/pattern" --count 10000 --min 1 --max 65536 --seed 60 || finish
app_cmd p info INFO 10 || finish
bytes=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$REPLY_LINE")
allocs=$(sed -n 's/.* allocations=\([0-9]*\).*/\1/p' <<<"$REPLY_LINE")
check_eq "live allocations" "$allocs" 10000
suspend_checked p $((bytes / 1048576)) || finish
resume_checked p || finish
app_verify p "10,000 allocations ($bytes bytes) after resume"
app_quit p
finish
