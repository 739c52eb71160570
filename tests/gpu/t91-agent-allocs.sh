#!/usr/bin/env bash
# t91-agent-allocs.sh - allocation shapes through the agent: 10,000 allocations
# from 1 byte to 64 KiB (sub-allocated), every allocation API (runtime, driver,
# pitch, stream-ordered, and the app's own cuMemCreate/cuMemMap, which the
# agent releases through virtual handles: t95), and the app built with the
# shared cudart: each suspended,
# resumed and verified bit for bit.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t91-agent-allocs

app_start many 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --count 10000 --min 1 --max 65536 --seed 91 || finish
suspend_checked many 0 || finish
resume_checked many || finish
app_verify many "10,000 allocations of 1 B..64 KiB through the agent"
app_quit many

for api in runtime driver pitch async vmm; do
  app_start "$api" 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 2G --alloc-size 256M --api "$api" --seed 92 || continue
  suspend_checked "$api" 2048 || { app_quit "$api"; continue; }
  resume_checked "$api" || { app_quit "$api"; continue; }
  app_verify "$api" "2 GiB allocated with --api $api through the agent"
  app_quit "$api"
done

app_start shared 180 "$GPUSNAP" run -- "$GS_APPS/pattern_shared" --size 1G --seed 93 || finish
suspend_checked shared 1024 || finish
resume_checked shared || finish
app_verify shared "shared-cudart app through the agent"
app_quit shared
finish
