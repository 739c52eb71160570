#!/usr/bin/env bash
# t5006 - signals and kill -9 of gpusnap at every step on the agent path,
# without a GPU: the app of t4004 (tests/agent/agent_app.c --signals) under
# libgpusnap.so on the host-memory fake driver, dumped with the real CRIU 4.
#  - suspend: SIGTERM after the agent released the data, or after the
#    driver's checkpoint, undoes it (the data back at its addresses); kill -9
#    there leaves it suspended, `state` says by whom, `resume` brings it back;
#    a resume killed after the driver part is finished by the next resume;
#  - dump: SIGTERM before CRIU undoes it (the agent reloads its data from the
#    temporary image, nothing is published); after CRIU it is finished and the
#    image restores; kill -9 after the agent wrote the image leaves the
#    process suspended with its data only in the temporary image, and a plain
#    `gpusnap resume PID` takes it from there (the record says where); a
#    --leave-running dump killed after publishing: `resume` takes the data
#    from the published image;
#  - restore: kill -9 after the process continued, before the agent loaded
#    its data: `state` says so and `gpusnap resume PID` loads it; SIGTERM
#    there lets the restore finish.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app criu
export AGENT_APP_BIG_MB=64

start_app
verify_ok "the app's data after allocation"
phys0=$(phys)

# ---- suspend ----
for point in suspend-after-agent suspend-after-driver; do
  GPUSNAP_FAULT=$point=term run_gpusnap suspend "$PID"
  check "SIGTERM at $point: gpusnap ends by it (rc $RC)" test "$RC" = 143
  check "SIGTERM at $point: says it was undone" grep -q "suspend of process $PID interrupted by SIGTERM: undone, process $PID runs on" "$ERR_TXT"
  check "SIGTERM at $point: the memory is back ($(phys) of $phys0 bytes)" test "$(phys)" = "$phys0"
  check "SIGTERM at $point: the driver runs the process" test "$(fake_state)" = 0
  verify_ok "SIGTERM at $point: the data"
done

GPUSNAP_FAULT=suspend-after-agent=kill run_gpusnap suspend "$PID"
check "kill -9 after the agent released the data (rc $RC)" test "$RC" = 137
check "the data is off the GPU" test "$(phys)" = 0
run_gpusnap state "$PID"; expect "state: suspended, by a killed suspend" 0 "suspended"
check "state says who left it and what to do" grep -q "process $PID was left suspended by a gpusnap suspend (pid [0-9]*) that was killed; gpusnap resume $PID puts it back" "$ERR_TXT"
run_gpusnap resume "$PID"; expect "resume after the killed suspend" 0
check "the memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the killed suspend"

run_gpusnap suspend "$PID"; expect "suspend" 0
GPUSNAP_FAULT=resume-after-driver=kill run_gpusnap resume "$PID"
check "kill -9 of a resume after the driver part (rc $RC)" test "$RC" = 137
check "the agent still holds the data" test "$(phys)" = 0 -a "$(fake_state)" = 0
run_gpusnap state "$PID"; expect "state: partly resumed" 0 "was left partly resumed by a gpusnap resume"
run_gpusnap resume "$PID"; expect "the next resume finishes it" 0
verify_ok "the data after the killed resume"

run_gpusnap suspend "$PID"; expect "suspend" 0
GPUSNAP_FAULT=resume-after-driver=term run_gpusnap resume "$PID"
expect "SIGTERM during a resume: finished" 0 "it was finished"
check "the memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after an interrupted resume"

# ---- dump ----
img=$TEST_TMP/img
for point in dump-after-agent dump-after-driver; do
  GPUSNAP_FAULT=$point=term run_gpusnap dump -D "$img" "$PID"
  check "SIGTERM at $point: gpusnap ends by it (rc $RC)" test "$RC" = 143
  check "SIGTERM at $point: one line says it was undone" \
    test "$(errors "$ERR_TXT")" = "gpusnap: dump of process $PID interrupted by SIGTERM: undone, process $PID runs on and nothing was written to '$img'"
  check "SIGTERM at $point: the memory is back" test "$(phys)" = "$phys0"
  check "SIGTERM at $point: nothing stays pinned" test "$(pinned)" = 0
  check "SIGTERM at $point: nothing published, no temporary image left" test ! -e "$img" -a -z "$(tmp_dirs "$img")"
  verify_ok "SIGTERM at $point: the data"
done

GPUSNAP_FAULT=dump-after-agent=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after the agent wrote the image (rc $RC)" test "$RC" = 137
kept=$(tmp_dirs "$img")
check "the data is off the GPU, in the temporary image ($kept)" test "$(phys)" = 0 -a -f "$kept/manifest.img"
run_gpusnap state "$PID"; expect "state: suspended by a killed dump" 0 "was left suspended by a gpusnap dump"
run_gpusnap resume "$PID"; expect "a plain resume takes the data from where the killed dump left it" 0 "taken from '$kept'"
check "the memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the killed dump"
rm -rf "$kept"

