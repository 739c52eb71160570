#!/usr/bin/env bash
# t1001 - suspend/resume/state through the driver path against the fake
# libcuda (tests/fake/fake_cuda.c): exit codes, messages, rollback, --tree,
# --map, --json. Real GPU behaviour is tested in tests/gpu.
. "$(dirname "$0")/lib.sh"

fake_cuda_env
export FAKE_CUDA_LOG=$TEST_TMP/calls.log

# usage and dispatch
run_gpusnap; expect "no command is a usage error that lists the commands" 2 "usage: gpusnap"
run_gpusnap suspend abc; expect "PID must be a number" 2 "'abc' is not a process ID"
# every usage error is one line naming what is wrong, and where the usage is
usage_error() { # usage_error TITLE TEXT ARGS...: exit 2, stderr exactly one line holding TEXT and the pointer to --help
  local title=$1 text=$2 cmd=$3
  shift 2
  run_gpusnap "$@"
  expect "$title" 2 "$text"
  check "$title: one line" [ "$(wc -l <"$ERR_TXT")" = 1 ]
  check "$title: points to --help" grep -qF "(see gpusnap $cmd --help)" "$ERR_TXT"
  check "$title: no usage printed" bash -c "! grep -q '^usage:' '$ERR_TXT' '$OUT_TXT'"
}
usage_error "suspend without PID" "gpusnap suspend: PID is required" suspend
usage_error "unknown option" "gpusnap suspend: unknown option '--bogus'" suspend --bogus 1
usage_error "unknown option after the PID names the command" "gpusnap suspend: unknown option '--bogus'" suspend 1 --bogus
usage_error "bad timeout" "option '--timeout' expects seconds" suspend --timeout soon 1
usage_error "two PIDs" "gpusnap suspend: unexpected argument '2'" suspend 1 2
usage_error "--keep-context with --driver" "exclude each other" suspend --keep-context --driver 1
usage_error "resume without PID" "gpusnap resume: PID is required" resume
usage_error "resume --image with --tree" "--image is for one process" resume --image /tmp --tree 1
usage_error "state with two PIDs" "gpusnap state: unexpected argument '2'" state 1 2
usage_error "state with an unknown option" "gpusnap state: unknown option '-x'" state -x 1
usage_error "dump without PID" "gpusnap dump: PID is required" dump -D /tmp/x
usage_error "dump without -D" "gpusnap dump: -D DIR is required" dump 1
usage_error "dump with both TCP modes" "exclude each other" dump --tcp-close --tcp-established -D /tmp/x 1
usage_error "restore without DIR" "gpusnap restore: -D DIR is required" restore
usage_error "restore with two DIRs" "gpusnap restore: unexpected argument" restore -D /tmp/a /tmp/b
usage_error "run without a command" "gpusnap run: CMD is required" run
usage_error "run with a bad size" "expects a size" run --reserve lots -- true
run_gpusnap frobnicate; expect "unknown command" 2 "'frobnicate' is not a gpusnap command (see gpusnap --help)"
check "unknown command: one line" [ "$(wc -l <"$ERR_TXT")" = 1 ]
# --help still prints the whole usage, whose synopsis names the command
for c in suspend resume state run dump restore inspect; do
  run_gpusnap "$c" --help; expect "$c --help prints its usage and succeeds" 0 "usage: gpusnap $c"
done
run_gpusnap suspend -h; expect "-h prints usage and succeeds" 0 "--timeout SECONDS"
run_gpusnap --version; expect "--version" 0 "gpusnap "

# processes that cannot be acted on
run_gpusnap suspend 2147483600; expect "no such process" 3 "no such process: 2147483600"
sleep 300 & plain=$!; TEST_PIDS+=("$plain")
run_gpusnap suspend "$plain"; expect "not a CUDA process" 4 "is not a CUDA process"
run_gpusnap state "$plain"; expect "state of a non-CUDA process" 4 "is not a CUDA process"
GPUSNAP_LIBCUDA=$TEST_TMP/nonexistent/libcuda.so.1 run_gpusnap suspend "$plain"
expect "no driver" 7 "no NVIDIA driver"
GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA_OLD run_gpusnap suspend "$plain"
expect "driver without checkpoint API" 8 "driver 570 or newer"

