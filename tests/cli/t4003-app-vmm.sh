#!/usr/bin/env bash
# t4003 - the app's own VMM memory (cuMemCreate/cuMemMap, as PyTorch's
# expandable segments use it) made releasable by the agent, without a GPU: an
# app (tests/agent/app_vmm.c) maps a handle twice, maps one again elsewhere
# (a mapping at an offset is refused, as by the driver), releases one
# while mapped, exports one, and gives access over two mappings at once,
# against the host-memory fake driver (tests/fake/fake_vmm_driver.c), which
# refuses any handle it did not make. Checks:
#  - suspend releases every physical allocation but the exported one, which
#    `gpusnap state -v` reports as not releasable; resume brings the data
#    back bit for bit, mappings and access included (also a --keep-context
#    cycle and a second cycle);
#  - the app's unmaps and releases afterwards leave no physical memory behind;
#  - with GPUSNAP_AGENT_HOOKS=0 the same app runs on the driver's handles.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/app_vmm
fake_agent_env
MiB=$((1 << 20))

# h1 4 + h2 6 + h3 4 + h5a 4 + h5b 4 MiB releasable; h4 (2 MiB) exported
releasable=$((22 * MiB))
exported=$((2 * MiB))

start_app
verify_ok "the app's own VMM memory after setup"
phys0=$(phys)
check "the app holds its 24 MiB in 6 physical allocations ($phys0 bytes, $(handles))" \
  test "$phys0" = $((releasable + exported)) -a "$(handles)" = 6

run_gpusnap state -v "$APP"; expect "state -v" 0
check "state -v counts 5 releasable allocations of 22 MiB" grep -q "5 allocations, 22.00 MiB releasable" "$OUT_TXT"
check "state -v reports the exported allocation as not releasable" \
  grep -q "1 allocation (2.00 MiB) not releasable" "$OUT_TXT"

run_gpusnap suspend --json "$APP"; expect "suspend" 0
check "suspend took the agent path" test "$(jget "['processes'][0]['path']")" = agent
got=$(jget "['processes'][0]['agent']['bytes']")
check "the agent moved the $releasable releasable bytes (reported: $got)" test "$got" = "$releasable"
check "suspend released all but the exported allocation (left: $(phys) bytes in $(handles))" \
  test "$(phys)" = "$exported" -a "$(handles)" = 1
check "the driver holds the process checkpointed" test "$(fake_state)" = 2

run_gpusnap resume --json "$APP"; expect "resume" 0
check "resume re-created the physical memory ($(phys) bytes in $(handles))" \
  test "$(phys)" = "$phys0" -a "$(handles)" = 6
verify_ok "the data, mappings and access are back"

run_gpusnap suspend --keep-context --json "$APP"; expect "suspend --keep-context" 0
check "--keep-context released the app's memory" test "$(phys)" = "$exported"
run_gpusnap resume --json "$APP"; expect "resume after --keep-context" 0
verify_ok "the data after a --keep-context cycle"

run_gpusnap suspend --json "$APP"; expect "a second suspend" 0
run_gpusnap resume --json "$APP"; expect "a second resume" 0
verify_ok "the data after a second cycle"
grep -q "could not\|cannot" "$GPUSNAP_AGENT_LOG" 2>/dev/null &&
  fail "the agent logged a failure" "$(grep "could not\|cannot" "$GPUSNAP_AGENT_LOG" | head -n 3)"

app_cmd cleanup
case $REPLY in "CLEAN OK") pass "the app unmapped and released everything" ;; *) fail "cleanup" "$REPLY" ;; esac
check "no physical memory is left ($(phys) bytes in $(handles) allocations)" \
  test "$(phys)" = 0 -a "$(handles)" = 0
run_gpusnap suspend --json "$APP"; expect "suspend with nothing left" 0
run_gpusnap resume --json "$APP"; expect "resume with nothing left" 0
quit_app "the app exits cleanly"

# The escape hatch: the app gets the driver's own handles and still works.
GPUSNAP_AGENT_HOOKS=0 start_app
verify_ok "the app on the driver's handles (GPUSNAP_AGENT_HOOKS=0)"
app_cmd cleanup
case $REPLY in "CLEAN OK") pass "cleanup on the driver's handles" ;; *) fail "cleanup without hooks" "$REPLY" ;; esac
check "nothing leaked without hooks ($(phys) bytes)" test "$(phys)" = 0 -a "$(handles)" = 0
quit_app "the app without hooks exits cleanly"
test_done
