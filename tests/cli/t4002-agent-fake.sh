#!/usr/bin/env bash
# t4002 - the agent's fast path end to end without a GPU, pinned staging: an app
# (tests/agent/agent_app.c) runs under libgpusnap.so against a driver whose
# device memory is host memory (tests/fake/fake_vmm_driver.c), fills its
# allocations (3 large, 2000 small, by dlsym, cuGetProcAddress and
# cuMemAllocAsync), and checks them through its own pointers after:
#  - suspend (agent path: bytes moved, the app's physical memory all released,
#    the driver state checkpointed) and resume;
#  - a --keep-context cycle; a cycle after freeing half the small blocks;
#  - suspend --driver of the agent's process;
#  - double suspend and resume of a running process (exit 6).
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
# the pinned staging mode (the default, bounce, is t4005's)
export GPUSNAP_STAGING_MODE=pinned

start_app
verify_ok "the app's data after allocation"
phys0=$(phys)
# 18 MiB of large blocks (rounded to 2 MiB) and slabs of 2 MiB for the small ones
check "the agent made the app's memory releasable ($phys0 physical bytes)" \
  test "$phys0" -gt $((18 << 20)) -a $((phys0 % (2 << 20))) -eq 0

run_gpusnap suspend --json "$APP"; expect "suspend" 0
check "suspend took the agent path" test "$(jget "['processes'][0]['path']")" = agent
# the agent moves the large blocks' own sizes (3 MiB, 8 MiB, 5 MiB+1) and the whole slabs
want=$((phys0 - (1 << 20) - ((1 << 20) - 1)))
got=$(jget "['processes'][0]['agent']['bytes']")
check "the agent moved $want bytes (reported: $got)" test "$got" = "$want"
check "suspend released all of the app's physical memory (left: $(phys))" test "$(phys)" = 0
check "a full suspend leaves no staging memory pinned for the driver's checkpoint ($(pinned) ranges)" test "$(pinned)" = 0
check "GPUSNAP_STAGING_MODE=pinned pins the pool instead of bouncing (staging_bounce $(jget "['processes'][0]['agent']['staging_bounce']"))" \
  test "$(jget "['processes'][0]['agent']['staging_bounce']")" = 0
check "the driver holds the process checkpointed" test "$(fake_state)" = 2
check "suspend reports the state after as suspended" test "$(jget "['processes'][0]['state_after']")" = suspended

run_gpusnap suspend "$APP"; expect "a second suspend is refused" 6 "already suspended"

run_gpusnap resume --json "$APP"; expect "resume" 0
check "resume re-created the physical memory" test "$(phys)" = "$phys0"
check "the driver runs the process again" test "$(fake_state)" = 0
verify_ok "the data is back at the same addresses"

run_gpusnap resume "$APP"; expect "resume of a running process is refused" 6 "not suspended"

run_gpusnap suspend --keep-context --json "$APP"; expect "suspend --keep-context" 0
check "--keep-context released the memory" test "$(phys)" = 0
check "--keep-context keeps the staging memory pinned ($(pinned) ranges)" test "$(pinned)" -gt 0
check "--keep-context leaves the driver running" test "$(fake_state)" = 0
check "--keep-context reports the process suspended, not the driver's running" \
  test "$(jget "['processes'][0]['state_after']")" = suspended
run_gpusnap state "$APP"; expect "state after --keep-context" 0 suspended
run_gpusnap resume --json "$APP"; expect "resume after --keep-context" 0
check "resume after --keep-context: before suspended, after running" \
  test "$(jget "['processes'][0]['state_before']")/$(jget "['processes'][0]['state_after']")" = suspended/running
verify_ok "the data after a --keep-context cycle"

app_cmd free-some
case $REPLY in "FREED 1000") pass "the app freed half its small blocks" ;; *) fail "free-some" "$REPLY" ;; esac
verify_ok "the rest after the frees"
run_gpusnap suspend --json "$APP"; expect "suspend after frees" 0
check "suspend after frees released everything" test "$(phys)" = 0
run_gpusnap resume "$APP"; expect "resume after frees" 0
verify_ok "the data after a cycle with frees"

run_gpusnap suspend --driver --json "$APP"; expect "suspend --driver of an agent process" 0
check "--driver took the driver path" test "$(jget "['processes'][0]['path']")" = driver
check "--driver leaves the agent's memory alone" test "$(phys)" -gt 0
check "--driver checkpointed the process" test "$(fake_state)" = 2
run_gpusnap resume "$APP"; expect "resume after --driver" 0
check "the driver runs the process again after --driver" test "$(fake_state)" = 0
verify_ok "the data after a driver-path cycle"

echo quit >&3
exec 3>&-
wait "$APP"; rc=$?
check "the app exits cleanly (rc $rc)" test "$rc" = 0
test_done
