#!/usr/bin/env bash
# run.sh - the GPU suite in one call, for the device machine (root, no network):
# GPU and driver info, configure + build (Release, GPU apps on), the unit tests
# (ctest), every tests/gpu/t*.sh with a time limit each, then bench/run.sh.
# Prints LAST a table of results, the line "N passed, N failed, N skipped", and
# the benchmark table. Exit 0 if nothing failed.
#
# usage: tests/gpu/run.sh [TEST...]     TEST: a name prefix (t20, t50-map); default all but those
#                                       marked "# gpu-test-default: off" (t88-soak: run it by name)
# Environment:
#   OUT                   results: summary.txt, logs.tar.gz, bench.md, bench.jsonl (default ./gpu-out)
#   GPUSNAP_GPU_TESTS     tests to run when no arguments are given (prefixes, space or comma separated)
#   GPUSNAP_BUILD         build directory (default ./build)
#   GPUSNAP_NO_BUILD=1    use the build directory as it is
#   GPUSNAP_NO_CTEST=1    skip the unit tests
#   GPUSNAP_NO_BENCH=1    skip the benchmarks
#   GPUSNAP_KEEP_IMAGES=1 keep the images of passed tests under the logs (by default they are removed)
#   GPUSNAP_BENCH_DUMP_SIZES  also run bench/dump.sh (dump/restore to files) for these sizes after
#                         bench/run.sh; GPUSNAP_BENCH_DUMP_PATHS its paths (default "agent driver agent-leave":
#                         agent-leave is a periodic checkpoint, dump --leave-running, with the time it stood still)
#   GPUSNAP_BENCH_CUDA_PLUGIN  also run bench/cuda-plugin.sh (CRIU's cuda_plugin and cuda-checkpoint by
#                         hand vs gpusnap_criu.so) for these sizes, e.g. 8G; needs .cache/nvidia from
#                         scripts/get-cuda-checkpoint.sh; GPUSNAP_BENCH_CUDA_PLUGIN_WAYS its ways
#   GPUSNAP_BENCH_WARM_START  also run bench/warm_start.sh (a Hugging Face model's server: a fresh start
#                         against gpusnap restore, agent and driver path) with this Llama shape: 1b, 3b or 8b
#   GPUSNAP_BENCH_SWITCH  also run bench/switch.sh (gpusnap switch of two processes of this size each, e.g.
#                         16G, against each half alone, a suspend and a resume, and the driver path)
#   GPUSNAP_BENCH_SPILL   also run bench/spill.sh (suspend --spill-only and a cold resume of a process of
#                         this size, e.g. 16G, against dd with O_DIRECT in the same directory)
#   GPUSNAP_TEST_TIMEOUT  seconds per test (default 240; a test's "# gpu-test-limit: N" line raises it)
#   GPUSNAP_GPU_PARALLEL  how many tests marked "# gpu-test-shared: yes" run at a time (default 3; 1: one
#                         test at a time); a shared test that fails beside others runs again alone at the end
#   GPUSNAP_DEADLINE_S    stop starting tests after this many seconds (default 540, 0 = none), so one
#                         10-minute device call still ends with a summary; tests not run are SKIP rows
#   GPUSNAP_GPU_WORK      where logs and FIFOs go (default a new /tmp/gpusnap-gpu.XXXXXX); only the
#                         tarball and the summary are written to $OUT (the device tool returns 8 files)
#
# Without a usable NVIDIA GPU it prints one SKIP line and exits 0 (make test on CI).
set -u
export LC_ALL=C
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: no NVIDIA GPU on this machine (tests/gpu)"
  exit 0
fi

