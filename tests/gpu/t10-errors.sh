#!/usr/bin/env bash
# t10-errors.sh - gpusnap's error exit codes on a real driver: a non-CUDA process
# (4), a pid that does not exist (3), usage errors (2), suspend of a suspended
# process and resume of a running one (6), a suspend of a process stopped by
# SIGSTOP or in a frozen cgroup (6, at once); the CUDA process stays usable
# throughout.
. "$(dirname "$0")/lib.sh"
gs_test_init t10-errors

# A process that never touched CUDA.
sleep 600 &
sleeper=$!
GS_EXTRA_PIDS+=("$sleeper")
gs_track_pid "$sleeper"
gs_run state "$sleeper"
expect_rc 4 "state of a non-CUDA process (sleep)"
gs_run suspend "$sleeper"
expect_rc 4 "suspend of a non-CUDA process (sleep)"
gs_run suspend "$sleeper" --json
expect_rc 4 "suspend --json of a non-CUDA process (sleep)"
check "sleep still runs after the refused suspend" pid_alive "$sleeper"
gs_kill_pid "$sleeper"

# A pid that existed a moment ago and is gone now.
sleep 0 &
gone=$!
wait "$gone"
if [ -e "/proc/$gone" ]; then
  skip "pid $gone was reused at once; cannot test a missing pid"
else
  gs_run suspend "$gone"
  expect_rc 3 "suspend of a pid that does not exist ($gone)"
  gs_run resume "$gone"
  expect_rc 3 "resume of a pid that does not exist ($gone)"
  gs_run state "$gone"
  expect_rc 3 "state of a pid that does not exist ($gone)"
fi

# Usage errors.
gs_run suspend
expect_rc 2 "suspend without a pid"
gs_run suspend not-a-pid
expect_rc 2 "suspend of 'not-a-pid'"

# Wrong states on a CUDA process.
app_start p 120 "$GS_APPS/pattern" --size 256M --seed 10 || finish
pid=${APP_PID[p]}
expect_state "$pid" running "state of a fresh CUDA process"
gs_run resume "$pid"
expect_rc 6 "resume of a running process"
suspend_checked p 256 || finish
gs_run suspend "$pid"
expect_rc 6 "second suspend of a suspended process"
expect_state "$pid" suspended "state after the refused second suspend"
resume_checked p || finish
gs_run resume "$pid"
expect_rc 6 "resume of a process already resumed"
expect_state "$pid" running "state after the refused resume"
app_verify p "256 MiB pattern after the refused operations"
# Stopped by a signal (a supervisor's SIGSTOP): the driver's calls on it would not return for
# minutes (a lock with a 5 s timeout: killed after 125 s); refused at once, state says so.
kill -STOP "$pid"
gs_run suspend "$pid" --timeout 5
expect_rc 6 "suspend of a process stopped by SIGSTOP"
check "... at once (${GS_SECS} s)" awk -v s="$GS_SECS" 'BEGIN { exit !(s < 3) }'
check "... naming the cause" grep -q 'is stopped (SIGSTOP or SIGTSTP)' <<<"$GS_ERR"
gs_run state "$pid"
expect_rc 0 "state of the stopped process"
check_eq "state says stopped" "$GS_OUT" stopped
kill -CONT "$pid"
expect_state "$pid" running "state once it continues"
app_verify p "256 MiB pattern after the refusal"
# Frozen by its cgroup (docker/podman pause), where a cgroup of the test's own can be frozen.
cg=
if [ -f /sys/fs/cgroup/cgroup.controllers ] && mkdir "/sys/fs/cgroup/gpusnap-t10-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/gpusnap-t10-$$ freeze_file=cgroup.freeze frozen=1 thawed=0 back=/sys/fs/cgroup/cgroup.procs
elif [ -w /sys/fs/cgroup/freezer/tasks ] && mkdir "/sys/fs/cgroup/freezer/gpusnap-t10-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/freezer/gpusnap-t10-$$ freeze_file=freezer.state frozen=FROZEN thawed=THAWED
  back=/sys/fs/cgroup/freezer/tasks
fi
if [ -n "$cg" ] && echo "$pid" >"$cg/cgroup.procs" 2>/dev/null; then
  echo "$frozen" >"$cg/$freeze_file"
  sleep 0.5
  gs_run suspend "$pid" --timeout 5
  expect_rc 6 "suspend of a process in a frozen cgroup"
  check "... at once (${GS_SECS} s), naming the cause" grep -q "is frozen (its cgroup" <<<"$GS_ERR"
  gs_run state "$pid"
  check_eq "state says frozen" "$GS_OUT" frozen
  echo "$thawed" >"$cg/$freeze_file"
  echo "$pid" >"$back" 2>/dev/null
  rmdir "$cg" 2>/dev/null
  expect_state "$pid" running "state once thawed"
  app_verify p "256 MiB pattern after the frozen refusal"
else
  [ -n "$cg" ] && rmdir "$cg" 2>/dev/null
  skip "no cgroup freezer the test may use here: a frozen process is not checked"
fi
app_quit p
finish
