#!/usr/bin/env bash
# t4033 - the storage tier for a process of another user, on the
# host-memory fake driver: root suspends an app that runs as nobody with
# --spill-only. The process's spill folder is root's and 0700, so nobody
# cannot reach the spill by path; only the image inside is nobody's (its
# agent wrote it through the directory passed as a descriptor); resume
# (root opens it, passes it along) brings every byte back and removes it.
# Needs root and setpriv.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run the app as another user"
command -v setpriv >/dev/null || skip "needs setpriv"
app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
nobody=65534
# nobody reaches its own folder and the fake driver's state files, nothing else of the test's
chmod 711 "$TEST_TMP"
home=$TEST_TMP/nobody
mkdir -m 700 "$home" && chown "$nobody:$nobody" "$home"
chown "$nobody:$nobody" "$FAKE_CUDA_DIR"
setpriv --reuid=$nobody --regid=$nobody --clear-groups test -x "$app" ||
  skip "the build directory cannot be read by another user here"
export GPUSNAP_AGENT_LOG=$home/agent.log
spill=$TEST_TMP/spill
mkdir -m 700 "$spill"

rm -f "$TEST_TMP/app.in" "$TEST_TMP/app.out"
mkfifo "$TEST_TMP/app.in"
# as start_app does: in a sanitizer build the sanitizer's runtime is preloaded before the agent
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  launch=(env LD_PRELOAD="$asan $GPUSNAP_BUILD/libgpusnap.so" "$app")
else
  launch=("$GPUSNAP_BIN" run -- "$app")
fi
setpriv --reuid=$nobody --regid=$nobody --clear-groups env GPUSNAP_RUN_DIR="$home/run" \
  "${launch[@]}" <"$TEST_TMP/app.in" >"$TEST_TMP/app.out" 2>"$TEST_TMP/app.err" &
APP=$!
PID=$APP
TEST_PIDS+=("$APP")
exec 3>"$TEST_TMP/app.in"
for _ in $(seq 200); do
  grep -q '^READY' "$TEST_TMP/app.out" 2>/dev/null && break
  kill -0 "$APP" 2>/dev/null || break
  sleep 0.1
done
grep -q '^READY' "$TEST_TMP/app.out" || { echo "not ok - the app did not start: $(cat "$TEST_TMP/app.err")"; exit 1; }
check "the app runs as nobody" test "$(stat -c %u "/proc/$APP")" = $nobody
verify_ok "the app's data after allocation"
phys0=$(phys)
folder=$spill/gpusnap-$APP-$(sed 's/.*) //' "/proc/$APP/stat" | awk '{print $20}')

run_gpusnap suspend --json --spill-only --spill "$spill" "$APP"; expect "root suspends nobody's app into the spill directory" 0
check "it spilled" test "$(jget "['processes'][0]['data']['where']")" = spill
check "all physical memory released" test "$(phys)" = 0
check "the process's folder is root's, 0700" test "$(stat -c '%u %a' "$folder")" = "0 700"
check "the image in it is nobody's, 0700 (its agent wrote it)" test "$(stat -c '%u %a' "$folder/image")" = "$nobody 700"
check "nobody cannot reach the spill by path" \
  setpriv --reuid=$nobody --regid=$nobody --clear-groups sh -c "! ls '$folder/image' 2>/dev/null"
run_gpusnap resume "$APP"; expect "resume from the spill" 0
check "the physical memory is back" test "$(phys)" = "$phys0"
verify_ok "nobody's data after the spill, bit for bit"
check "the spill folder is removed" test ! -e "$folder"
quit_app "the app exits cleanly"
test_done
