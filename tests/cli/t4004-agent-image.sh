#!/usr/bin/env bash
# t4004 - `gpusnap dump` and `restore` on the agent path without a GPU: the
# app of t4002 (tests/agent/agent_app.c --signals) under libgpusnap.so on the
# host-memory fake driver (tests/fake/fake_vmm_driver.c, whose asynchronous
# copies happen only when waited for, as DMA would), dumped with the real
# CRIU 4. The agent streams its GPU data through a small pinned ring into the
# image and back; checked here:
#  - dump: streamed, a ring smaller than the data, nothing left pinned, the
#    process gone; restore: every byte back at its address (the app checks);
#  - --leave-running: the app runs on with its data after the dump;
#  - a corrupt chunk read by the agent (restore --no-verify): refused, no
#    process left, the image unchanged, a restore from the good image works;
#  - a dump whose CRIU step fails after the image was written, and whose
#    image was damaged meanwhile: the agent cannot take its data back, the
#    process stays suspended with its memory released and the image kept;
#    `gpusnap resume --image` is refused while it is damaged and works once
#    it is whole again;
#  - a full disk while streaming: refused (exit 13), the process runs on with
#    its data, nothing published, nothing left pinned;
#  - an agent that offers no streamed dump (GPUSNAP_AGENT_NO_DUMP_RUNNING=1,
#    as before it existed): dumped through staging memory, restored;
#  - a reserved staging pool (GPUSNAP_RESERVE) is freed for the dump, so
#    CRIU does not carry it;
#  - a block left zero: found on the GPU, ZERO chunks in the image, and the
#    restore sets them on the GPU without reading them (fresh memory holds
#    stale bytes in these tests, FAKE_VMM_DIRTY_FRESH=1, so a chunk left
#    unset shows).
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

MNT=""
signals_app_env agent_app criu
# 300 MiB in one block: several 64 MiB chunks in one allocation, beside 2000 small ones in slabs
export AGENT_APP_BIG_MB=300
# two IO threads: a ring of 2 x 2 x 64 MiB, each buffer reused many times
export GPUSNAP_IO_THREADS=2

cleanup_more() {
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
}

flip() { # flip FILE OFFSET: inverts one bit
  python3 -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^0x20]))' "$1" "$2"
}

# ---- dump (streamed), gone, restore ----
start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
img=$TEST_TMP/img
run_gpusnap dump --json -D "$img" "$PID"; expect "dump (agent path)" 0
check "the agent streamed the data (no staging pool)" test "$(jget "['streamed']")" = True
data=$(jget "['gpu_data_bytes']")
ring=$(jget "['ring_bytes']")
check "the ring ($ring bytes) is smaller than the data ($data bytes)" test "$ring" -gt 0 -a "$ring" -lt "$data"
check "the data is the app's: at least its 300 MiB block ($data bytes)" test "$data" -gt $((300 << 20))
check "nothing stays pinned after the dump ($(pinned) bytes)" test "$(pinned)" = 0
check "the dumped process is gone" wait_gone "$PID" 5
check "no temporary directories left" test -z "$(tmp_dirs "$img")"
run_gpusnap inspect --json --verify "$img"; expect "inspect --verify of the image" 0
check "the image says agent and holds the data" \
  test "$(jget "['image']['how']")" = agent -a "$(jget "['verify']['ok']")" = True
good=$(sums "$img")

run_gpusnap restore --json -D "$img"; expect "restore" 0
check "restore streamed the data through the agent" python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["times"]; sys.exit(not ("agent_image_read_s" in t and "agent_recreate_s" in t))' "$OUT_TXT"
check "the agent's copy ring was got ready while the driver restored the process" test "$(jget "['ring_prepared']")" = True
check "the restored process runs" alive "$PID"
verify_ok "every byte is back at its address after restore"
check "restore re-created all the physical memory" test "$(phys)" = "$phys0"
check "nothing stays pinned after the restore" test "$(pinned)" = 0

