#!/usr/bin/env bash
# t22-fingerprint.sh - the agent's chunk fingerprint kernel on the GPU
# (src/agent/movement/fingerprint_ptx.h, docs/FORMAT.md 4.8.2):
#  - fp_check (tests/gpu/apps/fp_check.c) runs the kernel as the agent
#    launches it over random and edge-case chunks (lengths 1-48 and around
#    4 KiB, all zero, all ones, 1 MiB to 1 GiB, every 16-byte alignment of a
#    page) and compares each with the CPU's fingerprint (src/core/fingerprint.c),
#    then measures its rate over 16 GiB in 64 MiB chunks (target: >= 1.5 TB/s
#    on an H200, GPUSNAP_T22_MIN_GBS, default 1500; 0 only reports);
#  - end to end: a pattern process under the agent is dumped (fingerprints
#    computed on the GPU before the copy), inspect --verify recomputes every
#    one on the CPU from the image's bytes and agrees, restore --verify-gpu
#    checks every chunk on the GPU after loading, and the data verifies;
#  - a record changed in the image: restore --verify-gpu refuses it (11),
#    naming the chunk.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t22-fingerprint
export GS_APP_STDERR=null
MIN_GBS=${GPUSNAP_T22_MIN_GBS:-1500}

if [ ! -x "$GS_APPS/fp_check" ]; then
  fail "fp_check was not built ($GS_APPS/fp_check; tests/gpu/apps/CMakeLists.txt)"
  finish
fi
out=$("$GS_APPS/fp_check" --rate-gib 16 2>&1)
rc=$?
log "$out"
check "the GPU kernel's fingerprints equal the CPU's on every case (exit $rc)" grep -q "^FP_CHECK OK" <<<"$out"
gbs=$(awk '/^FP_RATE/ {print $2}' <<<"$out")
check "the kernel's rate was measured (${gbs:-none} GB/s)" test -n "$gbs"
if [ -n "$gbs" ] && [ "$MIN_GBS" != 0 ]; then
  check "the kernel fingerprints at ${gbs} GB/s, at least $MIN_GBS GB/s" awk -v g="$gbs" -v m="$MIN_GBS" 'BEGIN { exit !(g >= m) }'
fi

require_criu
img=$GS_WORK/img
app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 22 --zero-percent 25 || finish
pid=${APP_PID[p]}
dump_checked "$pid" "$img" agent || finish
log "dump: fingerprint pass $(json_get "$GS_OUT" times.agent_fingerprint_s 2>/dev/null) s"
gs_run inspect --json --verify "$img"
expect_rc 0 "inspect --verify (fingerprints recomputed on the CPU)"
stored=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1])["image"]["chunks"]; print(c["count"] - c["zero"])' "$GS_OUT")
check_eq "every stored chunk has a fingerprint" "$(json_get "$GS_OUT" image.chunks.fingerprinted)" "$stored"
check_eq "and the CPU agrees with every one the GPU computed" "$(json_get "$GS_OUT" verify.ok)" true
restore_checked "$img" "$pid" --verify-gpu || finish
check_eq "restore --verify-gpu checked every fingerprinted chunk on the GPU" "$(json_get "$RESTORE_OUT" verify_gpu_chunks)" "$stored"
log "restore --verify-gpu: $(json_get "$RESTORE_OUT" times.agent_verify_gpu_s) s"
app_verify p "8 GiB pattern after restore --verify-gpu" || finish
gs_kill_pid "$pid"
check "the restored process is gone" wait_pid_gone "$pid"

# a record whose fingerprint is not its data's (the manifest's CRC and cpu-files.img's record of it fixed)
log "changed record (index alloc offset): $(python3 "$(dirname "$0")/../cli/manifest_tool.py" flip-fp "$img")"
gs_run restore --json --verify-gpu -D "$img"
expect_rc 11 "restore --verify-gpu of an image whose fingerprint record was changed"
check "it names the chunk and the fingerprints" grep -q -- "--verify-gpu: chunk .* after loading has fingerprint" <<<"$GS_ERR"
check "no process is left" wait_pid_gone "$pid"
finish
