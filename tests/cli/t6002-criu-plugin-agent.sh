#!/usr/bin/env bash
# t6002-criu-plugin-agent - gpusnap_criu.so in plain criu runs on the agent
# path: the app of t4004 (tests/agent/agent_app --signals) under
# libgpusnap.so on the host-memory fake driver, with the real CRIU 4:
#  - criu dump: the agent streams the GPU data into gpusnap/<pid>/ of CRIU's
#    image directory, which it gets as a descriptor over its control socket
#    (DUMP_FD: an agent in a container's mount namespace could not resolve
#    CRIU's path), then the driver checkpoints the rest; the image verifies;
#  - criu restore: the driver restores the process (held by CRIU), the agent
#    loads the data once CRIU let it go (RESUME_FD): every byte is back;
#  - the checksum pass runs alongside CRIU (made slow: CRIU forks the task
#    before its result, which is waited for before the task runs);
#  - a restore CRIU fails before the pass's result is taken: the exit hook
#    ends the pass at once, no process is left, CRIU logs no dead task;
#  - a bad chunk: the pass finds it while CRIU restores, the task is killed
#    before it ran and criu fails; without the pass (no_verify = yes in the
#    plugin's configuration file) the agent finds it while loading and the
#    process is killed; GPUSNAP_PLUGIN_NO_VERIFY=0 wins over the file;
#  - a tree of two agent processes: every gate closed before either dumps;
#  - --leave-running: the app runs on with its data back on the GPU; its image is whole when criu
#    returns, and the resume helper syncs it afterwards;
#  - GPUSNAP_PLUGIN_COMPRESS=zstd: the agent's image is compressed and restores; an unknown codec
#    refuses the dump, naming the setting;
#  - a dump that fails after CRIU froze the tree: the app runs on with its data;
#  - a tree holding an io_uring (GPUSNAP_ALLOW_IO_URING=1): refused before
#    the GPU part, naming the process; the app runs on with its data.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/plugin_lib.sh"

signals_app_env agent_app criu
plugin_env
export AGENT_APP_BIG_MB=100
export GPUSNAP_IO_THREADS=2

flip() { # flip FILE OFFSET: inverts one bit
  python3 -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^0x20]))' "$1" "$2"
}
# loaded [PID]: the agent of PID (default $PID) says running within 30 s: it loaded its GPU data after the
# restore (criu returns only once it has: the plugin's exit hook waits; this app's verify reads the fake's
# device memory directly, past the agent's gate, so it must not come earlier)
loaded() { agent_says "${1:-$PID}" running; }

# ---- dump, gone, restore ----
start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
img=$TEST_TMP/img
criu_dump "$img" "$PID"
check "criu dump with the plugin succeeds" rc_ok
check "the plugin took the agent path" log_has "$img/dump.log" "($(cat "/proc/$PID/comm" 2>/dev/null || echo agent_app)) is off the GPU: agent path"
check "the agent wrote through the descriptor it was passed (DUMP_FD)" \
  log_has "$img/dump.log" "through the image directory's descriptor"
check "the dumped process is gone" wait_gone "$PID" 5
run_gpusnap inspect --json --verify "$img/gpusnap/$PID"; expect "inspect --verify of gpusnap/$PID" 0
check "the image says agent and verifies" test "$(jget "['image']['how']")" = agent -a "$(jget "['verify']['ok']")" = True
good=$(sums "$img/gpusnap")

criu_restore "$img"
check "criu restore with the plugin succeeds" rc_ok
check "it restored $PID" [ "$RPID" = "$PID" ]
check "its agent loaded the GPU data from the image" loaded
verify_ok "every byte is back at its address after the restore"
check "the physical memory was re-created" test "$(phys)" = "$phys0"
check "nothing stays pinned after the restore" test "$(pinned)" = 0
check "the images are unchanged" test "$(sums "$img/gpusnap")" = "$good"