# ---- --leave-running ----
img2=$TEST_TMP/img2
run_gpusnap dump --leave-running --json -D "$img2" "$PID"; expect "dump --leave-running" 0
check "the process runs on" alive "$PID"
# it goes on before the publish: how long it stood still is less than the whole dump
check "dump --json says how long it stood still, less than the dump" python3 -c 'import json,sys
t=json.load(open(sys.argv[1]))["times"]; sys.exit(not (0 < t["paused_s"] < t["total_s"] and t["publish_s"] > 0))' "$OUT_TXT"
check "the image is published and verifies" "$GPUSNAP_BIN" inspect --verify "$img2"
verify_ok "its data after dump --leave-running"
check "its memory is on the GPU again" test "$(phys)" = "$phys0"
check "nothing stays pinned after --leave-running" test "$(pinned)" = 0
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$img2"; expect "restore of the --leave-running image" 0
verify_ok "the data from the --leave-running image"
# the process goes on before the publish: a publish that fails then leaves it running with its data,
# the image at DIR as it was, and nothing else
s_img2=$(sums "$img2")
GPUSNAP_FAULT=image-publish=fail:EIO run_gpusnap dump --leave-running -D "$img2" "$PID"
expect "dump --leave-running whose publish fails after the process went on" 1 "process $PID runs on, but its image was not published at '$img2': cannot rename"
check "... in one line" one_error
check "the process runs on with its memory on the GPU" test "$(phys)" = "$phys0" -a "$(fake_state)" = 0
verify_ok "its data after the failed publish"
check "the image at DIR is as it was" test "$(sums "$img2")" = "$s_img2"
check "no temporary directory left" test -z "$(tmp_dirs "$img2")"
# while that publish runs, the process is free for other commands: a suspend right after a checkpoint
# (a scheduler preempting the job) does not wait for the fsync
GPUSNAP_FAULT=image-publish=hold:4 "$GPUSNAP_BIN" dump --leave-running -D "$img2" "$PID" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
bg=$!
# the process runs again and no gpusnap works on it (state names none): the dump is in its publish (held 4 s)
runs_again() { [ -n "$(tmp_dirs "$img2")" ] && [ "$("$GPUSNAP_BIN" state "$PID" 2>&1)" = running ]; }
for _ in $(seq 3000); do runs_again && break; sleep 0.01; done
check "the process runs again while its image is being published" runs_again
run_gpusnap suspend "$PID"; expect "a suspend during that publish" 0
check "... while the dump is still publishing" kill -0 "$bg"
run_gpusnap resume "$PID"; expect "and its resume" 0
rc=0; wait "$bg" || rc=$?
check "the dump then completes (rc $rc)" test "$rc" = 0
check "... and its image verifies" "$GPUSNAP_BIN" inspect --verify "$img2"
verify_ok "the data after a suspend during the publish of a checkpoint"

# ---- a corrupt chunk found by the agent itself ----
kill -9 "$PID"; wait_gone "$PID"
bad=$TEST_TMP/bad
cp -a "$img" "$bad"
flip "$bad/gpu-data-0000.img" $((4096 + (100 << 20)))
s0=$(sums "$bad")
run_gpusnap restore --no-verify -D "$bad"; expect "restore --no-verify of a corrupt chunk is refused" 11 "is corrupt"
check "no process is left (killed by gpusnap)" gone_or_zombie "$PID"
check "the image is unchanged" test "$(sums "$bad")" = "$s0"
run_gpusnap restore -D "$bad"; expect "restore (checksum pass) of a corrupt chunk is refused" 11 "is corrupt"
run_gpusnap restore -D "$img"; expect "restore from the good image after that" 0
verify_ok "the data after the refused restores"
check "the good image is unchanged" test "$(sums "$img")" = "$good"

