#!/usr/bin/env bash
# t86-interrupted.sh - dump and suspend interrupted on the real driver: an
# 8 GiB pattern under the agent (`gpusnap run`) and a 2 GiB one on the driver
# path, with the fault table (GPUSNAP_FAULT) stopping gpusnap at a step:
#  - `state` while the agent streams a dump answers at once, naming the dump
#    (it does not ask the busy agent), and a resume meanwhile is refused (6);
#  - SIGTERM after the driver's checkpoint undoes the dump: exit 143, the
#    data verifies, its VRAM is back;
#  - kill -9 after the agent wrote the image: the process stays suspended,
#    `state` says by whom, a plain `gpusnap resume` takes the data from the
#    image the dump was writing; the data verifies;
#  - SIGTERM after CRIU dumped the process: the dump is finished, the image
#    restores and verifies;
#  - driver path: kill -9 after the driver's checkpoint, `resume` brings it
#    back; SIGTERM in the middle of a suspend undoes it.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t86-interrupted
export GS_APP_STDERR=null
require_criu

# ---- agent path ----
app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 85 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192

# state and resume while the agent streams 8 GiB into the image
img=$GS_WORK/img-busy
"$GPUSNAP" dump --leave-running -D "$img" "$pid" >"$GS_WORK/bg.out" 2>"$GS_WORK/bg.err" &
bg=$!
sleep 0.5
t0=$EPOCHREALTIME
gs_run state "$pid"
took=$(gs_elapsed "$t0")
if pid_alive "$bg"; then
  expect_rc 0 "state while a dump is at work"
  check "state answered at once (${took} s)" awk -v t="$took" 'BEGIN { exit !(t < 2) }'
  check "state names the dump at work" grep -q "a gpusnap dump (pid $bg) is working on process $pid" <<<"$GS_ERR"
  gs_run resume "$pid"
  if pid_alive "$bg"; then
    expect_rc 6 "resume while the dump is at work"
  fi
else
  skip "the dump ended before state was asked: no window to check (took ${took} s)"
fi
rc=0
wait "$bg" || rc=$?
check_eq "the dump at work itself succeeded" "$rc" 0
app_verify p "8 GiB after dump --leave-running" || finish

GPUSNAP_FAULT=dump-after-driver=term gs_run dump -D "$GS_WORK/img-term" "$pid"
expect_rc 143 "SIGTERM after the driver's checkpoint ends gpusnap by the signal"
check "it says the dump was undone" grep -q "interrupted by SIGTERM: undone, process $pid runs on" <<<"$GS_ERR"
expect_state "$pid" running "state after the undone dump"
expect_vram_at_least p "$pid" 8192
app_verify p "8 GiB after the undone dump" || finish

img=$GS_WORK/img-kill
GPUSNAP_FAULT=dump-after-agent=kill gs_run dump -D "$img" "$pid"
expect_rc 137 "kill -9 after the agent wrote the image"
expect_state "$pid" suspended "state after the killed dump"
check "state says who left it suspended" grep -q "process $pid was left suspended by a gpusnap dump" <<<"$GS_ERR"
gs_run resume "$pid"
expect_rc 0 "a plain resume after the killed dump"
check "resume took the data from the dump's image" grep -q "taken from '$GS_WORK/.img-kill.tmp-" <<<"$GS_ERR"
expect_vram_at_least p "$pid" 8192
app_verify p "8 GiB after the killed dump" || finish
rm -rf "$GS_WORK"/.img-kill.tmp-*

img=$GS_WORK/img-late
GPUSNAP_FAULT=dump-after-criu=term gs_run dump -D "$img" "$pid"
expect_rc 0 "SIGTERM after CRIU: the dump is finished"
check "it says the signal came too late" grep -q "too late to undo; the dump was finished" <<<"$GS_ERR"
check "the process is gone" wait_pid_gone "$pid"
restore_checked "$img" "$pid" || finish
app_verify p "8 GiB restored from the finished dump" || finish
app_quit p

# ---- driver path ----
app_start d 180 "$GS_APPS/pattern" --size 2G --alloc-size 512M --seed 86 || finish
pid=${APP_PID[d]}
GPUSNAP_FAULT=dump-after-driver=kill gs_run dump -D "$GS_WORK/img-d" "$pid"
expect_rc 137 "driver path: kill -9 after the driver's checkpoint"
expect_state "$pid" suspended "driver path: state after the killed dump"
gs_run resume "$pid"
expect_rc 0 "driver path: resume after the killed dump"
app_verify d "2 GiB after the killed dump" || finish
GPUSNAP_FAULT=suspend-after-driver=term gs_run suspend "$pid"
expect_rc 143 "driver path: SIGTERM after the driver's checkpoint undoes the suspend"
expect_state "$pid" running "driver path: state after the undone suspend"
app_verify d "2 GiB after the undone suspend" || finish
app_quit d
finish
