#!/usr/bin/env bash
# t6003-criu-plugin-share - gpusnap_criu.so in plain criu runs on two
# processes that share GPU memory as POSIX file descriptors
# (cuMemExportToShareableHandle / cuMemImportFromShareableHandle, as NCCL
# does with cuMem): tests/agent/share_app.c --signals, two ranks (parent and
# child), each exporting a 4 MiB buffer the other imports and maps, under
# the agent on the host-memory fake driver, with the real CRIU 4. Checks:
#  - a dump failing in the second rank's agent (after the first dumped and
#    released its memory), and one failing after CRIU froze the tree, roll
#    back: both run on with their data, the ring exchange goes on;
#  - criu dump of the child alone (it imports memory exported outside its
#    tree) is refused before anything changes;
#  - criu dump --leave-running: both run on with their data, and both images are synced after;
#  - criu dump: the memory is linked and let go before the driver and CRIU
#    meet it (each exported buffer saved once, by its exporter; the
#    importer's image records the export), both processes are gone;
#  - criu restore refuses, in init and before any task exists, an image
#    whose import has no export among the dump's GPU images;
#  - criu restore: both ranks back, both buffers equal byte for byte from
#    both ranks, the ring exchange goes on; a restore failing for one task
#    leaves no process of the job; a second restore works.
# In a sanitizer build only the dump half runs (CRIU 4.2.1 cannot restore
# the two ASan-instrumented processes, as in t4016). Needs root, CRIU
# (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/share_lib.sh"
. "$(dirname "$0")/plugin_lib.sh"

signals_app_env share_app criu
plugin_env
# loaded PID: its agent says running within 30 s (its data is back; the gates open together)
loaded() { agent_says "$1" running; }
both_loaded() { loaded "$APP" && loaded "$CHILD"; }

# ---- the second rank's agent fails its copy out of the GPU: the first dumped already (its memory
# released); the child walked back, the parent takes its data back from its temporary image, its
# export made again and handed to the child, gates held until both are back ----
SHARE_APP_CHILD_FAULT=agent-copy-out start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$log")
criu_dump "$TEST_TMP/fail1" "$APP"
check "criu dump whose second rank fails its dump fails" rc_failed
check "... the plugin says why" log_has "$TEST_TMP/fail1/dump.log" "to host on GPU 0 failed"
check "... the memory was linked before (the handover ran)" log_has "$TEST_TMP/fail1/dump.log" "share GPU memory: linked"
check "both ranks run ($APP, $CHILD)" both_alive
check "both agents run" both_loaded
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers after the failed dump of the second rank"
ring_ok "the ring exchange after the failed dump of the second rank"
kill -9 "$CHILD" "$APP"; wait_gone "$APP" 5

start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$log")
check "both ranks started ($APP, $CHILD)" both_alive
verify_ok "both ranks see both buffers after setup"
ring_ok "the ring exchange before the dumps"

# ---- refused before anything changes: the child's tree alone (it imports memory exported outside it) ----
criu_dump "$TEST_TMP/alone" "$CHILD"
check "criu dump of the child alone fails" rc_failed
check "... refused by the plugin, naming the cause" log_has "$TEST_TMP/alone/dump.log" "no process of this tree exports"
check "both ranks run" both_alive
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "the refused dump changed nothing"
ring_ok "the ring exchange after the refused dump"

# ---- a dump failing after CRIU froze the tree (every agent dumped, the shared memory let go): both
# resume as one job once CRIU let them go ----
GPUSNAP_FAULT=plugin-checkpoint criu_dump "$TEST_TMP/fail2" "$APP"
check "criu dump failing at CHECKPOINT_DEVICES fails" rc_failed
check "both ranks run" both_alive
check "both agents took their data back" both_loaded
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers after the failed dump"
ring_ok "the ring exchange after the failed dump"

# ---- --leave-running ----
criu_dump "$TEST_TMP/lr" "$APP" --leave-running
check "criu dump --leave-running succeeds" rc_ok
check "both ranks run on" both_alive
check "both agents took their data back" both_loaded
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers after criu dump --leave-running"
ring_ok "the ring exchange after criu dump --leave-running"
check "... then the helper synced both images" log_soon "$TEST_TMP/lr/dump.log" "is on the disk (synced in" 2
for p in "$APP" "$CHILD"; do
  run_gpusnap inspect --verify "$TEST_TMP/lr/gpusnap/$p"; expect "inspect --verify of process $p's --leave-running image" 0
