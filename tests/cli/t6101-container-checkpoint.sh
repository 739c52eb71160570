#!/usr/bin/env bash
# t6101 - a real container engine checkpoints a container whose process runs
# the gpusnap agent, exports it to a tar and restores it from the tar: Podman
# (Debian 12: 4.3) with runc, which runs CRIU (`criu swrk`, found in PATH).
# Debian's crun is built without CRIU (`crun --version` lacks +CRIU), so runc
# it is. No registry: the image is imported from a tar of a directory holding
# the test apps and the libraries they load (the host's own). In the
# container, tests/agent/agent_app (--signals) runs under libgpusnap.so on the
# host-memory fake driver (tests/fake/fake_vmm_driver.c: "device memory" is a
# memfd), and tests/apps/cpu_counter counts beside it. Podman runs on storage
# of the test's own (--root, --runroot, --tmpdir under $TEST_TMP) and CRIU
# gets its options from a private config file named by the container's
# annotation org.criu.config (runc's way; /etc/criu/runc.conf is never
# touched). Podman hands runc no environment but PATH, so the criu in PATH is
# a wrapper of the test's that sets the environment CRIU's plugins see.
#  A. plain CRIU, the container in its own PID namespace: the dump loads the
#     private plugin folder (a marker plugin, tests/apps/criu_marker_plugin.c,
#     says so), the archive carries CRIU's images and the rootfs change; the
#     restored counter goes on from where it stopped, the fake GPU data is
#     every byte as it was (the app checks its pattern), /etc/criu unchanged.
#  B. the same through gpusnap's CRIU plugin (gpusnap_criu.so of the build
#     tree, in the private plugin folder), when it is built: the archive
#     carries its GPU image (checkpoint/gpusnap/). The container shares the
#     host's PID namespace here, as the fake driver names its state files by
#     the PID its process sees (the real driver knows host PIDs). The fake
#     driver's cuInit starts a thread, as libcuda's does: criu dumps the
#     container's mounts from inside its mount namespace, which a
#     multithreaded process cannot enter, so the plugin's driver calls must
#     stay out of criu's process (they did not, once). Without the
#     plugin, or in a sanitizer build (criu cannot load their runtime), this
#     part prints a SKIP line and counts nothing. The plugin's settings come
#     from gpusnap_criu.conf beside it (no environment reaches criu here): it
#     reads them, a bad value refuses a checkpoint (the container runs on),
#     so does `leave_running = no` against `checkpoint --leave-running`,
#     and `checkpoint --leave-running` (runc's criu swrk: not on criu's
#     command line) leaves the container running with its GPU data back.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), podman
# and runc (scripts/install-deps.sh installs them), python3; skips visibly
# where one is missing or where podman cannot start any container here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/container_lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
app=$build/tests/agent/agent_app
counter=$build/tests/apps/cpu_counter
APP_IO=signals
fake_agent_env criu
podman_env
[ -x "$counter" ] || { echo "not ok - missing $counter"; exit 1; }

