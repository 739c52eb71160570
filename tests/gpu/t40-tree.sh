#!/usr/bin/env bash
# t40-tree.sh - `--tree` on a parent that is not a CUDA process (bash) with two
# CUDA children: both are suspended (state suspended, VRAM 0), both resume and
# verify, both exit 0.
. "$(dirname "$0")/lib.sh"
gs_test_init t40-tree

tree_start c 2 180 "$GS_APPS/pattern" --size 1G --seed 40 || finish
p1=${APP_PID[c1]} p2=${APP_PID[c2]}
log "parent $TREE_PID, children $p1 $p2"
expect_vram_at_least c1 "$p1" 1024
expect_vram_at_least c2 "$p2" 1024
vram_snapshot "$p1"; b1=$SNAP_PID_MIB; gpu_before=$SNAP_GPU_MIB
b2=$(pid_vram_mib "$p2")

gs_run suspend "$TREE_PID" --tree --json
expect_rc 0 "suspend --tree of the bash parent $TREE_PID" || finish
expect_json_process "$p1" suspended "suspend --tree, child 1"
expect_json_process "$p2" suspended "suspend --tree, child 2"
expect_state "$p1" suspended "state of child 1"
expect_state "$p2" suspended "state of child 2"
expect_vram_released c1 "$p1" "$b1" "$gpu_before" 2048
expect_vram_released c2 "$p2" "$b2" "$gpu_before" 2048

gs_run resume "$TREE_PID" --tree --json
expect_rc 0 "resume --tree of the bash parent $TREE_PID" || finish
expect_json_process "$p1" running "resume --tree, child 1"
expect_json_process "$p2" running "resume --tree, child 2"
expect_state "$p1" running "state of child 1 after resume"
expect_state "$p2" running "state of child 2 after resume"
app_verify c1 "child 1's 1 GiB after resume"
app_verify c2 "child 2's 1 GiB after resume"
app_quit c1
app_quit c2
for ((i = 0; i < 50; i++)); do pid_alive "$TREE_PID" || break; sleep 0.1; done
if pid_alive "$TREE_PID"; then
  fail "tree parent $TREE_PID still runs after its children exited"
else
  pass "tree parent exits after its children"
fi
finish
