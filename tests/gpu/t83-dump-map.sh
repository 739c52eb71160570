#!/usr/bin/env bash
# t83-dump-map.sh - restore onto the other GPU (needs 2 GPUs): a pattern process
# on GPU 0 is dumped and restored with --map 0=1, its data verifies and
# nvidia-smi shows its memory on GPU 1; the same with the agent path. A map
# across GPU types or onto a missing GPU is refused before anything starts.
. "$(dirname "$0")/lib.sh"
gs_test_init t83-dump-map
export GS_APP_STDERR=null
require_gpus 2 "restore --map needs 2 GPUs"
require_criu

uuid1=$(gpu_uuid 1)
on_gpu1() { pid_gpu_uuids "$1" | grep -q "$uuid1"; }

for path in driver agent; do
  img=$GS_WORK/img-$path
  launch=()
  [ $path == agent ] && launch=("$GPUSNAP" run --)
  app_start p 180 "${launch[@]}" "$GS_APPS/pattern" --device 0 --size 2G --seed 83 || finish
  pid=${APP_PID[p]}
  dump_checked "$pid" "$img" "$path" || finish
  gs_run restore -D "$img" --map 0=9
  expect_rc 10 "$path: restore onto a GPU that does not exist"
  check "$path: no process after a refused restore" bash -c "! kill -0 $pid 2>/dev/null"
  restore_checked "$img" "$pid" --map 0=1 || finish
  app_verify p "$path: pattern restored onto GPU 1" || finish
  if [ -n "$(pid_gpu_uuids "$pid")" ]; then
    check "$path: memory is on GPU 1 after restore --map 0=1" on_gpu1 "$pid"
  else
    log "note: nvidia-smi does not list pid $pid; placement not checked"
  fi
  app_quit p
  app_forget p
done
finish