# ---- CRIU fails after the agent wrote the image, which was damaged meanwhile ----
failing=$TEST_TMP/failing-criu
cat >"$failing" <<EOF
#!/bin/sh
case "\$1" in --version|check) exec "$GPUSNAP_CRIU" "\$@";; esac
while [ \$# -gt 0 ]; do
  [ "\$1" = --images-dir ] && python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(4096+4096); b=f.read(1); f.seek(4096+4096); f.write(bytes([b[0]^0x20]))' "\$2/../gpu-data-0000.img"
  shift
done
echo "Error (criu/cr-dump.c:1): injected failure" >&2
exit 1
EOF
chmod 755 "$failing"
img3=$TEST_TMP/img3
GPUSNAP_CRIU=$failing run_gpusnap dump -D "$img3" "$PID"
expect "dump with CRIU failing" 15 "criu dump of $PID failed"
check "the agent could not take its data back: it says where the image is" grep -q "gpusnap resume --image" "$ERR_TXT"
kept=$(ls -d "$img3".kept-"$PID"-* 2>/dev/null)
check "the image is kept under a name of its own ($kept)" test -n "$kept" -a -f "$kept/manifest.img"
check "the message names the kept image" grep -qF "kept in '$kept'" "$ERR_TXT"
check "no temporary directory is left for a later dump to clean up" test -z "$(tmp_dirs "$img3")"
check "nothing was published" test ! -e "$img3"
check "the process is alive" alive "$PID"
check "its GPU memory is released (suspended, data in the image)" test "$(phys)" = 0
check "nothing stays pinned" test "$(pinned)" = 0
run_gpusnap resume --image "$kept" "$PID"; expect "resume from the damaged image is refused" 11 "is corrupt"
check "the process stays suspended, its memory released again" test "$(phys)" = 0
flip "$kept/gpu-data-0000.img" $((4096 + 4096))
run_gpusnap resume --image "$kept" "$PID"; expect "resume from the mended image" 0
check "its memory is back" test "$(phys)" = "$phys0"
verify_ok "the data after the retried resume"
rm -rf "$kept"

# ---- the disk fills while streaming ----
MNT=$TEST_TMP/small
mkdir -p "$MNT"
if mount -t tmpfs -o size=64m,mode=0700 tmpfs "$MNT" 2>/dev/null; then
  run_gpusnap dump -D "$MNT/img" "$PID"; expect "dump onto a full disk is refused" 13 "no space left"
  check "the process runs on" alive "$PID"
  verify_ok "its data after the refused dump"
  check "its memory stayed on the GPU" test "$(phys)" = "$phys0"
  check "nothing stays pinned" test "$(pinned)" = 0
  check "nothing published, no temporary directory left" test -z "$(ls -A "$MNT")"
  umount "$MNT" && MNT=""
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk case is not tested"
fi

# ---- a zero block: found on the GPU, ZERO chunks in the image, nothing copied for it ----
kill -9 "$PID"; wait_gone "$PID"
# fresh memory holds stale bytes (fake_agent_env): the restore must set the zero block, not leave it
AGENT_APP_ZERO_MB=8 start_app
verify_ok "zero block: the app's data after allocation"
img6=$TEST_TMP/img6
run_gpusnap dump --json -D "$img6" "$PID"; expect "zero block: dump (streamed)" 0
check "zero block: the agent found it on the GPU ($(jget "['gpu_zero_bytes']") bytes)" \
  test "$(jget "['gpu_zero_bytes']")" -ge $((8 << 20))
wait_gone "$PID" 5
run_gpusnap inspect --json --verify "$img6"; expect "zero block: inspect --verify" 0
check "zero block: ZERO chunks in the image ($(jget "['image']['chunks']['zero_bytes']") bytes) that verify" \
  test "$(jget "['image']['chunks']['zero_bytes']")" -ge $((8 << 20)) -a "$(jget "['verify']['ok']")" = True
run_gpusnap restore --json -D "$img6"; expect "zero block: restore" 0
check "zero block: the restore set its ZERO chunks on the GPU, without reading or copying them ($(jget "['zero_bytes']") bytes)" \
  test "$(jget "['zero_bytes']")" -ge $((8 << 20))
verify_ok "zero block: every byte is back after restore, the zero block included"

# ---- an agent without the streamed dump (gpusnap builds before it) ----
# the command line then suspends into staging memory and has the agent write
# the image from there (gs_agent_image_save); restore is the same
kill -9 "$PID"; wait_gone "$PID"
# with an 8 MiB block left zero: its chunks are not in staging, the image gets ZERO chunks for them
GPUSNAP_AGENT_NO_DUMP_RUNNING=1 AGENT_APP_ZERO_MB=8 start_app
verify_ok "old agent: the app's data after allocation, a zero block among it"
img5=$TEST_TMP/img5
run_gpusnap dump --json -D "$img5" "$PID"; expect "old agent: dump (through staging)" 0
check "old agent: the data went through staging, not streamed" test "$(jget "['streamed']")" = False
check "old agent: the image holds the data ($(jget "['gpu_data_bytes']") bytes)" test "$(jget "['gpu_data_bytes']")" -gt $((300 << 20))
check "old agent: nothing stays pinned after the dump ($(pinned) bytes)" test "$(pinned)" = 0
check "old agent: the dumped process is gone" wait_gone "$PID" 5
run_gpusnap inspect --json --verify "$img5"; expect "old agent: inspect --verify" 0
check "old agent: the image says agent and verifies" \
  test "$(jget "['image']['how']")" = agent -a "$(jget "['verify']['ok']")" = True
check "old agent: the zero block is ZERO chunks in the image ($(jget "['image']['chunks']['zero_bytes']") bytes)" \
  test "$(jget "['image']['chunks']['zero_bytes']")" -ge $((8 << 20))
run_gpusnap restore -D "$img5"; expect "old agent: restore" 0
verify_ok "old agent: every byte is back after restore"

# ---- a reserved staging pool is not carried by CRIU ----
# pinned: the pool itself is pinned; bounce (the default): the pool is only
# populated and its kept ring is what is pinned, made after the pool
for mode in pinned bounce; do
  kill -9 "$PID"; wait_gone "$PID"
  GPUSNAP_STAGING_MODE=$mode GPUSNAP_RESERVE=128M start_app
  if [ $mode = pinned ]; then want=$((128 << 20)); else want=1; fi
  for _ in $(seq 300); do [ "$(pinned)" -ge $want ] && break; sleep 0.1; done
  check "$mode: the app holds a reserved staging pool ($(pinned) bytes pinned)" test "$(pinned)" -ge $want
  run_gpusnap dump --leave-running --json -D "$TEST_TMP/img4-$mode" "$PID"; expect "$mode: dump --leave-running with a reserved pool" 0
  cpu=$(jget "['cpu_bytes']")
  check "$mode: CRIU's part did not carry the reserved pool ($cpu bytes)" test "$cpu" -lt $((64 << 20))
  verify_ok "$mode: the data after the dump with a reserved pool"
done

kill -9 "$PID"; wait_gone "$PID"
test_done
