#!/usr/bin/env bash
# t4042-driver-multi-gpu - the driver path never strands a process it could not
# give back: the driver checkpoints a process holding GPU memory on several
# GPUs but cannot restore some (a PyTorch process with peer copies: every
# resume fails, NVIDIA's cuda-checkpoint alike), and nothing outside the
# process tells those apart. The fake libcuda answers NVML too
# (GPUSNAP_LIBNVML), reporting a process on the GPUs its state file names:
#  - suspend, dump, dump --tree and switch of a process without the agent on
#    GPUs 0 and 1 are refused before anything moves (exit 6, one line naming
#    the GPUs, the agent path and --multi-gpu-driver); the driver was never
#    asked to lock it; no image directory is left;
#  - --multi-gpu-driver, or GPUSNAP_MULTI_GPU_DRIVER=1, lets it through (it
#    suspends and resumes); a bad value of the variable is a usage error;
#  - a process on one GPU of two is not refused;
#  - one let through whose resume the driver then refuses (FAKE_CUDA_FAIL_RESTORE):
#    resume says it held memory on 2 GPUs and what that likely means, and
#    `state` (text and JSON `fault`) says its last resume failed and why.
# Needs root and CRIU for the dump cases (as every dump test).
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu
export FAKE_CUDA_GPUS=2 GPUSNAP_LIBNVML=$GPUSNAP_FAKE_CUDA FAKE_CUDA_LOG=$TEST_TMP/calls.log
touch "$FAKE_CUDA_LOG"
never_locked() { ! grep -q "^lock $1 " "$FAKE_CUDA_LOG"; }
# refused TITLE PID: the last command was refused as the multi-GPU driver path, before anything moved
refused() {
  expect "$1: refused" 6 "process $2 holds GPU memory on GPUs 0, 1, and the driver cannot restore some such processes"
  check "$1: in one line" [ "$(wc -l <"$ERR_TXT")" = 1 ]
  check "$1: it names the ways out" grep -qF "start it with gpusnap run, or, if a suspend and resume of its kind worked, allow it with --multi-gpu-driver (GPUSNAP_MULTI_GPU_DRIVER=1)" "$ERR_TXT"
  check "$1: the driver never locked it" never_locked "$2"
  check "$1: it runs on" [ "$(fake_state "$2")" = 0 ]
}

start_cuda_proc 0,1; PID=$NEWPID
run_gpusnap state --json "$PID"; expect "state sees it on both GPUs (fake NVML)" 0
check "... its VRAM on both" [ "$(json_get "$OUT_TXT" '["vram_bytes"], d["gpus"]')" = "(536870912, [0, 1])" ]

run_gpusnap suspend "$PID"; refused "suspend" "$PID"
run_gpusnap suspend --tree "$PID"; refused "suspend --tree" "$PID"
run_gpusnap dump -D "$TEST_TMP/img" "$PID"; refused "dump" "$PID"
check "dump: no image, no temporary directory" test ! -e "$TEST_TMP/img" -a -z "$(tmp_dirs "$TEST_TMP/img")"

start_cuda_proc 1; ONE=$NEWPID
run_gpusnap suspend --driver "$ONE"; expect "a process on GPU 1 alone is not refused" 0
run_gpusnap switch "$PID" "$ONE"; refused "switch with the two-GPU process going out" "$PID"
check "switch: the process coming in stays suspended" [ "$(fake_state "$ONE")" = 2 ]
run_gpusnap resume "$ONE"; expect "... and resumes" 0

run_gpusnap suspend --multi-gpu-driver "$PID"; expect "--multi-gpu-driver lets it through" 0
check "it is checkpointed" [ "$(fake_state "$PID")" = 2 ]
run_gpusnap resume "$PID"; expect "and it resumes" 0
GPUSNAP_MULTI_GPU_DRIVER=1 run_gpusnap suspend "$PID"; expect "GPUSNAP_MULTI_GPU_DRIVER=1 lets it through" 0
run_gpusnap resume "$PID"; expect "and it resumes" 0
GPUSNAP_MULTI_GPU_DRIVER=maybe run_gpusnap suspend "$PID"
expect "a bad GPUSNAP_MULTI_GPU_DRIVER is a usage error" 2 "GPUSNAP_MULTI_GPU_DRIVER='maybe'"
check "... and it runs on" [ "$(fake_state "$PID")" = 0 ]

# let through, then the driver cannot restore it: resume and state say so
run_gpusnap suspend --multi-gpu-driver "$PID"; expect "let through again" 0
FAKE_CUDA_FAIL_RESTORE=$PID run_gpusnap resume "$PID"
expect "the driver refuses its resume: exit 1, still suspended" 1 "still suspended (resume again)"
check "... the message names the two GPUs and the likely cause" grep -qF "process $PID held memory on 2 GPUs when suspended: if every resume fails so, the driver cannot restore it and its GPU state is lost" "$ERR_TXT"
check "... in one line" [ "$(wc -l <"$ERR_TXT")" = 1 ]
run_gpusnap state "$PID"; expect "state: suspended" 0 "suspended"
check "... with a note: its last resume failed, and why" grep -qF "gpusnap: note: its last resume failed: " "$ERR_TXT"
run_gpusnap state --json "$PID"; expect "state --json" 0
check "... fault says the same" bash -c "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d[\"fault\"].startswith(\"its last resume failed: \") and \"CUDA_ERROR_INVALID_VALUE\" in d[\"fault\"] else 1)' '$OUT_TXT'"
run_gpusnap resume "$PID"; expect "once the driver can, it resumes" 0
run_gpusnap state --json "$PID"; expect "state after it" 0
check "... and no fault is left" bash -c "! grep -q '\"fault\"' '$OUT_TXT'"

# a tree whose child is on both GPUs: dump --tree refuses it before CRIU or the driver is asked
start_sleep_tree
parent=$TREE_PARENT child=$TREE_CHILD
echo "0 0,1" >"$FAKE_CUDA_DIR/$child"
run_gpusnap dump --tree -D "$TEST_TMP/tree-img" "$parent"; refused "dump --tree" "$child"
check "dump --tree: no image" [ ! -e "$TEST_TMP/tree-img" ]
check "the tree runs on" alive "$parent"
test_done
