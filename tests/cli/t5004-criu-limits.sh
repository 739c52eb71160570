#!/usr/bin/env bash
# t5004-criu-limits - how gpusnap bounds and explains its criu runs, on the fake
# driver with CPU processes (as t5002):
#  - a CRIU older than 4.2 is refused on every kernel (4.1 cannot dump a socket
#    on Linux >= 6.16), with one line saying what to do (exit 15);
#  - every criu run has a time limit (GPUSNAP_CRIU_TIMEOUT): a hanging criu is
#    killed with its process group (exit 9) and the process runs on;
#  - a restore whose criu ran past its time, or that gpusnap was interrupted in
#    (SIGTERM), leaves no half-restored task at the image's PID;
#  - a FIFO in cpu/ hangs the real CRIU (the restored task blocks opening it): the
#    time limit ends it and the task is killed (through tests/apps/criu_driver,
#    the library alone);
#  - a restore CRIU refuses because a file the process writes without O_APPEND
#    grew after `dump --leave-running` says so and what to do (exit 15), leaves
#    no process, and restores once the file is cut back to its size at the dump;
#  - a failed criu run's message names a log that still exists (RUN/criu/logs);
#    GPUSNAP_FAULT=criu-run fails criu without running it and names no log.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
driver=$build/tests/apps/criu_driver

fake_cuda_env criu
real_criu=$GPUSNAP_CRIU

cleanup_all() {
  kill_test_procs cpu_counter
  for f in "$TEST_TMP"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  cleanup_test
}
trap cleanup_all EXIT

# named_log: the log path the last error names, "" if none
named_log() { sed -n 's/.*(log: \([^)]*\)).*/\1/p' "$ERR_TXT" | tail -n 1; }
log_exists() { local l; l=$(named_log); [ -n "$l" ] && [ -s "$l" ] || { echo "    named: '$l'"; return 1; }; }
names_no_log() { ! grep -q "log:" "$ERR_TXT"; }
# a task at PID that is not a zombie
runs() { [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
gone_or_zombie() { # up to 30 s
  local i
  for ((i = 0; i < 3000; i++)); do runs "$1" || return 0; sleep 0.01; done
  return 1
}

log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
img=$TEST_TMP/img
run_gpusnap dump --leave-running -D "$img" "$pid"; expect "a first image (dump --leave-running)" 0

# ---- CRIU too old ----
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "Version: 4.1.1"; exit 0; }\necho "Error (x.c:1): ran" >&2; exit 1\n' \
  >"$TEST_TMP/criu-4.1"
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "Version: 3.17.1"; exit 0; }\nexit 1\n' >"$TEST_TMP/criu-3.17"
chmod 755 "$TEST_TMP/criu-4.1" "$TEST_TMP/criu-3.17"
# one minimum on every kernel: 4.1 cannot dump a process holding a socket on Linux >= 6.16
GPUSNAP_CRIU=$TEST_TMP/criu-4.1 run_gpusnap dump -D "$TEST_TMP/x" "$pid"
expect "dump with CRIU 4.1.1 on Linux $(uname -r)" 15 "is version 4.1.1; gpusnap needs CRIU >= 4.2 (older ones cannot dump a process holding a network socket"
check "the refusal says what to do" grep -q "run scripts/get-criu.sh" "$ERR_TXT"
check "the refusal is one line" one_line
check "nothing written for it" [ ! -e "$TEST_TMP/x" ]
check "the process runs on" grows "$log"
GPUSNAP_CRIU=$TEST_TMP/criu-4.1 run_gpusnap restore -D "$img"
expect "restore with CRIU 4.1.1 on Linux $(uname -r)" 15 "CRIU >= 4.2"
GPUSNAP_CRIU=$TEST_TMP/criu-3.17 run_gpusnap dump -D "$TEST_TMP/x" "$pid"
expect "dump with CRIU 3.17.1" 15 "is version 3.17.1; gpusnap needs CRIU >= 4.2"
check "the process runs on after the refusals" grows "$log"

