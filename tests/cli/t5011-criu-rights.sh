#!/usr/bin/env bash
# t5011 - dump, dump --tree and restore refuse at once where criu cannot work,
# before anything of the process is touched: as another user (criu 4.2 refuses
# to run as non-root without --unprivileged, which gpusnap does not pass, and
# needs CAP_CHECKPOINT_RESTORE), and as root whose children would lack
# CAP_CHECKPOINT_RESTORE and CAP_SYS_ADMIN (a limited container). Exit 5, one
# line naming what is missing and what to do; the fake driver was never asked
# to lock or checkpoint, the process runs on, nothing is written.
# Needs root (to switch users), setpriv and a usable CRIU.
. "$(dirname "$0")/lib.sh"
command -v setpriv >/dev/null || skip "needs setpriv"
fake_cuda_env criu
export FAKE_CUDA_LOG=$TEST_TMP/fake.log
: >"$FAKE_CUDA_LOG"
nobody=65534
# nobody reaches its own folders below TEST_TMP, and the fake driver's state and log
chmod 711 "$TEST_TMP"
chmod 777 "$FAKE_CUDA_DIR" && chmod 666 "$FAKE_CUDA_LOG"
home=$TEST_TMP/nobody
mkdir -p "$home/run" && chown -R "$nobody:$nobody" "$home" && chmod 700 "$home" "$home/run"
as_nobody() {
  OUT_TXT=$TEST_TMP/out ERR_TXT=$TEST_TMP/err RC=0
  setpriv --reuid=$nobody --regid=$nobody --clear-groups env GPUSNAP_RUN_DIR="$home/run" "$GPUSNAP_BIN" "$@" \
    >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
}
# untouched PID: the fake driver saw no call for PID (no lock, no checkpoint), its state is running, PID runs
untouched() {
  if ! grep -q " $1 " "$FAKE_CUDA_LOG" && [ "$(fake_state "$1")" = 0 ] && alive "$1"; then return 0; fi
  echo "    fake log: $(cat "$FAKE_CUDA_LOG"); state $(fake_state "$1")"
  return 1
}

no_process() { ! kill -0 "$1" 2>/dev/null; }

# ---- another user: its own CUDA process ----
setpriv --reuid=$nobody --regid=$nobody --clear-groups sleep 300 &
p=$!; TEST_PIDS+=("$p")
echo "0 0" >"$FAKE_CUDA_DIR/$p" && chmod 666 "$FAKE_CUDA_DIR/$p"
as_nobody dump -D "$home/img" "$p"
expect "dump as another user: refused, permission" 5 "criu refuses to run as user $nobody"
check "the message says what to do" grep -q "run gpusnap as root (sudo)" "$ERR_TXT"
check "the refusal is one line" one_line
check "the process was never locked or checkpointed, and runs" untouched "$p"
check "no image was written" [ ! -e "$home/img" ]
check "no temporary image was made" [ -z "$(tmp_dirs "$home/img")" ]
as_nobody dump --tree -D "$home/img" "$p"
expect "dump --tree as another user: refused" 5 "criu refuses to run as user $nobody"
check "dump --tree: untouched" untouched "$p"
as_nobody dump --leave-running -D "$home/img" "$p"
expect "dump --leave-running as another user: refused" 5 "criu refuses to run as user $nobody"
check "dump --leave-running: untouched" untouched "$p"

# ---- root whose children would lack CRIU's capabilities ----
start_cuda_proc; q=$NEWPID
RC=0
setpriv --bounding-set -sys_admin,-checkpoint_restore --inh-caps -all "$GPUSNAP_BIN" dump -D "$TEST_TMP/rimg" "$q" \
  >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
expect "dump as root without CRIU's capabilities: refused" 5 "criu would run without CAP_CHECKPOINT_RESTORE and CAP_SYS_ADMIN"
check "it names how to get them" grep -q "cap-add CHECKPOINT_RESTORE" "$ERR_TXT"
check "root without the capabilities: untouched" untouched "$q"
check "root without the capabilities: nothing written" [ ! -e "$TEST_TMP/rimg" ]

# ---- restore: an image the other user owns ----
run_gpusnap dump -D "$TEST_TMP/rimg" "$q"; expect "dump as root (an image for the restores below)" 0
wait_gone "$q"
: >"$FAKE_CUDA_LOG"
cp -a "$TEST_TMP/rimg" "$home/img" && chown -R "$nobody:$nobody" "$home/img"
as_nobody restore -D "$home/img"
expect "restore as another user: refused" 5 "criu refuses to run as user $nobody"
check "restore refusal is one line" one_line
check "restore: the driver was not asked" [ ! -s "$FAKE_CUDA_LOG" ]
check "restore: no process was started" no_process "$q"
RC=0
setpriv --bounding-set -sys_admin,-checkpoint_restore --inh-caps -all "$GPUSNAP_BIN" restore -D "$TEST_TMP/rimg" \
  >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
expect "restore as root without CRIU's capabilities: refused" 5 "criu would run without CAP_CHECKPOINT_RESTORE"
check "restore without the capabilities: the driver was not asked" [ ! -s "$FAKE_CUDA_LOG" ]
check "restore without the capabilities: no process was started" no_process "$q"
run_gpusnap restore -D "$TEST_TMP/rimg"; expect "the same restore as root with its capabilities works" 0
kill -9 "$q" 2>/dev/null

test_done
