#!/usr/bin/env bash
# t89-criu-plugin-apps.sh - plain criu through gpusnap_criu.so on what a
# container runs, beyond t87's single processes:
#  - a tree: a bash parent with two CUDA children, one under `gpusnap run`
#    (agent path), one without (driver path). One criu dump of the parent
#    takes both off the GPU (every CUDA process locked before any is frozen),
#    the tree is gone, criu restore brings all three back with their PIDs, and
#    both children's 1 GiB verify;
#  - the PyTorch inference server (tests/gpu/py/server.py, HTTP keep-alive +
#    UDP, started with `gpusnap run`) dumped with --tcp-close while a client
#    holds an idle connection, on the agent path and then on the driver path
#    (GPUSNAP_PLUGIN_DRIVER=1); after each restore every answer equals what an
#    uninterrupted twin gives.
# Two PyTorch start-ups and four criu runs of PyTorch processes:
# gpu-test-limit: 420
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/plugin_lib.sh"
gs_test_init t89-criu-plugin-apps
export GS_APP_STDERR=null # CRIU restores a process only if its regular files kept their size
require_criu
plugin_init

# ---- a tree of two CUDA processes, one on each path ----
# The first child to start takes the agent (mkdir is atomic), the other runs bare.
mixed=$GS_WORK/mixed-child.sh
cat >"$mixed" <<EOF
#!/usr/bin/env bash
if mkdir "$GS_WORK/agent-taken" 2>/dev/null; then
  exec "$GPUSNAP" run -- "$GS_APPS/pattern" --size 1G --seed 89
fi
exec "$GS_APPS/pattern" --size 1G --seed 89
EOF
chmod +x "$mixed"
rm -rf "$GS_WORK/agent-taken"
tree_start c 2 180 "$mixed" || finish
p1=${APP_PID[c1]} p2=${APP_PID[c2]}
log "parent $TREE_PID, children $p1 $p2"
expect_vram_at_least c1 "$p1" 1024
expect_vram_at_least c2 "$p2" 1024
plugin_dump "$TREE_PID" "$GS_WORK/img-tree"
check_eq "criu dump of the tree through the plugin" "$PLUGIN_RC" 0 || finish
wait "$TREE_PID" 2>/dev/null
log_file="$GS_WORK/img-tree/dump.log"
check "one child took the agent path" grep -q "is off the GPU: agent path" "$log_file"
check "the other took the driver path" grep -q "is off the GPU: driver path" "$log_file"
for p in "$TREE_PID" "$p1" "$p2"; do
  check "process $p is gone after the dump" wait_pid_reaped "$p"
done
gs_run inspect "$GS_WORK/img-tree/gpusnap/$(ls "$GS_WORK/img-tree/gpusnap" | head -n 1)"
expect_rc 0 "inspect of the agent child's GPU image"
plugin_restore "$GS_WORK/img-tree"
check_eq "criu restore of the tree through the plugin" "$PLUGIN_RC" 0 || finish
check_eq "restored root pid" "$PLUGIN_PID" "$TREE_PID"
APP_OWN[c1]=restored
APP_OWN[c2]=restored
check "child 1 ($p1) is running on the GPU" plugin_wait_loaded "$p1"
check "child 2 ($p2) is running on the GPU" plugin_wait_loaded "$p2"
app_verify c1 "child 1's 1 GiB after criu restore of the tree"
app_verify c2 "child 2's 1 GiB after criu restore of the tree"
app_quit c1
app_quit c2
check "the restored tree parent exits after its children" wait_pid_gone "$TREE_PID"

# ---- the PyTorch server, agent path then driver path ----
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  skip "PyTorch with CUDA is not installed here: the server part"
  finish
fi
server_pair_start 89 || finish
pid=${APP_PID[srv]}
server_client_start 89 || finish
client_ask open OPEN "OPEN SAME" "keep-alive connections to the server and its twin"
client_same_as_twin "before any dump"
for path in agent driver; do
  [ "$path" == driver ] && client_ask open OPEN "OPEN SAME" "a new idle keep-alive connection before the driver-path dump"
  if [ "$path" == driver ]; then export GPUSNAP_PLUGIN_DRIVER=1; else unset GPUSNAP_PLUGIN_DRIVER; fi
  plugin_dump "$pid" "$GS_WORK/img-srv-$path" --tcp-close
  unset GPUSNAP_PLUGIN_DRIVER
  check_eq "criu dump --tcp-close of the server through the plugin ($path path)" "$PLUGIN_RC" 0 || finish
  check "the plugin took the $path path" grep -q "is off the GPU: $path path" "$GS_WORK/img-srv-$path/dump.log"
  check "the server is gone after the dump" wait_pid_reaped "$pid"
  plugin_restore "$GS_WORK/img-srv-$path" --tcp-close
  check_eq "criu restore of the server through the plugin ($path path)" "$PLUGIN_RC" 0 || finish
  check_eq "restored server pid" "$PLUGIN_PID" "$pid"
  APP_OWN[srv]=restored
  check "the server is running on the GPU again" plugin_wait_loaded "$pid"
  client_ask keepalive KEEPALIVE "KEEPALIVE CLOSED" "$path path: the idle keep-alive connection comes back closed"
  client_same_as_twin "after criu dump/restore through the plugin ($path path)"
done
app_quit client 30
app_quit srv 60
app_quit twin 60
finish
