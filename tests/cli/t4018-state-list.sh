#!/usr/bin/env bash
# t4018 - `gpusnap state` without a PID lists every CUDA process (on the fake
# driver, with an app under the agent, tests/agent/agent_app.c):
#  - none (in a PID namespace of its own): "no CUDA process found", exit 0;
#    --json: an empty list;
#  - a process with the agent loaded but no CUDA in use, and a plain one, are
#    left out; the app is listed with its state, path and command, as running,
#    then suspended (a suspended process holds no GPU memory, which is why the
#    list does not come from NVML), then stopped by SIGSTOP (said at once),
#    then running again;
#  - --json gives each process as `state PID --json` does; -v adds the
#    agent's line.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env

# the list's line for PID (empty if it is not listed)
row() { awk -v p="$1" '$1 == p' "$OUT_TXT"; }
listed_json() { # PID -> its object in `state --json`'s list, or nothing
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(next((x for x in d["processes"] if x["pid"] == int(sys.argv[2])), None) or ""))' \
    "$OUT_TXT" "$1"
}

# none: in a PID namespace of its own (other tests' apps may run beside this one)
if unshare -p -f --mount-proc true 2>/dev/null; then
  RC=0; unshare -p -f --mount-proc "$GPUSNAP_BIN" state >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
  check "state without PID where no CUDA process is: exit 0, 'no CUDA process found' (exit $RC)" \
    sh -c "[ $RC = 0 ] && grep -qx 'no CUDA process found' '$TEST_TMP/out'"
  RC=0; unshare -p -f --mount-proc "$GPUSNAP_BIN" state --json >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
  check "... --json: an empty list, every process looked at (exit $RC)" \
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["processes"] == [] and d["not_looked_at"] == 0))' "$TEST_TMP/out"
else
  echo "SKIP: no PID namespace of its own here (unshare -p): the empty list is not checked"
fi

# the agent in a process that uses no CUDA, and a process with neither
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
LD_PRELOAD="${asan:+$asan }$GPUSNAP_BUILD/libgpusnap.so" sleep 60 &
agent_only=$!
sleep 60 &
plain=$!
TEST_PIDS+=("$agent_only" "$plain")
for _ in $(seq 300); do grep -q libgpusnap "/proc/$agent_only/maps" 2>/dev/null && break; sleep 0.1; done
check "the agent is loaded in the process that uses no CUDA" grep -q libgpusnap "/proc/$agent_only/maps"

start_app
verify_ok "the app's data after allocation"
run_gpusnap state; expect "state lists the app" 0
check "... a header line" grep -q '^PID  *STATE  *PATH  *VRAM  *GPUS  *COMMAND$' "$OUT_TXT"
check "... the app running on the agent path ($(row "$APP"))" \
  sh -c "echo '$(row "$APP")' | grep -qE '^$APP +running +agent .* agent_app\$'"
check "... not the process whose agent sees no CUDA" test -z "$(row "$agent_only")"
check "... not the plain process" test -z "$(row "$plain")"

run_gpusnap suspend "$APP"; expect "suspend" 0
run_gpusnap state; expect "state lists the suspended app" 0
check "... as suspended ($(row "$APP"))" sh -c "echo '$(row "$APP")' | grep -qE '^$APP +suspended +agent '"
run_gpusnap state --json; expect "state --json lists it" 0
one=$(listed_json "$APP")
check "... as state PID --json gives it: state, path, the agent's part" \
  python3 -c 'import json,sys; x=json.loads(sys.argv[1]); sys.exit(not (x["state"] == "suspended" and x["path"] == "agent" and x["agent"]["state"] == "suspended" and x["comm"] == "agent_app"))' "$one"
run_gpusnap state -v; expect "state -v" 0
check "... adds the agent's line" grep -qE '^ +agent: suspended, [0-9]+ allocations' "$OUT_TXT"
run_gpusnap resume "$APP"; expect "resume" 0

kill -STOP "$APP"
check "the app is stopped" wait_stopped "$APP"
t0=$(date +%s%N)
run_gpusnap state; expect "state lists a stopped app" 0
check "... at once ($((($(date +%s%N) - t0) / 1000000)) ms), as stopped" \
  sh -c "[ $((($(date +%s%N) - t0) / 1000000)) -lt 5000 ] && echo '$(row "$APP")' | grep -qE '^$APP +stopped '"
check "... and says why on stderr" grep -q "process $APP is stopped" "$ERR_TXT"
kill -CONT "$APP"
run_gpusnap state; expect "state after SIGCONT" 0
check "... running again" sh -c "echo '$(row "$APP")' | grep -qE '^$APP +running +agent '"
verify_ok "the app's data after the listings"
quit_app "the app ends well"
kill "$agent_only" "$plain" 2>/dev/null
test_done
