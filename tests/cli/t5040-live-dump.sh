#!/usr/bin/env bash
# t5040 - `gpusnap dump --leave-running` through the dump's own copy in
# memory (the stage, GPUSNAP_STAGE_DIR): the agent app of t4004 on the
# host-memory fake driver, dumped with the real CRIU 4. Checked here:
#  - the pause copies the GPU data into the stage, the process runs again,
#    then the image is written from the stage and published; nothing of the
#    stage is left; the image restores every byte;
#  - the order: with the image's write held (fault point dump-stage-write),
#    the process answers with its data while DIR still holds the previous
#    image, then the new one is published;
#  - the process exiting while its image is written: the image is published
#    and restores it;
#  - gpusnap killed while writing: the process runs on with its data, DIR
#    holds the previous image, nothing is left in memory, the unfinished
#    directory has no manifest and the next dump removes it;
#  - storage full after the process ran again (a small tmpfs as DIR's
#    parent): exit 13 naming it, the process runs on with its data, nothing
#    left on the storage or in memory;
#  - no room for the stage in memory (a tiny tmpfs), a stage directory that
#    is not in memory, or an incremental dump (--parent, written beside its
#    parent): the image is written inside the pause as before, and --json
#    says why;
#  - gpusnap killed during the pause: the process stays suspended with its
#    data in the stage, state says so, gpusnap resume puts it back; killed
#    so again and the process gone too, the next gpusnap command removes the
#    stage (memory nobody frees otherwise), and not before;
#  - the stage filling up while the agent writes into it: the agent walks
#    back and writes into the image instead, in the same pause.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

MNT=""
SHM=""
TINY=""
signals_app_env agent_app criu
export AGENT_APP_BIG_MB=300
export GPUSNAP_IO_THREADS=2

cleanup_more() {
  local m
  for m in "$MNT" "$SHM" "$TINY"; do
    [ -n "$m" ] && umount "$m" 2>/dev/null
  done
  return 0
}

SHM=$TEST_TMP/shm
mkdir -p "$SHM"
mount -t tmpfs -o size=1g,mode=0755 tmpfs "$SHM" || skip "cannot mount a tmpfs (root is needed)"
export GPUSNAP_STAGE_DIR=$SHM
stage_empty() { [ -z "$(ls -A "$SHM")" ] || { echo "    left in the stage: $(ls -A "$SHM")"; return 1; }; }
jtrue() { test "$(jget "$1")" = True; }

# ---- the live dump through memory ----
start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
img=$TEST_TMP/img
run_gpusnap dump --leave-running --json -D "$img" "$PID"; expect "dump --leave-running" 0
check "the pause copied the GPU data into memory (staged)" jtrue "['staged']"
stop=$(jget "['stop_copy_bytes']")
check "what the pause copied is the app's data, its 300 MiB block at least ($stop bytes)" test "$stop" -gt $((300 << 20))
check "the image was written from that copy ($(jget "['stage_written_bytes']") bytes)" \
  test "$(jget "['stage_written_bytes']")" -ge "$stop"
check "the write came after the pause: paused_s < total_s, stage_write_s > 0" python3 -c 'import json,sys
t=json.load(open(sys.argv[1]))["times"]; sys.exit(not (0 < t["paused_s"] < t["total_s"] and t["stage_write_s"] > 0))' "$OUT_TXT"
check "the process runs on" alive "$PID"
verify_ok "its data after the live dump"
check "its memory is on the GPU again" test "$(phys)" = "$phys0"
check "nothing stays pinned" test "$(pinned)" = 0
check "nothing is left in memory" stage_empty
check "no temporary directory left" test -z "$(tmp_dirs "$img")"
run_gpusnap inspect --json --verify "$img"; expect "inspect --verify of the live image" 0
check "it holds CPU state and the data" test "$(jget "['verify']['ok']")" = True -a "$(jget "['image']['how']")" = agent
s_img=$(sums "$img")

