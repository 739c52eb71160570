#!/usr/bin/env bash
# t11-lock-timeout.sh - suspend --timeout 1 while a kernel runs for 12 s: the lock
# times out (exit 9), the process is left running, the kernel finishes ("DONE"),
# and once idle the same process suspends and resumes normally.
. "$(dirname "$0")/lib.sh"
gs_test_init t11-lock-timeout

spin_s=12
app_start s 120 "$GS_APPS/spin" --seconds $spin_s || finish
pid=${APP_PID[s]}
app_expect s SPINNING 20 || { fail "spin kernel did not start"; finish; }
sleep 1

gs_run suspend "$pid" --timeout 1
expect_rc 9 "suspend --timeout 1 during a ${spin_s}s kernel"
if awk -v s="$GS_SECS" 'BEGIN { exit !(s < 6) }'; then
  pass "lock gave up after ${GS_SECS}s (timeout 1 s)"
else
  fail "suspend --timeout 1 took ${GS_SECS}s"
fi
expect_state "$pid" running "state after the lock timeout"
if app_cmd s status STATUS 20 && [[ $REPLY_LINE == *spinning* ]]; then
  pass "the kernel is still running after the timeout ($REPLY_LINE)"
else
  log "note: status after the timeout: '$REPLY_LINE' (kernel may have ended already)"
fi
if app_expect s DONE $((spin_s + 30)) && [[ $REPLY_LINE != "DONE FAIL"* ]]; then
  pass "the spin kernel finished after the timed-out lock ($REPLY_LINE)"
else
  fail "no clean DONE from the spin app: '${REPLY_LINE}'"
fi
app_verify s "spin app after the timed-out lock"

# Idle now: a normal cycle works on the same process.
suspend_checked s 0 || finish
resume_checked s || finish
app_verify s "spin app after suspend/resume"
app_quit s
finish