done

# ---- dump, gone ----
img=$TEST_TMP/img
criu_dump "$img" "$APP"
check "criu dump of the two ranks succeeds" rc_ok
d=$img/dump.log
check "the agents' memory was linked" log_has "$d" "share GPU memory: linked"
saved_once() { [ "$(grep -c "the agent wrote $((4 * MiB)) bytes" "$d")" = 2 ]; }
check "each exported buffer is saved once, by its exporter (4 MiB each)" saved_once
check "both took the agent path" test "$(grep -c 'is off the GPU: agent path' "$d")" = 2
check "the parent is gone" wait_gone "$APP" 5
check "the child is gone" wait_gone "$CHILD" 5
run_gpusnap inspect --json "$img/gpusnap/$CHILD"; expect "inspect of the child's GPU image" 0
imported=$(jget "['image']['metadata']['share.import.0']")
check "the child's image records what it imported: the parent's export ($imported)" \
  grep -q "^exporter=$APP export_handle=0x[0-9a-f]* handle=0x[0-9a-f]* maps=0x[0-9a-f]*+0x400000$" <<<"$imported"
run_gpusnap inspect --json "$img/gpusnap/$APP"; expect "inspect of the parent's GPU image" 0
exported=$(jget "['image']['metadata']['share.export.0']")
export_handle=${imported#*export_handle=}
export_handle=${export_handle%% *}
check "the parent's image records that export ($exported)" test -n "$export_handle" -a "handle=$export_handle" = "$exported"
run_gpusnap inspect --verify "$img/gpusnap/$APP"; expect "the parent's GPU image verifies" 0
run_gpusnap inspect --verify "$img/gpusnap/$CHILD"; expect "the child's GPU image verifies" 0

# ---- refused in init: the importer's image without its exporter's ----
cp -a "$img" "$TEST_TMP/half"
rm -rf "$TEST_TMP/half/gpusnap/$APP"
criu_restore "$TEST_TMP/half"
check "criu restore of an image whose import has no export fails" rc_failed
check "... refused in init, naming the cause" log_has "$TEST_TMP/restore.log" \
  "refusing the restore: the GPU image of process $CHILD imported GPU memory that process $APP exported"
refused_one_line() { [ "$(grep -c 'gpusnap: refusing the restore' "$TEST_TMP/restore.log")" = 1 ]; }
check "... in one line" refused_one_line
check "... before any task existed" bash -c "! grep -q 'Forking task' '$TEST_TMP/restore.log'"
check "... no process at $APP" wait_gone "$APP" 5
check "... nor at $CHILD" wait_gone "$CHILD" 5

if ldd "$app" | grep -q libasan; then
  # CRIU 4.2.1's restore of this tree of two ASan-instrumented processes dies in the root task's
  # premap (SIGSEGV in criu's restore log, before any task runs); see t4016
  echo "# the restore of the two ranks is not checked in a sanitizer build (CRIU cannot restore them there)"
  test_done
  exit
fi

# ---- a restore failing for one task: neither runs without the other's memory ----
GPUSNAP_FAULT=plugin-restore criu_restore "$img"
check "... the failed task's partner was killed too" log_has "$TEST_TMP/restore.log" "shares GPU memory with"
check "no process at $APP after a restore failing for one task" wait_gone "$APP" 10
check "nor at $CHILD" wait_gone "$CHILD" 10

# ---- restore ----
criu_restore "$img"
check "criu restore of the two ranks succeeds" rc_ok
check "it restored $APP" [ "$RPID" = "$APP" ]
check "both ranks run again" both_alive
check "the agents loaded together" log_has "$TEST_TMP/restore.log" "share GPU memory loaded their GPU data together"
check "both agents run" both_loaded
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers are back byte for byte, seen from both ranks"
ring_ok "the ring exchange goes on after the restore"

kill -9 "$CHILD" "$APP"; wait_gone "$APP" 5; wait_gone "$CHILD" 5
criu_restore "$img"
check "a second restore from the same image succeeds" rc_ok
check "both agents run" both_loaded
verify_ok "both buffers after the second restore"
ring_ok "the ring exchange after the second restore"
test_done