# ---- --leave-running ----
criu_dump "$TEST_TMP/lr" "$PID" --leave-running
check "criu dump --leave-running succeeds" rc_ok
check "its GPU image is published when criu returns" test -f "$TEST_TMP/lr/gpusnap/$PID/manifest.img"
check "the process runs on" alive "$PID"
check "its agent took its data back" loaded
# the image's fsync runs in the helper once the process runs again, not in the pause
check "... and then the helper synced its image" \
  log_soon "$TEST_TMP/lr/dump.log" "GPU image of process $PID is on the disk (synced in"
run_gpusnap inspect --json --verify "$TEST_TMP/lr/gpusnap/$PID"; expect "inspect --verify of the --leave-running image" 0
# the helper's fsync failing: said in CRIU's log, and the process runs on with its data
GPUSNAP_FAULT=image-sync=fail:EIO criu_dump "$TEST_TMP/lr2" "$PID" --leave-running
check "criu dump --leave-running whose later sync fails succeeds" rc_ok
check "... the process runs on" alive "$PID"
check "... its agent took its data back" loaded
check "... CRIU's log says the image may not be on the disk, and why" log_soon "$TEST_TMP/lr2/dump.log" \
  "GPU image of process $PID at '$TEST_TMP/lr2/gpusnap/$PID' may not be on the disk: syncing"
verify_ok "its data after the dump whose sync failed"
verify_ok "its data after criu dump --leave-running"
check "its memory is on the GPU again" test "$(phys)" = "$phys0"

# ---- a dump that fails after CRIU froze the tree ----
GPUSNAP_FAULT=plugin-checkpoint criu_dump "$TEST_TMP/fail" "$PID"
check "criu dump fails (injected at CHECKPOINT_DEVICES)" rc_failed
check "the process runs on" alive "$PID"
check "its agent took its data back" loaded
verify_ok "its data after the failed dump"
check "its memory is on the GPU again" test "$(phys)" = "$phys0"

# ---- a restore CRIU fails before RESUME_DEVICES_LATE (the PID is taken: the app still runs) while the pass runs ----
t0=$(date +%s%N)
GPUSNAP_FAULT=plugin-verify=hold:20 criu_restore "$img"
t1=$(date +%s%N)
check "criu restore fails (pid $PID in use)" rc_failed
check "... CRIU's own reason" log_has "$TEST_TMP/restore.log" "Can't fork for $PID"
check "... criu did not wait for the checksum pass (the exit hook ended it; $(((t1 - t0) / 1000000)) ms)" \
  test $(((t1 - t0) / 1000000)) -lt 15000
check "... no process of that criu is left (the pass's process reaped)" \
  bash -c "! pgrep -f '[r]estore --images-dir $img ' >/dev/null"
check "... CRIU did not take the pass's end for a task's ('killed by signal')" \
  bash -c "! grep -q 'killed by signal\|exited, status' '$TEST_TMP/restore.log'"
check "the app runs on" alive "$PID"
kill -9 "$PID"; wait_gone "$PID"

# ---- the checksum pass runs alongside CRIU (a process of the plugin's), its result taken before any task runs ----
# plugin-verify=hold:2 makes the pass slow: CRIU forks the tasks meanwhile, and the result is waited for at
# RESUME_DEVICES_LATE (before, the pass ran in init, before CRIU created any task)
GPUSNAP_FAULT=plugin-verify=hold:2 criu_restore "$img"
check "criu restore with a slow checksum pass succeeds" rc_ok
check "its agent loaded the GPU data" loaded
verify_ok "the data after a restore with a slow checksum pass"
after_fork() { # the pass's result is logged after CRIU forked the task and before the task was put back on the GPU
  local r=$TEST_TMP/restore.log f g b
  f=$(grep -n "Forking task with $PID pid" "$r" | head -n 1 | cut -d: -f1)
  g=$(grep -n "checksums of its GPU image good" "$r" | head -n 1 | cut -d: -f1)
  b=$(grep -n "process $PID is back on the GPU" "$r" | head -n 1 | cut -d: -f1)
  [ -n "$f" ] && [ -n "$g" ] && [ -n "$b" ] && [ "$f" -lt "$g" ] && [ "$g" -lt "$b" ] ||
    { echo "    forking at line ${f:-none}, checksums at ${g:-none}, back on the GPU at ${b:-none}"; return 1; }
}
check "... the pass ran while CRIU created the task, its result waited for before the task ran" after_fork
check "... the pass's process is gone (no process of that criu left)" bash -c "! pgrep -f '[r]estore --images-dir $img ' >/dev/null"
kill -9 "$PID"; wait_gone "$PID"

