#!/usr/bin/env bash
# t82-agent-dump.sh - agent path to files: a pattern process started with
# `gpusnap run` (8 GiB) is dumped (the agent streams its data from the GPU
# through a small pinned ring into the image's data files, with no staging
# copy of the data; the driver checkpoints the rest, CRIU the CPU state), is
# gone, is restored (the agent re-creates its memory and streams the data
# from the image through the ring to the GPU) and verifies; inspect
# lists the allocations and their checksums verify; a second restore from the
# same image verifies again. Then --leave-running keeps it running.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t82-agent-dump
export GS_APP_STDERR=null
require_criu

img=$GS_WORK/img
app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 82 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192
dump_checked "$pid" "$img" agent || finish
check "the agent wrote 8 GiB of GPU data" test "$(json_get "$GS_OUT" gpu_data_bytes)" -ge $((8 << 30))
check_eq "the agent streamed the data" "$(json_get "$GS_OUT" streamed)" true
ring=$(json_get "$GS_OUT" ring_bytes)
log "dump: pinned ring of $ring B"
check "the pinned ring ($ring B) is far smaller than the data" test "$ring" -gt 0 -a "$ring" -le $((2 << 30))

gs_run inspect --json --verify "$img"
expect_rc 0 "inspect --verify of the agent image"
check_eq "image taken by" "$(json_get "$GS_OUT" image.how)" agent
check "image lists allocations of 8 GiB" test "$(json_get "$GS_OUT" image.allocations.total_bytes)" -ge $((8 << 30))
check "image holds chunks" test "$(json_get "$GS_OUT" image.chunks.count)" -gt 0
check_eq "every checksum verifies" "$(json_get "$GS_OUT" verify.ok)" true
gs_run inspect "$img"

restore_checked "$img" "$pid" || finish
expect_vram_at_least p "$pid" 8192
log "restore, agent: re-create $(json_get "$RESTORE_OUT" times.agent_recreate_s) s, read + copy to the GPU $(json_get "$RESTORE_OUT" times.agent_image_read_s) s"
app_verify p "8 GiB pattern after an agent-path restore" || finish

gs_kill_pid "$pid"
check "first restored process is gone" wait_pid_gone "$pid"
restore_checked "$img" "$pid" || finish
app_verify p "8 GiB pattern after a second restore from the same image" || finish

dump_checked "$pid" "$GS_WORK/img2" agent --leave-running || finish
app_verify p "8 GiB pattern after dump --leave-running (agent resumed from the image)"
app_quit p
finish
