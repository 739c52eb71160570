#!/usr/bin/env bash
# run.sh FUZZER NAME SECONDS SEEDS_DIR [LIBFUZZER_ARGS...] - fuzzes one
# libFuzzer harness for SECONDS over its corpus: a working corpus kept in
# $GPUSNAP_FUZZ_WORK/NAME (default: next to the fuzzer), the seeds in
# SEEDS_DIR/NAME and the saved crash inputs in regress/NAME. Prints one
# summary line (executions, coverage, corpus) and exits non-zero on a crash,
# a leak or a timeout, naming the saved input.
#
# ctest runs it briefly (fuzz.NAME); the long runs in docs/reliability.md
# use it too, e.g. nice -n 19 tests/fuzz/run.sh build-fuzz/tests/fuzz/fuzz_image image 1800 build-fuzz/fuzz-seeds
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: run.sh FUZZER NAME SECONDS SEEDS_DIR [LIBFUZZER_ARGS...]" >&2; exit 2; }
fuzzer=$1 name=$2 seconds=$3 seeds=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
work=${GPUSNAP_FUZZ_WORK:-$(dirname "$fuzzer")/work}/$name
mkdir -p "$work/corpus" "$work/crashes" "$work/tmp"
corpora=("$work/corpus" "$seeds/$name")
[ -d "$here/regress/$name" ] && corpora+=("$here/regress/$name")
log=$work/fuzz.log
# -timeout: one input taking longer is a hang, reported like a crash.
TMPDIR=$work/tmp ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  "$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/" "$@" "${corpora[@]}" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
last=$(grep -E '^#[0-9]+' "$log" | tail -n1)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
if [ "$rc" -ne 0 ]; then
  grep -E 'ERROR: |SUMMARY: |property failed|Test unit written to' "$log" | head -n 8
  echo "fuzz $name: FAILED after ${execs:-?} executions (exit $rc); log: $log; inputs: $work/crashes/"
  exit 1
fi
echo "fuzz $name: ok, ${execs:-?} executions in ${seconds}s, cov ${cov:-?} ft ${ft:-?} corpus ${corp:-?}, 0 crashes"
