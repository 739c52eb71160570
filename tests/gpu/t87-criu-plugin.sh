#!/usr/bin/env bash
# t87-criu-plugin.sh - plain criu through gpusnap_criu.so (what Podman, CRI-O
# and containerd run), no gpusnap dump/restore:
#  - NVIDIA's counter example idea (t81's counter, value in GPU memory):
#    criu dump through the plugin (driver path), gone, file stops; criu
#    restore: it goes on with no reset or gap;
#  - an 8 GiB pattern process without the agent (driver path) and one under
#    `gpusnap run` (agent path: the agent streams into gpusnap/<pid>/ of CRIU's
#    image directory, passed as a descriptor), each dumped, gone, restored,
#    verified bit for bit; the agent one then criu dump --leave-running: it
#    runs on and verifies;
#  - NVIDIA's own counter example (src/counter.cu of NVIDIA/cuda-checkpoint,
#    a UDP server whose counter lives in GPU memory; fetched by
#    scripts/get-cuda-checkpoint.sh, built here with nvcc, never committed),
#    bare and under `gpusnap run`: answers 101, 102; criu dump and restore
#    through the plugin; it answers 103. A visible SKIP when not fetched.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/plugin_lib.sh"
gs_test_init t87-criu-plugin
export GS_APP_STDERR=null
require_criu
plugin_init

# ---- the counter, driver path ----
counter_start
pid=$COUNTER_PID
plugin_dump "$pid" "$GS_WORK/counter-img"
check_eq "criu dump of the counter through the plugin" "$PLUGIN_RC" 0
check "the plugin took it off the GPU (driver path)" grep -q "is off the GPU: driver path" "$GS_WORK/counter-img/dump.log"
wait "$pid" 2>/dev/null
check "the counter is gone" wait_pid_gone "$pid"
n=$(counter_lines)
sleep 1.5
check_eq "lines in the counter's file after the dump" "$(counter_lines)" "$n"
plugin_restore "$GS_WORK/counter-img"
check_eq "criu restore of the counter through the plugin" "$PLUGIN_RC" 0
check_eq "restored pid" "$PLUGIN_PID" "$pid"
sleep 1.5
check "counter goes on after restore ($n -> $(counter_lines) lines)" test "$(counter_lines)" -gt "$n"
counter_check_sequence
expect_state "$pid" running "state of the restored counter"
gs_kill_pid "$pid"

# ---- 8 GiB, driver path then agent path ----
for path in driver agent; do
  launch=()
  [ "$path" == agent ] && launch=("$GPUSNAP" run --)
  app_start p 180 "${launch[@]}" "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 87 || finish
  pid=${APP_PID[p]}
  expect_vram_at_least p "$pid" 8192
  img=$GS_WORK/img-$path
  plugin_dump "$pid" "$img"
  check_eq "criu dump of 8 GiB through the plugin ($path path)" "$PLUGIN_RC" 0
  check "the plugin took the $path path" grep -q "is off the GPU: $path path" "$img/dump.log"
  check "process $pid is gone" wait_pid_gone "$pid"
  gs_run inspect "$img/gpusnap/$pid"
  expect_rc 0 "inspect of gpusnap/$pid"
  plugin_restore "$img"
  check_eq "criu restore of 8 GiB through the plugin ($path path)" "$PLUGIN_RC" 0
  check_eq "restored pid" "$PLUGIN_PID" "$pid"
  APP_OWN[p]=restored
  check "the restored process is running on the GPU" plugin_wait_loaded "$pid"
  expect_vram_at_least p "$pid" 8192
  app_verify p "8 GiB pattern after criu restore through the plugin ($path path)" || finish
  if [ "$path" == agent ]; then
    plugin_dump "$pid" "$GS_WORK/img-lr" --leave-running
    check_eq "criu dump --leave-running through the plugin" "$PLUGIN_RC" 0
    check "the process runs on" pid_alive "$pid"
    check "its agent took its data back" plugin_wait_loaded "$pid"
    app_verify p "8 GiB pattern after criu dump --leave-running" || finish
  fi
  app_quit p
  app_forget p
done

# ---- NVIDIA's counter example (UDP port 10000), driver path then agent path ----
nv_src=${GPUSNAP_NVIDIA_CACHE:-$GS_SRC/.cache/nvidia}/src/counter.cu
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# One datagram to the counter, its answer on stdout ("" when none came within 5 s).
udp_ask() {
  local line=''
  exec 7<>/dev/udp/127.0.0.1/10000 || return 1
  printf 'hello' >&7
  # one read of the whole datagram: bash's read takes a byte at a time, and a datagram read in part is lost
  line=$(timeout 5 dd bs=64 count=1 status=none <&7 2>/dev/null | tr -d '\n')
  exec 7>&-
  printf '%s' "$line"
}
if [ ! -s "$nv_src" ]; then
  skip "NVIDIA's counter example: $nv_src is missing (scripts/get-cuda-checkpoint.sh fetches it)"
elif ! "$nvcc_bin" -o "$GS_WORK/nv-counter" "$nv_src" >"$GS_WORK/nvcc.log" 2>&1; then
  fail "nvcc could not build NVIDIA's counter example: $(tail -n 3 "$GS_WORK/nvcc.log")"
else
  for path in driver agent; do
    launch=()
    [ "$path" == agent ] && launch=("$GPUSNAP" run --)
    setsid "${launch[@]}" "$GS_WORK/nv-counter" </dev/null >/dev/null 2>&1 &
    pid=$!
    GS_EXTRA_PIDS+=("$pid")
    gs_track_pid "$pid"
    first=''
    for ((i = 0; i < 100; i++)); do
      first=$(udp_ask 2>/dev/null)
      [ -n "$first" ] && break
      sleep 0.1
    done
    check_eq "NVIDIA's counter ($path path) answers its first datagram" "$first" 101
    check_eq "and its second" "$(udp_ask)" 102
    plugin_dump "$pid" "$GS_WORK/nv-img-$path"
    check_eq "criu dump of NVIDIA's counter through the plugin ($path path)" "$PLUGIN_RC" 0
    check "the plugin took the $path path" grep -q "is off the GPU: $path path" "$GS_WORK/nv-img-$path/dump.log"
    check "the counter is gone" wait_pid_reaped "$pid"
    plugin_restore "$GS_WORK/nv-img-$path"
    check_eq "criu restore of NVIDIA's counter through the plugin ($path path)" "$PLUGIN_RC" 0
    check "the restored counter is running on the GPU" plugin_wait_loaded "$pid"
    check_eq "the restored counter goes on from its GPU memory ($path path)" "$(udp_ask)" 103
    gs_kill_pid "$pid"
    wait_pid_reaped "$pid"
  done
fi
finish
