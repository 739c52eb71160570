# shellcheck shell=bash
# standin_agent.sh - the stand-in agent of t4013, t4020 and t4021: a test's
# Python script built on standin_agent.py (the protocol and the server loop),
# run as a CUDA process of the plain fake libcuda. Sourced after lib.sh.

# standin_env: the plain fake libcuda with its state files in $FAKE_CUDA_DIR, the agents' socket
# folder, and the file named libcuda.so.1 the stand-ins map; skips without python3.
standin_env() {
  command -v python3 >/dev/null || skip "python3 is needed for the stand-in agent"
  export GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA
  export FAKE_CUDA_DIR=$TEST_TMP/fake
  mkdir -p "$FAKE_CUDA_DIR" "$GPUSNAP_RUN_DIR" "$TEST_TMP/lib"
  chmod 700 "$GPUSNAP_RUN_DIR"
  head -c 4096 /dev/zero >"$TEST_TMP/lib/libcuda.so.1"
}

# standin_start SCRIPT [ARGS...] -> AGENT: runs the stand-in SCRIPT with ARGS in the background
# (killed at the end) and waits for it to listen; its output in $TEST_TMP/agent-N.out(.err).
STANDIN_N=0
STANDIN_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
standin_start() {
  local out=$TEST_TMP/agent-$STANDIN_N.out
  STANDIN_N=$((STANDIN_N + 1))
  LIBCUDA_FILE=$TEST_TMP/lib/libcuda.so.1 PYTHONPATH=$STANDIN_LIB \
    python3 "$@" >"$out" 2>"$out.err" &
  AGENT=$!
  TEST_PIDS+=("$AGENT")
  for _ in $(seq 100); do grep -q READY "$out" && return 0; sleep 0.1; done
  echo "the stand-in agent did not start: $(cat "$out.err")"
  exit 1
}
