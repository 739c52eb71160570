#!/usr/bin/env bash
# t98-agent-pools.sh - the agent keeps the driver's semantics of memory pools,
# managed memory and graph capture on a real GPU (the fake driver's version is
# tests/cli/t4011): the pools app (tests/gpu/apps/pools.cu) under `gpusnap run`
#  - gets memory of a host-located pool and of an IPC pool set with
#    cudaDeviceSetMemPool from those pools (the driver's), cudaMalloc and
#    cudaMallocAsync memory from the agent (where);
#  - `state --json` counts the driver's (host pool, IPC pool, managed) as not
#    releasable, 48 MiB (32 MiB without host pools);
#  - a cudaFreeAsync inside a stream capture gives its 64 MiB back when the
#    graph runs (the agent's bytes drop by 64 MiB);
#  - a suspend and resume keep every buffer's data.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t98-agent-pools
require_app pools
agent_field() { json_get "$GS_OUT" "agent.$1"; }

app_start pools 120 "$GPUSNAP" run -- "$app" || finish
pid=${APP_PID[pools]}
app_cmd pools host HOST || { fail "no answer to host"; finish; }
host=${REPLY_LINE#HOST }
[ "$host" = 1 ] || log "note: no memory pools in host memory on this driver: that case is not tested"
app_cmd pools where WHERE && [[ $REPLY_LINE == "WHERE OK" ]] &&
  pass "pool memory comes from its pool (host pool, IPC pool set as current), the rest from the agent" ||
  fail "where the memory comes from: $REPLY_LINE"

gs_run state "$pid" --json
expect_rc 0 "state --json"
check_eq "not releasable allocations (IPC pool, managed, host pool)" "$(agent_field unmanaged_allocations)" $((2 + host))
check_eq "not releasable bytes" "$(agent_field unmanaged_bytes)" $(((2 + host) * 16 << 20))
bytes_before=$(agent_field bytes)

app_cmd pools capture-free CAPFREE && [[ $REPLY_LINE == "CAPFREE OK" ]] &&
  pass "cudaFreeAsync inside a capture, graph launched" || fail "capture-free: $REPLY_LINE"
gs_run state "$pid" --json
check_eq "the graph's free gave the agent's 64 MiB back" $((bytes_before - $(agent_field bytes))) $((64 << 20))
app_verify pools "the buffers after the graph"

# Driver 580 refuses to checkpoint some of these (an IPC-capable pool at least: CUDA_ERROR_NOT_SUPPORTED;
# after that it refuses the same process again with CUDA_ERROR_UNKNOWN). A refused suspend must be
# undone, the app running with its data. Then fresh instances leave out, in turn, the IPC pool, the
# host pool and managed memory, until one suspends: that one gets the checked cycle below.
try_suspend() { # -> 0 suspended and resumed again; 1 refused (and checked undone); 2 other failure
  gs_run suspend "$pid" --json
  if [ "$GS_RC" = 0 ]; then
    gs_run resume "$pid" --json
    expect_rc 0 "resume after the probing suspend"
    return 0
  fi
  if { [ "$GS_RC" = 8 ] || [ "$GS_RC" = 1 ]; } && grep -q "suspend undone, processes left running" <<<"$GS_ERR"; then
    log "the driver refused to checkpoint the pools app (POOLS_SKIP='${POOLS_SKIP:-}'): $(head -n 1 <<<"$GS_ERR")"
    expect_state "$pid" running "a refused suspend (POOLS_SKIP='${POOLS_SKIP:-}') is undone: the app runs"
    app_verify pools "every buffer after the refused suspend"
    return 1
  fi
  fail "suspend pools: exit $GS_RC ($(head -n 1 <<<"$GS_ERR"))"
  return 2
}
try_suspend; tried=$?
for skip in ipc ipc,host ipc,host,managed; do
  [ "$tried" = 1 ] || break
  app_quit pools
  log "a fresh pools app without: $skip"
  export POOLS_SKIP=$skip
  app_start pools 120 "$GPUSNAP" run -- "$app" || finish
  pid=${APP_PID[pools]}
  try_suspend; tried=$?
  [ "$tried" = 0 ] && pass "the driver checkpoints the pools app without: $skip"
done
[ "$tried" = 0 ] || { fail "no suspend of the pools app worked"; app_quit pools; finish; }
suspend_checked pools 0 || { app_quit pools; finish; }
resume_checked pools || { app_quit pools; finish; }
app_verify pools "every buffer after a suspend and resume"
app_cmd pools where WHERE && [[ $REPLY_LINE == "WHERE OK" ]] &&
  pass "the pools' memory is still theirs after the resume" || fail "after resume: $REPLY_LINE"
app_quit pools
finish
