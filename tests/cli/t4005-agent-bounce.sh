#!/usr/bin/env bash
# t4005 - the agent's bounce staging mode end to end on the fake driver
# (tests/fake/fake_vmm_driver.c, whose asynchronous copies land only when
# waited for, like DMA): the staging pool is never pinned and the data goes
# through a small pinned ring (the default staging mode). Three runs: on
# demand; with a reserved pool (GPUSNAP_RESERVE), whose ring is kept across
# cycles, its host copies as by default (non-temporal stores into the pool,
# memcpy out of it); the same with GPUSNAP_STAGING_MODE=bounce said, chunks
# of 2 MiB (GPUSNAP_CHUNK_SIZE) and memcpy both ways (GPUSNAP_HOST_COPY=memcpy);
# and on demand with the pool populated ahead (GPUSNAP_STAGING_POPULATE=ahead;
# the default lets the copies fault it in) and non-temporal stores both ways
# (GPUSNAP_HOST_COPY=stream); each time:
#  - a full suspend: data moved, physical memory released, the driver holds
#    the process, and the pinned host memory is only the kept ring (reserve)
#    or nothing (on demand); resume gives the data back bit for bit;
#  - a second cycle (the kept ring is reused, not set up again);
#  - a --keep-context cycle; a suspend whose release fails part way (the fake
#    fails one cuMemUnmap): the memory comes back with its data, refilled
#    through the ring, and the next cycle works; a cycle after the app freed
#    half its small blocks.
# Then all-zero chunks (AGENT_APP_ZERO_MB): not copied on suspend, set by a
# memset on resume, on demand and with a reserved pool holding an older
# cycle's bytes there; GPUSNAP_ZERO_CHUNKS=0 copies them.
# Then a suspend that needs more host memory than GPUSNAP_HOST_MEMORY_LIMIT
# allows: refused (exit 13, the cause named), the app's data stays on the GPU.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/agent_app
fake_agent_env
counter() { jget "['processes'][0]['agent']['$1']"; }

# cycle TITLE [SUSPEND ARGS...]: suspend (checks what is released and pinned), resume, verify
cycle() {
  local title=$1 state=2 ring
  shift
  [ "${1:-}" = --keep-context ] && state=0
  run_gpusnap suspend --json "$@" "$APP"; expect "$mode: suspend $title" 0
  check "$mode: $title took the agent path" test "$(jget "['processes'][0]['path']")" = agent
  check "$mode: $title staged in bounce mode" test "$(counter staging_bounce)" = 1
  ring=$(counter ring_bytes)
  check "$mode: $title went through a ring ($ring bytes)" test "${ring:-0}" -gt 0
  [ -n "${GPUSNAP_CHUNK_SIZE:-}" ] &&
    check "$mode: $title used a ring of 2 MiB buffers ($ring bytes, $(counter ring_threads) threads)" \
      test "$ring" = $(($(counter ring_threads) * 2 * (2 << 20)))
  check "$mode: $title released all of the app's physical memory (left: $(phys))" test "$(phys)" = 0
  check "$mode: $title left the driver in state $state" test "$(fake_state)" = "$state"
  if [ -n "${GPUSNAP_RESERVE:-}" ]; then
    check "$mode: $title left only the kept ring pinned ($(pinned) bytes, ring $ring)" test "$(pinned)" = "$ring"
    check "$mode: $title used the reserved pool" test "$(counter reserved_pool)" = 1
    # the kept ring was set up in the background when the pool was made: no setup in the suspend
    check "$mode: $title set up no ring of its own (ring_setup_s $(counter ring_setup_s))" \
      python3 -c 'import sys; sys.exit(float(sys.argv[1]) != 0)' "$(counter ring_setup_s)"
    [ -n "$first_ring" ] &&
      check "$mode: $title reused the kept ring" test "$ring" = "$first_ring"
    first_ring=$ring
  else
    check "$mode: $title left nothing pinned ($(pinned) bytes)" test "$(pinned)" = 0
  fi
  run_gpusnap resume --json "$APP"; expect "$mode: resume after $title" 0
  check "$mode: resume after $title came back through a ring" test "$(counter ring_bytes)" -gt 0
  check "$mode: the driver runs the process again after $title" test "$(fake_state)" = 0
  verify_ok "$mode: the data after $title"
}

