#!/usr/bin/env bash
# t5005 - `gpusnap dump` and `restore` on the driver path (fake libcuda,
# FAKE_CUDA_CRIU=1, the real CRIU 4) interrupted at every step:
#  - SIGTERM while CRIU dumps: CRIU finishes, the image is published (before:
#    gpusnap ended with 143, CRIU killed the process and the image stayed
#    unpublished, to be deleted by the next dump); SIGTERM to gpusnap's whole
#    process group: never a process left silently suspended;
#  - SIGTERM at each step (fault action term): before CRIU has dumped the
#    process the dump is undone (the process counts on, nothing is written,
#    gpusnap ends by the signal after one line); after it, the dump is
#    finished and the image restores; the same for restore: before the
#    process continues it is killed, never having run;
#  - kill -9 of gpusnap at each step (fault action kill, and while CRIU
#    runs): the process runs, is suspended and `gpusnap resume` brings it back,
#    or is gone and its image restores; the next state, dump or restore says
#    what the killed gpusnap left; a restore removes the stopped copy a killed
#    restore left;
#  - one operation per process: a resume or a second restore while a dump or
#    a restore is at work is refused at once naming it;
#  - a full disk while CRIU writes: exit 13, the process runs on.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu
MNT=""

cleanup_counters() {
  kill_test_procs cpu_counter
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
  cleanup_test
}
trap cleanup_counters EXIT

log=$TEST_TMP/counter.log
stopped_counting() { local a; a=$(wc -l <"$log"); sleep 0.2; [ "$(wc -l <"$log")" = "$a" ]; }
restores() { # restores TITLE DIR VALUE [OPTION]: restore [OPTION] from DIR brings the counter back at VALUE
  run_gpusnap restore ${4:+"$4"} -D "$2"; expect "$1: restore" 0 "restored $PID"
  check "$1: the restored process counts on from $3" counts_on_from "$log" "$3"
  kill -9 "$PID"; wait_gone "$PID"
}

# a criu that sleeps before dumping: a window while "CRIU runs"
slow=$TEST_TMP/slow-criu
cat >"$slow" <<EOF
#!/bin/sh
case "\$1" in dump|restore) touch "$TEST_TMP/criu-started"; sleep 1.5;; esac
exec "$GPUSNAP_CRIU" "\$@"
EOF
chmod 755 "$slow"
criu_started() { local i; for ((i = 0; i < 500; i++)); do [ -e "$TEST_TMP/criu-started" ] && return 0; sleep 0.01; done; return 1; }

# ---- SIGTERM while CRIU dumps: the dump is finished, the image published ----
start_counter "$log"; PID=$NEWPID
img=$TEST_TMP/img-term-criu
rm -f "$TEST_TMP/criu-started"
GPUSNAP_CRIU=$slow "$GPUSNAP_BIN" dump -D "$img" "$PID" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
check "CRIU started" criu_started
kill -TERM "$BG"
bg_wait
check "SIGTERM while CRIU dumps: the dump completes (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "it says the signal came too late to undo the dump" grep -q "SIGTERM came after CRIU had dumped process $PID, too late to undo; the dump was finished" "$TEST_TMP/bg.err"
check "the image is published" test -f "$img/manifest.img" -a -z "$(tmp_dirs "$img")"
check "the process is gone" wait_gone "$PID"
v=$(last_count "$log")
restores "SIGTERM while CRIU dumps" "$img" "$v"

# ---- SIGTERM to gpusnap's whole process group while CRIU dumps ----
start_counter "$log"; PID=$NEWPID
img=$TEST_TMP/img-term-group
rm -f "$TEST_TMP/criu-started"
GPUSNAP_CRIU=$slow setsid "$GPUSNAP_BIN" dump -D "$img" "$PID" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
criu_started
kill -TERM -- "-$BG"
bg_wait
# criu runs in a process group of its own: it finishes, and the dump with it
check "group SIGTERM: gpusnap finishes the dump (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "group SIGTERM: the finished dump's image is published" test -f "$img/manifest.img"
check "group SIGTERM: the process is gone" wait_gone "$PID"
restores "group SIGTERM" "$img" "$(last_count "$log")"

