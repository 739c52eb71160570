#!/usr/bin/env bash
# t66-share-fd.sh - two processes on one GPU sharing memory as NCCL does with
# cuMem (cuMemExportToShareableHandle / cuMemImportFromShareableHandle with
# POSIX file descriptors sent over a Unix socket, closed after import), both
# under the agent (tests/gpu/apps/share.cu; the CPU twin is
# tests/cli/t4015-agent-share.sh). Each rank exports a 1 GiB buffer and maps
# the other's. Checks:
#  - suspend --tree of rank 0 (rank 1 is its child): both suspended, each
#    holds 0 MiB in nvidia-smi and the GPU's use falls by both buffers (the
#    shared memory is really freed, not kept by an import or a descriptor);
#  - resume --tree: both buffers verify on the GPU bit for bit from both ranks,
#    and a ring exchange (each rank writes the other's buffer through its
#    import) is seen by the other: the imports map the exporters' new memory;
#  - a second cycle and a --keep-context cycle work the same;
#  - suspending one rank alone is refused (exit 6, one line), nothing changes;
#  - dump --tree --leave-running: both run on with their data (read back from
#    the image before it is published), and the image verifies;
#  - dump --tree of rank 0 (with CRIU): both ranks gone, one GPU image per
#    rank, each 1 GiB buffer saved once (by its exporter); restore brings
#    both back with their PIDs, both buffers verify from both ranks, the ring
#    exchange goes on (the imports map the exporters' new memory at their
#    old addresses), and a suspend/resume --tree cycle of the restored pair
#    works (the CPU twin is tests/cli/t4016-share-tree-image.sh);
#  - the same with plain criu dump / criu restore through gpusnap_criu.so
#    (the CPU twin is tests/cli/t6003-criu-plugin-share.sh).
# gpu-test-limit: 420
. "$(dirname "$0")/lib.sh"
gs_test_init t66-share-fd
# CRIU dumps the ranks: an open stderr file would grow between dump and restore
export GS_APP_STDERR=null
require_app share

app_start share 180 "$GPUSNAP" run -- "$app" --size 1G --seed 66 || finish
p0=${APP_PID[share]}
p1=$(awk '{ print $3 }' <<<"$REPLY_LINE")
if ! [[ $p1 =~ ^[0-9]+$ ]]; then
  fail "no pid of rank 1 in '$REPLY_LINE'"
  finish
fi
gs_track_pid "$p1"
log "rank 0 $p0, rank 1 $p1"
app_verify share "both buffers from both ranks before suspend" || finish

ring_ok() { app_reply_ok share ring "RING OK" 120 "$1: each rank sees the other's writes through its import"; } # WHAT
ring_ok "before suspend"

fell_by_both() { # WHAT [SUSPEND ARGS...]
  local gpu_after
  gpu_after=$(gpus_used_mib)
  check "$1: the GPU's use fell by both 1 GiB buffers ($TREE_GPU_BEFORE -> $gpu_after MiB)" \
    [ $((TREE_GPU_BEFORE - gpu_after)) -ge $((2048 * 9 / 10)) ]
}
cycle() { # WHAT [SUSPEND ARGS...]
  tree_cycle "$1" "$p0" "$p1" 1024 fell_by_both "${@:2}" || return 1
  app_verify share "$1: both buffers from both ranks after resume" || return 1
  ring_ok "$1: after resume"
}
cycle "first cycle" || finish
cycle "second cycle" || finish
cycle "keep-context cycle" --keep-context || finish

gs_run suspend "$p0" --json
expect_rc 6 "suspending rank 0 alone is refused"
check "the refusal says to use --tree" grep -q -- "--tree" <<<"$GS_ERR"
check "the refusal is one line" [ "$(wc -l <<<"$GS_ERR")" == 1 ]
expect_state "$p0" running "rank 0 after the refusal"
app_verify share "both buffers after the refusal"

require_criu
# dump --tree --leave-running (a periodic checkpoint): both ranks run on with their data, read back from
# the image before it is published, and the published image verifies
limg=$GS_WORK/tree-leave-img
gs_run dump --tree --leave-running --json -D "$limg" "$p0"
if ! expect_rc 0 "dump --tree --leave-running of both ranks"; then
  log_criu_tail
  app_quit share 60
  finish
