#!/usr/bin/env bash
# t4032 - what can go wrong with the storage tier, each a one-line
# error with its documented exit code, nothing lost, on the host-memory fake
# driver:
#  - a spill directory that is missing or not a directory (exit 2), another
#    user's, writable by group or others, or on a read-only file system
#    (exit 5): refused before anything is touched, the app runs on;
#  - a spill directory on a file system that fills while the agent writes
#    (a small tmpfs): the suspend is rolled back (exit 13), the app runs on
#    with its data on the GPU, nothing is left in the directory;
#  - a spill file damaged while suspended: resume refuses naming the chunk
#    (exit 11), the app stays suspended and `state` says why, the spill stays;
#    with the file made whole again resume works; a spill file removed: the
#    same refusal, still suspended;
#  - the gpusnap that spilled killed before the driver's part: resume takes
#    the data from the spill;
#  - the app killed while spilled: the next gpusnap command removes its
#    spill folder and record;
#  - an agent whose own rollback fails after it spilled (injected): the
#    spill is kept, the process stays suspended, resume takes it from there.
# The read-only and full file systems are tmpfs mounts (root); where none
# can be mounted those cases say SKIP.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
export AGENT_APP_BIG_MB=24
MNT=
cleanup_more() { [ -z "$MNT" ] || umount "$MNT" 2>/dev/null; }
trap 'cleanup_more; cleanup_test' EXIT

start_app
phys0=$(phys)
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')

# untouched TITLE: the app runs on with its data on the GPU
untouched() {
  check "$1: one line" one_line
  check "$1: the physical memory stayed ($(phys))" test "$(phys)" = "$phys0"
  check "$1: the driver still runs the process" test "$(fake_state)" = 0
  check "$1: nothing left in the spill directory" test -z "$(ls -A "$spill")"
  check "$1: no spill record" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
  verify_ok "$1: the data"
}

# ---- directories that cannot take spills ----
run_gpusnap suspend --spill "$TEST_TMP/none" "$APP"
expect "a missing spill directory is refused" 2 "gpusnap: spill directory '$TEST_TMP/none': No such file or directory: nothing was done"
untouched "missing"
: >"$TEST_TMP/file"
run_gpusnap suspend --spill "$TEST_TMP/file" "$APP"
expect "a spill directory that is a file is refused" 2 "spill directory '$TEST_TMP/file' is not a directory"
untouched "a file"
GPUSNAP_SPILL_DIR=$TEST_TMP/none run_gpusnap suspend "$APP"
expect "GPUSNAP_SPILL_DIR missing is refused too" 2 "spill directory '$TEST_TMP/none'"
untouched "GPUSNAP_SPILL_DIR missing"
if [ "$(id -u)" = 0 ]; then
  chown 65534 "$spill"
  run_gpusnap suspend --spill "$spill" "$APP"
  expect "another user's spill directory is refused" 5 "spill directory '$spill' belongs to uid 65534, not to the user running gpusnap (uid 0)"
  chown 0 "$spill"
  untouched "another user's"
else
  echo "SKIP: not root: another user's directory is not tested"
fi
chmod 770 "$spill"
run_gpusnap suspend --spill "$spill" "$APP"
expect "a spill directory its group may write is refused" 5 "spill directory '$spill' is writable by its group (mode 0770): it must be this user's alone (chmod go-w)"
chmod 700 "$spill"
untouched "group-writable"
run_gpusnap suspend --spill-only "$APP"
expect "--spill-only without a spill directory is a usage error" 2 "--spill-only needs a spill directory"

small=$TEST_TMP/small
mkdir -p "$small"
if mount -t tmpfs -o size=1m,mode=0700,ro tmpfs "$small" 2>/dev/null; then
  MNT=$small
  run_gpusnap suspend --spill "$small" "$APP"
  expect "a read-only spill directory is refused" 5 "spill directory '$small' cannot be written: Read-only file system"
  untouched "read-only"
  umount "$small" && MNT=
else
  echo "SKIP: cannot mount a tmpfs here: the read-only case is not tested"
fi