# ---- SIGTERM at each step of a dump ----
start_counter "$log"; PID=$NEWPID
old=$TEST_TMP/img-old
run_gpusnap dump --leave-running -D "$old" "$PID"; expect "an image to keep" 0
s_old=$(sums "$old")
for point in dump-after-agent dump-after-driver; do
  GPUSNAP_FAULT=$point=term run_gpusnap dump -D "$old" "$PID"
  check "SIGTERM at $point: gpusnap ends by it (rc $RC)" [ "$RC" = 143 ]
  check "SIGTERM at $point: one line says the dump was undone" \
    grep -q "^gpusnap: dump of process $PID interrupted by SIGTERM: undone, process $PID runs on and nothing was written to '$old'$" "$ERR_TXT"
  check "SIGTERM at $point: no other error line" one_error
  check "SIGTERM at $point: the process counts on" grows "$log"
  check "SIGTERM at $point: its driver state is running" [ "$(fake_state "$PID")" = 0 ]
  check "SIGTERM at $point: the old image is intact" [ "$(sums "$old")" = "$s_old" ]
  check "SIGTERM at $point: no temporary directory left" [ -z "$(tmp_dirs "$old")" ]
done
for point in dump-after-criu dump-after-publish; do
  img=$TEST_TMP/img-$point
  GPUSNAP_FAULT=$point=term run_gpusnap dump -D "$img" "$PID"
  expect "SIGTERM at $point: the dump is finished" 0 "dumped $PID"
  check "SIGTERM at $point: it says so" grep -q "SIGTERM came after CRIU had dumped process $PID, too late to undo; the dump was finished" "$ERR_TXT"
  check "SIGTERM at $point: the process is gone" wait_gone "$PID"
  restores "SIGTERM at $point" "$img" "$(last_count "$log")"
  start_counter "$log"; PID=$NEWPID
done
# an injected failure at the step after CRIU: the process is gone, its image kept where it is, and said
img=$TEST_TMP/img-fail-publish
GPUSNAP_FAULT=dump-after-criu run_gpusnap dump -D "$img" "$PID"
expect "publishing fails after CRIU dumped the process" 1 "process $PID was dumped, but its image was not published; it is kept at"
kept=$(ls -d "$img.kept-$PID-"* 2>/dev/null | head -n 1)
check "the image is kept under a name no dump removes ($kept)" test -n "$kept" -a -f "$kept/manifest.img" -a -z "$(tmp_dirs "$img")"
v=$(last_count "$log")
wait_gone "$PID"
run_gpusnap state "$PID"; expect "state names the kept image" 3 "its image could not be put at '$img' and is kept at '$kept'"
restores "the kept image" "$kept" "$v"
rm -rf "$kept"

# ---- kill -9 of gpusnap at each step of a dump ----
start_counter "$log"; PID=$NEWPID
img=$TEST_TMP/img-kill
GPUSNAP_FAULT=dump-after-agent=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 before the driver (rc $RC)" [ "$RC" = 137 ]
check "the process counts on" grows "$log"
run_gpusnap state "$PID"; expect "state: running" 0 "running"
check "nothing to say about a process the killed dump never touched" [ ! -s "$ERR_TXT" ]

GPUSNAP_FAULT=dump-after-driver=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after the driver's checkpoint (rc $RC)" [ "$RC" = 137 ]
check "the process is left suspended" [ "$(fake_state "$PID")" = 2 ]
run_gpusnap state "$PID"; expect "state: suspended, and by whom" 0 "process $PID was left suspended by a gpusnap dump"
check "state says what to do" grep -q "gpusnap resume $PID puts it back" "$ERR_TXT"
run_gpusnap dump -D "$img" "$PID"; expect "a new dump is refused, saying why" 6 "was left suspended by a gpusnap dump"
check "the refusal is one line" one_error
run_gpusnap resume "$PID"; expect "resume after the killed dump" 0
check "the process counts on" grows "$log"
run_gpusnap state "$PID"; expect "state after the resume" 0 "running"
check "the record is gone" [ ! -s "$ERR_TXT" ]

