#!/usr/bin/env bash
# t5031 - chunk fingerprints (docs/FORMAT.md 4.8.2) on the agent path without
# a GPU: the app of t4004 under libgpusnap.so on the host-memory fake driver,
# whose module loader runs the fingerprint kernel's C twin
# (src/core/fingerprint.c) where the GPU runs the agent's PTX (tests/gpu t22
# compares the two on a GPU). Checked here:
#  - a dump records a fingerprint for every stored chunk (none for ZERO
#    ones), computed through the kernel's seam; inspect --verify recomputes
#    them on the CPU and agrees;
#  - restore --verify-gpu checks every one on the "GPU" after loading
#    (restore --json: verify_gpu_chunks) and the data is back;
#  - a record whose fingerprint is not its data's: inspect --verify and
#    restore --verify-gpu refuse it in one line naming the chunk (exit 11),
#    no process left; a restore without --verify-gpu does not look;
#  - a kernel that computes something else (FAKE_CUDA_FP_FLIP): its self-check
#    (its own table, fingerprinted on both sides) fails, the dump computes
#    them on the host, and they verify;
#  - a driver that refuses the module (FAKE_CUDA_NO_FP_MODULE): the dump
#    computes the fingerprints on its IO threads instead (the log says so),
#    they verify; restore --verify-gpu there cannot check and refuses (16).
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app criu
export AGENT_APP_BIG_MB=100 AGENT_APP_ZERO_MB=8
export GPUSNAP_IO_THREADS=2

# flip-fp: tests/cli/manifest_tool.py
MT=$(dirname "$0")/manifest_tool.py
stored_chunks() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["image"]["chunks"]; print(c["count"] - c["zero"])' "$OUT_TXT"; }

# ---- a dump records them; inspect --verify agrees; restore --verify-gpu checks them ----
start_app
verify_ok "the app's data after allocation"
img=$TEST_TMP/img
run_gpusnap dump --json -D "$img" "$PID"; expect "dump" 0
wait_gone "$PID" 5
run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify" 0
n=$(stored_chunks)
check "every stored chunk has a fingerprint ($(jget "['image']['chunks']['fingerprinted']") of $n), ZERO ones too few to matter" \
  test "$(jget "['image']['chunks']['fingerprinted']")" = "$n" -a "$n" -gt 0 -a "$(jget "['image']['chunks']['zero']")" -gt 0
check "and the CPU's fingerprints are the kernel seam's (verified)" test "$(jget "['verify']['ok']")" = True
run_gpusnap inspect "$img"; expect "inspect" 0
check "inspect says how many are fingerprinted" grep -q "checksum crc32c, $n fingerprinted" "$OUT_TXT"
good=$(sums "$img")
run_gpusnap restore --verify-gpu --json -D "$img"; expect "restore --verify-gpu" 0
check "the agent checked every fingerprinted chunk on the GPU ($(jget "['verify_gpu_chunks']"))" \
  test "$(jget "['verify_gpu_chunks']")" = "$n"
check "... and says how long it took" python3 -c 'import json,sys; sys.exit("agent_verify_gpu_s" not in json.load(open(sys.argv[1]))["times"])' "$OUT_TXT"
verify_ok "every byte is back after restore --verify-gpu"
kill -9 "$PID"; wait_gone "$PID"

# ---- a record that does not match its data ----
bad=$TEST_TMP/bad
cp -a "$img" "$bad"
# the tool's whole run, not only its line: it rewrites the manifest and cpu-files.img
read -r idx aid off <<<"$(python3 "$MT" flip-fp "$bad")"
want="chunk $idx (allocation $aid, offset $off"
run_gpusnap inspect --verify "$bad"; expect "inspect --verify of a wrong fingerprint" 11 "$want"
check "... naming the fingerprint, in one line" grep -q "has fingerprint" "$ERR_TXT"
check "... in one line" one_line
run_gpusnap restore --verify-gpu -D "$bad"; expect "restore --verify-gpu of a wrong fingerprint is refused" 11 \
  "--verify-gpu: $want"
check "no process is left" gone_or_zombie "$PID"
run_gpusnap restore -D "$bad"; expect "a restore without --verify-gpu does not look at fingerprints" 0
verify_ok "its data (only the record was changed)"
kill -9 "$PID"; wait_gone "$PID"
check "the good image is unchanged" test "$(sums "$img")" = "$good"

# ---- a kernel that computes something else: its self-check fails, the host computes them ----
FAKE_CUDA_FP_FLIP=1 start_app
img2=$TEST_TMP/flip
: >"$GPUSNAP_AGENT_LOG"
run_gpusnap dump -D "$img2" "$PID"; expect "dump with a kernel computing other sums" 0
wait_gone "$PID" 5
check "the agent found the kernel wrong and computed on the host" \
  grep -q "computed on the host instead of on GPU .*self-check" "$GPUSNAP_AGENT_LOG"
run_gpusnap inspect --verify "$img2"; expect "inspect --verify: what was recorded is right" 0

# ---- a driver that refuses the module: the IO threads compute them ----
FAKE_CUDA_NO_FP_MODULE=1 start_app
img3=$TEST_TMP/nomodule
: >"$GPUSNAP_AGENT_LOG"
run_gpusnap dump -D "$img3" "$PID"; expect "dump where the fingerprint kernel cannot load" 0
wait_gone "$PID" 5
check "the agent said it computes them on the host" grep -q "chunk fingerprints are computed on the host instead" "$GPUSNAP_AGENT_LOG"
run_gpusnap inspect --json --verify "$img3"; expect "inspect --verify of that image" 0
check "every stored chunk has one all the same, and they verify" \
  test "$(jget "['image']['chunks']['fingerprinted']")" = "$(stored_chunks)" -a "$(jget "['verify']['ok']")" = True
run_gpusnap restore --verify-gpu -D "$img3"; expect "restore --verify-gpu where the kernel cannot run" 16 "could not be fingerprinted on GPU"
check "no process is left" gone_or_zombie "$PID"

test_done
