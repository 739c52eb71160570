#!/usr/bin/env bash
# t5042 - the CRIU plugin's restore with CRIU's lazy pages: what a container
# engine runs for `restore --lazy-pages` (a `criu lazy-pages` daemon, then
# `criu restore --lazy-pages`), with gpusnap_criu.so loaded. The app of t4004
# (tests/agent/agent_app --signals) on the host-memory fake driver, holding
# 200 MiB of CPU memory of its own: the driver restores it (held by CRIU)
# while the daemon fills its memory, its agent is found (its environment,
# where GPUSNAP_RUN_DIR is, comes in ahead of the daemon's background order:
# gs_proc_fault_in_environ) and loads the GPU data; every byte is back. The
# plugin neither starts nor watches the daemon: that is the engine's.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/plugin_lib.sh"

signals_app_env agent_app criu
plugin_env
export AGENT_APP_HOST_MB=200
export AGENT_APP_BIG_MB=64
export GPUSNAP_IO_THREADS=2
loaded() { agent_says "$PID" running; }

start_app
verify_ok "the app's data after allocation (200 MiB of CPU memory, GPU data)"
img=$TEST_TMP/img
criu_dump "$img" "$PID"
check "criu dump with the plugin succeeds" rc_ok
check "the dumped process is gone" wait_gone "$PID" 5

# the engine's daemon, in the restore's work folder ($TEST_TMP, as criu_restore names it)
"$GPUSNAP_CRIU" lazy-pages --images-dir "$img" --work-dir "$TEST_TMP" --log-file lazy-pages.log -v4 \
  --status-fd 9 9>"$TEST_TMP/lazy.status" >"$TEST_TMP/lazy.out" 2>&1 &
daemon=$!
TEST_PIDS+=("$daemon")
ready() { [ -S "$TEST_TMP/lazy-pages.socket" ] && [ -s "$TEST_TMP/lazy.status" ]; }
for _ in $(seq 1000); do ready && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.01; done
check "the lazy-pages daemon listens" ready
criu_restore "$img" --lazy-pages
check "criu restore --lazy-pages with the plugin succeeds" rc_ok
check "it restored $PID" [ "$RPID" = "$PID" ]
check "its agent loaded the GPU data from the image" loaded
rc=0; wait "$daemon" || rc=$?
check "the daemon put every page in and ended well (status $rc)" test "$rc" = 0
verify_ok "every byte of its CPU and GPU data is back"

test_done
