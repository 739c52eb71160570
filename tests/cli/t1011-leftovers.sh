#!/usr/bin/env bash
# t1011 - what killed commands leave in the runtime directory is removed by the
# next command of the same kind, and only what belongs to processes that are
# gone (fake libcuda, real CRIU for the restore):
#  - a restore killed by kill -9 leaves its work folder (restore-PID-START-*);
#    the next restore removes it, and keeps the folder of a gpusnap that still
#    runs, a folder of another form, and what a link inside points to;
#  - op-PID-START.* records and lock files of operations on processes that are
#    gone go at the next operation, unless the record still has something to
#    tell (an image it names is there); a live process's record stays; a link
#    is never followed;
#  - suspended-PID records of processes that are gone (or whose PID now names
#    another process: the start time differs) go at the next suspend; a live
#    suspended process's record stays.
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu
run=$GPUSNAP_RUN_DIR
[ -d "$run" ] || mkdir -m 700 "$run"
# start_of PID: the process's start time (field 22 of /proc/PID/stat), as gpusnap keys its records
start_of() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $20}'; }
# a PID no process has: a child that ended
dead_pid() { sh -c 'exit 0' & local p=$!; wait "$p"; echo "$p"; }

log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
img=$TEST_TMP/img
run_gpusnap dump -D "$img" "$pid"; expect "dump" 0
wait_gone "$pid"

# ---- a restore killed by kill -9 leaves its work folder ----
bg_gpusnap restore-after-criu=kill restore -D "$img"
bg_wait
check "the restore was killed (rc $BG_RC)" test "$BG_RC" = 137
killed=$(find "$run" -maxdepth 1 -name "restore-$BG-*" -type d)
check "it left its work folder ($killed)" test -n "$killed" -a -d "$killed"
# a gpusnap that runs (this test's shell stands for one): its folder is at work
live_dir=$run/restore-$$-$(start_of $$)-abcdef
mkdir -m 700 "$live_dir"
# a folder of a gone gpusnap holding a link to a file outside: the link goes, the file stays
gone=$(dead_pid)
outside=$TEST_TMP/outside
echo keep >"$outside"
linked=$run/restore-$gone-12345-ghijkl
mkdir -m 700 "$linked"
ln -s "$outside" "$linked/restore.log"
# a link named like a folder of a gone gpusnap, to a folder outside: neither it nor what it names is touched
mkdir -p "$TEST_TMP/elsewhere" && echo keep >"$TEST_TMP/elsewhere/f"
ln -s "$TEST_TMP/elsewhere" "$run/restore-$gone-12345-mnopqr"
# an older name without its gpusnap's PID: not known as anyone's, left alone
mkdir -m 700 "$run/restore-stuvwx"

run_gpusnap restore -D "$img"; expect "the next restore" 0
check "the killed restore's work folder is gone" test ! -e "$killed"
check "the gone gpusnap's folder is gone" test ! -e "$linked"
check "... and what its link pointed to is not" grep -q keep "$outside"
check "a running gpusnap's folder stays" test -d "$live_dir"
check "a link named like a folder stays" test -L "$run/restore-$gone-12345-mnopqr"
check "... and what it names is untouched" grep -q keep "$TEST_TMP/elsewhere/f"
check "a folder of another form stays" test -d "$run/restore-stuvwx"
check "no work folder of this restore is left" \
  test -z "$(find "$run" -maxdepth 1 -name 'restore-*' ! -name "restore-$$-*" ! -name "restore-$gone-12345-mnopqr" ! -name restore-stuvwx)"
kill -9 "$pid" 2>/dev/null; wait_gone "$pid"

# ---- op records ----
rec() { # rec NAME HOLDER HOLDER_START [gone SENTENCE] [image PATH]: writes a record as gpusnap does
  local f=$run/$1
  printf 'action dump\nholder %s %s\nsince 1.000\nstep criu\n' "$2" "$3" >"$f"
  [ -z "${4:-}" ] || printf 'gone %s\n' "$4" >>"$f"
  [ -z "${5:-}" ] || printf 'image %s\n' "$5" >>"$f"
}
g1=$(dead_pid); g2=$(dead_pid); g3=$(dead_pid)
rec "op-$g1-777.rec" "$g2" 5                               # gone, its holder dead, nothing to tell
: >"$run/op-$g1-777.lock"
: >"$run/op-$g1-777.rec.tmp-$g3"                           # a killed writer's half record
mkdir -p "$TEST_TMP/kept-image"
rec "op-$g2-888.rec" "$g3" 5 "its image is complete under X" "$TEST_TMP/kept-image" # still tells something
rec "op-$g3-999.rec" "$g1" 5 "its image is complete under Y" "$TEST_TMP/no-such-image" # names an image that is gone
sleep 300 &
live=$!
TEST_PIDS+=("$live")
rec "op-$live-$(start_of "$live").rec" "$g1" 5             # a live process's record of a killed operation
echo "0 0" >"$FAKE_CUDA_DIR/$live"
# a link named like a gone process's record, to a file outside
echo keep >"$TEST_TMP/outside-rec"
ln -s "$TEST_TMP/outside-rec" "$run/op-$g3-1000.rec"

start_cuda_proc; other=$NEWPID
# ---- suspended records ----
printf '12345\n' >"$run/suspended-$g1"                     # gone
printf '%s\n' "$(start_of "$live")" >"$run/suspended-$live"  # a live process suspended: stays
printf '1\n' >"$run/suspended-$$"                          # the PID names another process now
printf '1\n' >"$run/suspended-$g2.tmp"                     # a killed writer's
run_gpusnap suspend "$other"; expect "the next operation (a suspend)" 0
check "a gone process's record with nothing to tell is gone" test ! -e "$run/op-$g1-777.rec"
check "... and its lock file" test ! -e "$run/op-$g1-777.lock"
check "... and a half-written record" test ! -e "$run/op-$g1-777.rec.tmp-$g3"
check "a record whose image is still there stays" test -f "$run/op-$g2-888.rec"
check "a record whose image is gone goes" test ! -e "$run/op-$g3-999.rec"
check "a live process's record stays" test -f "$run/op-$live-$(start_of "$live").rec"
check "what a link named like a record points to is untouched" grep -q keep "$TEST_TMP/outside-rec"
check "the suspend's own record went with it" test -z "$(find "$run" -maxdepth 1 -name "op-$other-*")"
check "a gone process's suspended record is gone" test ! -e "$run/suspended-$g1"
check "a reused PID's suspended record is gone" test ! -e "$run/suspended-$$"
check "a killed writer's suspended .tmp is gone" test ! -e "$run/suspended-$g2.tmp"
check "a live suspended process's record stays" test -f "$run/suspended-$live"
check "the new suspend's record is there" test -f "$run/suspended-$other"
run_gpusnap resume "$other"; expect "resume" 0
test_done
