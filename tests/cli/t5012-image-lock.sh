#!/usr/bin/env bash
# t5012 - a restore holds its image: restore and inspect --verify hold the
# image directory for reading (a shared flock on DIR), and a dump that would
# replace DIR takes it exclusively before the exchange. With the fake driver
# and the real CRIU (gated by a wrapper that waits for a file, so each window
# is a condition, not a time):
#  - a dump --replace of DIR while a restore (or an inspect --verify) reads it
#    refuses at once, exit 6, naming the reader; its process is never locked;
#  - a restore that began after the dump's claim: the dump's publish waits for
#    it, says so in one line, and publishes once it ended; the restore works
#    from the image it opened (no "Unexpected EOF" from CRIU);
#  - the reverse: a restore of DIR while its dump publishes waits a few
#    seconds, then refuses, exit 6, naming the dump; once the dump has ended
#    it restores the new image.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu
export FAKE_CUDA_LOG=$TEST_TMP/fake.log
: >"$FAKE_CUDA_LOG"
cleanup_counters() {
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_counters EXIT

# a criu that waits, once it is asked to dump or restore, for go-dump or go-restore
gate=$TEST_TMP/gate-criu
cat >"$gate" <<EOF
#!/bin/sh
case "\$1" in dump|restore) touch "$TEST_TMP/started-\$1"; while [ ! -e "$TEST_TMP/go-\$1" ]; do sleep 0.02; done;; esac
exec "$GPUSNAP_CRIU" "\$@"
EOF
chmod 755 "$gate"
ungate() { rm -f "$TEST_TMP"/started-* "$TEST_TMP"/go-*; }
wait_file() { local i; for ((i = 0; i < 2000; i++)); do [ -e "$1" ] && return 0; sleep 0.01; done; return 1; }
wait_text() { local i; for ((i = 0; i < 2000; i++)); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; echo "    $1: $(cat "$1")"; return 1; }
image_pid() { "$GPUSNAP_BIN" inspect --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["image"]["process"]["pid"])'; }
# lacks FILE TEXT: FILE has no line with TEXT
lacks() { ! grep -qF -- "$2" "$1" || { echo "    $1: $(grep -F -- "$2" "$1")"; return 1; }; }
# never_locked PID: the fake driver saw no call for PID, PID runs
never_locked() { ! grep -q " $1 " "$FAKE_CUDA_LOG" && [ "$(fake_state "$1")" = 0 ] && alive "$1"; }

img=$TEST_TMP/img
start_counter "$TEST_TMP/c1.log"; p1=$NEWPID
run_gpusnap dump -D "$img" "$p1"; expect "an image of process 1" 0
wait_gone "$p1"

# ---- a restore reads DIR: a dump --replace refuses before it touches its process ----
ungate
GPUSNAP_CRIU=$gate "$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/r.out" 2>"$TEST_TMP/r.err" &
R=$!
check "the restore reached CRIU, holding the image" wait_file "$TEST_TMP/started-restore"
start_counter "$TEST_TMP/c2.log"; p2=$NEWPID
before=$(sums "$img")
: >"$FAKE_CUDA_LOG"
run_gpusnap dump --replace -D "$img" "$p2"
expect "dump --replace while a restore reads DIR: refused" 6 "image '$img' is being read by gpusnap restore (pid $R); not replacing it now"
check "the refusal is one line" one_line
check "its process was never locked or checkpointed, and runs" never_locked "$p2"
check "the image is unchanged" [ "$(sums "$img")" = "$before" ]
touch "$TEST_TMP/go-restore"
RRC=0; wait "$R" || RRC=$?
check "the restore succeeded (rc $RRC)" [ "$RRC" = 0 ]
check "it restored process 1" grep -q "restored $p1" "$TEST_TMP/r.out"
check "the restored process counts on" grows "$TEST_TMP/c1.log"
kill -9 "$p1"; wait_gone "$p1"

# ---- an inspect --verify reads DIR: the same ----
bg_gpusnap image-read=hold:60 inspect --verify "$img"
check "inspect --verify is reading the image" at_fault image-read 20
run_gpusnap dump --replace -D "$img" "$p2"
expect "dump --replace while inspect --verify reads DIR: refused" 6 "image '$img' is being read by gpusnap inspect (pid $BG)"
check "its process was never locked" never_locked "$p2"
kill -9 "$BG"; bg_wait

# ---- a restore that began after the dump's claim: the publish waits for it ----
ungate
GPUSNAP_CRIU=$gate "$GPUSNAP_BIN" dump --replace -D "$img" "$p2" >"$TEST_TMP/d.out" 2>"$TEST_TMP/d.err" &
D=$!
check "the dump reached CRIU (DIR claimed)" wait_file "$TEST_TMP/started-dump"
GPUSNAP_CRIU=$gate "$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/r.out" 2>"$TEST_TMP/r.err" &
R=$!
check "the restore reached CRIU, holding the image" wait_file "$TEST_TMP/started-restore"
touch "$TEST_TMP/go-dump"
check "the dump's publish waits for the restore, saying so" \
  wait_text "$TEST_TMP/d.err" "'$img' is being read by gpusnap restore (pid $R): replacing it once that has finished"
check "DIR still holds the image the restore reads" [ "$(image_pid "$img")" = "$p1" ]
touch "$TEST_TMP/go-restore"
RRC=0; wait "$R" || RRC=$?
DRC=0; wait "$D" || DRC=$?
check "the restore succeeded (rc $RRC)" [ "$RRC" = 0 ]
check "it restored process 1" grep -q "restored $p1" "$TEST_TMP/r.out"
check "CRIU read the files it was given (no 'Unexpected EOF')" lacks "$TEST_TMP/r.err" "Unexpected EOF"
check "the dump succeeded after it (rc $DRC)" [ "$DRC" = 0 ]
check "it dumped process 2" grep -q "dumped $p2" "$TEST_TMP/d.out"
check "the dump said so in one line" [ "$(grep -c "is being read by" "$TEST_TMP/d.err")" = 1 ]
check "DIR holds the new image" [ "$(image_pid "$img")" = "$p2" ]
check "the restored process counts on" grows "$TEST_TMP/c1.log"
kill -9 "$p1"; wait_gone "$p1"; wait_gone "$p2"

# ---- the reverse: a restore of DIR while its dump publishes ----
start_counter "$TEST_TMP/c3.log"; p3=$NEWPID
: >"$FAKE_CUDA_LOG"
bg_gpusnap image-publish@2=hold:10 dump --replace -D "$img" "$p3"
check "the dump is publishing (after the rename)" at_fault image-publish 30
run_gpusnap restore -D "$img"
expect "a restore while the dump publishes: waits, then refuses" 6 "image '$img' is being written by gpusnap dump (pid $BG); try again when it has finished"
check "it said it waited" grep -q "waiting for gpusnap dump (pid $BG), which is publishing '$img'" "$ERR_TXT"
check "nothing was restored" lacks "$FAKE_CUDA_LOG" "restore"
bg_wait
check "the dump succeeded (rc $BG_RC)" [ "$BG_RC" = 0 ]
wait_gone "$p3"
run_gpusnap restore -D "$img"; expect "once the dump has ended, the restore works" 0 "restored $p3"
check "the restored process counts on" grows "$TEST_TMP/c3.log"
kill -9 "$p3"; wait_gone "$p3"

test_done