etc_criu_before=$(ls -la --time-style=full-iso /etc/criu 2>&1; cat /etc/criu/* 2>/dev/null)
mkdir -p "$TEST_TMP/bin" "$TEST_TMP/fake-b"
marker=$TEST_TMP/marker
# What CRIU's plugins see: the marker's file, and the fake driver for gpusnap's plugin (part B), whose
# cuInit starts a thread as libcuda's does (criu, multithreaded, could not enter the container's mount
# namespace to dump its /dev: the plugin must make its driver calls in a process of its own)
cat >"$TEST_TMP/bin/criu" <<EOF
#!/bin/sh
export GPUSNAP_TEST_PLUGIN_MARKER='$marker'
export GPUSNAP_LIBCUDA='$GPUSNAP_LIBCUDA' FAKE_CUDA_DIR='$TEST_TMP/fake-b' FAKE_CUDA_CRIU=1 FAKE_CUDA_INIT_THREAD=1
exec '$GPUSNAP_CRIU' "\$@"
EOF
chmod 755 "$TEST_TMP/bin/criu"
export PATH=$TEST_TMP/bin:$PATH

# ---- the image: the apps, the agent, the fake driver and what they load ----
image=localhost/gpusnap-t6101:1
make_image "$image" "$app" "$counter" "$build/libgpusnap.so" "$GPUSNAP_LIBCUDA"
# a sanitizer build's runtime has to come before the agent
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
preload="${asan:+$asan }/app/libgpusnap.so"

# start_container NAME FAKE_DIR [PODMAN ARGS...]: the apps in container NAME; sets HPID (the
# app's host PID), PID, log and count (its files seen from the host).
start_container() {
  local name=$1 fake=$2
  shift 2
  pm_out run -d --name "$name" --network none "${limits[@]}" --annotation "org.criu.config=$TEST_TMP/criu-$name.conf" \
    -e "LD_PRELOAD=$preload" -e "GPUSNAP_LIBCUDA=/app/$(basename "$GPUSNAP_LIBCUDA")" -e "FAKE_CUDA_DIR=$fake" \
    -e FAKE_CUDA_CRIU=1 -e GPUSNAP_AGENT_LOG=/out/agent.log "$@" "$image" \
    /bin/sh -c '/app/cpu_counter /out/count & exec /app/agent_app --signals >/out/app.log 2>/out/app.err'
  try "podman run $name (runc)" pm_ok || return 1
  try "$name: the apps started" wait_started "$name"
}
# wait_started NAME: the container's app printed READY and its counter runs; sets HPID, PID, log, count
wait_started() {
  HPID=$(pm inspect -f '{{.State.Pid}}' "$1" 2>/dev/null)
  PID=$HPID
  [ "${HPID:-0}" -gt 0 ] 2>/dev/null || { echo "    $1 has no process ($(pm inspect -f '{{.State.Status}}' "$1" 2>&1))"; return 1; }
  log=/proc/$HPID/root/out/app.log
  count=/proc/$HPID/root/out/count
  for _ in $(seq 100); do
    grep -q '^READY' "$log" 2>/dev/null && wait_lines "$count" 10 && return 0
    sleep 0.1
  done
  echo "    $1 did not start: $(tail -n 3 "/proc/$HPID/root/out/app.err" 2>&1)"
  return 1
}
pm_failed() { [ "$RC" != 0 ]; }
# try TITLE COMMAND...: as check, and returns whether COMMAND succeeded
try() {
  if "${@:2}"; then pass "$1"; return 0; fi
  fail "$1" "command failed: ${*:2}"
  return 1
}
# criu_log FILE: the lines of CRIU's newest FILE (dump.log, restore.log; podman -k keeps them) that
# say what failed, and the plugin's
criu_log() {
  local f
  f=$(find "$TEST_TMP/storage" "$TEST_TMP/runroot" -name "$1" -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-)
  [ -n "$f" ] && grep -h "Error (\|gpusnap: " "$f" | tail -n 8 | sed 's/^/    /'
  return 0
}
# log_says FILE TEXT: CRIU's newest FILE (dump.log, restore.log) has a line with TEXT
log_says() {
  local f
  f=$(find "$TEST_TMP/storage" "$TEST_TMP/runroot" -name "$1" -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-)
  grep -qF -- "$2" "${f:-/dev/null}" || { echo "    ${f:-no $1} lacks '$2'"; return 1; }
}
# agent_listens: the app's agent accepts a connection on its control socket (/run/gpusnap in the container)
agent_listens() {
  local nspid sock
  nspid=$(awk '/^NSpid/ {print $NF}' "/proc/$HPID/status")
  sock=/proc/$HPID/root/run/gpusnap/agent-$nspid.sock
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' "$sock" 2>/dev/null ||
    { echo "    no agent at $sock: $(ls -l "$(dirname "$sock")" 2>&1 | tail -n +2)"; return 1; }
}
# counts_on: the counter's log is 1, 2, 3 ... without a gap or a restart, and ends past $1
counts_on() {
  awk -v after="$1" 'NR != $1 {print "    line " NR " is " $1; bad = 1} END {if (NR <= after) {print "    " NR " lines, not past " after; bad = 1}; exit bad}' "$count"
}
# archive_count TAR: the counter's last line as the archive's rootfs change holds it
archive_count() { tar -xOf "$1" rootfs-diff.tar | tar -xO out/count | tail -n 1; }
# checkpoint_remove PART NAME: checkpoint NAME to $TEST_TMP/NAME.tar and remove it; RESTORE_FROM is the counter then
checkpoint_remove() {
  local part=$1 name=$2 tar=$TEST_TMP/$2.tar n0
  verify_ok "$part: the fake GPU data before the checkpoint"
  check "$part: the app's agent listens on its control socket" agent_listens
  rm -f "$marker"
  pm_out container checkpoint -k --export="$tar" "$name"
  try "$part: podman container checkpoint --export" pm_ok || { criu_log dump.log; return 1; }
  check "$part: the checkpoint stopped the container" test "$(pm inspect -f '{{.State.Status}}' "$name")" = exited
  check "$part: the archive carries CRIU's images" sh -c "tar -tf '$tar' | grep -qx 'checkpoint/inventory.img'"
  n0=$(archive_count "$tar")
  check "$part: the archive carries the rootfs change (the counter at ${n0:-?})" test "${n0:-0}" -ge 10
  pm_out rm "$name"
  check "$part: the checkpointed container is removed (only the archive is left)" pm_ok
  RESTORE_FROM=$n0
}
# restore_check PART NAME: restore NAME from its archive; it goes on as it was
restore_check() {
  local part=$1 name=$2 tar=$TEST_TMP/$2.tar
  pm_out container restore -k --import="$tar"
  try "$part: podman container restore --import" pm_ok || { criu_log restore.log; return 0; }
  try "$part: the restored container runs" test "$(pm inspect -f '{{.State.Status}}' "$name" 2>&1)" = running ||
    criu_log restore.log
  try "$part: the restored apps run" wait_started "$name" || return 0
  grows "$count"
  check "$part: the counter goes on from where it stopped (${RESTORE_FROM:-?} -> $(tail -n 1 "$count"))" counts_on "${RESTORE_FROM:-0}"
  local failed=$TEST_FAILED
  verify_ok "$part: the fake GPU data after the restore, every byte"
  [ "$TEST_FAILED" = "$failed" ] || criu_log restore.log
  check "$part: the restored agent listens on its control socket again" agent_listens
}

# ---- A: plain CRIU, the container's own PID namespace; the plugin folder from a private config ----
inc=""
for d in "$(dirname "$(readlink -f "$GPUSNAP_CRIU")")/../usr/include/criu" "$src/.cache/criu/usr/include/criu" /usr/include/criu; do
  [ -f "$d/criu-plugin.h" ] && { inc=$d; break; }
done
mkdir -p "$TEST_TMP/plugins-a"
if [ -n "$inc" ] && ${CC:-cc} -shared -fPIC -isystem "$inc" -o "$TEST_TMP/plugins-a/marker.so" "$src/tests/apps/criu_marker_plugin.c"; then
  have_marker=1
else
  have_marker=0
  echo "SKIP: the marker plugin (no criu-plugin.h or C compiler): the private plugin folder is not checked"
fi
echo "libdir $TEST_TMP/plugins-a" >"$TEST_TMP/criu-gs-a.conf"

start_container gs-a /fake || { test_done; exit; }
check "A: the app runs in a PID namespace of its own (NSpid $(awk '/^NSpid/ {print $2, $3}' "/proc/$HPID/status"))" \
  sh -c "awk '/^NSpid/ {exit !(NF == 3 && \$3 == 1)}' /proc/$HPID/status"
if checkpoint_remove A gs-a; then
  [ "$have_marker" = 1 ] && check "A: CRIU's dump loaded the plugin folder of the private config (libdir)" grep -q "^init 0 " "$marker"
  restore_check A gs-a
  [ "$have_marker" = 1 ] && check "A: CRIU's restore loaded it too" grep -q "^init 2 " "$marker"
fi
pm rm -f -t 0 gs-a >/dev/null 2>&1

# ---- B: through gpusnap's CRIU plugin ----
plugin=$build/src/criu_plugin/gpusnap_criu.so
[ -f "$plugin" ] || plugin=$(find "$build" -name gpusnap_criu.so -type f 2>/dev/null | head -n 1)
if [ -z "$plugin" ]; then
  echo "SKIP: B (the CRIU plugin): no gpusnap_criu.so in the build tree"
elif grep -q "^GPUSNAP_SANITIZE:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: B (the CRIU plugin): built with ASan/UBSan here, whose runtime criu cannot load"
else
  mkdir -p "$TEST_TMP/plugins-b"
  cp "$plugin" "$TEST_TMP/plugins-b/"
  echo "libdir $TEST_TMP/plugins-b" >"$TEST_TMP/criu-gs-b.conf"
  # the plugin's settings: Podman hands runc, and so criu, no environment of its own; the file beside the plugin
  # is how they reach it
  pconf=$TEST_TMP/plugins-b/gpusnap_criu.conf
  printf '# gpusnap_criu.so, for t6101\ntimeout = 60\n' >"$pconf"
  export FAKE_CUDA_DIR=$TEST_TMP/fake-b # the state files the plugin's driver and the app's share
  # Windows in the restored agent's load (its 2nd operation, after the dump's, holds 1 s before its
  # work; its first copy to the GPU holds 1 s): the restore returns only once the GPU data is back.
  # Before, podman's restore returned while the agent was still loading, and the verify below read
  # memory not yet mapped (the app died, the plugin's helper logged the failed load) or not yet filled.
  start_container gs-b "$FAKE_CUDA_DIR" --pid=host -v "$FAKE_CUDA_DIR:$FAKE_CUDA_DIR" \
    -e GPUSNAP_FAULT=agent-operation@2=hold:1,agent-copy-in=hold:1 || { test_done; exit; }
  check "B: the app registered with the shared fake driver" test -e "$FAKE_CUDA_DIR/$HPID"
  if checkpoint_remove B gs-b; then
    check "B: the archive carries gpusnap's GPU image (checkpoint/gpusnap/)" \
      sh -c "tar -tf '$TEST_TMP/gs-b.tar' | grep -q '^checkpoint/gpusnap/.'"
    restore_check B gs-b
    check "B: the plugin read its settings from the file beside it (restore.log)" log_says restore.log "settings from '$pconf'"
    check "B: criu returned once the agent had loaded the GPU data (restore.log)" \
      log_says restore.log "loaded their GPU data"
    # a bad setting in the file refuses the checkpoint; the container runs on, its data on the GPU
    echo "timeout = soon" >"$pconf"
    pm_out container checkpoint -k --leave-running gs-b
    check "B: a bad value in gpusnap_criu.conf refuses the checkpoint" pm_failed
    check "B: ... CRIU's log names the file, line and value" \
      log_says dump.log "refusing the dump: '$pconf' line 1: timeout 'soon' is not a number of seconds"
    check "B: ... the container runs on" test "$(pm inspect -f '{{.State.Status}}' gs-b 2>&1)" = running
    verify_ok "B: ... its fake GPU data, every byte"
    # leave_running = no against podman's --leave-running (runc's RPC): refused at the plugin's init, before
    # anything moves (it would leave the container running without its GPU state)
    printf 'leave_running = no\n' >"$pconf"
    pm_out container checkpoint -k --leave-running gs-b
    check "B: leave_running = no against checkpoint --leave-running refuses the checkpoint" pm_failed
    check "B: ... CRIU's log names the setting, its file and line, and what criu was told (through criu swrk)" \
      log_says dump.log "the leave_running setting says no (leave_running in '$pconf' line 1), but criu was told --leave-running (the tasks run on) (CRIU's options)"
    check "B: ... the container runs on" test "$(pm inspect -f '{{.State.Status}}' gs-b 2>&1)" = running
    verify_ok "B: ... its fake GPU data, every byte"
    # --leave-running through runc's criu swrk (not on criu's command line): the plugin reads it from CRIU's
    # options and puts the GPU data back
    printf 'timeout = 60\n' >"$pconf"
    pm_out container checkpoint -k --leave-running gs-b
    check "B: podman container checkpoint --leave-running" pm_ok
    check "B: ... the plugin knew the container runs on (CRIU's options, through criu swrk)" \
      log_says dump.log "the tasks run on after the dump (CRIU's options)"
    check "B: ... the container runs on" test "$(pm inspect -f '{{.State.Status}}' gs-b 2>&1)" = running
    check "B: ... its agent took its data back and listens" agent_listens
    wait_resumed() { # the agent's helper gives the data back once runc let the process go
      local i
      for ((i = 0; i < 100; i++)); do
        "$GPUSNAP_BIN" state --json "$HPID" >"$TEST_TMP/state.json" 2>/dev/null &&
          [ "$(json_get "$TEST_TMP/state.json" "['agent']['state']" 2>/dev/null)" = running ] && return 0
        sleep 0.1
      done
      echo "    agent state: $(cat "$TEST_TMP/state.json" 2>&1 | head -c 300)"
      return 1
    }
    check "B: ... its agent runs again" wait_resumed
    verify_ok "B: ... its fake GPU data after the checkpoint, every byte"
  fi
  pm rm -f -t 0 gs-b >/dev/null 2>&1
fi

check "/etc/criu is as it was (the criu config is the test's own)" \
  test "$(ls -la --time-style=full-iso /etc/criu 2>&1; cat /etc/criu/* 2>/dev/null)" = "$etc_criu_before"
test_done
