#!/usr/bin/env bash
# t4035 - a spill no process needs any more is removed in the background
# (src/cli/spill.c: unlinking gigabytes on a file system mounted with discard
# takes seconds, which a resume would add after its process already runs):
#  - resume from a spill returns with the folder's name already free, the
#    data back; a detached `gpusnap _remove-spill` removes the renamed folder
#    and its record soon after;
#  - a removal whose remover was killed (its record and folder left) is
#    finished by the next command's sweep, and one whose remover still works
#    (holding the record's lock) is left to it;
#  - a spill into a directory waits for the removals there, so the space they
#    free counts;
#  - `_remove-spill` takes only a record of the runtime directory and removes
#    only a trash folder: anything else is refused or left alone.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"
export AGENT_APP_BIG_MB=24 AGENT_APP_ZERO_MB=8
records() { find "$GPUSNAP_RUN_DIR" -maxdepth 1 -name 'spilltrash-*'; }
held() { ! flock -n "$1" true; } # held FILE: another process holds FILE's flock
not_alive() { ! alive "$1"; }
# hold FILE SECONDS: a process (HOLDER) holds FILE's flock for that long, as a remover at work does;
# the lock is its own descriptor's, so killing it lets go at once
hold() {
  (exec 9>>"$1" && flock 9 && exec sleep "$2") </dev/null >/dev/null 2>&1 &
  HOLDER=$!
  TEST_PIDS+=("$HOLDER")
}
no_trash() { empty_dir "$spill" && [ -z "$(records)" ]; }

start_app
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')

# ---- a resume from the spill: the folder's name free at once, the rest in the background ----
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "suspend --spill-only" 0
check "the data is in the process's spill folder" test -d "$folder/image"
run_gpusnap resume "$APP"; expect "resume from the spill" 0
check "the folder's name is free when resume returns" test ! -e "$folder"
check "the spill record is gone when resume returns" test -z "$(find "$GPUSNAP_RUN_DIR" -name 'spill-*')"
verify_ok "the data after the spill"
check "the renamed folder and its record are removed in the background" eventually 30 no_trash
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "a second spill of the same process at once" 0
run_gpusnap resume "$APP"; expect "and its resume" 0
verify_ok "the data after the second spill"
check "... removed in the background too" eventually 30 no_trash

# ---- a removal left by a killed remover ----
# what trash_folder leaves before its remover starts: the renamed folder and the record naming it
left_trash() { # ID: a trash folder with a file in it, and its record
  mkdir -p "$spill/gpusnap-trash-$1/image"
  head -c 65536 /dev/urandom >"$spill/gpusnap-trash-$1/image/gpu-data-0000.img"
  echo "$(realpath "$spill")/gpusnap-trash-$1" >"$GPUSNAP_RUN_DIR/spilltrash-$1"
}
left_trash 1-0-1
run_gpusnap state; expect "the next command (state)" 0
check "its sweep finishes the removal a killed remover left" eventually 30 no_trash
# a remover at work holds the record's lock: a sweep leaves the removal to it
left_trash 1-0-2
hold "$GPUSNAP_RUN_DIR/spilltrash-1-0-2" 600
check "(a remover at work holds the record's lock)" eventually 30 held "$GPUSNAP_RUN_DIR/spilltrash-1-0-2"
run_gpusnap state; expect "a command while a remover holds the record" 0
sleep 1
check "the folder stays while the record's lock is held" test -d "$spill/gpusnap-trash-1-0-2"
kill "$HOLDER"
wait "$HOLDER" 2>/dev/null
run_gpusnap state; expect "a command after the lock is gone" 0
check "then the next sweep finishes it" eventually 30 no_trash

# ---- a spill into the directory waits for the removals there ----
left_trash 1-0-3
hold "$GPUSNAP_RUN_DIR/spilltrash-1-0-3" 2
check "(a remover at work holds the record's lock)" eventually 30 held "$GPUSNAP_RUN_DIR/spilltrash-1-0-3"
run_gpusnap suspend --spill-only --spill "$spill" "$APP"; expect "a spill while a removal in its directory runs" 0
# only the waiting spill can have removed it while the lock was held: every sweep leaves a held record alone
check "the removal there was finished before the spill went on" test ! -e "$spill/gpusnap-trash-1-0-3" -a -z "$(records)"
check "the spill returned after the remover let go" not_alive "$HOLDER"
wait "$HOLDER" 2>/dev/null
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after a spill that waited"
check "... and its own folder removed in the background" eventually 30 no_trash

# ---- _remove-spill takes only what is its own ----
run_gpusnap _remove-spill /etc/passwd; expect "a path outside the runtime directory: refused" 2 "is not a spill removal record"
check "... and /etc/passwd is still there" test -s /etc/passwd
echo "$spill/precious" >"$TEST_TMP/spilltrash-9"
run_gpusnap _remove-spill "$TEST_TMP/spilltrash-9"; expect "a record outside the runtime directory: refused" 2 "is not a spill removal record"
mkdir "$spill/precious"
echo keep >"$spill/precious/file"
echo "$spill/precious" >"$GPUSNAP_RUN_DIR/spilltrash-1-0-4"
run_gpusnap _remove-spill "$GPUSNAP_RUN_DIR/spilltrash-1-0-4"; expect "a record naming a folder that is not a trash folder" 0
check "... leaves that folder alone" test -s "$spill/precious/file"
check "... and the record, naming nothing to remove, goes" test ! -e "$GPUSNAP_RUN_DIR/spilltrash-1-0-4"
echo "$spill/gpusnap-trash-1-0-5/../precious" >"$GPUSNAP_RUN_DIR/spilltrash-1-0-5"
run_gpusnap _remove-spill "$GPUSNAP_RUN_DIR/spilltrash-1-0-5"; expect "a record with a '..' in its path" 0
check "... leaves the folder it leads to alone" test -s "$spill/precious/file"
rm -rf "$spill/precious"
quit_app "the app exits cleanly"
test_done
