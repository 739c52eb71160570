#!/usr/bin/env bash
# t4015 - GPU memory shared between two processes as POSIX file descriptors
# (cuMemExportToShareableHandle / cuMemImportFromShareableHandle, as NCCL
# does with cuMem), suspended and resumed together with --tree, without a
# GPU: tests/agent/share_app.c runs two ranks under the agent on the
# host-memory fake driver (tests/fake/fake_vmm_driver.c, whose exported
# descriptors are memfds that another process can import). Each rank
# exports a 4 MiB buffer, the other imports and maps it. Checks:
#  - suspend --tree releases every physical allocation of both ranks (own
#    and imported), and no descriptor or mapping of the shared memory is left
#    in either process (the memory is really gone);
#  - resume --tree brings both buffers back bit for bit, the imports mapped
#    again at the same addresses onto the exporter's new memory: a "ring"
#    exchange after it sees each rank's writes in the other's buffer;
#  - a second cycle works the same;
#  - refusals, one line each, nothing changed: suspending one rank alone, and
#    a rank that keeps the descriptor it imported open;
#  - dump without --tree refuses a rank that shares memory, which runs on
#    (a dump of the parent, or dump --tree, takes both: t4016);
#  - legacy CUDA IPC (cuIpcGetMemHandle) on the agent's memory fails at the
#    call with a log line naming GPUSNAP_AGENT_HOOKS=0, which makes it work;
#  - a --tree suspend that fails after the agents (suspend-after-agent), or
#    in an importer letting go (share-let-go), rolls the tree back: data,
#    mappings and the ring exchange intact;
#  - resuming one rank of a suspended tree alone is refused (one line);
#  - a resume stopped after the exporters made their memory again (fault
#    share-handover) leaves the tree suspended; the next resume finishes it;
#  - a resume --tree whose second rank fails its RESUME (agent-copy-in in the
#    child only, SHARE_APP_CHILD_FAULT) opens no gate: the first rank is
#    suspended again, the shared memory let go, the tree stays suspended
#    (one line, exit 16) and the next resume --tree brings both back;
#  - a suspend --tree rolled back after the driver (suspend-after-driver)
#    holds the gates until every rank is back: while the child's RESUME is
#    held, a driver call of the parent waits.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/share_lib.sh"

app=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}/tests/agent/share_app
fake_agent_env

APP_SETSID=1 start_app # the dump refusal below must meet the shared memory, not CRIU's session limit
CHILD=$(awk '/^READY/ {print $3; exit}' "$TEST_TMP/app.out")
TEST_PIDS+=("$CHILD")
verify_ok "both ranks see both buffers after setup"
# descriptors and mappings of the fake's shared memory (memfds) in process $1
memfds() { { ls -l "/proc/$1/fd" 2>/dev/null; cat "/proc/$1/maps" 2>/dev/null; } | grep -c "memfd:fake-vram" || true; }
check "each rank holds its buffer and the imported one (8 MiB each: $(phys_of "$APP"), $(phys_of "$CHILD"))" \
  test "$(phys_of "$APP")" = $((8 * MiB)) -a "$(phys_of "$CHILD")" = $((8 * MiB))

cycle() {
  check "before the suspend each rank maps the shared memory ($(memfds "$APP"), $(memfds "$CHILD") memfd entries)" \
    test "$(memfds "$APP")" -gt 0 -a "$(memfds "$CHILD")" -gt 0
  run_gpusnap suspend --tree --json "$APP"; expect "suspend --tree ($1)" 0
  check "suspend released both ranks' memory ($(phys_of "$APP"), $(phys_of "$CHILD") bytes left)" \
    test "$(phys_of "$APP")" = 0 -a "$(phys_of "$CHILD")" = 0
  check "no descriptor or mapping of the shared memory is left ($(memfds "$APP") in $APP, $(memfds "$CHILD") in $CHILD)" \
    test "$(memfds "$APP")" = 0 -a "$(memfds "$CHILD")" = 0
  run_gpusnap resume --tree --json "$APP"; expect "resume --tree ($1)" 0
  check "resume brought both ranks' memory back ($(phys_of "$APP"), $(phys_of "$CHILD"))" \
    test "$(phys_of "$APP")" = $((8 * MiB)) -a "$(phys_of "$CHILD")" = $((8 * MiB))
  verify_ok "both buffers are back bit for bit ($1)"
  app_cmd ring
  case $REPLY in "RING OK") pass "each rank writes into the other's buffer after the resume ($1)" ;;
    *) fail "ring after the resume ($1)" "$REPLY" "agent log: $(tail -n 5 "$GPUSNAP_AGENT_LOG")" ;; esac
}
cycle "first cycle"
cycle "second cycle"

