#!/usr/bin/env bash
# t71-container-runc.sh - CUDA processes in containers, checkpointed and
# restored by the OCI runtime itself (runc checkpoint / runc restore, what
# Podman, CRI-O and containerd run underneath), with gpusnap's CRIU plugin
# named by the container's org.criu.config annotation (runc's way: nothing
# in /etc/criu). Each container has its own PID, mount, network, IPC and UTS
# namespaces and a device cgroup; its file system is the host's /usr, /etc and
# /opt bound read-only (tests/gpu/py/oci_bundle.py writes the bundle), the GPU
# device nodes given as nvidia-container-toolkit would, the agent through
# `gpusnap container-spec --run-args` (a bind mount and LD_PRELOAD).
#  ag: 8 GiB pattern under the agent, PID 1 of its namespace, commands on
#      FIFOs in its /out: `gpusnap suspend`/`resume` from the host (VRAM 0,
#      verified; a runc checkpoint meanwhile is refused, the container runs
#      on, still suspended); runc checkpoint (the plugin's agent path, the GPU image in
#      CRIU's image directory), the container gone; runc restore: verified bit
#      for bit; runc checkpoint --leave-running: runs on, verified.
#  sh: two ranks sharing 1 GiB cuMem buffers as file descriptors, as NCCL
#      does (tests/gpu/apps/share.cu), rank 0 PID 1 of the container's
#      namespace: `gpusnap suspend --tree`/`resume --tree` from the host (VRAM 0
#      for both, verified); runc checkpoint (each exported buffer saved by its owner,
#      the records naming PIDs as the container sees them) and restore (the
#      exports made again, the imports handed over): both buffers verified
#      from both ranks, the ring exchange through the imports works.
#  srv: the PyTorch inference server of t85 (tests/gpu/py/server.py: HTTP
#      keep-alive and UDP, a small transformer) under the agent, on the
#      host's network, with `tcp-close` in its container's CRIU
#      configuration (runc has no such option): runc checkpoint with an idle
#      keep-alive client connection, restore; every answer equal to an
#      uninterrupted twin's (run on the host), the idle connection closed.
#  ddp: torchrun --standalone with one DistributedDataParallel worker
#      (tests/gpu/py/ddp_train.py) under the agent on the host's network,
#      `tcp-established` and `network-lock skip` in its CRIU configuration: runc
#      checkpoint and restore; the store's connections come back as they
#      were (torchrun still runs 10 s later), every step's loss, parameters
#      and optimizer state equal to an uninterrupted twin's on the host.
#  dr: the counter (value in GPU memory) without the agent, on the host's
#      network (no network namespace, as --network host): `gpusnap suspend`/
#      `resume` from the host, runc checkpoint --leave-running (it counts on),
#      then runc checkpoint and restore through the plugin's driver path and
#      the PID namespace; it counts on with no reset or gap.
# A host without iptables-restore cannot lock a network namespace for CRIU:
# the CRIU configuration then says `network-lock skip` (ag's namespace has
# only its loopback).
# runc: on PATH, else Debian's .deb in .cache/container-debs (the GPU machine
# has no registry; scripts/get-runc.sh fetches it), unpacked here. Needs CRIU.
# gpu-test-limit: 420
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/plugin_lib.sh"
gs_test_init t71-container-runc
require_criu
plugin_init

RUNC=$(command -v runc || true)
if [ -z "$RUNC" ]; then
  deb=$(find "$GS_SRC/.cache/container-debs" -name 'runc_*.deb' 2>/dev/null | sort | tail -n 1)
  [ -n "$deb" ] && dpkg -x "$deb" "$GS_WORK/runc-root" && RUNC=$GS_WORK/runc-root/usr/sbin/runc
fi
if [ -z "$RUNC" ] || ! "$RUNC" --version >"$GS_WORK/runc.version" 2>&1; then
  skip "no runc: install it, or carry .cache/container-debs (scripts/get-runc.sh fetches Debian's)"
  finish
