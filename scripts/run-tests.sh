#!/usr/bin/env bash
# run-tests.sh BUILD ASAN_BUILD [FUZZ_BUILD] - what `make test` runs: the unit
# and command-line tests on the normal build, again under ASan+UBSan, a short
# run of each fuzz harness (clang with libFuzzer; a SKIP line where there is
# none), then the GPU suite (which skips with one line where there is no GPU).
# Each stage starts with a "== ..." line (CRIU's fetch included), so a long run
# never looks like a hang. Prints one total line "N passed, N failed" last;
# exits non-zero on any failure.
set -uo pipefail
build=${1:-build}
asan=${2:-build-asan}
fuzz=${3:-build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)
status=0
passed=0
failed=0
skipped=0

run_ctest() { # run_ctest DIR LABEL [CTEST_ARGS...]
  local log dir=$1 label=$2
  shift 2
  log=$(mktemp)
  # A hung test fails after 10 minutes instead of holding CI to its own limit.
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j "$jobs" "$@") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local total fails skips
  total=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
  fails=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -n1)
  skips=$(grep -c '\*\*\*Skipped\|Not Run' "$log" || true)
  total=${total:-0}; fails=${fails:-0}
  passed=$((passed + total - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  [ "$rc" -eq 0 ] || status=1
  [ -n "$total" ] && [ "$total" -gt 0 ] || { echo "gpusnap: no tests ran in $dir ($label)"; status=1; }
  rm -f "$log"
}

# CRIU for the tests that run it: fetched once here, in view, rather than by the
# first test that needs it, silently (tests/cli/lib.sh require_criu).
if [ -z "${GPUSNAP_CRIU:-}" ] && [ "$(id -u)" = 0 ]; then
  echo "== CRIU for the tests (scripts/get-criu.sh: Debian's .debs into .cache/criu-debs, unpacked in .cache/criu)"
  criu_rc=0
  scripts/get-criu.sh 2>&1 | sed 's/^/   /' || criu_rc=${PIPESTATUS[0]}
  if [ "$criu_rc" = 0 ]; then
    export GPUSNAP_CRIU=$PWD/.cache/criu/bin/criu
  else
    echo "   no CRIU (get-criu.sh exit $criu_rc): the tests that need it say they skip"
  fi
elif [ -n "${GPUSNAP_CRIU:-}" ]; then
  echo "== CRIU for the tests: $GPUSNAP_CRIU (GPUSNAP_CRIU)"
else
  echo "== CRIU for the tests: not root, the tests that need CRIU skip"
fi

echo "== unit and command-line tests ($build)"
run_ctest "$build" normal

echo "== the same under AddressSanitizer and UndefinedBehaviorSanitizer ($asan)"
echo "   building $asan"
if cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=Debug -DGPUSNAP_SANITIZE=ON -DGPUSNAP_GPU_APPS=OFF >/dev/null &&
   cmake --build "$asan" -j "$jobs" >/dev/null; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_ctest "$asan" asan
else
  echo "gpusnap: sanitizer build failed"
  status=1
fi

echo "== fuzz harnesses, a few seconds each ($fuzz)"
fuzz_probe=$(mktemp -d)
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$fuzz_probe/f.c"
if ! command -v clang >/dev/null 2>&1 ||
   ! clang -fsanitize=fuzzer,address,undefined "$fuzz_probe/f.c" -o "$fuzz_probe/f" >/dev/null 2>&1; then
  echo "SKIP: fuzz harnesses: no clang with libFuzzer here (Debian: apt-get install clang libclang-rt-dev)"
  skipped=$((skipped + 5))
elif echo "   building $fuzz with clang" && CC=clang cmake -S . -B "$fuzz" -DGPUSNAP_FUZZ=ON -DGPUSNAP_GPU_APPS=OFF >/dev/null &&
     cmake --build "$fuzz" -j "$jobs" --target fuzzers >/dev/null; then
  run_ctest "$fuzz" fuzz -R '^fuzz\.'
else
  echo "gpusnap: fuzz build failed"
  status=1
fi
rm -rf "$fuzz_probe"

echo "== GPU suite"
gpu_log=$(mktemp)
if GPUSNAP_NO_BENCH=1 GPUSNAP_NO_CTEST=1 tests/gpu/run.sh 2>&1 | tee "$gpu_log"; then :; else status=1; fi
# a suite that skipped as a whole (no GPU) counts as one skipped entry in the total
grep -q '^SKIP: no NVIDIA GPU' "$gpu_log" && skipped=$((skipped + 1))
rm -f "$gpu_log"

echo "$passed passed, $failed failed, $skipped skipped"
exit $status