# ---- the order: the process answers while its image is being written ----
bg_gpusnap "dump-stage-write@1=hold:20" dump --leave-running -D "$img" "$PID"
check "the dump reaches the image's write" at_fault dump-stage-write 60
check "... the process runs then, no gpusnap at work on it" test "$("$GPUSNAP_BIN" state "$PID" 2>&1)" = running
verify_ok "the process answers with its data while its image is being written"
check "... while the dump still writes" kill -0 "$BG"
check "... DIR still holds the previous image" test "$(sums "$img")" = "$s_img"
check "... and the stage is out of every directory (its memory is the dump's alone)" stage_empty
bg_wait
check "the dump then publishes (rc $BG_RC)" test "$BG_RC" = 0
check "... a new image" test "$(sums "$img")" != "$s_img"
check "... that verifies" "$GPUSNAP_BIN" inspect --verify "$img"
s_img=$(sums "$img")

# ---- the process exits while its image is written: the image is published all the same ----
bg_gpusnap "dump-stage-write@1=hold:10" dump --leave-running -D "$img" "$PID"
check "the dump reaches the image's write" at_fault dump-stage-write 60
kill -9 "$PID"; wait_gone "$PID"
bg_wait
check "the dump of a process that exited while its image was written publishes it (rc $BG_RC)" test "$BG_RC" = 0
run_gpusnap restore -D "$img"; expect "restore of that image" 0
verify_ok "every byte from it"
s_img=$(sums "$img")

# ---- gpusnap killed while writing ----
GPUSNAP_FAULT=dump-stage-write@2=kill run_gpusnap dump --leave-running -D "$img" "$PID"
check "gpusnap killed while writing the image (rc $RC)" test "$RC" = 137
check "the process runs on" test "$("$GPUSNAP_BIN" state "$PID" 2>&1)" = running
verify_ok "with its data"
check "DIR holds the previous image" test "$(sums "$img")" = "$s_img"
check "nothing is left in memory" stage_empty
left=$(tmp_dirs "$img")
check "the unfinished directory holds no manifest" test -n "$left" -a ! -e "$left/manifest.img"
run_gpusnap dump --leave-running -D "$img" "$PID"; expect "the next dump" 0
check "... which says the image was written after the pause" grep -q "stood still for .* s; the image was written in .* s after" "$OUT_TXT"
check "... removed it" test -z "$(tmp_dirs "$img")"
check "... and published" "$GPUSNAP_BIN" inspect --verify "$img"

# ---- storage full after the process ran again ----
cpu=$(dump_dir_bytes() { du -sb "$img/cpu" | cut -f1; }; dump_dir_bytes)
MNT=$TEST_TMP/small
mkdir -p "$MNT"
# room for CRIU's files, not for the 300 MiB of GPU data
mount -t tmpfs -o size=$((cpu + (64 << 20))) tmpfs "$MNT"
run_gpusnap dump --leave-running -D "$MNT/img" "$PID"
expect "a live dump onto a storage that fills up after the process ran again" 13 "process $PID runs on, but its image was not published at '$MNT/img'"
check "... in one line" one_error
check "the process runs on" alive "$PID"
verify_ok "with its data"
check "no image and nothing else on the storage" test -z "$(ls -A "$MNT")"
check "nothing is left in memory" stage_empty
check "nothing stays pinned" test "$(pinned)" = 0
umount "$MNT"; MNT=""

# ---- no room in memory: written inside the pause, as before ----
TINY=$TEST_TMP/tiny
mkdir -p "$TINY"
mount -t tmpfs -o size=16m tmpfs "$TINY"
GPUSNAP_STAGE_DIR=$TINY run_gpusnap dump --leave-running --json -D "$img" "$PID"
expect "a live dump with no room in memory" 0
check "... not staged, and says why" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not (d["staged"] is False and "MiB free" in d["no_stage"]))' "$OUT_TXT"
check "... its image verifies" "$GPUSNAP_BIN" inspect --verify "$img"
verify_ok "the data after it"
check "nothing left in the tiny tmpfs" test -z "$(ls -A "$TINY")"
GPUSNAP_STAGE_DIR=$TEST_TMP run_gpusnap dump --leave-running --json -D "$img" "$PID"
expect "a live dump whose GPUSNAP_STAGE_DIR is on a disk" 0
check "... not staged: not a memory file system" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not (d["staged"] is False and "not a memory file system" in d["no_stage"]))' "$OUT_TXT"

