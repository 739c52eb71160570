#!/usr/bin/env bash
# t4011 - the agent keeps the driver's semantics of memory pools, managed
# memory and CUDA graph capture (tests/agent/pool_app.c on the fake driver
# with two devices):
#  - an allocation from a host-located pool is the pool's (the driver's), one
#    from a pool of device 1 lives on device 1 whatever context is current;
#  - a pool's access list reaches its allocations, also when given after
#    them, and survives a suspend and resume (re-created mappings);
#  - cuMemAllocAsync takes the pool cuDeviceSetMemPool set (an IPC pool: the
#    driver's; a pool with an access list: the agent's, with that access);
#  - allocations inside a stream capture, also cuMemAllocFromPoolAsync, are
#    the graph's; a free inside a capture frees the memory when the graph
#    runs (once, however often it runs), not never;
#  - managed memory counts as not releasable in `state` until it is freed;
#  - a suspend while the app's global-mode stream capture is open is refused
#    (exit 6) and the app runs on, its capture intact; a thread-local one does
#    not stop it; once the capture ended the suspend works; a pinned staging
#    pool's workers wait for the capture to end before they pin; the agent's
#    background pinning (the kept copy ring with GPUSNAP_RESERVE) skips its
#    work rather than break a capture the app began meanwhile;
#  - memory on both devices is released by one thread per device: a release
#    that fails on one while the other's go on is undone on both, the app
#    runs on with its data, and the next cycle works.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/pool_app
fake_agent_env
export FAKE_CUDA_GPUS=2


start_app
unmanaged0=$(agent_field unmanaged_allocations)
reply_ok "an allocation from a host-located pool is host memory of that pool" host-pool HOSTPOOL
check "the host pool's allocation counts as not releasable ($(agent_field unmanaged_allocations), before $unmanaged0)" \
  test "$(agent_field unmanaged_allocations)" = $((unmanaged0 + 1))
reply_ok "an allocation from a pool of device 1 lives on device 1 (device 0 current)" device-pool DEVPOOL
reply_ok "a pool's access list reaches its allocations, given before or after them" pool-access ACCESS
reply_ok "cuMemAllocAsync takes the pool cuDeviceSetMemPool set" set-pool SETPOOL
reply_ok "allocations inside a stream capture (by pool too) are the graph's" capture-alloc CAPALLOC

verify_ok "the agent's pool allocations hold their data"
run_gpusnap suspend --json "$APP"; expect "suspend with pool allocations" 0
check "suspend released the agent's memory (left: $(phys))" test "$(phys)" = 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after the cycle"
reply_ok "the pools' access is there again after the resume" check-access ACCESS

phys0=$(phys)
allocs0=$(agent_field allocations)
reply_ok "a free inside a capture is captured" capture-free CAPFREE
check "the memory stays until the graph runs ($(phys) bytes, before $phys0)" \
  test "$(phys)" = $((phys0 + (4 << 20)))
reply_ok "the graph runs twice" graph-launch GRAPH
check "the graph's free gave the 4 MiB back, once ($(phys) bytes)" test "$(phys)" = "$phys0"
check "the agent no longer counts the freed allocation ($(agent_field allocations), before $allocs0)" \
  test "$(agent_field allocations)" = "$allocs0"
verify_ok "the other allocations are untouched by the graph's free"

unmanaged=$(agent_field unmanaged_allocations)
ubytes=$(agent_field unmanaged_bytes)
reply_ok "cuMemAllocManaged" managed MANAGED
check "managed memory counts as not releasable ($(agent_field unmanaged_allocations), before $unmanaged)" \
  test "$(agent_field unmanaged_allocations)" = $((unmanaged + 1))
check "its 2 MiB too ($(agent_field unmanaged_bytes), before $ubytes)" \
  test "$(agent_field unmanaged_bytes)" = $((ubytes + (2 << 20)))
run_gpusnap state -v "$APP"; expect "state -v lists memory the agent cannot release" 0 "not releasable, moved by the driver"
reply_ok "managed memory freed" managed-free MANAGEDFREE
check "freed managed memory no longer counts ($(agent_field unmanaged_allocations))" \
  test "$(agent_field unmanaged_allocations)" = "$unmanaged"

