#!/usr/bin/env bash
# t23-store.sh - a chunk store shared by images on the GPU (dump --store,
# docs/FORMAT.md 4.12): an 8 GiB pattern process under the agent (a quarter
# of it zero) is dumped twice with --leave-running into one store:
#  - the first dump copies the data (gpu_copied_bytes) and writes it as
#    objects; the second finds every chunk in the store by the fingerprint
#    the agent computes on the GPU: it copies (almost) nothing over PCIe
#    (gpu_copied_bytes <= 1% of the data) and writes no object, and its GPU
#    part takes a fraction of the first's (both logged);
#  - the first image removed, gc frees nothing (the second uses every object);
#  - the process restored from the second image with --verify-gpu: every
#    chunk checked on the GPU after loading, the data verifies bit for bit.
. "$(dirname "$0")/lib.sh"
gs_test_init t23-store
export GS_APP_STDERR=null

require_criu
st=$GS_WORK/store
app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 23 --zero-percent 25 || finish
pid=${APP_PID[p]}
dump_checked "$pid" "$GS_WORK/img1" agent --leave-running --store "$st" || finish
data=$(json_get "$GS_OUT" gpu_data_bytes)
c1=$(json_get "$GS_OUT" gpu_copied_bytes)
n1=$(json_get "$GS_OUT" store_new_objects)
g1=$(json_get "$GS_OUT" times.gpu_s)
log "first dump: $c1 of $data bytes copied, $n1 objects written, GPU part $g1 s"
check "the first dump copied the non-zero data ($c1 bytes)" test "$c1" -ge $((data / 2))
check "... and wrote it as objects ($n1)" test "$n1" -gt 0
dump_checked "$pid" "$GS_WORK/img2" agent --leave-running --store "$st" || finish
c2=$(json_get "$GS_OUT" gpu_copied_bytes)
g2=$(json_get "$GS_OUT" times.gpu_s)
log "second dump: $c2 bytes copied, $(json_get "$GS_OUT" store_bytes) bytes found in the store, GPU part $g2 s (first: $g1 s)"
check "the second dump copied at most 1% of the data over PCIe ($c2 of $data bytes)" test "$c2" -le $((data / 100))
check_eq "the second dump wrote no object" "$(json_get "$GS_OUT" store_new_objects)" 0
check "the second dump found the non-zero data in the store" test "$(json_get "$GS_OUT" store_bytes)" -ge $((data / 2))
rm -rf "$GS_WORK/img1"
gs_run gc --json "$st"
expect_rc 0 "gc after the first image was removed"
check_eq "gc removed nothing (the second image uses every object)" "$(json_get "$GS_OUT" objects_removed)" 0
app_verify p "8 GiB pattern after two dumps" || finish
gs_kill_pid "$pid"
check "the process is gone" wait_pid_gone "$pid"
restore_checked "$GS_WORK/img2" "$pid" --verify-gpu || finish
check "restore --verify-gpu checked chunks on the GPU" test "$(json_get "$RESTORE_OUT" verify_gpu_chunks)" -gt 0
app_verify p "8 GiB pattern restored from the store" || finish
gs_kill_pid "$pid"
check "the restored process is gone" wait_pid_gone "$pid"
finish
