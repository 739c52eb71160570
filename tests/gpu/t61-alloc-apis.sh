#!/usr/bin/env bash
# t61-alloc-apis.sh - memory from each allocation API (cudaMalloc, cuMemAlloc,
# cuMemAllocPitch, cudaMallocAsync, cuMemCreate+cuMemMap) survives suspend/resume
# through the driver path (suspend --driver), one process per API.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t61-alloc-apis

seed=61
for api in runtime driver pitch async vmm; do
  log "-- --api $api"
  seed=$((seed + 1))
  app_start "$api" 120 "$GS_APPS/pattern" --api "$api" --size 1G --alloc-size 256M --seed $seed || continue
  if suspend_checked "$api" 1024 --driver && resume_checked "$api"; then
    app_verify "$api" "1 GiB from --api $api after resume"
  fi
  app_quit "$api"
done
finish
