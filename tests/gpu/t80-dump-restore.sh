#!/usr/bin/env bash
# t80-dump-restore.sh - driver path to files: a process holding 8 GiB of pattern
# is dumped (GPU state through the driver's checkpoint, CPU state and the
# driver's host copy through CRIU), is gone, is restored and verifies bit for
# bit; killed, it is restored a second time from the same image and verifies
# again. The image is unchanged by the restores.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t80-dump-restore
export GS_APP_STDERR=null
require_criu

img=$GS_WORK/img
app_start p 180 "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 80 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192
dump_checked "$pid" "$img" driver || finish
gs_run inspect "$img"
expect_rc 0 "inspect of the image"
sums() { (cd "$img" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(sums)

restore_checked "$img" "$pid" || finish
expect_vram_at_least p "$pid" 8192
app_verify p "8 GiB pattern after restore" || finish

gs_kill_pid "$pid"
check "first restored process is gone" wait_pid_gone "$pid"
restore_checked "$img" "$pid" || finish
app_verify p "8 GiB pattern after a second restore from the same image"
check "restores left the image unchanged" test "$(sums)" == "$before"
app_quit p
finish
