#!/usr/bin/env bash
# t20-pattern-8g.sh - a process holding 8 GiB of pattern: suspend (VRAM -> 0),
# resume, verify bit for bit; then rewrite the data and do it again, so data
# written after a resume also survives.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t20-pattern-8g

app_start p 180 "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 20 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192
suspend_checked p 8192 || finish
resume_checked p || finish
app_verify p "8 GiB pattern after resume" || finish

if app_cmd p rewrite REWRITE 120 && [[ $REPLY_LINE == "REWRITE OK"* ]]; then
  pass "pattern rewritten after resume ($REPLY_LINE)"
else
  fail "rewrite after resume: '$REPLY_LINE'"
fi
suspend_checked p 8192 || finish
resume_checked p || finish
app_verify p "8 GiB rewritten pattern after a second cycle"
app_quit p
finish