# ---- an incremental live dump is staged too; the published image names its parent beside it ----
MT=$(dirname "$0")/manifest_tool.py
run_gpusnap dump --leave-running --json --parent "$img" -D "$TEST_TMP/img-inc" "$PID"
expect "an incremental live dump (--parent)" 0
check "... staged" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not d["staged"])' "$OUT_TXT"
check "... its image verifies" "$GPUSNAP_BIN" inspect --verify "$TEST_TMP/img-inc"
check "... and records its parent as the image beside it ($(python3 "$MT" parent-path "$TEST_TMP/img-inc"))" \
  test "$(python3 "$MT" parent-path "$TEST_TMP/img-inc")" = img
mkdir "$TEST_TMP/moved"
cp -a "$img" "$TEST_TMP/img-inc" "$TEST_TMP/moved/"
check "... so the pair verifies moved elsewhere together" "$GPUSNAP_BIN" inspect --verify "$TEST_TMP/moved/img-inc"
rm -rf "$TEST_TMP/moved"
verify_ok "the data after the incremental live dump"
# killed in the pause: the stage names the parent by absolute path, so resume reads the chain from it
GPUSNAP_FAULT=dump-after-driver=kill run_gpusnap dump --leave-running --parent "$img" -D "$TEST_TMP/img-inc2" "$PID"
check "gpusnap killed in the pause of an incremental live dump (rc $RC)" test "$RC" = 137
run_gpusnap resume "$PID"; expect "resume from its stage, through the parent" 0
verify_ok "its data, from the stage and the parent"
check "the stage is removed" stage_empty

# ---- gpusnap killed during the pause: the data is in the stage, resume takes it from there ----
GPUSNAP_FAULT=dump-after-driver=kill run_gpusnap dump --leave-running -D "$img" "$PID"
check "gpusnap killed in the pause (rc $RC)" test "$RC" = 137
run_gpusnap state "$PID"
check "state says the process was left suspended and how to resume it" \
  grep -q "gpusnap resume $PID" "$OUT_TXT" "$ERR_TXT"
run_gpusnap resume "$PID"; expect "resume after the killed live dump" 0
verify_ok "its data, from the stage"
check "its memory is on the GPU again" test "$(phys)" = "$phys0"
check "the stage the resume read its data from is removed" test -z "$(ls -A "$SHM")"

# ---- killed in the pause, then the process is gone too: the next gpusnap frees the stage's memory ----
GPUSNAP_FAULT=dump-after-driver=kill run_gpusnap dump --leave-running -D "$img" "$PID"
check "gpusnap killed in the pause again (rc $RC)" test "$RC" = 137
check "its stage holds the data ($(ls -A "$SHM"))" test -n "$(ls -A "$SHM")"
run_gpusnap state "$PID"
check "a gpusnap command keeps the stage while the process lives (it is its only copy)" test -n "$(ls -A "$SHM")"
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap state; expect "state after the process is gone" 0
check "... which removed the stage nobody needs" stage_empty

# ---- the memory fills up while the agent writes into it: written into the image instead ----
GPUSNAP_FAULT=image-write@1=fail:ENOSPC start_app
verify_ok "an app whose agent's first image write finds no space"
img=$TEST_TMP/img-full
run_gpusnap dump --leave-running --json -D "$img" "$PID"
expect "a live dump whose copy in memory fills up" 0
check "... written into the image inside the pause, saying why" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not (d["staged"] is False and "No space" in d["no_stage"]))' "$OUT_TXT"
check "... its image verifies" "$GPUSNAP_BIN" inspect --verify "$img"
verify_ok "the data after it"
check "nothing is left in memory" stage_empty

test_done