OUT=${OUT:-$SRC/gpu-out}
case $OUT in /*) ;; *) OUT=$SRC/$OUT ;; esac
BUILD=${GPUSNAP_BUILD:-$SRC/build}
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac
WORK=${GPUSNAP_GPU_WORK:-$(mktemp -d /tmp/gpusnap-gpu.XXXXXX)}
LOGS=$WORK/logs
TEST_TIMEOUT=${GPUSNAP_TEST_TIMEOUT:-240}
DEADLINE=${GPUSNAP_DEADLINE_S:-540}
mkdir -p "$OUT" "$LOGS" || exit 1
rm -f "$OUT/summary.txt" "$OUT/logs.tar.gz" "$OUT/bench.md" "$OUT/bench.jsonl" "$OUT/bench-dump.md" "$OUT/bench-dump.jsonl" \
  "$OUT/bench-cuda-plugin.md" "$OUT/bench-switch.md"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

# Results: one "name|verdict|detail" per row; the summary and the tarball are
# rewritten after every row, so a call cut off by its time limit still returns them.
ROWS=()
NPASS=0 NFAIL=0 NSKIP=0

remaining() { if [ "$DEADLINE" -gt 0 ]; then echo $((DEADLINE - SECONDS)); else echo 999999; fi; }

table() {
  local row name verdict detail
  echo "gpusnap GPU suite: $NGPUS x $DEVICE, driver $DRIVER, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$SRC" describe --always --dirty 2>/dev/null)"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r name verdict detail <<<"$row"
    printf '  %-22s %-4s  %s\n' "$name" "$verdict" "$detail"
  done
  echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
}

# The first FAIL lines of each failed test, so summary.txt alone says what broke.
failures() {
  local row name verdict detail
  for row in "${ROWS[@]}"; do
    IFS='|' read -r name verdict detail <<<"$row"
    if [ "$verdict" != FAIL ] || [ ! -s "$LOGS/$name.log" ]; then continue; fi
    echo "$name:"
    grep -E '^FAIL: ' "$LOGS/$name.log" | head -n 8 | sed 's/^/  /'
  done
}

save() {
  {
    table
    echo
    [ -s "$OUT/bench.md" ] && cat "$OUT/bench.md"
    echo
    [ -s "$OUT/bench-dump.md" ] && cat "$OUT/bench-dump.md"
    echo
    [ -s "$OUT/bench-cuda-plugin.md" ] && cat "$OUT/bench-cuda-plugin.md"
    echo
    [ -s "$OUT/bench-switch.md" ] && cat "$OUT/bench-switch.md"
    echo
    failures
    echo "logs: $LOGS (and logs.tar.gz)"
  } >"$OUT/summary.txt"
  cp "$OUT/summary.txt" "$LOGS/summary.txt"
  # logs only: small files, no images (img*, *.img) and nothing of a test's data (a chunk store's objects,
  # spill files, models), which is GiB and took minutes to compress after every row
  (cd "$WORK" && find logs \( -name 'img*' -prune \) -o \( -type f ! -name '*.img' -size -4M -print0 \) |
    tar --null -czf "$OUT/logs.tar.gz.tmp" -T - 2>/dev/null) && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

add_row() { # NAME VERDICT DETAIL
  ROWS+=("$1|$2|$3")
  case $2 in
    PASS) NPASS=$((NPASS + 1)) ;;
    SKIP) NSKIP=$((NSKIP + 1)) ;;
    *) NFAIL=$((NFAIL + 1)) ;;
  esac
  printf '[%4ds] %-22s %s  %s\n' "$SECONDS" "$1" "$2" "$3"
  save
}

final() {
  echo
  echo "== Summary (logs: $LOGS; $OUT/logs.tar.gz, $OUT/summary.txt)"
  table
  if [ -s "$OUT/bench.md" ]; then
    echo
    cat "$OUT/bench.md"
  fi
  if [ -s "$OUT/bench-dump.md" ]; then
    echo
    cat "$OUT/bench-dump.md"
  fi
  if [ -s "$OUT/bench-cuda-plugin.md" ]; then
    echo
    cat "$OUT/bench-cuda-plugin.md"
  fi
  if [ -s "$OUT/bench-switch.md" ]; then
    echo
    cat "$OUT/bench-switch.md"
  fi
  [ $NFAIL -eq 0 ]
  exit $?
}

# Kills what a test left behind: the pids it recorded, if they are still our apps.
kill_leftovers() { # PIDS_FILE
  local pid cmd
  [ -s "$1" ] || return 0
  while read -r pid; do
    if [ -z "$pid" ] || [ ! -r "/proc/$pid/cmdline" ]; then continue; fi
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    case $cmd in
      *tests/gpu/apps/*|*tests/gpu/py/*|"sleep 600 ") echo "  killing leftover pid $pid: $cmd"; kill -KILL "$pid" 2>/dev/null ;;
    esac
  done <"$1"
}

echo "== GPU"
nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv 2>&1 | sed 's/^/  /'
echo "  kernel $(uname -r), $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc'), $(cmake --version 2>/dev/null | head -n 1)"
echo "  logs: $LOGS   results: $OUT"

# the codecs' headers where the system has none: unpacked from carried .debs (scripts/install-deps.sh)
scripts/install-deps.sh build || { add_row build FAIL "build tools or headers missing"; final; }

if [ "${GPUSNAP_NO_BUILD:-0}" != 1 ]; then
  echo "== Build ($BUILD, Release, GPU apps on)"
  t0=$SECONDS
  if cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGPUSNAP_GPU_APPS=ON >"$LOGS/build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" -- -k >>"$LOGS/build.log" 2>&1; then
    add_row build PASS "$((SECONDS - t0))s"
  else
    # -k went on past the first error: every error the compilers there found, at once (their
    # version differs from the CI machine's, and a device call is too dear to learn them one by one)
    grep -E -A3 'error' "$LOGS/build.log" | head -n 60
    tail -n 10 "$LOGS/build.log"
    add_row build FAIL "see logs/build.log"
    final
  fi
fi

if [ "${GPUSNAP_NO_CTEST:-0}" != 1 ]; then
  echo "== Unit tests (ctest)"
  t0=$SECONDS
  (cd "$BUILD" && timeout -k 10 300 ctest --output-on-failure -j 8 --timeout 120) >"$LOGS/ctest.log" 2>&1
  rc=$?
  counts=$(grep -E 'tests passed|tests failed' "$LOGS/ctest.log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    add_row ctest PASS "${counts:-ok}, $((SECONDS - t0))s"
  else
    grep -E '\*\*\*Failed|Failed|Timeout' "$LOGS/ctest.log" | head -n 10 | sed 's/^/  /'
    add_row ctest FAIL "${counts:-exit $rc}, see logs/ctest.log"
  fi
fi

# Which tests: arguments, else GPUSNAP_GPU_TESTS, else all.
ALL=()
for t in "$SRC"/tests/gpu/t*.sh; do ALL+=("$(basename "$t" .sh)"); done
want=("$@")
if [ ${#want[@]} -eq 0 ] && [ -n "${GPUSNAP_GPU_TESTS:-}" ]; then
  read -r -a want <<<"${GPUSNAP_GPU_TESTS//,/ }"
fi
SELECTED=()
if [ ${#want[@]} -eq 0 ]; then
  # A test with a "# gpu-test-default: off" line (a long one: the soak) runs only when named.
  for t in "${ALL[@]}"; do
    grep -q '^# gpu-test-default: off' "$SRC/tests/gpu/$t.sh" || SELECTED+=("$t")
  done
else
  for w in "${want[@]}"; do
    found=0
    for t in "${ALL[@]}"; do
      if [[ $t == "$w"* ]]; then
        found=1
        [[ " ${SELECTED[*]} " == *" $t "* ]] || SELECTED+=("$t")
      fi
    done
    if [ $found -eq 0 ]; then
      echo "run.sh: no test matches '$w' (tests: ${ALL[*]})" >&2
      exit 2
    fi
  done
fi

# CRIU for the tests that dump, unpacked once here: tests running side by side must not unpack it together
if [ -z "${GPUSNAP_CRIU:-}" ] && [ -d "$SRC/.cache/criu-debs" ]; then
  if "$SRC/scripts/get-criu.sh" --offline >"$LOGS/get-criu.log" 2>&1 && [ -x "$SRC/.cache/criu/bin/criu" ]; then
    export GPUSNAP_CRIU=$SRC/.cache/criu/bin/criu
  else
    echo "  no CRIU from .cache/criu-debs (logs/get-criu.log): the tests that dump say they skip"
  fi
fi
echo "== GPU tests: ${SELECTED[*]}"
# Tests marked "# gpu-test-shared: yes" (small, no GPU-wide or host-wide memory figures, no list of
# every process, no fixed port) run up to GPUSNAP_GPU_PARALLEL at a time; the others alone. A shared
# test that fails beside others runs again alone at the end, and its row says both.
PARALLEL=${GPUSNAP_GPU_PARALLEL:-3}
RUNNING=()
RETRY=()

# The time limit of test NAME: the suite's, or its own "# gpu-test-limit: SECONDS", within the deadline.
test_limit() { # NAME LEFT
  local limit=$TEST_TIMEOUT own
  own=$(sed -n 's/^# gpu-test-limit: *\([0-9][0-9]*\).*/\1/p' "$SRC/tests/gpu/$1.sh" | head -n 1)
  [ -n "$own" ] && [ "$own" -gt "$limit" ] && limit=$own
  [ "$2" -lt $((limit + 10)) ] && limit=$(($2 - 10))
  echo "$limit"
}