fi
log "runc: $RUNC ($(head -n 1 "$GS_WORK/runc.version"))"
# runc runs the first criu in its PATH (criu swrk); the wrapper finds its tree through the link
mkdir -p "$GS_WORK/bin"
ln -sf "$(command -v "$GS_CRIU_BIN")" "$GS_WORK/bin/criu"
export PATH=$GS_WORK/bin:$PATH
# the container's CRIU configuration (annotation org.criu.config): the plugin folder
printf 'libdir %s\n' "$GS_PLUGIN_DIR" >"$GS_WORK/criu-runc.conf"
# CRIU locks a container's network namespace with iptables-restore (or nft) during the dump; a host
# without them (the GPU machine) cannot, and ag has no network but its loopback: nothing to lock
if ! command -v iptables-restore >/dev/null 2>&1; then
  log "no iptables-restore here: the CRIU configuration says network-lock skip"
  echo "network-lock skip" >>"$GS_WORK/criu-runc.conf"
fi

runc_() { timeout -k 5 "${GS_CMD_TIMEOUT:-300}" "$RUNC" --root "$GS_WORK/runc-state" "$@"; }
t71_cleanup() {
  local c
  for c in ag sh srv ddp dr; do runc_ delete -f "$c" >/dev/null 2>&1; done
  rmdir /sys/fs/cgroup/gpusnap-t71 2>/dev/null
  gs_cleanup
}
trap t71_cleanup EXIT

devices=()
for d in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia[0-9]*; do
  [ -c "$d" ] && devices+=(--device "$d")
done
gs_run container-spec --run-args --container-path /gpusnap/libgpusnap.so
expect_rc 0 "gpusnap container-spec --run-args" || finish
agent=()
while read -r a; do
  case $a in
  --volume=*) agent+=(--bind "${a#--volume=}") ;;
  --env=*) agent+=(--env "${a#--env=}") ;;
  esac
done <<<"$GS_OUT"

