#!/usr/bin/env bash
# t6005-criu-plugin-multi-gpu - gpusnap_criu.so on the driver path refuses, as
# the command line does (t4042), a process holding GPU memory on several GPUs:
# the driver would checkpoint it but cannot restore some such processes.
# Plain criu with the plugin (fake libcuda answering NVML
# too, real CRIU 4): the dump fails before the driver locks the process, one
# line of CRIU's log names the GPUs and the setting; the process counts on;
# with multi_gpu_driver (GPUSNAP_MULTI_GPU_DRIVER=1, or the key in the
# plugin's file) the dump goes through (--leave-running: it runs on).
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/plugin_lib.sh"

fake_cuda_env criu
plugin_env
export FAKE_CUDA_GPUS=2 GPUSNAP_LIBNVML=$GPUSNAP_FAKE_CUDA FAKE_CUDA_LOG=$TEST_TMP/fake.log
touch "$FAKE_CUDA_LOG"
cleanup_all() {
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_all EXIT
never_locked() { ! grep -q "^lock $1 " "$FAKE_CUDA_LOG"; }

log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
echo "0 0,1" >"$FAKE_CUDA_DIR/$pid"

criu_dump "$TEST_TMP/c1" "$pid"
check "criu dump fails" rc_failed
check "CRIU's log names the GPUs and the way out" log_has "$TEST_TMP/c1/dump.log" \
  "process $pid holds GPU memory on GPUs 0, 1, and the driver cannot restore some such processes"
check "the driver never locked it" never_locked "$pid"
check "it counts on" wait_lines "$log" $(($(wc -l <"$log") + 3))
check "it is running on the GPU" [ "$(fake_state "$pid")" = 0 ]

GPUSNAP_MULTI_GPU_DRIVER=1 criu_dump "$TEST_TMP/c2" "$pid" --leave-running
check "GPUSNAP_MULTI_GPU_DRIVER=1: the dump goes through" rc_ok
check "... and it runs on, back on the GPU" [ "$(fake_state "$pid")" = 0 ]

printf 'multi_gpu_driver = yes\n' >"$PLUGIN_DIR/gpusnap_criu.conf"
chmod 644 "$PLUGIN_DIR/gpusnap_criu.conf"
criu_dump "$TEST_TMP/c3" "$pid" --leave-running
check "multi_gpu_driver = yes in the plugin's file: the dump goes through" rc_ok
check "it counts on" wait_lines "$log" $(($(wc -l <"$log") + 3))
test_done