# ---- a bad chunk: found by the pass while CRIU restores; every task killed before it ran ----
cp -a "$img" "$TEST_TMP/bad"
flip "$TEST_TMP/bad/gpusnap/$PID/gpu-data-0000.img" $((4096 + (10 << 20)))
: >"$TEST_TMP/agent.log"
criu_restore "$TEST_TMP/bad"
check "criu restore of an image with a bad chunk fails" rc_failed
check "... the plugin names the bad chunk" log_has "$TEST_TMP/restore.log" "is corrupt"
check "... the task was killed before it ran" log_has "$TEST_TMP/restore.log" "killed before it ran"
check "... no agent was asked to load (nothing ran)" bash -c "! grep -q 'waiting for the agents' '$TEST_TMP/restore.log'"
check "... no process at $PID" wait_gone "$PID"
# no checksum pass (no_verify in the plugin's configuration file beside it): the agent finds the bad chunk
# while loading, the process goes, CRIU's log says why
echo "no_verify = yes" >"$PLUGIN_DIR/gpusnap_criu.conf"
criu_restore "$TEST_TMP/bad"
check "with no_verify = yes in gpusnap_criu.conf criu restores the task (the load comes after)" rc_ok
check "... the plugin read that file" log_has "$TEST_TMP/restore.log" "settings from '$PLUGIN_DIR/gpusnap_criu.conf'"
check "... the agent finds the bad chunk while loading and the process is killed" wait_gone "$PID" 30
check "... CRIU's log says why" log_has "$TEST_TMP/restore.log" "could not load its GPU data"
# the environment wins over the file
GPUSNAP_PLUGIN_NO_VERIFY=0 criu_restore "$TEST_TMP/bad"
check "GPUSNAP_PLUGIN_NO_VERIFY=0 wins over the file: the bad chunk is refused" rc_failed
check "... named" log_has "$TEST_TMP/restore.log" "is corrupt"
check "... no process at $PID" wait_gone "$PID"
rm -f "$PLUGIN_DIR/gpusnap_criu.conf"
criu_restore "$img"
check "the good image restores after that" rc_ok
check "its agent loaded the GPU data" loaded
verify_ok "the data from the good image"
kill -9 "$PID"; wait_gone "$PID"
# the --leave-running image (written through the page cache, a data file per writer thread) restores too
check "the --leave-running image has several data files ($(ls "$TEST_TMP/lr/gpusnap/$PID" | grep -c '^gpu-data-'))" \
  test "$(ls "$TEST_TMP/lr/gpusnap/$PID" | grep -c '^gpu-data-')" -gt 1
criu_restore "$TEST_TMP/lr"
check "criu restore of the --leave-running image succeeds" rc_ok
check "its agent loaded the GPU data" loaded
verify_ok "the data from the --leave-running image"
# the agents compress their images' chunks when the plugin is told to (GPUSNAP_PLUGIN_COMPRESS, key compress)
GPUSNAP_PLUGIN_COMPRESS=zstd criu_dump "$TEST_TMP/z" "$PID" --leave-running
check "GPUSNAP_PLUGIN_COMPRESS=zstd: criu dump succeeds" rc_ok
run_gpusnap inspect --json --verify "$TEST_TMP/z/gpusnap/$PID"; expect "inspect --verify of the compressed image" 0
check "its chunks are zstd's" json_get "$OUT_TXT" "['image']['chunks']['codec'] == 'zstd' or exit(1)"
GPUSNAP_PLUGIN_COMPRESS=gzip criu_dump "$TEST_TMP/zbad" "$PID" --leave-running
check "GPUSNAP_PLUGIN_COMPRESS=gzip: the dump is refused" rc_failed
check "... naming the setting" log_has "$TEST_TMP/zbad/dump.log" "GPUSNAP_PLUGIN_COMPRESS='gzip' is not a codec"
verify_ok "the data after the refused dump"
kill -9 "$PID"; wait_gone "$PID"
criu_restore "$TEST_TMP/z"
check "criu restore of the compressed image succeeds" rc_ok
check "its agent loaded the GPU data" loaded
verify_ok "the data from the compressed image"
kill -9 "$PID"; wait_gone "$PID"