fi
expect_state "$p0" running "rank 0 after dump --tree --leave-running"
expect_state "$p1" running "rank 1 after dump --tree --leave-running"
app_verify share "both buffers from both ranks after dump --tree --leave-running" || finish
ring_ok "after dump --tree --leave-running"
gs_run inspect --json --verify "$limg/procs/$p1"
expect_rc 0 "that image's GPU image of rank 1 verifies"
rm -rf "$limg"

# dump --tree, both ranks gone, restore: the shared buffers come back through their exporters
img=$GS_WORK/tree-img
gs_run dump --tree --json -D "$img" "$p0"
if ! expect_rc 0 "dump --tree of both ranks"; then
  log_criu_tail
  app_quit share 60
  finish
fi
check_eq "the dump took the tree" "$(json_get "$GS_OUT" tree)" true
check_eq "the dump saw the shared memory" "$(json_get "$GS_OUT" shared_memory)" true
check_eq "rank 1 took the agent path" "$(json_get "$GS_OUT" "processes[pid=$p1].path")" agent
data=$(json_get "$GS_OUT" gpu_data_bytes)
check "each 1 GiB buffer is saved once, by its exporter ($data bytes)" test "$data" -ge $((2 << 30)) -a "$data" -lt $((3 << 30))
log "dump --tree: agents $(json_get "$GS_OUT" times.agents_s) s, CRIU $(json_get "$GS_OUT" times.criu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
check "rank 0 is gone after the dump" wait_pid_gone "$p0"
check "rank 1 is gone after the dump" wait_pid_gone "$p1"
gs_run inspect --json --verify "$img/procs/$p1"
expect_rc 0 "rank 1's GPU image verifies"
check "rank 1's image records its import of rank 0's buffer" \
  grep -q "exporter=$p0 " <<<"$(json_get "$GS_OUT" image.metadata)"
gs_run inspect --json "$img"
check_eq "the image is of a tree" "$(json_get "$GS_OUT" image.how)" tree

gs_run restore --json -D "$img"
expect_rc 0 "restore of both ranks" || { app_forget share; finish; }
check_eq "restored pid" "$(json_get "$GS_OUT" pid)" "$p0"
log "restore: CRIU $(json_get "$GS_OUT" times.criu_s) s, GPU $(json_get "$GS_OUT" times.gpu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
APP_OWN[share]=restored
check "rank 0 runs again" pid_alive "$p0"
check "rank 1 runs again" pid_alive "$p1"
app_verify share "both buffers from both ranks after the restore" || finish
ring_ok "after the restore"
cycle "cycle of the restored ranks" || finish

# the same through plain criu and the CRIU plugin (what container engines run): the plugin links the
# shared memory before the gates close and lets it go before the driver and CRIU; on restore one helper
# has both agents load as one job (the CPU twin is tests/cli/t6003-criu-plugin-share.sh)
. "$(dirname "$0")/plugin_lib.sh"
plugin_init
pimg=$GS_WORK/plugin-img
plugin_dump "$p0" "$pimg"
check_eq "criu dump of both ranks through the plugin" "$PLUGIN_RC" 0
check "the plugin linked the shared memory" grep -q "share GPU memory: linked" "$pimg/dump.log"
check "both took the agent path" test "$(grep -c 'is off the GPU: agent path' "$pimg/dump.log")" = 2
check "rank 0 is gone after criu dump" wait_pid_gone "$p0"
check "rank 1 is gone after criu dump" wait_pid_gone "$p1"
plugin_restore "$pimg"
check_eq "criu restore of both ranks through the plugin" "$PLUGIN_RC" 0
check_eq "restored pid" "$PLUGIN_PID" "$p0"
check "the agents loaded as one job" grep -q "share GPU memory loaded their GPU data together" "$GS_WORK/restore-$$.log"
check "rank 0 runs on the GPU again" plugin_wait_loaded "$p0"
check "rank 1 runs on the GPU again" plugin_wait_loaded "$p1"
app_verify share "both buffers from both ranks after criu restore through the plugin" || finish
ring_ok "after criu restore through the plugin"

app_quit share 60
finish