# Runs test NAME (limit LIMIT seconds, its log LOG) and writes "RC SECONDS" to $LOGS/NAME.result.
run_one() { # NAME LIMIT LOG
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc
  rm -f "$LOGS/$name.result"
  GPU_TEST_WORK=$LOGS/$name GPUSNAP_BUILD=$BUILD GPU_TEST_LIMIT_S=$limit timeout -k 15 "$limit" bash "$SRC/tests/gpu/$name.sh" \
    >"$log" 2>&1
  rc=$?
  kill_leftovers "$LOGS/$name/pids"
  # A passed test's images go (GPUSNAP_KEEP_IMAGES=1 keeps them): a suite of dump tests writes tens
  # of GiB, and the GPU machine's disk filled in one call (later dumps then failed with ENOSPC).
  if [ "$rc" = 0 ] || [ "$rc" = 77 ] && [ "${GPUSNAP_KEEP_IMAGES:-0}" != 1 ]; then
    find "$LOGS/$name" \( -name manifest.img -o -name inventory.img \) -printf '%h\0' 2>/dev/null |
      xargs -0 -r rm -rf 2>/dev/null
  fi
  echo "$rc $((SECONDS - t0))" >"$LOGS/$name.result"
}

# The row of a finished test. NOTE: said after its detail (a run beside others that failed first).
record() { # NAME [NOTE]
  local name=$1 note=${2:-} rc secs counts
  read -r rc secs <"$LOGS/$name.result"
  counts=$(sed -n 's/^RESULT [^ ]*: [A-Z]* (\(.*\)) in .*/\1/p' "$LOGS/$name.log" | tail -n 1)
  case $rc in
    0) add_row "$name" PASS "${counts}, ${secs}s$note" ;;
    77) add_row "$name" SKIP "$(grep -m 1 '^SKIP: ' "$LOGS/$name.log" | cut -c 7-100)${counts:+ ($counts)}$note" ;;
    124 | 137)
      grep '^FAIL: ' "$LOGS/$name.log" | head -n 8 | sed 's/^/  /'
      tail -n 5 "$LOGS/$name.log" | sed 's/^/  | /'
      add_row "$name" FAIL "timed out after ${secs}s${counts:+ ($counts)}, see logs/$name.log$note" ;;
    *)
      grep '^FAIL: ' "$LOGS/$name.log" | head -n 8 | sed 's/^/  /'
      [ -n "$counts" ] || tail -n 5 "$LOGS/$name.log" | sed 's/^/  | /'
      add_row "$name" FAIL "${counts:-exit $rc}, ${secs}s, see logs/$name.log$note" ;;
  esac
}