# the happy path
start_cuda_proc 0; p=$NEWPID
run_gpusnap state "$p"; expect "state running" 0 "running"
run_gpusnap suspend "$p"; expect "suspend" 0 "suspended $p"
check "driver state is checkpointed after suspend" [ "$(fake_state "$p")" = 2 ]
run_gpusnap state "$p"; expect "state suspended" 0 "suspended"
run_gpusnap suspend "$p"; expect "double suspend" 6 "is already suspended"
run_gpusnap resume "$p" --json; expect "resume --json" 0
check "resume JSON is valid and says ok" [ "$(json_get "$OUT_TXT" '["ok"]')" = True ]
check "resume JSON has restore time" json_get "$OUT_TXT" '["processes"][0]["times"]["restore_s"]'
check "driver state is running after resume" [ "$(fake_state "$p")" = 0 ]
run_gpusnap resume "$p"; expect "resume of a running process" 6 "is not suspended"
run_gpusnap suspend --json "$p"; expect "suspend --json" 0
check "suspend JSON names the process and states" [ "$(json_get "$OUT_TXT" '["processes"][0]["state_after"]')" = suspended ]
run_gpusnap state --json "$p"; expect "state --json" 0
check "state JSON" [ "$(json_get "$OUT_TXT" '["state"]')" = suspended ]
run_gpusnap resume "$p"; expect "resume again" 0

# stopped by a signal (a supervisor's SIGSTOP): the driver cannot reach it (on the real driver its
# calls hang for minutes); refused at once, nothing asked of the driver, state says so
kill -STOP "$p"
check "the process is stopped" wait_stopped "$p"
: >"$FAKE_CUDA_LOG"
run_gpusnap suspend --timeout 5 "$p"
expect "suspend of a stopped process is refused" 6 "process $p is stopped (SIGSTOP or SIGTSTP)"
check "... in one line" one_error
check "... without a call to the driver" test ! -s "$FAKE_CUDA_LOG"
run_gpusnap suspend --tree "$p"; expect "suspend --tree of it too" 6 "is stopped"
run_gpusnap state "$p"; expect "state of a stopped process answers" 0 "stopped"
check "... and says why" grep -q "once it continues (kill -CONT $p)" "$ERR_TXT"
check "the process was left as it was" [ "$(fake_state "$p")" = 0 ]
kill -CONT "$p"
run_gpusnap suspend "$p"; expect "once continued, suspend" 0
kill -STOP "$p"
check "the suspended process is stopped" wait_stopped "$p"
run_gpusnap resume "$p"; expect "resume of a suspended process stopped meanwhile is refused" 6 "is stopped"
kill -CONT "$p"
run_gpusnap resume "$p"; expect "once continued, resume" 0

# frozen by its cgroup (docker/podman pause): the same, where this machine lets the test freeze a
# cgroup of its own (cgroup v1's freezer, or v2's cgroup.freeze)
freezer=
if [ -w /sys/fs/cgroup/freezer/tasks ] && mkdir "/sys/fs/cgroup/freezer/gpusnap-t1001-$$" 2>/dev/null; then
  freezer=/sys/fs/cgroup/freezer/gpusnap-t1001-$$ freeze_file=freezer.state frozen=FROZEN thawed=THAWED
  back=/sys/fs/cgroup/freezer/tasks
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && mkdir "/sys/fs/cgroup/gpusnap-t1001-$$" 2>/dev/null; then
  freezer=/sys/fs/cgroup/gpusnap-t1001-$$ freeze_file=cgroup.freeze frozen=1 thawed=0
  back=/sys/fs/cgroup/cgroup.procs
fi
if [ -n "$freezer" ] && echo "$p" >"$freezer/cgroup.procs" 2>/dev/null; then
  echo "$frozen" >"$freezer/$freeze_file"
  for _ in $(seq 300); do grep -q "$frozen" "$freezer/$freeze_file" 2>/dev/null && break; sleep 0.1; done
  : >"$FAKE_CUDA_LOG"
  run_gpusnap suspend "$p"
  expect "suspend of a process in a frozen cgroup is refused" 6 "process $p is frozen (its cgroup /${freezer##*/} is: a paused container)"
  check "... without a call to the driver" test ! -s "$FAKE_CUDA_LOG"
  run_gpusnap state "$p"; expect "state of a frozen process answers" 0 "frozen"
  echo "$thawed" >"$freezer/$freeze_file"
  echo "$p" >"$back" 2>/dev/null
  rmdir "$freezer"
  run_gpusnap suspend "$p"; expect "once thawed, suspend" 0
  run_gpusnap resume "$p"; expect "resume" 0
else
  echo "# SKIP: no cgroup freezer this test may use here: a frozen process is not checked"
  [ -n "$freezer" ] && rmdir "$freezer"
fi

# lock timeout: the process is left running, nothing else happened to it
start_cuda_proc 0; p=$NEWPID
: >"$FAKE_CUDA_LOG"
FAKE_CUDA_LOCK_BUSY=1 run_gpusnap suspend --timeout 0.1 "$p"
expect "lock timeout" 9 "timed out"
check "timeout message says the process keeps running" grep -q "keeps running" "$ERR_TXT"
check "process still running after a lock timeout" [ "$(fake_state "$p")" = 0 ]
check "no checkpoint attempted after a lock timeout" bash -c "! grep -q checkpoint '$FAKE_CUDA_LOG'"

