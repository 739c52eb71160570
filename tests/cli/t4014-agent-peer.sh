#!/usr/bin/env bash
# t4014 - peer access, pointer attributes and dma-buf exports of the agent's
# memory (tests/agent/peer_app.c on the fake driver with two devices; a
# kernel of device 0 reads device 1's memory through device 0's view):
#  - without peer access the kernel faults (the agent's mappings name only
#    their own device, as the driver's cudaMalloc memory would);
#  - cuCtxEnablePeerAccess reaches the agent's memory allocated before it
#    (sub-allocated blocks sharing a slab and a large allocation), after it,
#    and after a suspend and resume (re-created mappings);
#  - cuCtxDisablePeerAccess takes it away again, also from re-created ones;
#  - cuPointerGetAttribute(s) on sub-allocated blocks answer for the block
#    (range start and size, a buffer id of its own kept across a resume);
#    the memory asks for GPUDirect RDMA where the device has it, and not
#    where it has not (FAKE_CUDA_NO_RDMA=1), where allocating still works;
#  - a dma-buf export of the agent's memory pins it: a suspend leaves it
#    mapped, `state` counts it as not releasable, its data stays;
#  - a failed grant (fault point agent-peer-access) undoes the enable.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/peer_app
fake_agent_env
export FAKE_CUDA_GPUS=2

cycle() { # TITLE
  run_gpusnap suspend "$APP"; expect "suspend ($1)" 0
  check "suspend released every allocation ($1; left: $(phys))" test "$(phys)" = 0
  run_gpusnap resume "$APP"; expect "resume ($1)" 0
}

start_app
reply_ok "allocations on device 1 (blocks of a slab, one of its own)" alloc ALLOC
reply_ok "without peer access a kernel of device 0 faults on device 1's memory" read-denied DENIED
reply_ok "pointer attributes of sub-allocated blocks answer for the block" attrs ATTRS
reply_ok "device 0 enables peer access to device 1" enable ENABLE
reply_ok "the memory allocated before the enable is readable from device 0" read-all READ
reply_ok "allocations after the enable" alloc-new ALLOC
reply_ok "the memory allocated after the enable is readable too" read-all READ
cycle "peer access enabled"
reply_ok "the re-created memory is readable from device 0" read-all READ
verify_ok "the data after the cycle"
reply_ok "the buffer ids and ranges are those before the cycle" attrs ATTRS
reply_ok "device 0 disables peer access" disable DISABLE
reply_ok "after the disable the kernel faults again" read-denied DENIED
cycle "peer access disabled"
reply_ok "and it does on the re-created memory" read-denied DENIED
reply_ok "enabled again" enable ENABLE
reply_ok "readable again" read-all READ

unmanaged=$(agent_field unmanaged_allocations)
ubytes=$(agent_field unmanaged_bytes)
reply_ok "a dma-buf export of the agent's large allocation" export EXPORT
check "the exported allocation counts as not releasable ($(agent_field unmanaged_allocations), before $unmanaged)" \
  test "$(agent_field unmanaged_allocations)" = $((unmanaged + 1))
check "with its 4 MiB ($(agent_field unmanaged_bytes), before $ubytes)" \
  test "$(agent_field unmanaged_bytes)" = $((ubytes + (4 << 20)))
run_gpusnap suspend "$APP"; expect "suspend with exported memory" 0
check "the exported 4 MiB stay mapped while suspended ($(phys) bytes)" test "$(phys)" = $((4 << 20))
run_gpusnap state -v "$APP"; expect "state -v lists it as not releasable" 0 "not releasable, moved by the driver"
run_gpusnap resume "$APP"; expect "resume with exported memory" 0
verify_ok "the data, exported block included"
reply_ok "still readable from device 0" read-all READ
quit_app "the app exits cleanly"

# a grant that fails: the enable is undone in the driver too (a second enable is not "already enabled") and works
GPUSNAP_FAULT=agent-peer-access start_app
reply_ok "allocations on device 1" alloc ALLOC
app_cmd enable
case $REPLY in "ENABLE FAIL error 2"*) pass "a peer enable whose grant fails reports the error ($REPLY)" ;;
  *) fail "a peer enable whose grant fails reports the error" "$REPLY" ;; esac
reply_ok "and gives no access" read-denied DENIED
reply_ok "a second enable works (the driver's was undone)" enable ENABLE
reply_ok "and gives access" read-all READ
quit_app "the app exits cleanly"

# a device without GPUDirect RDMA on VMM memory: the agent does not ask for it, allocations still work
FAKE_CUDA_NO_RDMA=1 PEER_APP_RDMA=0 start_app
reply_ok "allocations where the device lacks GPUDirect RDMA" alloc ALLOC
reply_ok "their memory does not claim it" attrs ATTRS
quit_app "the app exits cleanly"
GPUSNAP_RDMA=0 PEER_APP_RDMA=0 start_app
reply_ok "allocations with GPUSNAP_RDMA=0" alloc ALLOC
reply_ok "GPUSNAP_RDMA=0: the agent does not ask for GPUDirect RDMA" attrs ATTRS
quit_app "the app exits cleanly"
test_done