# ctr_run NAME SHELL_CMD [oci_bundle.py options]: container NAME (bundle and /out under $GS_WORK/NAME) runs
# /bin/sh -c SHELL_CMD, detached; CTR_PID its init's host PID
ctr_run() {
  local name=$1 cmd=$2 dir=$GS_WORK/$1
  shift 2
  python3 "$GS_SRC/tests/gpu/py/oci_bundle.py" "$dir/bundle" --cgroup "/gpusnap-t71/$name" --hostname "$name" \
    --annotation "org.criu.config=$GS_WORK/criu-runc.conf" --bind "$dir/out:/out" --bind "$GS_BUILD:$GS_BUILD:ro" \
    "${devices[@]}" "$@" -- /bin/sh -c "$cmd" || { fail "oci_bundle.py for $name"; return 1; }
  log "\$ runc run -d $name: $cmd"
  (cd "$dir/bundle" && runc_ run -d "$name") </dev/null >"$dir/run.out" 2>&1 ||
    { fail "runc run $name: $(tail -n 3 "$dir/run.out")"; return 1; }
  ctr_pid "$name"
}
ctr_pid() { # NAME: CTR_PID
  CTR_PID=$(runc_ state "$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
  [ -n "$CTR_PID" ] && [ "$CTR_PID" -gt 0 ]
}
ctr_status() { runc_ state "$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])' 2>/dev/null; }
# ctr_checkpoint NAME IMG [runc checkpoint options]: CTR_RC, CTR_SECS; CRIU's log in IMG.work/dump.log
ctr_checkpoint() {
  local name=$1 img=$2 t0
  shift 2
  rm -rf "$img" "$img.work"
  mkdir -p "$img" "$img.work"
  log "\$ runc checkpoint --image-path $img $* $name"
  t0=$EPOCHREALTIME
  runc_ checkpoint --image-path "$img" --work-path "$img.work" "$@" "$name" >"$img.out" 2>&1
  CTR_RC=$?
  CTR_SECS=$(gs_elapsed "$t0")
  log "  exit $CTR_RC after ${CTR_SECS}s"
  log_block "  plugin| " "$(grep 'gpusnap:' "$img.work/dump.log" 2>/dev/null)"
  [ "$CTR_RC" == 0 ] || log_block "  runc| " "$(tail -n 5 "$img.out"; grep -i 'error' "$img.work/dump.log" 2>/dev/null | tail -n 10)"
}
# ctr_restore NAME IMG: runc restore -d from IMG (CRIU's log in IMG.rwork/restore.log); CTR_RC, CTR_SECS, CTR_PID
ctr_restore() {
  local name=$1 img=$2 t0
  rm -rf "$img.rwork"
  mkdir -p "$img.rwork"
  log "\$ runc restore -d --image-path $img $name"
  t0=$EPOCHREALTIME
  (cd "$GS_WORK/$name/bundle" && runc_ restore -d --image-path "$img" --work-path "$img.rwork" "$name") \
    </dev/null >"$img.rout" 2>&1
  CTR_RC=$?
  CTR_SECS=$(gs_elapsed "$t0")
  CTR_PID=
  ctr_pid "$name"
  log "  exit $CTR_RC after ${CTR_SECS}s, pid ${CTR_PID:-none}"
  log_block "  plugin| " "$(grep 'gpusnap:' "$img.rwork/restore.log" 2>/dev/null)"
  [ "$CTR_RC" == 0 ] || log_block "  runc| " "$(tail -n 5 "$img.rout"; grep -i 'error' "$img.rwork/restore.log" 2>/dev/null | tail -n 10)"
}
ns_pid() { awk '/^NSpid/ {print $NF}' "/proc/$1/status" 2>/dev/null; }
# ctr_app NAME READY_TIMEOUT CMD [oci_bundle.py options]: container NAME runs CMD (exec'd by /bin/sh) with its
# stdio on FIFOs in its /out, attached as app NAME; the app is no child of this shell: its exit status comes
# from its BYE line (APP_OWN restored). Returns once it printed READY; CTR_PID its host PID.
ctr_app() {
  local name=$1 ready=$2 cmd=$3 out=$GS_WORK/$1/out
  shift 3
  mkdir -p "$out"
  mkfifo "$out/in" "$out/out"
  app_attach "$name" 0 "$out/in" "$out/out" "$out/err" "" || return 1
  ctr_run "$name" "$cmd </out/in >/out/out 2>/out/err" "$@" || return 1
  APP_PID[$name]=$CTR_PID APP_OWN[$name]=restored
  app_wait_ready "$name" "$ready"
}

# ---- ag: 8 GiB under the agent ----
ctr_app ag 180 "exec $GS_APPS/pattern --size 8G --alloc-size 1G --seed 71" "${agent[@]}" || finish
pid=$CTR_PID
check "ag's app is PID 1 of its own PID namespace (host PID $pid)" test "$(ns_pid "$pid")" = 1
check "ag's app runs in the container's cgroup" grep -q "gpusnap-t71/ag" "/proc/$pid/cgroup"
expect_vram_at_least ag "$pid" 8192
gs_run state "$pid"
check_eq "gpusnap state of the container's process (from the host)" "$(tr -d '[:space:]' <<<"$GS_OUT")" running
gs_run suspend --json "$pid"
expect_rc 0 "gpusnap suspend of the container's process (agent socket through /proc/$pid/root)"
check_eq "suspend path" "$(json_get "$GS_OUT" "processes[pid=$pid].path")" agent
check_eq "its VRAM while suspended (MiB)" "$(pid_vram_mib "$pid")" 0
# a checkpoint of a container whose process gpusnap holds suspended: refused, nothing changes
ctr_checkpoint ag "$GS_WORK/ag-refused"
check "runc checkpoint while its process is suspended is refused (exit $CTR_RC)" test "$CTR_RC" != 0
check "... CRIU's log says why" grep -q "; resume it before dumping it" "$GS_WORK/ag-refused.work/dump.log"
check_eq "... runc says ag is" "$(ctr_status ag)" running
expect_state "$pid" suspended "... state of the container's process"
gs_run resume "$pid"
expect_rc 0 "gpusnap resume of the container's process"
app_verify ag "8 GiB in the container after suspend/resume" || finish

ctr_checkpoint ag "$GS_WORK/ag-img"
check_eq "runc checkpoint of ag (8 GiB, agent)" "$CTR_RC" 0
check "the plugin took the agent path" grep -q "is off the GPU: agent path" "$GS_WORK/ag-img.work/dump.log"
check "the container's process is gone" wait_pid_reaped "$pid"
check "runc no longer runs ag" sh -c "! '$RUNC' --root '$GS_WORK/runc-state' state ag >/dev/null 2>&1"
check "CRIU's image directory holds the GPU image (gpusnap/1: the PID in the container)" test -d "$GS_WORK/ag-img/gpusnap/1"
gs_run inspect "$GS_WORK/ag-img/gpusnap/1"
expect_rc 0 "inspect of the container's GPU image"
ctr_restore ag "$GS_WORK/ag-img"
check_eq "runc restore of ag" "$CTR_RC" 0
[ -n "$CTR_PID" ] || finish
pid=$CTR_PID
APP_PID[ag]=$pid
check_eq "runc says ag is" "$(ctr_status ag)" running
check "the restored app is PID 1 of its namespace again" test "$(ns_pid "$pid")" = 1
check "the restored agent has loaded the GPU data" plugin_wait_loaded "$pid"
expect_vram_at_least ag "$pid" 8192
app_verify ag "8 GiB after runc checkpoint and restore" || finish

ctr_checkpoint ag "$GS_WORK/ag-lr" --leave-running
check_eq "runc checkpoint --leave-running of ag" "$CTR_RC" 0
check "the plugin knew the container runs on (runc's RPC options)" \
  grep -q "the tasks run on after the dump" "$GS_WORK/ag-lr.work/dump.log"
check_eq "runc says ag is" "$(ctr_status ag)" running
check "its agent took its data back" plugin_wait_loaded "$pid"
app_verify ag "8 GiB after runc checkpoint --leave-running" || finish
app_quit ag
runc_ delete -f ag >/dev/null 2>&1
app_forget ag

# ---- sh: two ranks that share cuMem buffers as file descriptors (as NCCL does), in one container ----
ctr_app sh 180 "exec $GS_APPS/share --size 1G --seed 71" "${agent[@]}" || finish
app_verify sh "both ranks' buffers, own and imported, in the container" || finish
app_reply_ok sh ring "RING OK" 120 "each rank writes the other's buffer through its import"
# gpusnap from the host on the container's ranks: host PIDs here, PIDs of the container in the agents' records
sh_pid=$CTR_PID
sh_rank1=$(pgrep -P "$sh_pid" | head -n 1)
gs_run suspend --tree "$sh_pid"
expect_rc 0 "gpusnap suspend --tree of the container's two ranks (from the host)"
check_eq "rank 0's VRAM while suspended (MiB)" "$(pid_vram_mib "$sh_pid")" 0
check_eq "rank 1's VRAM while suspended (MiB)" "$(pid_vram_mib "${sh_rank1:-0}")" 0
gs_run resume --tree "$sh_pid"
expect_rc 0 "gpusnap resume --tree of the two ranks (exports made again, imports handed over)"
app_verify sh "both ranks' buffers after suspend/resume --tree from the host" || finish
app_reply_ok sh ring "RING OK" 120 "the ring exchange through the imports after resume --tree"
ctr_checkpoint sh "$GS_WORK/sh-img"
check_eq "runc checkpoint of the two ranks" "$CTR_RC" 0
check "the plugin linked their shared memory" grep -q "share GPU memory: linked" "$GS_WORK/sh-img.work/dump.log"
check "a GPU image for each rank, named by its PID in the container (gpusnap/$(ls "$GS_WORK/sh-img/gpusnap" | tr '\n' ' '))" \
  test "$(find "$GS_WORK/sh-img/gpusnap" -mindepth 1 -maxdepth 1 -name '[0-9]*' | wc -l)" = 2 -a -d "$GS_WORK/sh-img/gpusnap/1"
ctr_restore sh "$GS_WORK/sh-img"
check_eq "runc restore of the two ranks" "$CTR_RC" 0
[ -n "$CTR_PID" ] || finish
APP_PID[sh]=$CTR_PID
check "their agents loaded as one job (the exports made again, the imports handed over)" \
  grep -q "share GPU memory loaded their GPU data together" "$GS_WORK/sh-img.rwork/restore.log"
app_verify sh "both ranks' buffers after runc checkpoint and restore" || finish
app_reply_ok sh ring "RING OK" 120 "the ring exchange through the imports after the restore"
app_quit sh
runc_ delete -f sh >/dev/null 2>&1
app_forget sh

# ---- srv: the PyTorch inference server (HTTP keep-alive, UDP, many threads), host network ----
py=$(command -v python3)
if ! "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  skip "srv: PyTorch with CUDA is not installed here"
else
  # its own CRIU configuration: established connections are closed on restore (no iptables here to lock them)
  printf 'libdir %s\ntcp-close\n' "$GS_PLUGIN_DIR" >"$GS_WORK/criu-srv.conf"
  ctr_app srv 240 "exec $py $GS_SRC/tests/gpu/py/server.py --seed 71 --ports-file /out/ports.json" \
    --host-network --bind "$GS_SRC:$GS_SRC:ro" --annotation "org.criu.config=$GS_WORK/criu-srv.conf" "${agent[@]}" ||
    finish
  ln -sf "$GS_WORK/srv/out/ports.json" "$GS_WORK/srv.json"
  rm -f "$GS_WORK/twin.json"
  # the twin runs on the host, never checkpointed
  GS_APP_STDERR=null app_start twin 240 "$GPUSNAP" run -- "$py" "$GS_SRC/tests/gpu/py/server.py" --seed 71 \
    --ports-file "$GS_WORK/twin.json" || finish
  server_client_start 71 || finish
  client_ask open OPEN "OPEN SAME" "keep-alive connections to the container's server and to its twin"
  client_same_as_twin "the server in a container, before the checkpoint"
  ctr_checkpoint srv "$GS_WORK/srv-img"
  check_eq "runc checkpoint of the server (agent path, tcp-close in its CRIU configuration)" "$CTR_RC" 0
  check "the plugin took the agent path" grep -q "is off the GPU: agent path" "$GS_WORK/srv-img.work/dump.log"
  ctr_restore srv "$GS_WORK/srv-img"
  check_eq "runc restore of the server" "$CTR_RC" 0
  [ -n "$CTR_PID" ] || finish
  APP_PID[srv]=$CTR_PID
  check "the restored server's agent has loaded its GPU data" plugin_wait_loaded "$CTR_PID"
  client_ask keepalive KEEPALIVE "KEEPALIVE CLOSED" "tcp-close: the idle keep-alive connection comes back closed"
  client_same_as_twin "after runc checkpoint and restore of the server"
  app_quit client 30
  app_quit srv 60
  app_quit twin 60
  runc_ delete -f srv >/dev/null 2>&1
fi

# ---- ddp: torchrun's one-GPU DistributedDataParallel job, host network ----
if ! "$py" -c 'import torch, torch.distributed; assert torch.cuda.is_available() and torch.distributed.is_nccl_available()' \
  2>/dev/null || ! command -v torchrun >/dev/null; then
  skip "ddp: PyTorch with NCCL and torchrun are not installed here"
else
  # On the host's network, as training jobs run for NCCL. The store's connections have both ends in
  # the container: restored as they were, and nothing outside meets them meanwhile, so no network lock
  # (runc has no option for either). In a network namespace of its own bare runc restored the job with
  # the namespace's loopback down, and CRIU could not connect the sockets back ("Network is
  # unreachable"): an engine sets the namespace's network up, runc alone does not.
  # torchrun names the store by the host name, which the host's /etc/hosts (bound in) resolves only as localhost
  printf 'libdir %s\ntcp-established\nnetwork-lock skip\n' "$GS_PLUGIN_DIR" >"$GS_WORK/criu-ddp.conf"
  ctr_app ddp 120 "export CUBLAS_WORKSPACE_CONFIG=:4096:8 TORCH_NCCL_ENABLE_MONITORING=0 NCCL_DEBUG=WARN; exec \
$(command -v torchrun) --standalone --nproc_per_node=1 $GS_SRC/tests/gpu/py/ddp_train.py --seed 71" \
    --bind "$GS_SRC:$GS_SRC:ro" --annotation "org.criu.config=$GS_WORK/criu-ddp.conf" "${agent[@]}" \
    --host-network --hostname localhost || finish
  GS_APP_STDERR=null CUBLAS_WORKSPACE_CONFIG=:4096:8 app_start ddptwin 240 "$py" "$GS_SRC/tests/gpu/py/ddp_train.py" \
    --seed 71 --port $((31500 + RANDOM % 1000)) || finish
  ddp_steps() { # N WHAT: N steps in the container and on the twin: loss, parameters and optimizer state equal
    local a b
    app_cmd ddp "step $1" STEP 240 && a=$REPLY_LINE
    app_cmd ddptwin "step $1" STEP 240 && b=$REPLY_LINE
    check_eq "$2: step count and loss equal the twin's" "${a:-none}" "${b:-no twin answer}"
    app_cmd ddp digest DIGEST 120 && a=$REPLY_LINE
    app_cmd ddptwin digest DIGEST 120 && b=$REPLY_LINE
    check_eq "$2: parameters and optimizer state equal the twin's" "${a:-none}" "${b:-no twin answer}"
  }
  app_cmd ddp fds FDS 60 && check_eq "no io_uring in the worker nor in torchrun (the agent refused libuv's)" "$REPLY_LINE" "FDS 0 0"
  ddp_steps 5 "torchrun in a container, before the checkpoint"
  ctr_checkpoint ddp "$GS_WORK/ddp-img"
  check_eq "runc checkpoint of torchrun's job (tcp-established in its CRIU configuration)" "$CTR_RC" 0
  check "the plugin took the agent path" grep -q "is off the GPU: agent path" "$GS_WORK/ddp-img.work/dump.log"
  ctr_restore ddp "$GS_WORK/ddp-img"
  check_eq "runc restore of torchrun's job" "$CTR_RC" 0
  [ -n "$CTR_PID" ] || finish
  APP_PID[ddp]=$CTR_PID
  check "the restored worker's agent has loaded its GPU data" plugin_wait_loaded "$(pgrep -P "$CTR_PID" -f ddp_train.py | head -n 1)"
  ddp_steps 5 "after runc checkpoint and restore"
  sleep 10
  check_eq "the container still runs 10 s later (torchrun's heartbeat through the restored store connection)" \
    "$(ctr_status ddp)" running
  ddp_steps 5 "10 s after the restore"
  app_quit ddp 60
  app_quit ddptwin 60
  runc_ delete -f ddp >/dev/null 2>&1
fi

# ---- dr: the counter, driver path ----
mkdir -p "$GS_WORK/dr/out"
COUNTER_VALUES=$GS_WORK/dr/out/count
ctr_run dr "exec $GS_APPS/counter --no-stdin --quiet --out /out/count </dev/null >/dev/null 2>/out/err" \
  --host-network || finish
pid=$CTR_PID
GS_EXTRA_PIDS+=("$pid")
for ((i = 0; i < 300; i++)); do [ "$(counter_lines)" -ge 10 ] && break; sleep 0.1; done
check "dr's counter counts ($(counter_lines) lines)" test "$(counter_lines)" -ge 10
gs_run suspend "$pid"
expect_rc 0 "gpusnap suspend of dr's counter (driver path, host PID $pid)"
n=$(counter_lines)
sleep 1
check_eq "lines while suspended" "$(counter_lines)" "$n"
gs_run resume "$pid"
expect_rc 0 "gpusnap resume of dr's counter"
n=$(counter_lines)
ctr_checkpoint dr "$GS_WORK/dr-lr" --leave-running
check_eq "runc checkpoint --leave-running of dr (driver path)" "$CTR_RC" 0
check "... the plugin put it back on the GPU" grep -q "is back on the GPU" "$GS_WORK/dr-lr.work/dump.log"
sleep 1
check "... it counts on ($n -> $(counter_lines) lines)" test "$(counter_lines)" -gt "$n"
ctr_checkpoint dr "$GS_WORK/dr-img"
check_eq "runc checkpoint of dr (driver path)" "$CTR_RC" 0
check "the plugin took the driver path" grep -q "is off the GPU: driver path" "$GS_WORK/dr-img.work/dump.log"
check "dr's process is gone" wait_pid_reaped "$pid"
n=$(counter_lines)
sleep 1.5
check_eq "lines after the checkpoint" "$(counter_lines)" "$n"
ctr_restore dr "$GS_WORK/dr-img"
check_eq "runc restore of dr" "$CTR_RC" 0
if [ -n "$CTR_PID" ]; then
  GS_EXTRA_PIDS+=("$CTR_PID")
  sleep 1.5
  check "the counter goes on after the restore ($n -> $(counter_lines) lines)" test "$(counter_lines)" -gt "$n"
  counter_check_sequence
fi
runc_ delete -f dr >/dev/null 2>&1
finish