v=0
GPUSNAP_FAULT=dump-after-criu=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after CRIU dumped the process (rc $RC)" [ "$RC" = 137 ]
check "the process is gone (CRIU killed it)" wait_gone "$PID"
v=$(last_count "$log")
kept=$(tmp_dirs "$img")
check "the complete image is at its temporary name ($kept)" test -n "$kept" -a -f "$kept/manifest.img" -a ! -e "$img"
run_gpusnap state "$PID"
expect "state names what the killed dump left" 3 "a gpusnap dump (pid"
check "state says where the image is and what to do" grep -qF "the image is complete at '$kept'; gpusnap restore -D '$kept' brings the process back" "$ERR_TXT"
check "the message is one line" one_error
# CRIU's files were checksummed before the kill: the kept image verifies whole, as a published one
run_gpusnap inspect --verify --json "$kept"; expect "the kept image verifies, CRIU's files too" 0
check "inspect JSON: CRIU's files checked" [ "$(json_get "$OUT_TXT" '["verify"]["ok"],d["verify"]["cpu_files_checked"]')" = "(True, True)" ]
restores "the image a killed dump left" "$kept" "$v"
rm -rf "$kept"

start_counter "$log"; PID=$NEWPID
GPUSNAP_FAULT=dump-after-publish=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after publishing (rc $RC)" [ "$RC" = 137 ]
check "the process is gone" wait_gone "$PID"
v=$(last_count "$log")
run_gpusnap state "$PID"; expect "state names the published image" 3 "process $PID was dumped to '$img' by a gpusnap dump"
restores "the image published before the kill" "$img" "$v"

# kill -9 while CRIU runs: CRIU goes on without gpusnap
start_counter "$log"; PID=$NEWPID
img=$TEST_TMP/img-kill-criu
rm -f "$TEST_TMP/criu-started"
GPUSNAP_CRIU=$slow "$GPUSNAP_BIN" dump -D "$img" "$PID" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
criu_started
kill -9 "$BG"
bg_wait
check "kill -9 while CRIU runs (rc $BG_RC)" [ "$BG_RC" = 137 ]
check "CRIU finished the dump: the process is gone" wait_gone "$PID" 10
v=$(last_count "$log")
kept=$(tmp_dirs "$img")
run_gpusnap state "$PID"; expect "state names the image CRIU wrote" 3 "CRIU dumped process $PID for a gpusnap dump"
# gpusnap died before it could checksum CRIU's files: the commands it names say so
check "state says where it is, and that CRIU's files are unverified" grep -qF "gpusnap restore --allow-unverified-cpu -D '$kept'" "$ERR_TXT"
run_gpusnap inspect --verify "$kept"; expect "inspect --verify: CRIU's files have no checksums" 11 "has no checksums of CRIU's files"
run_gpusnap inspect --verify --allow-unverified-cpu "$kept"; expect "the image CRIU wrote verifies but for CRIU's files" 0 "CRIU's files unverified"
run_gpusnap restore -D "$kept"; expect "restore without --allow-unverified-cpu is refused" 11 "--allow-unverified-cpu"
restores "the image of a dump killed while CRIU ran" "$kept" "$v" --allow-unverified-cpu
rm -rf "$kept"

# ---- one operation per process: a dump at work ----
start_counter "$log"; PID=$NEWPID
img=$TEST_TMP/img-lock
bg_gpusnap dump-after-driver=hold:3 dump -D "$img" "$PID"
check "the dump reaches the driver's checkpoint" at_fault dump-after-driver 10
run_gpusnap resume "$PID"; expect "resume while a dump is at work" 6 "cannot resume process $PID now: a gpusnap dump (pid $BG) is working on process $PID"
run_gpusnap dump -D "$TEST_TMP/img-lock2" "$PID"; expect "a second dump meanwhile" 6 "a gpusnap dump (pid $BG) is working"
run_gpusnap state "$PID"; expect "state while a dump is at work" 0 "a gpusnap dump (pid $BG) is working on process $PID"
bg_wait
check "the dump succeeded (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "the process is gone" wait_gone "$PID"
v=$(last_count "$log")

# ---- restore: SIGTERM and kill -9 at each step, and its lock ----
for point in restore-after-criu restore-before-cont; do
  n=$(wc -l <"$log")
  GPUSNAP_FAULT=$point=term run_gpusnap restore -D "$img"
  check "SIGTERM at $point: gpusnap ends by it (rc $RC)" [ "$RC" = 143 ]
  check "SIGTERM at $point: says the restored copy was killed before it ran" \
    grep -q "restore from '$img' interrupted by SIGTERM: the restored process $PID was killed before it ran; the image is unchanged" "$ERR_TXT"
  check "SIGTERM at $point: no process left" wait_gone "$PID" 5
  check "SIGTERM at $point: it never ran" [ "$(wc -l <"$log")" = "$n" ]