# ---- the disk fills while the agent writes: rolled back ----
if mount -t tmpfs -o size=8m,mode=0700 tmpfs "$small" 2>/dev/null; then
  MNT=$small
  run_gpusnap suspend --spill-only --spill "$small" "$APP"
  expect "a spill onto a full file system is rolled back" 13 "No space left on device: nothing was spilled, process $APP runs on with its data on the GPU"
  check "full: it names the spill directory, not a descriptor" grep -q "holding '$small/gpusnap-$APP-" "$ERR_TXT"
  check "full: nothing left on the small file system" test -z "$(ls -A "$small")"
  spill_saved=$spill spill=$small
  untouched "full"
  spill=$spill_saved
  umount "$small" && MNT=
  # a file system without O_DIRECT (tmpfs) that has room: the writer and the reader go through memory
  mount -t tmpfs -o size=256m,mode=0700 tmpfs "$small" && MNT=$small
  run_gpusnap suspend --spill-only --spill "$small" "$APP"; expect "a spill onto tmpfs (no O_DIRECT)" 0
  run_gpusnap resume "$APP"; expect "resume from tmpfs" 0
  verify_ok "the data after a spill on tmpfs"
  check "tmpfs: nothing left" eventually 30 empty_dir "$small"
  umount "$small" && MNT=
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk and no-O_DIRECT cases are not tested"
fi

# ---- the gpusnap that spilled is killed before the driver's part: resume takes the data from the spill ----
bg_gpusnap suspend-after-agent=kill suspend --spill-only --spill "$spill" "$APP"
bg_wait
check "the suspend was killed after the agent spilled (rc $BG_RC)" test "$BG_RC" = 137
check "the spill is there" test -d "$folder/image"
run_gpusnap state "$APP"; expect "state names the killed suspend" 0 "was left suspended by a gpusnap suspend"
run_gpusnap resume "$APP"; expect "resume after the killed suspend" 0
verify_ok "the data from the spill a killed gpusnap left"
check "the spill folder is removed" test ! -e "$folder"

# ---- a spill file damaged while suspended ----
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "suspend --spill-only" 0
data=$(find "$folder/image" -type f -size +1M | head -n 1)
check "the spill has a data file ($data)" test -n "$data"
spill_damaged_resume "$folder" "$data" "resume from a damaged spill is refused"
run_gpusnap state "$APP"; expect "state after the refused resume" 0 "suspended (the last resume failed"
check "state names the damaged chunk" grep -q "chunk" "$OUT_TXT"
check "state says where the data is" grep -q "note: the GPU data of process $APP is spilled to $spill" "$ERR_TXT"
cp "$TEST_TMP/whole" "$data"
run_gpusnap resume "$APP"; expect "resume once the file is whole again" 0
verify_ok "the data after the repaired spill"
check "the spill folder is removed" test ! -e "$folder"

# ---- a spill file removed while suspended ----
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "suspend --spill-only again" 0
data=$(find "$folder/image" -type f -size +1M | head -n 1)
rm -f "$data"
run_gpusnap resume "$APP"
expect "resume from a spill missing a file is refused, naming it" 11 "image '$folder/image': data file '$(basename "$data")' is missing"
check "removed: one line" one_line
check "removed: its memory is not back" test "$(phys)" = 0
run_gpusnap state "$APP"; expect "state after that" 0 "suspended (the last resume failed"

# ---- killed while spilled: the next command removes the spill ----
check "the spill folder is there while the process lives" test -d "$folder"
kill -9 "$APP"; wait "$APP" 2>/dev/null
exec 3>&-
run_gpusnap state; expect "the next command" 0
check "the killed process's spill folder is removed" test ! -e "$folder"
check "its spill record is removed" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
check "the spill directory stays" test -d "$spill"

# ---- the agent's own rollback fails after it spilled: the spill is kept, resume takes the data from it ----
GPUSNAP_FAULT=agent-reply,agent-recreate start_app
phys0=$(phys)
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')
run_gpusnap suspend --spill-only --spill "$spill" "$APP"
expect "a suspend whose agent fails after spilling and cannot put the data back" 16 "the process stays suspended with its GPU data in the spill image at '$folder/"
check "rollback failed: one line" one_line
check "rollback failed: the spill is kept" test -d "$folder/image"
run_gpusnap state "$APP"; expect "state says so" 0 "suspended (rollback failed"
run_gpusnap resume "$APP"; expect "resume takes the data from the kept spill" 0
check "the physical memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the failed rollback, from the spill"
check "the spill folder is removed" test ! -e "$folder"
quit_app "the app exits cleanly"
test_done