# a failure after every agent suspended: the tree is rolled back, the descriptors handed over again
GPUSNAP_FAULT=suspend-after-agent run_gpusnap suspend --tree "$APP"
expect "a suspend --tree failing after the agents fails" 1 "suspend-after-agent"
check "both ranks hold their memory again ($(phys_of "$APP"), $(phys_of "$CHILD"))" \
  test "$(phys_of "$APP")" = $((8 * MiB)) -a "$(phys_of "$CHILD")" = $((8 * MiB))
verify_ok "both buffers after the rollback"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after the rollback" ;; *) fail "ring after the rollback" "$REPLY" ;; esac

# one rank alone: its importer would keep the old memory
run_gpusnap suspend "$APP"; expect "suspending the exporting rank alone is refused" 6 "suspend them together with --tree"
check "the refusal is one line" one_error
run_gpusnap suspend "$CHILD"; expect "suspending the other rank alone is refused" 6 "together with --tree"
verify_ok "the refused suspends changed nothing"

# resuming one rank of a suspended tree alone: refused, the tree stays suspended and resumes together
run_gpusnap suspend --tree "$APP"; expect "suspend --tree before a resume of one rank" 0
run_gpusnap resume "$CHILD"
expect "resuming one rank alone is refused" 6 "resume them together with --tree"
check "the refusal is one line" one_error
check "the parent is still suspended (holds $(phys_of "$APP") bytes)" test "$(phys_of "$APP")" = 0
run_gpusnap resume --tree "$APP"; expect "resume --tree after the refusal" 0
verify_ok "both buffers after the refused resume"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after the refused resume" ;; *) fail "ring after refused resume" "$REPLY" ;; esac

# a resume that stops after the exports were made again, before the importers got them: it stays
# suspended, and the next resume finishes it
run_gpusnap suspend --tree "$APP"; expect "suspend --tree before the failed resume" 0
GPUSNAP_FAULT=share-handover run_gpusnap resume --tree "$APP"
expect "a resume stopped at the handover fails" 1 "share-handover"
check "the importers are still suspended (child holds $(phys_of "$CHILD") bytes)" test "$(phys_of "$CHILD")" != $((8 * MiB))
run_gpusnap resume --tree "$APP"; expect "the next resume --tree finishes it" 0
verify_ok "the data after the resumed handover"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after the retried resume" ;; *) fail "ring after retry" "$REPLY" ;; esac

# a rank that shares memory refuses to be dumped alone, and runs on (a dump of the parent takes the whole
# job, its rank being a CUDA process under it, as dump --tree does: t4016)
if have_criu; then
  run_gpusnap dump "$CHILD" -D "$TEST_TMP/img"
  expect "dumping a rank that shares memory alone is refused" 6 "together with --tree"
  check "no image is left" test ! -e "$TEST_TMP/img"
  verify_ok "the refused dump changed nothing"
else
  echo "SKIP: the dump refusal (root and CRIU needed: $(tail -n 1 "$TEST_TMP/get-criu.log" "$TEST_TMP/check.log" 2>/dev/null | tail -n 1))"
fi

# a rank that keeps the descriptor it imported open: refused, nothing changed
app_cmd keepfd
case $REPLY in "KEEPFD OK") pass "the child imports a second time and keeps the descriptor" ;;
  *) fail "keepfd" "$REPLY" ;; esac
run_gpusnap suspend --tree "$APP"
expect "a rank that keeps an imported descriptor open is refused" 6 "keeps the file descriptor"
check "the refusal is one line" one_error
check "the refusal names the rank ($CHILD)" grep -q "process $CHILD " "$ERR_TXT"
verify_ok "the refused suspend changed nothing"

# legacy CUDA IPC on the agent's memory fails at the call, saying why in the agent's log
app_cmd ipc
check "cuIpcGetMemHandle on agent memory fails as not supported ($REPLY)" test "$REPLY" = "IPC 801"
check "the agent's log names the way out (GPUSNAP_AGENT_HOOKS=0)" \
  grep -q "cuIpcGetMemHandle on memory the gpusnap agent manages is not supported.*GPUSNAP_AGENT_HOOKS=0" "$GPUSNAP_AGENT_LOG"

quit_app "both ranks exit cleanly"

# an importer that cannot let go of its import (fault in both ranks' agents, once each): the
# suspend fails after every rank suspended, every rank walks back on its own (the exporter takes
# back the very memory its importer still maps) and runs on with its data
GPUSNAP_FAULT=share-let-go start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$TEST_TMP/app.out")
TEST_PIDS+=("$CHILD")
run_gpusnap suspend --tree "$APP"
expect "a failure letting go of an import fails the suspend" 16 "cannot let go of imported GPU memory"
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" \
  test "$(phys_of "$APP")" = $((8 * MiB)) -a "$(phys_of "$CHILD")" = $((8 * MiB))
