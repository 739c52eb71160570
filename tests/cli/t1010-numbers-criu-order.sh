#!/usr/bin/env bash
# t1010 - input that is refused before anything moves, on the fake libcuda:
#  - numbers are plain decimal: --timeout 0x10, ' 5', 1e3, inf, nan and a size
#    with white space in front are usage errors (exit 2), like other malformed numbers;
#  - a PID that is not a CUDA process is named as such (exit 4) by dump and
#    dump --tree before CRIU is looked for, also where no CRIU is found;
#  - a CUDA process with no CRIU anywhere: exit 15, one line naming CRIU >= 4.2
#    and the GPUSNAP_CRIU to set (the one `make test` fetched, where it is).
. "$(dirname "$0")/lib.sh"

fake_cuda_env

for t in 0x10 ' 5' '5 ' +5 1e3 inf nan -1; do
  run_gpusnap suspend --timeout "$t" 1
  expect "--timeout '$t' is refused" 2 "option '--timeout' expects seconds"
done
run_gpusnap run --reserve ' 1G' -- true
expect "--reserve ' 1G' is refused" 2 "expects a size"
run_gpusnap suspend ' 1'
expect "a PID with white space in front is refused" 2 "is not a process ID"

# no criu anywhere: GPUSNAP_CRIU unset, a PATH without one
nocriu=$TEST_TMP/bin
mkdir -p "$nocriu"
# without_criu ARGS...: as run_gpusnap, with GPUSNAP_CRIU unset and a PATH without criu
without_criu() {
  OUT_TXT=$TEST_TMP/out
  ERR_TXT=$TEST_TMP/err
  RC=0
  env -u GPUSNAP_CRIU PATH="$nocriu" "$GPUSNAP_BIN" "$@" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
}
sleep 300 &
plain=$!
TEST_PIDS+=("$plain")
without_criu dump -D "$TEST_TMP/img" "$plain"
expect "dump of a non-CUDA process without CRIU: not a CUDA process" 4 "is not a CUDA process"
check "... and no word of CRIU" bash -c "! grep -qi criu '$TEST_TMP/err'"
without_criu dump --tree -D "$TEST_TMP/img" "$plain"
expect "dump --tree of a non-CUDA process without CRIU: exit 4" 4
check "... and no word of CRIU" bash -c "! grep -qi criu '$TEST_TMP/err'"
check "nothing written" test ! -e "$TEST_TMP/img"

start_cuda_proc
without_criu dump -D "$TEST_TMP/img" "$NEWPID"
expect "dump of a CUDA process without CRIU: exit 15" 15 "criu not found on PATH; gpusnap needs CRIU >= 4.2: "
check "... names the GPUSNAP_CRIU to set" grep -q "GPUSNAP_CRIU=.*\.cache/criu/bin/criu" "$TEST_TMP/err"
check "... one line" test "$(wc -l <"$TEST_TMP/err")" = 1
check "... one minimum version only" bash -c "! grep -q '4\.[013-9]' '$TEST_TMP/err'"
check "the process was not touched" test "$(fake_state "$NEWPID")" = 0
test_done
