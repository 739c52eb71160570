#!/usr/bin/env bash
# t4031 - admission of a suspend into host memory counts what will move,
# on the host-memory fake driver: the agent's zero scan runs
# before the pool is asked for, and only the chunks not found zero are
# counted (a lazy pool touches no others), less GPUSNAP_HOST_MEMORY_MARGIN.
#  - a mostly-zero app (24 MiB written, 256 MiB left zero) is admitted under
#    a GPUSNAP_HOST_MEMORY_LIMIT its full size exceeds; the reply says what it
#    admitted, held and left zero; resume gives the data back bit for bit;
#  - a margin that leaves too little of what the host has: refused, exit 13,
#    one line naming needed, zero, available and margin; the process runs on,
#    its data on the GPU; a margin in percent of the host's memory (100%)
#    refuses too;
#  - a limit below the written data: refused the same way, naming the limit
#    (which caps this suspend alone, the margin aside);
#  - a margin that is neither a size nor a share: the agent names it once in
#    its log as the app starts (the settings table's type) and keeps the
#    default; the suspend and resume work.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
counter() { jget "['processes'][0]['agent']['$1']"; }
export AGENT_APP_BIG_MB=16 AGENT_APP_ZERO_MB=256
full=$(((3 + 16 + 5 + 256) << 20))

# refused TITLE WANT...: a suspend refused for want of host memory, the app untouched
refused() {
  local title=$1
  shift
  run_gpusnap suspend "$APP"
  expect "$title: refused" 13
  check "$title: one line" one_line
  for want in "$@"; do
    check "$title: it says '$want'" grep -q -- "$want" "$ERR_TXT"
  done
  check "$title: the physical memory stayed ($(phys))" test "$(phys)" = "$phys0"
  check "$title: the driver still runs the process" test "$(fake_state)" = 0
  verify_ok "$title: the data after the refusal"
}

# ---- admitted: the full size exceeds the limit, what will be held does not ----
export GPUSNAP_HOST_MEMORY_LIMIT=100M GPUSNAP_HOST_MEMORY_MARGIN=0
start_app
phys0=$(phys)
run_gpusnap suspend --json "$APP"; expect "a mostly-zero app is admitted under a limit its full size ($full bytes) exceeds" 0
admitted=$(counter admitted_bytes) held=$(jget "['processes'][0]['data']['held_bytes']") zero=$(jget "['processes'][0]['data']['zero_bytes']")
check "it admitted only the written chunks ($admitted bytes)" test "${admitted:-0}" -gt 0 -a "${admitted:-$full}" -le $((100 << 20))
check "the zero block was found on the GPU before the pool ($(counter gpu_zero_bytes) bytes)" test "$(counter gpu_zero_bytes)" -ge $((256 << 20))
check "it held the data less the zero chunks ($held held, $zero zero)" test "${held:-0}" -le "${admitted:-0}" -a "${zero:-0}" -ge $((256 << 20))
check "the JSON says host memory" test "$(jget "['processes'][0]['data']['where']")" = host-memory
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after the admitted suspend, the zero block included"
quit_app "the app exits"

# ---- a margin that leaves too little of what the host has (the limit caps this suspend alone) ----
unset GPUSNAP_HOST_MEMORY_LIMIT
avail_kib=$(awk '/^(MemAvailable|SwapFree):/ {s += $2} END {print s}' /proc/meminfo)
margin=$(((avail_kib >> 10) + 4096))M # more than the host has: whatever else runs meanwhile
export GPUSNAP_HOST_MEMORY_MARGIN=$margin
start_app
phys0=$(phys)
refused "a margin of more than the host has" "not enough host memory to hold the GPU data: .* needed (.* more are zero and stay on the GPU), .* available (.*) less a margin of .* (GPUSNAP_HOST_MEMORY_MARGIN=$margin); the process keeps running on the GPU"
quit_app "the app exits"
export GPUSNAP_HOST_MEMORY_MARGIN=100%
start_app
phys0=$(phys)
refused "a margin of 100% of the host's memory" "less a margin of .* (GPUSNAP_HOST_MEMORY_MARGIN=100%)"
quit_app "the app exits"

# ---- a limit below the written data ----
export GPUSNAP_HOST_MEMORY_LIMIT=8M GPUSNAP_HOST_MEMORY_MARGIN=0
start_app
phys0=$(phys)
refused "a limit below the written data" "needed (256.00 MiB more are zero" "8.00 MiB available (GPUSNAP_HOST_MEMORY_LIMIT); the process keeps running on the GPU"
quit_app "the app exits"

# ---- a margin that means nothing: named once in the agent's log as the app starts, the default kept ----
export GPUSNAP_HOST_MEMORY_MARGIN=lots
unset GPUSNAP_HOST_MEMORY_LIMIT
start_app
said="GPUSNAP_HOST_MEMORY_MARGIN='lots' is not a size (bytes, or with K, M, G or T) or a share of the host's memory (0% to 100%): using the default"
check "the agent's log names the value that means nothing, once" test "$(grep -cF "$said" "$GPUSNAP_AGENT_LOG")" = 1
run_gpusnap suspend "$APP"; expect "a suspend with that margin takes the default (1G)" 0
run_gpusnap resume "$APP"; expect "... and its resume" 0
verify_ok "the data after the suspend with the default margin"
quit_app "the app exits"
test_done