# ---- the time limit ----
fake_criu criu-hang 'sleep 60 & echo $! >"'"$TEST_TMP"'/hang-helper.pid"; exec sleep 60'
t0=$(date +%s)
GPUSNAP_CRIU=$TEST_TMP/criu-hang GPUSNAP_CRIU_TIMEOUT=1 run_gpusnap dump -D "$TEST_TMP/x" "$pid"
t1=$(date +%s)
expect "a hanging criu dump is stopped by GPUSNAP_CRIU_TIMEOUT" 9 "ran past 1 s (GPUSNAP_CRIU_TIMEOUT) and was killed"
check "it was stopped soon ($((t1 - t0)) s)" [ $((t1 - t0)) -le 10 ]
check "the helper in criu's process group went too" gone_or_zombie "$(cat "$TEST_TMP/hang-helper.pid")"
check "the process runs on" grows "$log"
check "its driver state is running again" [ "$(fake_state "$pid")" = 0 ]
check "no image left" [ ! -e "$TEST_TMP/x" ]
GPUSNAP_CRIU_TIMEOUT=soon run_gpusnap dump -D "$TEST_TMP/x" "$pid"
expect "a bad GPUSNAP_CRIU_TIMEOUT" 2 "GPUSNAP_CRIU_TIMEOUT='soon' is not a number of seconds"

# ---- a failed criu names a log that exists ----
fake_criu criu-fail 'log=; prev=; for a in "$@"; do [ "$prev" = --log-file ] && log=$a; prev=$a; done
echo "(00.01) Error (criu/sk-inet.c:1): injected: cannot dump socket" >"$log"; exit 1'
GPUSNAP_CRIU=$TEST_TMP/criu-fail run_gpusnap dump -D "$TEST_TMP/x" "$pid"
expect "a failing criu dump" 15 "injected: cannot dump socket"
check "the log it names exists after gpusnap is done" log_exists
check "that log is the failed run's" grep -q "injected: cannot dump socket" "$(named_log)"
check "it is kept in gpusnap's run directory" grep -q "^$GPUSNAP_RUN_DIR/criu/logs/dump-$pid-" <(named_log)
check "the process runs on" grows "$log"
GPUSNAP_FAULT=criu-run run_gpusnap dump -D "$TEST_TMP/x" "$pid"
expect "GPUSNAP_FAULT=criu-run: criu fails without running" 15 "criu failed without running"
check "... and no log is named" names_no_log
check "the process runs on" grows "$log"
# refused before criu runs: no log to name
run_gpusnap restore -D "$img"
expect "restore while the dumped process runs" 15 "pid $pid, which the image needs, is in use"
check "... names no log (criu did not run)" names_no_log

# ---- a restore that runs past its time leaves nothing at the image's PID ----
kill -9 "$pid"; wait_gone "$pid"
lines=$(wc -l <"$log")
# the real criu restores (the task is left stopped: --leave-stopped), then this criu hangs
fake_criu criu-slow '"'"$real_criu"'" "$@"; echo $$ >"'"$TEST_TMP"'/slow.pid"; exec sleep 60'
GPUSNAP_CRIU=$TEST_TMP/criu-slow GPUSNAP_CRIU_TIMEOUT=4 run_gpusnap restore -D "$img"
expect "a restore whose criu runs past GPUSNAP_CRIU_TIMEOUT" 9 "ran past 4 s"
check "criu had restored the task at $pid" [ -s "$TEST_TMP/slow.pid" ]
check "the half-restored task at $pid is gone" gone_or_zombie "$pid"
check "it never ran" [ "$(wc -l <"$log")" = "$lines" ]
check "the restore log it names exists" log_exists
wait_gone "$pid"
run_gpusnap restore -D "$img"; expect "the image restores after that" 0 "restored $pid"
check "it runs" grows "$log"
kill -9 "$pid"; wait_gone "$pid"