# Records the shared tests that have ended; one that failed beside others waits in RETRY for a run alone.
collect() {
  local name rc secs still=()
  for name in "${RUNNING[@]}"; do
    if [ ! -s "$LOGS/$name.result" ]; then still+=("$name"); continue; fi
    read -r rc secs <"$LOGS/$name.result"
    if [ "$rc" = 0 ] || [ "$rc" = 77 ] || [ "$PARALLEL" -le 1 ]; then
      record "$name"
    else
      echo "  $name failed beside other tests (exit $rc, ${secs}s): it runs again alone at the end"
      RETRY+=("$name")
    fi
  done
  RUNNING=("${still[@]}")
}

# Waits until fewer than N shared tests run (0: none).
drain_to() { # N
  while [ "${#RUNNING[@]}" -gt "$1" ]; do
    wait -n 2>/dev/null || sleep 1
    collect
  done
}

for name in "${SELECTED[@]}"; do
  left=$(remaining)
  if [ "$left" -lt 30 ]; then
    add_row "$name" SKIP "not run: suite deadline reached (GPUSNAP_DEADLINE_S=$DEADLINE)"
    continue
  fi
  limit=$(test_limit "$name" "$left")
  if [ "$PARALLEL" -gt 1 ] && grep -q '^# gpu-test-shared: yes' "$SRC/tests/gpu/$name.sh"; then
    drain_to $((PARALLEL - 1))
    echo "-- $name (limit ${limit}s, $(date -u +%T), beside ${#RUNNING[@]} other(s))"
    run_one "$name" "$limit" "$LOGS/$name.log" &
    RUNNING+=("$name")
  else
    drain_to 0
    echo "-- $name (limit ${limit}s, $(date -u +%T))"
    run_one "$name" "$limit" "$LOGS/$name.log"
    record "$name"
  fi