# --tree: a non-CUDA parent with two CUDA children, locked all before any checkpoint
bash -c 'sleep 300 & sleep 300 & wait' & parent=$!; TEST_PIDS+=("$parent")
for _ in $(seq 300); do [ "$(pgrep -P "$parent" | wc -l)" -ge 2 ] && break; sleep 0.1; done
kids=($(pgrep -P "$parent")); TEST_PIDS+=("${kids[@]}")
for k in "${kids[@]}"; do echo "0 0" >"$FAKE_CUDA_DIR/$k"; done
: >"$FAKE_CUDA_LOG"
run_gpusnap suspend --tree --json "$parent"; expect "suspend --tree" 0
check "both children suspended" [ "$(fake_state "${kids[0]}")$(fake_state "${kids[1]}")" = 22 ]
check "tree JSON lists two processes" [ "$(json_get "$OUT_TXT" '["processes"].__len__()')" = 2 ]
check "all locks come before any checkpoint" bash -c "awk '{print \$1}' '$FAKE_CUDA_LOG' | tr '\n' ' ' | grep -q '^lock lock checkpoint checkpoint'"
run_gpusnap resume --tree "$parent"; expect "resume --tree" 0
check "both children running" [ "$(fake_state "${kids[0]}")$(fake_state "${kids[1]}")" = 00 ]
run_gpusnap suspend "$parent"; expect "parent alone is not CUDA" 4 "is not a CUDA process"
check "... and the message points at --tree for the CUDA processes under it" \
  grep -qE "process (${kids[0]}|${kids[1]}) under it is one: --tree acts on every CUDA process under $parent" "$ERR_TXT"
check "... in one line" one_error

# --tree rollback: the second checkpoint fails, the first child is brought back to running
FAKE_CUDA_FAIL_CHECKPOINT=${kids[1]} run_gpusnap suspend --tree "$parent"
expect "failed checkpoint in a tree" 1 "checkpoint of process ${kids[1]} failed"
check "rollback left both children running" [ "$(fake_state "${kids[0]}")$(fake_state "${kids[1]}")" = 00 ]

# --map on two GPUs
export FAKE_CUDA_GPUS=2
start_cuda_proc 0; p=$NEWPID
run_gpusnap suspend "$p"; expect "suspend for map" 0
run_gpusnap resume --map 0=5 "$p"; expect "map to a missing GPU index" 10 "GPU index 5 does not exist"
run_gpusnap resume --map 0 "$p"; expect "map syntax" 10 "expected FROM=TO"
run_gpusnap resume --map 0=1 --map 1=1 "$p"; expect "two GPUs onto one" 10 "mapped onto"
check "process stays suspended after refused maps" [ "$(fake_state "$p")" = 2 ]
run_gpusnap resume --map 0=1 "$p"; expect "resume onto GPU 1" 0
check "process moved to GPU 1" grep -q "^0 1$" "$FAKE_CUDA_DIR/$p"

start_cuda_proc 0,1; p=$NEWPID
run_gpusnap suspend "$p"; expect "suspend two-GPU process" 0
FAKE_CUDA_REFUSE_REMAP=1 run_gpusnap resume --map 0=1 --map 1=0 "$p"; expect "a map the driver refuses" 10 "refused the GPU map"
check "still suspended after a refused map" [ "$(fake_state "$p")" = 2 ]
check "message says it stays suspended" grep -q "still suspended" "$ERR_TXT"
run_gpusnap resume --map 0=1 "$p"; expect "a partial map is completed (0=1 becomes 0=1, 1=0)" 0
check "GPUs swapped" grep -q "^0 1,0$" "$FAKE_CUDA_DIR/$p"

FAKE_CUDA_GPU1_NAME="Other GPU" run_gpusnap suspend "$p"; expect "suspend before mismatch" 0
FAKE_CUDA_GPU1_NAME="Other GPU" run_gpusnap resume --map 0=1 --map 1=0 "$p"
expect "map across GPU types" 12 "different GPU types"
run_gpusnap resume "$p"; expect "resume without map after mismatch" 0

# permission: another user may not act on our process (needs root to switch user)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  start_cuda_proc 0; p=$NEWPID
  chmod 755 "$TEST_TMP"
  RC=0; setpriv --reuid=65534 --regid=65534 --clear-groups env GPUSNAP_RUN_DIR=/tmp "$GPUSNAP_BIN" suspend "$p" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
  OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err
  expect "another user's process" 5 "permission denied"
else
  echo "SKIP: permission check needs root and setpriv"
fi

test_done