# a dump killed after the driver's checkpoint, then the resume of it killed half way: the next resume still finds the data
GPUSNAP_FAULT=dump-after-driver=kill run_gpusnap dump -D "$img" "$PID"
check "kill -9 after the driver's checkpoint (rc $RC)" test "$RC" = 137
kept=$(tmp_dirs "$img")
GPUSNAP_FAULT=resume-after-driver=kill run_gpusnap resume "$PID"
check "its resume killed after the driver part (rc $RC)" test "$RC" = 137
check "the data is still only in the image" test "$(phys)" = 0 -a "$(fake_state)" = 0 -a -f "$kept/manifest.img"
run_gpusnap resume "$PID"; expect "the next resume takes the data from the killed dump's image" 0 "taken from '$kept'"
verify_ok "the data after a killed dump and a killed resume"
rm -rf "$kept"

# dump --leave-running resumes the process before it writes the image: killed after CRIU, the process
# is left suspended with its GPU data in the dump's own copy (a stage on a tmpfs, GPUSNAP_STAGE_DIR), no
# image; resume takes the data from there and removes the copy; killed after the publish, it runs with
# its data and the image is there
img2=$TEST_TMP/img2
stage=$TEST_TMP/stage
mkdir -m 700 "$stage" && mount -t tmpfs -o size=512m,mode=700 gpusnap-t5006 "$stage" || fail "a tmpfs for the stage"
cleanup_more() { umount "$stage" 2>/dev/null; }
GPUSNAP_STAGE_DIR=$stage GPUSNAP_FAULT=dump-after-criu=kill run_gpusnap dump --leave-running -D "$img2" "$PID"
check "kill -9 of dump --leave-running after CRIU (rc $RC)" test "$RC" = 137
left=$(find "$stage" -mindepth 1 -maxdepth 1 -name '.gpusnap-live-*')
check "the process is left suspended, its GPU data in the dump's copy ($left), no image" \
  test "$(phys)" = 0 -a "$(fake_state)" = 2 -a -f "$left/manifest.img" -a ! -e "$img2"
run_gpusnap state "$PID"; expect "state names the killed dump and the copy" 0 "its GPU data is in '$left'"
check "... and does not call the temporary image complete" sh -c "! grep -q 'image is complete' '$ERR_TXT'"
run_gpusnap resume "$PID"; expect "resume takes the data from the copy" 0 "taken from '$left'"
check "... and removes it" test ! -e "$left"
verify_ok "the data after the dump --leave-running killed after CRIU"
rm -rf "$(tmp_dirs "$img2")"
GPUSNAP_FAULT=dump-after-publish=kill run_gpusnap dump --leave-running -D "$img2" "$PID"
check "kill -9 of dump --leave-running after publishing (rc $RC)" test "$RC" = 137
check "the image is published" test -f "$img2/manifest.img"
check "the process runs with its memory back" test "$(phys)" = "$phys0" -a "$(fake_state)" = 0
verify_ok "the data after the dump --leave-running killed at its end"
run_gpusnap inspect --verify "$img2"; expect "the image verifies" 0

GPUSNAP_FAULT=dump-after-criu=term run_gpusnap dump -D "$img" "$PID"
expect "SIGTERM after CRIU: the dump is finished" 0 "dumped $PID"
check "the process is gone" wait_gone "$PID" 5

# ---- restore ----
GPUSNAP_FAULT=restore-after-cont=kill run_gpusnap restore -D "$img"
check "kill -9 after the restored process continued (rc $RC)" test "$RC" = 137
check "the process runs, its data not loaded" test "$(phys)" = 0
run_gpusnap state "$PID"; expect "state says the GPU data was not loaded" 0 "killed before the agent loaded its GPU data: gpusnap resume $PID loads it"
run_gpusnap resume "$PID"; expect "resume loads the data from the image" 0 "taken from '$img'"
check "the memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the killed restore"
kill -9 "$PID"; wait_gone "$PID"

GPUSNAP_FAULT=restore-after-cont=term run_gpusnap restore -D "$img"
expect "SIGTERM after the process continued: the restore is finished" 0 "the restore was finished"
check "the memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the interrupted restore"
kill -9 "$PID"; wait_gone "$PID"

GPUSNAP_FAULT=restore-after-criu=term run_gpusnap restore -D "$img"
check "SIGTERM before the process continued: ends by it (rc $RC)" test "$RC" = 143
check "no process is left" wait_gone "$PID" 5
run_gpusnap restore -D "$img"; expect "the image restores after that" 0
verify_ok "the data after the restore"
test_done
