#!/usr/bin/env bash
# t5020 - a zombie is gone: `gpusnap dump` killed (kill -9) in its CRIU step
# while the dumped process's parent does not reap it (fake libcuda,
# FAKE_CUDA_CRIU=1, the real CRIU 4). CRIU finishes the dump and kills the
# process, which stays a zombie (state Z) under its parent:
#  - `state PID` says it has ended, names the complete image the killed dump
#    kept at its temporary name and the `gpusnap restore -D` that brings it
#    back (exit 3), where it said "left suspended ... gpusnap resume";
#  - `resume PID` refuses the same way (exit 3, one line), where it reported
#    success on the zombie;
#  - suspend and dump of the zombie are refused as for a process that is gone;
#  - once the parent reaped it, `restore -D` of the kept image brings the
#    process back, counting on;
#  - suspend --tree and resume --tree leave a zombie of the tree alone.
# Both kill points: the fault point after CRIU (dump-after-criu=kill) and a
# kill -9 while criu runs.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu
command -v python3 >/dev/null || skip "python3 is needed for a parent that does not reap"

PARENT=""
cleanup_zombie() {
  [ -n "$PARENT" ] && kill -9 "$PARENT" 2>/dev/null
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_zombie EXIT

log=$TEST_TMP/counter.log
# start_parent MODE PIDFILE: a python process, PARENT, that never waits for its children: MODE child:
# one, the counter, in a session of its own (as CRIU wants); MODE tree: first one that exits at once
# (a zombie), then the counter, in the parent's session. PIDFILE holds their PIDs once they exist.
start_parent() {
  rm -f "$2"
  (exec python3 -c '
import os, sys, time
mode, counter, log, pidfile = sys.argv[1:5]
pids = []
if mode == "tree":
    z = os.fork()
    if z == 0:
        os._exit(0)
    pids.append(z)
c = os.fork()
if c == 0:
    if mode == "child":
        os.setsid()
    fd = os.open("/dev/null", os.O_RDWR)
    for i in (0, 1, 2):
        os.dup2(fd, i)
    os.closerange(3, 1024)
    os.execv(counter, [counter, log])
pids.append(c)
with open(pidfile + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(pidfile + ".tmp", pidfile)
os.closerange(0, 1024)
while True:
    time.sleep(3600)
' "$1" "$GPUSNAP_BUILD/tests/apps/cpu_counter" "$log" "$2" </dev/null >/dev/null 2>&1) &
  PARENT=$!
  disown
  local i
  for ((i = 0; i < 3000; i++)); do [ -s "$2" ] && break; sleep 0.01; done
}
# start_child: a counter (its own session, as CRIU wants) whose parent never waits for it: PID is the
# counter, PARENT the parent
start_child() {
  : >"$log"
  start_parent child "$TEST_TMP/child.pid"
  PID=$(cat "$TEST_TMP/child.pid")
  echo "0 0" >"$FAKE_CUDA_DIR/$PID"
  wait_lines "$log" 10
}
# zombie PID: /proc/PID/stat says Z within 10 s (CRIU killed it; its parent does not reap it)
zombie() {
  local i
  for ((i = 0; i < 1000; i++)); do
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.01
  done
  echo "    /proc/$1/stat: $(cat "/proc/$1/stat" 2>/dev/null)"
  return 1
}
# reap: the parent ends, init reaps the zombie
reap() { kill -9 "$PARENT"; PARENT=""; wait_gone "$PID" 10; }

# a criu that sleeps before dumping: a window while "CRIU runs"
slow=$TEST_TMP/slow-criu
cat >"$slow" <<EOF
#!/bin/sh
case "\$1" in dump) touch "$TEST_TMP/criu-started"; sleep 1.5;; esac
exec "$GPUSNAP_CRIU" "\$@"
EOF
chmod 755 "$slow"
criu_started() { local i; for ((i = 0; i < 500; i++)); do [ -e "$TEST_TMP/criu-started" ] && return 0; sleep 0.01; done; return 1; }

# the zombie's state, resume, suspend, dump and then the restore of the kept image; $1 names the
# case, $2 is what the kept image needs to verify and restore: nothing, or --allow-unverified-cpu
# where the dump was killed before CRIU's files were checksummed
zombie_checks() {
  local what=$1 allow=${2:-} kept v restore_cmd
  check "$what: the process is a zombie its parent did not reap" zombie "$PID"
  v=$(last_count "$log")
  kept=$(tmp_dirs "$img")
  check "$what: the complete image is at its temporary name ($kept)" test -n "$kept" -a -f "$kept/manifest.img"
  restore_cmd="gpusnap restore ${allow:+$allow }-D '$kept'"
  run_gpusnap state "$PID"
  expect "$what: state says the zombie has ended" 3 "process $PID has ended (a zombie its parent $PARENT has not reaped yet)"
  check "$what: ... names the kept image and the restore command" grep -qF "$restore_cmd" "$ERR_TXT"
  check "$what: ... never 'left suspended' nor 'gpusnap resume'" bash -c "! grep -q 'left suspended\|gpusnap resume' '$ERR_TXT'"
  check "$what: ... one line" one_error
  run_gpusnap resume "$PID"
  expect "$what: resume refuses the zombie (no process)" 3 "process $PID has ended"
  check "$what: ... naming the kept image and the restore command" grep -qF "$restore_cmd" "$ERR_TXT"
  check "$what: ... one line" one_error
  check "$what: ... and reports no success" test ! -s "$OUT_TXT"
  run_gpusnap suspend "$PID"; expect "$what: suspend of the zombie is refused" 3 "process $PID has ended"
  run_gpusnap dump -D "$TEST_TMP/img-again" "$PID"; expect "$what: dump of the zombie is refused" 3 "process $PID has ended"
  check "$what: ... nothing written" test ! -e "$TEST_TMP/img-again"
  # shellcheck disable=SC2086 # $allow is one option or none
  run_gpusnap inspect --verify $allow "$kept"; expect "$what: the kept image verifies" 0
  check "$what: the parent reaps it" reap
  # shellcheck disable=SC2086 # $allow is one option or none
  run_gpusnap restore $allow -D "$kept"; expect "$what: restore -D of the kept image" 0 "restored $PID"
  check "$what: the restored process counts on from $v" counts_on_from "$log" "$v"
  kill -9 "$PID"; wait_gone "$PID"
  rm -rf "$kept"
}

# ---- kill -9 at the fault point after CRIU: the record says the image is complete at its temporary name ----
start_child
img=$TEST_TMP/img-after-criu
GPUSNAP_FAULT=dump-after-criu=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after CRIU dumped the process (rc $RC)" [ "$RC" = 137 ]
zombie_checks "after CRIU"

# ---- kill -9 while CRIU runs: CRIU finishes without gpusnap ----
start_child
img=$TEST_TMP/img-in-criu
rm -f "$TEST_TMP/criu-started"
GPUSNAP_CRIU=$slow "$GPUSNAP_BIN" dump -D "$img" "$PID" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
check "CRIU started" criu_started
kill -9 "$BG"
bg_wait
check "kill -9 while CRIU runs (rc $BG_RC)" [ "$BG_RC" = 137 ]
zombie_checks "in CRIU" --allow-unverified-cpu

# ---- --tree leaves a zombie of the tree alone: a parent with an unreaped child and a live counter ----
: >"$log"
start_parent tree "$TEST_TMP/tree.pids"
read -r Z C <"$TEST_TMP/tree.pids"
echo "0 0" >"$FAKE_CUDA_DIR/$Z"
echo "0 0" >"$FAKE_CUDA_DIR/$C"
wait_lines "$log" 10
check "the tree's first child is a zombie" zombie "$Z"
run_gpusnap suspend --tree "$PARENT"; expect "suspend --tree of the parent" 0 "suspended $C"
check "... the live child is suspended" [ "$(fake_state "$C")" = 2 ]
check "... the zombie was left alone" [ "$(fake_state "$Z")" = 0 ]
check "... and is not named" bash -c "! grep -qw '$Z' '$OUT_TXT'"
run_gpusnap resume --tree "$PARENT"; expect "resume --tree of the parent" 0 "resumed $C"
check "... the counter runs again" grows "$log"
kill -9 "$C" "$PARENT"; PARENT=""; wait_gone "$C"

# ---- a live process is not taken for a zombie: its main thread ended, its other thread runs ----
# (/proc/PID/stat says Z for a main thread that called pthread_exit)
python3 - "$TEST_TMP/mt.pid" <<'EOF' &
import ctypes, os, sys, threading, time
def run():
    while True:
        time.sleep(0.05)
threading.Thread(target=run).start()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
ctypes.CDLL(None).pthread_exit(None)
EOF
MT=$!
disown
for ((i = 0; i < 500; i++)); do [ -s "$TEST_TMP/mt.pid" ] && zombie "$MT" >/dev/null && break; sleep 0.01; done
if [ "$(awk '{print $3}' "/proc/$MT/stat" 2>/dev/null)" = Z ]; then
  echo "0 0" >"$FAKE_CUDA_DIR/$MT"
  run_gpusnap state "$MT"
  check "a process whose main thread ended while another runs is no zombie to state (rc $RC)" \
    bash -c "! grep -q 'has ended' '$ERR_TXT'"
else
  fail "the main thread of $MT did not end: $(cat "/proc/$MT/stat" 2>/dev/null)"
fi
kill -9 "$MT" 2>/dev/null

test_done