# ---- a tree of two agent processes: both gated before either waits, both dumped and restored ----
la=$TEST_TMP/a.log lb=$TEST_TMP/b.log
: >"$la"; : >"$lb"
# as start_app: a sanitizer build's runtime first, then the agent (gpusnap run would put the agent first)
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  launch="env LD_PRELOAD='$asan $GPUSNAP_BUILD/libgpusnap.so'"
else
  launch="'$GPUSNAP_BIN' run --"
fi
(close_inherited_fds && exec setsid bash -c "$launch '$app' --signals >>'$la' 2>/dev/null </dev/null &
  $launch '$app' --signals >>'$lb' 2>/dev/null </dev/null & wait" </dev/null >/dev/null 2>&1) &
disown
tree=$!
ready_pid() { local i p; for ((i = 0; i < 300; i++)); do p=$(awk '/^READY/ {print $2; exit}' "$1"); [ -n "$p" ] && { echo "$p"; return; }; sleep 0.1; done; }
pa=$(ready_pid "$la"); pb=$(ready_pid "$lb")
both_started() { [ -n "$pa" ] && [ -n "$pb" ]; }
check "both apps of the tree started" both_started
criu_dump "$TEST_TMP/tree" "$tree"
check "criu dump of the tree succeeds" rc_ok
gates_first() { # two gates closed, both logged before the first agent's data was written
  local d=$TEST_TMP/tree/dump.log g w
  [ "$(grep -c "the agent's gate is closed" "$d")" = 2 ] || return 1
  g=$(grep -n "the agent's gate is closed" "$d" | tail -n 1 | cut -d: -f1)
  w=$(grep -n "the agent wrote" "$d" | head -n 1 | cut -d: -f1)
  [ -n "$w" ] && [ "$g" -lt "$w" ]
}
check "both agents' gates closed before either dumped" gates_first
gated() { [ "$(grep -c 'is off the GPU: agent path' "$TEST_TMP/tree/dump.log")" = 2 ]; }
check "both took the agent path" gated
# CRIU restores each task at its PID: the root and both apps must be gone (the root reaped), not only one
tree_gone() { wait_gone "$pa" && wait_gone "$pb" && wait_gone "$tree"; }
check "the tree is gone" tree_gone
criu_restore "$TEST_TMP/tree"
check "criu restore of the tree succeeds" rc_ok
check "the first app's agent loaded its data" loaded "$pa"
check "the second app's agent loaded its data" loaded "$pb"
log=$la PID=$pa verify_ok "the first app's data after the restore"
log=$lb PID=$pb verify_ok "the second app's data after the restore"
kill -9 "$pa" "$pb" "$RPID" 2>/dev/null

# ---- an app holding an io_uring (its agent told to let it through): refused before the GPU part ----
log=$TEST_TMP/app.log
GPUSNAP_ALLOW_IO_URING=1 FAKE_APP_IO_URING=start start_app
if grep -q '^IO_URING preinit=untried start=[0-9]' "$log"; then
  criu_dump "$TEST_TMP/uring" "$PID"
  check "criu dump of a tree holding an io_uring fails" rc_failed
  check "the plugin names the process and io_uring" log_has "$TEST_TMP/uring/dump.log" "process $PID (agent_app) holds an io_uring"
  not_off() { ! grep -q "is off the GPU" "$TEST_TMP/uring/dump.log"; }
  check "before any GPU data moved" not_off
  check "the app runs on" alive "$PID"
  verify_ok "its data after the refused dump"
else
  echo "SKIP: this kernel gives no io_uring ($(grep '^IO_URING' "$log")): the plugin's refusal is not tested"
fi

test_done