for mode in on-demand on-demand-ahead reserve said-reserve; do
  first_ring=
  case $mode in on-demand*) unset GPUSNAP_RESERVE ;; *) export GPUSNAP_RESERVE=64M ;; esac
  # on demand the ring's copies fault the pool in (lazy, the default) or its workers populate it first
  if [ $mode = on-demand-ahead ]; then export GPUSNAP_STAGING_POPULATE=ahead; else unset GPUSNAP_STAGING_POPULATE; fi
  if [ $mode = said-reserve ]; then export GPUSNAP_STAGING_MODE=bounce; else unset GPUSNAP_STAGING_MODE; fi
  # that run also takes other chunks, and so another kept ring (2 buffers of 2 MiB a thread)
  if [ $mode = said-reserve ]; then export GPUSNAP_CHUNK_SIZE=2M; else unset GPUSNAP_CHUNK_SIZE; fi
  # each way of the host copy (core/host_copy.c): the default, memcpy, non-temporal stores
  case $mode in said-reserve) export GPUSNAP_HOST_COPY=memcpy ;; on-demand-ahead) export GPUSNAP_HOST_COPY=stream ;; *) unset GPUSNAP_HOST_COPY ;; esac
  start_app
  verify_ok "$mode: the app's data after allocation"
  phys0=$(phys)
  cycle "a full suspend"
  check "$mode: resume re-created the physical memory" test "$(phys)" = "$phys0"
  cycle "a second full suspend"
  cycle "a --keep-context suspend" --keep-context
  # the third release fails: what was released is re-created and refilled through the ring
  echo 3 >"$FAKE_CUDA_DIR/$APP.fail_unmap"
  run_gpusnap suspend --json "$APP"
  check "$mode: a suspend whose release fails is refused (rc $RC)" test "$RC" -ne 0
  check "$mode: it says why" grep -q "cannot release GPU memory" "$ERR_TXT" "$OUT_TXT"
  check "$mode: the fake failed an unmap" test ! -e "$FAKE_CUDA_DIR/$APP.fail_unmap"
  check "$mode: the failed release put the physical memory back ($(phys))" test "$(phys)" = "$phys0"
  check "$mode: the driver still runs the process" test "$(fake_state)" = 0
  if [ -n "${GPUSNAP_RESERVE:-}" ]; then
    check "$mode: only the kept ring is pinned ($(pinned) bytes)" test "$(pinned)" = "$first_ring"
  else
    check "$mode: nothing is pinned after the failed suspend ($(pinned) bytes)" test "$(pinned)" = 0
  fi
  verify_ok "$mode: the data after a failed release (refilled through the ring)"
  cycle "a suspend after a failed one"
  app_cmd free-some
  case $REPLY in "FREED 1000") pass "$mode: the app freed half its small blocks" ;; *) fail "$mode: free-some" "$REPLY" ;; esac
  verify_ok "$mode: the rest after the frees"
  cycle "a suspend after frees"
  case $mode in on-demand*)
    check "$mode: nothing stays pinned while the app runs ($(pinned) bytes)" test "$(pinned)" = 0 ;;
  esac
  echo quit >&3
  exec 3>&-
  wait "$APP"; rc=$?
  check "$mode: the app exits cleanly (rc $rc)" test "$rc" = 0
done
if grep -q "GPUSNAP_STAGING_MODE" "$GPUSNAP_AGENT_LOG" 2>/dev/null; then
  fail "the agent accepted GPUSNAP_STAGING_MODE=bounce" "$(grep GPUSNAP_STAGING_MODE "$GPUSNAP_AGENT_LOG")"
fi
# the ring reports where its threads' time went
check "the ring reports its threads' wait and host time (ring_wait_s $(counter ring_wait_s), ring_host_s $(counter ring_host_s))" \
  python3 -c 'import sys; sys.exit(not (float(sys.argv[1]) >= 0 and float(sys.argv[2]) > 0))' "$(counter ring_wait_s)" "$(counter ring_host_s)"