quit_app "the app exits cleanly"
# ---- an open global-mode stream capture ----
start_app
reply_ok "a global-mode capture left open" capture-open CAPOPEN
run_gpusnap suspend "$APP"
expect "a suspend during it is refused" 6 "capturing a CUDA graph in global mode"
check "the message says the app runs on" grep -q "the app runs on" "$ERR_TXT"
run_gpusnap state "$APP"
check "state says running ($(cat "$OUT_TXT"))" grep -qx running "$OUT_TXT"
reply_ok "the capture ends as the app meant it to" capture-close CAPCLOSE
run_gpusnap suspend "$APP"; expect "a suspend once it ended" 0
run_gpusnap resume "$APP"; expect "resume" 0
reply_ok "a thread-local capture left open" capture-open-local CAPOPEN
run_gpusnap suspend "$APP"; expect "a suspend during a thread-local capture goes on" 0
run_gpusnap resume "$APP"; expect "resume" 0
reply_ok "that capture ends too" capture-close CAPCLOSE
verify_ok "the data after the capture cycles"
quit_app "the app exits cleanly"

# the kept ring's background build (held 2 s by the fault point) meets the app's open capture: it skips
: >"$GPUSNAP_AGENT_LOG"
GPUSNAP_LOG=info GPUSNAP_RESERVE=64M GPUSNAP_FAULT=agent-ring-build=hold:2 start_app
reply_ok "a global-mode capture begun while the agent's ring build waits" capture-open CAPOPEN
for _ in $(seq 300); do grep -q "copy ring is not set up ahead" "$GPUSNAP_AGENT_LOG" && break; sleep 0.1; done
check "the build skipped its pinning" grep -q "the app is capturing a CUDA graph" "$GPUSNAP_AGENT_LOG"
reply_ok "the app's capture was not broken by it" capture-close CAPCLOSE
run_gpusnap suspend --json "$APP"; expect "a suspend then (its ring set up on demand)" 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after that cycle"
quit_app "the app exits cleanly"

# a pinned staging pool's workers (GPUSNAP_STAGING_MODE=pinned) pin the reserved pool in the
# background after the first allocation; held 2 s, each meets the app's open capture and waits for
# it to end rather than break it (the fake driver invalidates a global capture when another thread pins)
GPUSNAP_STAGING_MODE=pinned GPUSNAP_RESERVE=64M GPUSNAP_FAULT=agent-staging-pin=hold:2 start_app
reply_ok "a global-mode capture begun while the pinned pool's workers wait to pin" capture-open CAPOPEN
sleep 2.5 # the workers' hold is over: they wait for the capture now
reply_ok "the app's capture was not broken by the pool's pinning" capture-close CAPCLOSE
run_gpusnap suspend "$APP"; expect "a suspend through the pinned pool then" 0
run_gpusnap resume "$APP"; expect "resume" 0
verify_ok "the data after that cycle"
quit_app "the app exits cleanly"

# ---- one thread per device releases; a failure on one is undone on both ----
GPUSNAP_FAULT=agent-release@2 start_app
reply_ok "an allocation on device 1 (device 0 current)" device-pool DEVPOOL
reply_ok "allocations on device 0 through its pools" set-pool SETPOOL
verify_ok "the data on both devices"
phys0=$(phys)
run_gpusnap suspend "$APP"
expect "a suspend whose second release fails (two devices releasing at once)" 16 "cannot release GPU memory"
check "every allocation is mapped again ($(phys) of $phys0 bytes)" test "$(phys)" = "$phys0"
verify_ok "the data after the failed suspend"
run_gpusnap state "$APP"
check "state says running ($(cat "$OUT_TXT"))" grep -qx running "$OUT_TXT"
run_gpusnap suspend "$APP"; expect "the next suspend" 0
check "it released both devices' memory (left: $(phys))" test "$(phys)" = 0
run_gpusnap resume "$APP"; expect "resume" 0
check "mapped again ($(phys) of $phys0 bytes)" test "$(phys)" = "$phys0"
verify_ok "the data after the cycle"
quit_app "the app exits cleanly"
test_done
