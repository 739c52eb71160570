#!/usr/bin/env bash
# t12-state-list.sh - `gpusnap state` without a PID on the real driver: two
# pattern apps (1 GiB each), one on the driver path and one under the agent,
# are listed with their state, path and VRAM; once both are suspended they
# are still listed (NVML no longer shows them: they hold no GPU memory), as
# suspended with 0 B; a process with the agent loaded that never used CUDA,
# and a plain process, are not listed. --json lists both as `state PID --json`
# describes them. Both resume and verify.
. "$(dirname "$0")/lib.sh"
gs_test_init t12-state-list

app_start d 120 "$GS_APPS/pattern" --size 1G --alloc-size 256M --seed 12 || finish
app_start a 120 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 1G --alloc-size 256M --seed 13 || finish
pd=${APP_PID[d]} pa=${APP_PID[a]}
LD_PRELOAD=$(dirname "$GPUSNAP")/libgpusnap.so sleep 120 &
agent_only=$!
sleep 120 &
plain=$!
GS_EXTRA_PIDS+=("$agent_only" "$plain")
sleep 1

row() { awk -v p="$1" '$1 == p' <<<"$GS_OUT"; }
row_is() { # DESC PID REGEX: the list's line for PID matches REGEX
  if [[ $(row "$2") =~ $3 ]]; then pass "$1 ($(row "$2"))"; else fail "$1: line '$(row "$2")'"; fi
}

gs_run state
expect_rc 0 "state without PID"
row_is "the driver-path app is listed as running, driver path, with its VRAM" "$pd" "^$pd +running +driver +[0-9.]+ GiB +0 +pattern$"
row_is "the agent's app is listed as running, agent path" "$pa" "^$pa +running +agent +[0-9.]+ GiB +0 +pattern$"
check "the process with the agent and no CUDA is not listed" test -z "$(row "$agent_only")"
check "the plain process is not listed" test -z "$(row "$plain")"

gs_run suspend "$pd"
expect_rc 0 "suspend of the driver-path app"
gs_run suspend "$pa"
expect_rc 0 "suspend of the agent's app"
check "nvidia-smi no longer shows either" \
  bash -c "! nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -qwE '$pd|$pa'"
gs_run state
expect_rc 0 "state without PID, both suspended"
row_is "the driver-path app is listed as suspended, 0 B" "$pd" "^$pd +suspended +driver +0 B +- +pattern$"
row_is "the agent's app is listed as suspended, 0 B" "$pa" "^$pa +suspended +agent +0 B +- +pattern$"
gs_run state --json
expect_rc 0 "state --json without PID"
check "--json lists both, suspended, with their paths" python3 -c '
import json, sys
d = {p["pid"]: p for p in json.loads(sys.argv[1])["processes"]}
a, b = d.get(int(sys.argv[2])), d.get(int(sys.argv[3]))
sys.exit(not (a and b and a["state"] == "suspended" and a["path"] == "driver" and a["vram_bytes"] == 0
              and b["state"] == "suspended" and b["path"] == "agent" and b["agent"]["state"] == "suspended"))' \
  "$GS_OUT" "$pd" "$pa"

gs_run resume "$pd"
expect_rc 0 "resume of the driver-path app"
gs_run resume "$pa"
expect_rc 0 "resume of the agent's app"
app_verify d "the driver-path app after suspend and resume"
app_verify a "the agent's app after suspend and resume"
kill "$agent_only" "$plain" 2>/dev/null
app_quit d
app_quit a
finish