# all-zero chunks (a 64 MiB block the app leaves zero): not kept in host memory on
# suspend, set with a memset on resume; with a reserved pool, whose bytes at that
# block's place are an older cycle's, the memset must win over the stale bytes
unset GPUSNAP_STAGING_MODE GPUSNAP_CHUNK_SIZE GPUSNAP_HOST_COPY GPUSNAP_STAGING_POPULATE
export AGENT_APP_ZERO_MB=64
# where zero chunks are found: on the GPU (the agent's own kernel), or on the host after the copy
scan_where=gpu
zero_cycle() { # TITLE WANT(zero|data|off)
  run_gpusnap suspend --json "$APP"; expect "$mode: suspend, $1" 0
  local z g; z=$(counter zero_bytes) g=$(counter gpu_zero_bytes)
  check "$mode: $1: the agent unloaded its kernel ($(cat "$FAKE_CUDA_DIR/$APP.modules" 2>/dev/null) modules)" \
    test "$(cat "$FAKE_CUDA_DIR/$APP.modules" 2>/dev/null || echo 0)" = 0
  case $2:$scan_where in
    zero:gpu) check "$mode: $1: the zero block was found on the GPU ($g of $z zero bytes)" test "${g:-0}" -ge $((64 << 20)) ;;
    zero:host) check "$mode: $1: the zero block was found on the host ($g of $z zero bytes)" test "${g:-1}" = 0 ;;
    data:*) check "$mode: $1: nothing of the filled block is zero on the GPU ($g bytes)" test "${g:-1}" -lt $((64 << 20)) ;;
  esac
  case $2 in
    zero) check "$mode: $1: the zero block was not copied ($z zero bytes)" test "${z:-0}" -ge $((64 << 20)) ;;
    data) check "$mode: $1: the filled block was copied ($z zero bytes)" test "${z:-0}" -lt $((64 << 20)) ;;
    off) check "$mode: $1: GPUSNAP_ZERO_CHUNKS=0 copies every chunk ($z zero bytes)" test "${z:-1}" = 0 ;;
  esac
  check "$mode: $1: all physical memory released" test "$(phys)" = 0
  run_gpusnap resume --json "$APP"; expect "$mode: resume, $1" 0
  [ "$2" = zero ] && check "$mode: $1: resume set the zero chunks ($(counter zero_bytes) bytes)" \
    test "$(counter zero_bytes)" -ge $((64 << 20))
  verify_ok "$mode: $1: every block, the zero one included"
}
zero_flip() { # WANT
  app_cmd zero-flip
  case $REPLY in "ZERO $1") pass "$mode: the app flipped its zero block ($REPLY)" ;; *) fail "$mode: zero-flip" "$REPLY" ;; esac
}
for mode in zero-on-demand zero-reserve; do
  if [ $mode = zero-reserve ]; then export GPUSNAP_RESERVE=256M; else unset GPUSNAP_RESERVE; fi
  start_app
  verify_ok "$mode: the app's data, a zero block among it"
  zero_cycle "a zero block" zero
  zero_flip 1
  zero_cycle "the block filled" data
  zero_flip 0
  zero_cycle "the block zero again" zero
  echo quit >&3
  exec 3>&-
  wait "$APP"
done
# the GPU scan turned off, or a driver that loads no module: found on the host, as before the scan
scan_where=host
for mode in zero-scan-off zero-no-modules; do
  if [ $mode = zero-scan-off ]; then export GPUSNAP_GPU_ZERO_SCAN=0; else unset GPUSNAP_GPU_ZERO_SCAN; export FAKE_CUDA_NO_MODULES=1; fi
  : >"$GPUSNAP_AGENT_LOG"
  start_app
  zero_cycle "a zero block" zero
  if [ $mode = zero-no-modules ]; then
    check "$mode: the agent's log says the GPU could not scan" grep -q "found on the host instead of on GPU 0" "$GPUSNAP_AGENT_LOG"
  fi
  echo quit >&3
  exec 3>&-
  wait "$APP"
done
unset GPUSNAP_GPU_ZERO_SCAN FAKE_CUDA_NO_MODULES
mode=zero-off
unset GPUSNAP_RESERVE
export GPUSNAP_ZERO_CHUNKS=0
start_app
zero_cycle "zero chunks not looked for" off
echo quit >&3
exec 3>&-
wait "$APP"
unset GPUSNAP_ZERO_CHUNKS AGENT_APP_ZERO_MB

# a suspend the host memory cannot hold is refused before anything moves, and the app goes on
unset GPUSNAP_RESERVE GPUSNAP_STAGING_MODE GPUSNAP_CHUNK_SIZE GPUSNAP_HOST_COPY GPUSNAP_STAGING_POPULATE
export GPUSNAP_HOST_MEMORY_LIMIT=1M
mode=host-memory
start_app
phys0=$(phys)
run_gpusnap suspend "$APP"
expect "a suspend needing more host memory than GPUSNAP_HOST_MEMORY_LIMIT is refused" 13
check "it names the cause" grep -q "not enough host memory to hold the GPU data: .* needed (.* zero .*), .* available (GPUSNAP_HOST_MEMORY_LIMIT)" "$ERR_TXT"
check "the physical memory stayed ($(phys))" test "$(phys)" = "$phys0"
check "the driver still runs the process" test "$(fake_state)" = 0
verify_ok "the data after the refused suspend"
unset GPUSNAP_HOST_MEMORY_LIMIT
echo quit >&3
exec 3>&-
wait "$APP"; rc=$?
check "the app exits cleanly after the refused suspend (rc $rc)" test "$rc" = 0
test_done