# ---- gpusnap restore interrupted while criu runs ----
rm -f "$TEST_TMP/slow.pid"
lines=$(wc -l <"$log")
GPUSNAP_CRIU=$TEST_TMP/criu-slow GPUSNAP_CRIU_TIMEOUT=60 "$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/out" 2>"$TEST_TMP/err" &
gp=$!
for _ in $(seq 3000); do [ -s "$TEST_TMP/slow.pid" ] && break; sleep 0.01; done
check "criu restored the task at $pid and still runs" runs "$pid"
kill -TERM "$gp"; rc=0; wait "$gp" || rc=$?
check "gpusnap restore ended by SIGTERM (rc $rc)" [ "$rc" = 143 ]
check "the half-restored task at $pid went with it" gone_or_zombie "$pid"
check "criu went with it" gone_or_zombie "$(cat "$TEST_TMP/slow.pid")"
check "the task never ran" [ "$(wc -l <"$log")" = "$lines" ]
wait_gone "$pid"

# ---- a file the process writes without O_APPEND grew after the dump ----
# (a log opened with `>`: CRIU checks the size of every open file but a write-only O_APPEND one)
tlog=$TEST_TMP/trunc.log
CPU_COUNTER_NO_APPEND=1 start_counter "$tlog"; pid=$NEWPID
timg=$TEST_TMP/timg
run_gpusnap dump --leave-running -D "$timg" "$pid"; expect "dump --leave-running of a process writing a log opened with >" 0
check "it writes on after the dump" grows "$tlog"
kill -9 "$pid"; wait_gone "$pid"
run_gpusnap restore -D "$timg"
expect "restore after its log grew" 15 "trunc.log has bad size"
check "... says what to do" grep -q "truncate it back to the expected size (keep a copy), or have the app open its logs for appending" "$ERR_TXT"
check "... in one line" one_line
check "... naming the image's path, not a descriptor's" bash -c "! grep -q /proc/self/fd '$ERR_TXT'"
check "... and leaves no process at $pid" gone_or_zombie "$pid"
want=$(sed -n 's/.*has bad size [0-9]* (expect \([0-9]*\)).*/\1/p' "$ERR_TXT")
check "the message gives the size at the dump ($want)" [ -n "$want" ]
truncate -s "${want:-0}" "$tlog"
run_gpusnap restore -D "$timg"; expect "with the log cut back to that size, it restores" 0 "restored $pid"
check "it runs" grows "$tlog"
kill -9 "$pid"; wait_gone "$pid"

# ---- a FIFO in the CRIU images hangs the real CRIU: the time limit ends it ----
start_counter "$log"; pid=$NEWPID
cimg=$TEST_TMP/cimg
"$driver" dump "$pid" "$cimg" 2>"$TEST_TMP/err"
check "criu_driver dump" [ -s "$cimg/inventory.img" ]
wait_gone "$pid"
pages=$(cd "$cimg" && ls pages-*.img | head -n 1)
mv "$cimg/$pages" "$TEST_TMP/$pages"
mkfifo -m 600 "$cimg/$pages"
t0=$(date +%s)
RC=0; GPUSNAP_CRIU_TIMEOUT=3 "$driver" restore "$cimg" "" "$pid" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
t1=$(date +%s)
OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err
expect "a FIFO in the images: the restore is stopped by the time limit" 9 "ran past 3 s"
check "it was stopped soon ($((t1 - t0)) s)" [ $((t1 - t0)) -le 15 ]
check "the task criu left at $pid (blocked on the FIFO) is gone" gone_or_zombie "$pid"
check "the restore log it names exists" log_exists
wait_gone "$pid"
rm "$cimg/$pages"; mv "$TEST_TMP/$pages" "$cimg/$pages"
rpid=$("$driver" restore "$cimg" 2>"$TEST_TMP/err")
check "with the FIFO replaced by the pages, the images restore" [ "$rpid" = "$pid" ]
check "it runs" grows "$log"
kill -9 "$pid"

test_done