verify_ok "both buffers after the failed suspend"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after the failed suspend" ;; *) fail "ring after the failed suspend" "$REPLY" ;; esac
# the fault fires once in each rank: the second suspend meets the other rank's
run_gpusnap suspend --tree "$APP"
expect "the other rank's injected failure fails the next suspend" 16 "cannot let go of imported GPU memory"
verify_ok "both buffers after the second failed suspend"
run_gpusnap suspend --tree "$APP"; expect "the third suspend --tree works" 0
check "it released both ranks' memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" \
  test "$(phys_of "$APP")" = 0 -a "$(phys_of "$CHILD")" = 0
run_gpusnap resume --tree "$APP"; expect "and its resume" 0
verify_ok "both buffers after that cycle"
quit_app "both ranks exit cleanly after the fault"

# without the agent's hooks the driver gives the handle
GPUSNAP_AGENT_HOOKS=0 start_app
app_cmd ipc
check "with GPUSNAP_AGENT_HOOKS=0 cuIpcGetMemHandle works ($REPLY)" test "$REPLY" = "IPC 0"
quit_app "both ranks exit cleanly without hooks"
# one rank's RESUME fails (the child's agent fails its first copy to the GPU): no gate opens onto
# memory that rank did not fill; the rank resumed before it is suspended again, the memory they
# share released, and the whole tree stays suspended until the next resume --tree
SHARE_APP_CHILD_FAULT=agent-copy-in start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$TEST_TMP/app.out")
TEST_PIDS+=("$CHILD")
run_gpusnap suspend --tree "$APP"; expect "suspend --tree before the failing resume" 0
run_gpusnap resume --tree "$APP"
expect "a resume --tree whose second rank fails its RESUME fails" 16 "to the GPU on GPU 0 failed"
check "the refusal says the tree stays suspended" grep -q "the processes stay suspended" "$ERR_TXT"
check "the error is one line" one_error
check "the rank resumed first is suspended again (it holds $(phys_of "$APP") bytes)" test "$(phys_of "$APP")" = 0
check "the failing rank stays suspended (it holds $(phys_of "$CHILD") bytes)" test "$(phys_of "$CHILD")" = 0
check "no descriptor or mapping of the shared memory is left ($(memfds "$APP") in $APP, $(memfds "$CHILD") in $CHILD)" \
  test "$(memfds "$APP")" = 0 -a "$(memfds "$CHILD")" = 0
run_gpusnap state "$APP"
check "state says the first rank is suspended ($(head -c 200 "$OUT_TXT"))" grep -q "suspended" "$OUT_TXT"
run_gpusnap resume --tree "$APP"; expect "the next resume --tree brings the tree back" 0
verify_ok "both buffers after the failed resume and its retry"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after the retried resume" ;; *) fail "ring after retry" "$REPLY" ;; esac
quit_app "both ranks exit cleanly after the failed resume"

# a rollback after the driver's checkpoint (suspend-after-driver) resumes the ranks with their
# gates held until all are back: while the child's RESUME is slow (its agent holds 3 s in its
# copy to the GPU), a driver call of the parent, resumed first, waits at its gate
SHARE_APP_CHILD_FAULT=agent-copy-in=hold:3 start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$TEST_TMP/app.out")
TEST_PIDS+=("$CHILD")
holds() { grep -c "injected at 'agent-copy-in'" "$GPUSNAP_AGENT_LOG" 2>/dev/null || true; }
before=$(holds)
bg_gpusnap suspend-after-driver suspend --tree "$APP"
for _ in $(seq 200); do
  [ "$(holds)" -gt "$before" ] && break
  sleep 0.05
done
check "the child's resume holds (its agent's log)" test "$(holds)" -gt "$before"
echo sync >&3
sleep 1
check "while the child resumes, the parent's driver call waits at its gate ($(grep -c '^SYNC' "$TEST_TMP/app.out") answers)" \
  test "$(grep -c '^SYNC' "$TEST_TMP/app.out")" = 0
bg_wait
check "the suspend failed at the injected point and was undone (rc $BG_RC: $(cat "$TEST_TMP/bg.err"))" test "$BG_RC" = 1
for _ in $(seq 600); do grep -q '^SYNC' "$TEST_TMP/app.out" && break; sleep 0.05; done
check "once every rank is back the parent's driver call returns ($(grep '^SYNC' "$TEST_TMP/app.out"))" \
  grep -q '^SYNC 0' "$TEST_TMP/app.out"
verify_ok "both buffers after the rollback after the driver"
app_cmd ring
case $REPLY in "RING OK") pass "the ring exchange after that rollback" ;; *) fail "ring after rollback" "$REPLY" ;; esac
quit_app "both ranks exit cleanly after that rollback"
test_done