done
drain_to 0
for name in "${RETRY[@]}"; do
  left=$(remaining)
  mv -f "$LOGS/$name.log" "$LOGS/$name.beside.log"
  if [ "$left" -lt 30 ]; then
    cp "$LOGS/$name.beside.log" "$LOGS/$name.log"
    record "$name" " (beside other tests; not run again alone: suite deadline reached)"
    continue
  fi
  echo "-- $name again, alone (limit $(test_limit "$name" "$left")s, $(date -u +%T))"
  run_one "$name" "$(test_limit "$name" "$left")" "$LOGS/$name.log"
  record "$name" " (run alone; it failed beside other tests first: logs/$name.beside.log)"
done

if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ]; then
  left=$(remaining)
  if [ "$left" -lt 90 ]; then
    add_row bench SKIP "not run: ${left}s left before the suite deadline (GPUSNAP_DEADLINE_S=$DEADLINE)"
  else
    echo "== Benchmark (bench/run.sh)"
    t0=$SECONDS
    OUT=$OUT GPUSNAP_BUILD=$BUILD GPUSNAP_BENCH_WORK=$LOGS/bench timeout -k 15 $((left - 5)) \
      bash "$SRC/bench/run.sh" >"$LOGS/bench.log" 2>&1
    rc=$?
    kill_leftovers "$LOGS/bench/pids"
    case $rc in
      0) add_row bench PASS "data verified after every resume, $((SECONDS - t0))s" ;;
      77) add_row bench SKIP "$(grep -m 1 '^SKIP: ' "$LOGS/bench.log" | cut -c 7-100)" ;;
      124 | 137) add_row bench FAIL "timed out after $((SECONDS - t0))s, see logs/bench.log" ;;
      *)
        grep -E '^(FAIL|ERROR)' "$LOGS/bench.log" | head -n 8 | sed 's/^/  /'
        add_row bench FAIL "exit $rc, see logs/bench.log" ;;
    esac
  fi