done
GPUSNAP_FAULT=restore-after-cont=term run_gpusnap restore -D "$img"
expect "SIGTERM after the process continued: the restore is finished" 0 "restored $PID"
check "it says so" grep -q "SIGTERM came after process $PID had started running; the restore was finished" "$ERR_TXT"
check "the process counts on" counts_on_from "$log" "$v"
kill -9 "$PID"; wait_gone "$PID"

for point in restore-after-criu restore-before-cont; do
  n=$(wc -l <"$log")
  GPUSNAP_FAULT=$point=kill run_gpusnap restore -D "$img"
  check "kill -9 at $point (rc $RC)" [ "$RC" = 137 ]
  check "kill -9 at $point: the copy is left stopped, never run" bash -c "[ \"\$(cut -d' ' -f3 /proc/$PID/stat)\" = T ] && [ \"\$(wc -l <'$log')\" = $n ]"
  run_gpusnap state "$PID"; expect "kill -9 at $point: state says what the copy is" 0 "is a copy of the image at '$img' that a gpusnap restore"
  run_gpusnap restore -D "$img"; expect "kill -9 at $point: the next restore removes the copy and restores" 0 "restored $PID"
  check "kill -9 at $point: it said it removed the copy" grep -q "note: removing process $PID, a copy of this image" "$ERR_TXT"
  check "kill -9 at $point: the process counts on from the dump" counts_on_from "$log" "$v"
  kill -9 "$PID"; wait_gone "$PID"
done

# kill -9 while CRIU restores: CRIU goes on and leaves the copy stopped; the next restore says what it is
n=$(wc -l <"$log")
rm -f "$TEST_TMP/criu-started"
GPUSNAP_CRIU=$slow "$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
BG=$!
criu_started
kill -9 "$BG"
bg_wait
check "kill -9 while CRIU restores (rc $BG_RC)" [ "$BG_RC" = 137 ]
for _ in $(seq 3000); do [ "$(cut -d' ' -f3 "/proc/$PID/stat" 2>/dev/null)" = T ] && break; sleep 0.01; done
check "CRIU left the copy stopped, never run" bash -c "[ \"\$(cut -d' ' -f3 /proc/$PID/stat)\" = T ] && [ \"\$(wc -l <'$log')\" = $n ]"
run_gpusnap restore -D "$img"; expect "the next restore names the copy and what to do" 15 "may be a copy of the image at '$img' that CRIU made for a gpusnap restore (pid $BG) that was killed; if it is stopped, it never ran: kill -9 $PID"
check "the refusal is one line" one_error
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$img"; expect "restore after the copy is gone" 0
check "the process counts on from the dump" counts_on_from "$log" "$v"
kill -9 "$PID"; wait_gone "$PID"

bg_gpusnap restore-before-cont=hold:3 restore -D "$img"
check "the restore holds the process" at_fault restore-before-cont 10
run_gpusnap restore -D "$img"; expect "a second restore meanwhile is refused" 6 "cannot restore process $PID now: a gpusnap restore (pid $BG) is working on process $PID"
run_gpusnap resume "$PID"; expect "a resume of the process being restored is refused" 6 "a gpusnap restore (pid $BG) is working on process $PID"
bg_wait
check "the restore itself succeeded (rc $BG_RC)" [ "$BG_RC" = 0 ]
check "the process counts on" counts_on_from "$log" "$v"
kill -9 "$PID"; wait_gone "$PID"

# ---- a full disk while CRIU writes ----
MNT=$TEST_TMP/small
mkdir -p "$MNT"
if mount -t tmpfs -o size=100k,mode=0700 tmpfs "$MNT" 2>/dev/null; then
  start_counter "$log"; PID=$NEWPID
  run_gpusnap dump -D "$MNT/img" "$PID"; expect "CRIU finds the disk full" 13 "no space left"
  check "disk full: one line" one_error
  check "disk full: the process counts on" grows "$log"
  check "disk full: its driver state is running" [ "$(fake_state "$PID")" = 0 ]
  check "disk full: nothing left on the disk" test -z "$(ls -A "$MNT")"
  kill -9 "$PID"; wait_gone "$PID"
  umount "$MNT" && MNT=""
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk case is not tested"
fi

test_done