fi
# An optional benchmark after bench/run.sh: row NAME, bench SCRIPT run with ENV (NAME=VALUE words) if at least
# MIN_LEFT seconds remain before the deadline; PASS_TEXT says what its exit 0 means. Its logs: logs/NAME*.
optional_bench() { # NAME SCRIPT MIN_LEFT PASS_TEXT ENV...
  local name=$1 script=$2 min=$3 pass_text=$4 left rc t0
  shift 4
  left=$(remaining)
  if [ "$left" -lt "$min" ]; then
    add_row "$name" SKIP "not run: ${left}s left before the suite deadline (GPUSNAP_DEADLINE_S=$DEADLINE)"
    return
  fi
  echo "== $name ($script)"
  t0=$SECONDS
  env OUT="$OUT" GPUSNAP_BUILD="$BUILD" GPUSNAP_BENCH_WORK="$LOGS/$name" "$@" timeout -k 15 $((left - 5)) \
    bash "$SRC/$script" >"$LOGS/$name.log" 2>&1
  rc=$?
  kill_leftovers "$LOGS/$name/pids"
  # a bench that cannot run here says SKIP on its first line and exits 0, or exits 77 after a SKIP line
  if [ $rc = 77 ] || { [ $rc = 0 ] && head -n 1 "$LOGS/$name.log" | grep -q '^SKIP: '; }; then
    add_row "$name" SKIP "$(grep -m 1 '^SKIP: ' "$LOGS/$name.log" | cut -c 7-100)"
    return
  fi
  case $rc in
    0) add_row "$name" PASS "$pass_text, $((SECONDS - t0))s" ;;
    124 | 137) add_row "$name" FAIL "timed out after $((SECONDS - t0))s, see logs/$name.log" ;;
    *)
      grep -E '^(FAIL|ERROR)' "$LOGS/$name.log" | head -n 8 | sed 's/^/  /'
      add_row "$name" FAIL "exit $rc (the log's FAIL lines say what), see logs/$name.log" ;;
  esac
}
if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ] && [ -n "${GPUSNAP_BENCH_DUMP_SIZES:-}" ]; then
  optional_bench bench-dump bench/dump.sh 60 "data verified after every restore" \
    GPUSNAP_BENCH_SIZES="$GPUSNAP_BENCH_DUMP_SIZES" GPUSNAP_BENCH_PATHS="${GPUSNAP_BENCH_DUMP_PATHS:-agent driver agent-leave}"
fi
if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ] && [ -n "${GPUSNAP_BENCH_CUDA_PLUGIN:-}" ]; then
  optional_bench bench-cuda-plugin bench/cuda-plugin.sh 120 "every way verified after restore" \
    GPUSNAP_BENCH_SIZES="$GPUSNAP_BENCH_CUDA_PLUGIN" \
    GPUSNAP_BENCH_WAYS="${GPUSNAP_BENCH_CUDA_PLUGIN_WAYS:-cuda_plugin cuda-checkpoint driver agent}"
fi
if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ] && [ -n "${GPUSNAP_BENCH_WARM_START:-}" ]; then
  optional_bench bench-warm-start bench/warm_start.sh 300 "every answer the first start's" \
    GPUSNAP_BENCH_HF_SIZE="$GPUSNAP_BENCH_WARM_START"
fi
if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ] && [ -n "${GPUSNAP_BENCH_SWITCH:-}" ]; then
  optional_bench bench-switch bench/switch.sh 120 "data verified after every resume and switch" \
    GPUSNAP_BENCH_SWITCH_SIZE="$GPUSNAP_BENCH_SWITCH"
fi
if [ "${GPUSNAP_NO_BENCH:-0}" != 1 ] && [ -n "${GPUSNAP_BENCH_SPILL:-}" ]; then
  optional_bench bench-spill bench/spill.sh 120 "data verified after every resume" \
    GPUSNAP_BENCH_SPILL_SIZE="$GPUSNAP_BENCH_SPILL"
fi
final
