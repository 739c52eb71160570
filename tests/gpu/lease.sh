#!/usr/bin/env bash
# lease.sh - a plan of GPU tests and benchmarks that outlasts one device call:
# `start` copies the tree to a private folder, builds it once and runs the plan's
# steps one after another in a session of its own (setsid), then returns; `wait`
# waits for the plan (or a number of seconds), prints where it stands and each
# step's table, and leaves in $OUT a bounded tarball and lease-report.txt (the
# steps' summaries and the end of each failed test's log, which comes back even
# when the tarball is too big to). A device call is limited to
# 10 minutes and a machine stays lent only 30 s after a call, so a plan longer
# than one call is started in the first call and collected by the next ones,
# each issued as soon as the previous one returns.
#
# usage: tests/gpu/lease.sh start STEP...     (returns at once)
#        tests/gpu/lease.sh wait SECONDS      (at most SECONDS, less when the plan ends)
#        tests/gpu/lease.sh stop              (ends the plan and what it started)
# STEP:  tests=t22,t31         tests/gpu/run.sh with these tests (name prefixes), no ctest, no bench
#        bench-run=SIZES       bench/run.sh (driver, agent, agent-reserve; SIZES like 8G+32G)
#        bench-two-gpus=SIZE   bench/run.sh's two-GPU case alone: SIZE on GPU 0, then on GPUs 0 and 1 (2 GPUs)
#        bench-spill=SIZE      bench/spill.sh          bench-switch=SIZE   bench/switch.sh
#        bench-incremental=MIB bench/incremental.sh    bench-compress=1b|3b|8b   bench/compress.sh
#        bench-live=1b|3b|8b   bench/live_pause.sh (the pause only)
#        bench-store=1b|3b|8b  bench/store.sh (snapshots into a chunk store against a full image)
#        demo                  make demo, in a build folder of its own
# Other settings of those scripts (GPUSNAP_BENCH_REPEAT, ...) pass through the environment.
#
# Why a private copy: each device call copies the working tree again, and a step's
# script rewritten under a running bash misbehaves. Why one build first, with -k:
# the device's compiler and CUDA headers are not the CI machine's, and every error
# they find should come back in the first call, not one per call.
set -u
export LC_ALL=C
SRC=$(cd "$(dirname "$0")/../.." && pwd)
LEASE=${GPUSNAP_LEASE_DIR:-/tmp/gpusnap-lease}
PROGRESS=$LEASE/progress

# One line of the plan's progress, with the time of day.
note() { echo "$(date -u +%T) $*" >>"$PROGRESS"; }

# Runs one step with its own OUT and log; its exit status goes to the progress file.
run_step() { # NAME COMMAND...
  local name=$1 rc
  shift
  mkdir -p "$LEASE/out/$name"
  note "start $name"
  env OUT="$LEASE/out/$name" "$@" >"$LEASE/out/$name/step.log" 2>&1
  rc=$?
  note "end $name rc=$rc"
}

plan() { # STEP...
  local step name arg copy=$LEASE/src
  cd "$copy" || exit 1
  export GPUSNAP_BUILD=$copy/build GPUSNAP_NO_CTEST=1 GPUSNAP_DEADLINE_S=0 PYTHONUNBUFFERED=1
  scripts/install-deps.sh build >"$LEASE/deps.log" 2>&1 || note "install-deps.sh build failed (deps.log)"
  if scripts/get-criu.sh --offline >"$LEASE/criu.log" 2>&1 && [ -x "$copy/.cache/criu/bin/criu" ]; then
    export GPUSNAP_CRIU=$copy/.cache/criu/bin/criu
  else
    note "no CRIU from .cache/criu-debs (criu.log): dump and restore steps skip"
  fi
  note "build"
  if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUSNAP_GPU_APPS=ON &&
    cmake --build build -j "$(nproc)" -- -k; } >"$LEASE/build.log" 2>&1; then
    note "build FAILED: every error is in build.log (wait prints them)"
    echo ALLDONE >>"$PROGRESS"
    return
  fi
  note "built"
  for step in "$@"; do
    name=${step%%=*} arg=${step#*=}
    [ "$arg" == "$step" ] && arg=
    case $name in
      tests) run_step "tests-${arg//,/-}" env GPUSNAP_NO_BUILD=1 GPUSNAP_NO_BENCH=1 \
        GPUSNAP_GPU_WORK="$LEASE/work-tests-${arg//,/-}" tests/gpu/run.sh ${arg//,/ } ;;
      bench-run) run_step "$name" env GPUSNAP_BENCH_SIZES="${arg//+/ }" \
        GPUSNAP_BENCH_PATHS="${GPUSNAP_BENCH_PATHS:-driver agent agent-reserve}" GPUSNAP_BENCH_TWO_GPUS=0 bench/run.sh ;;
      bench-two-gpus) run_step "$name" env GPUSNAP_BENCH_SIZES= GPUSNAP_BENCH_TWO_GPUS="$arg" bench/run.sh ;;
      bench-spill) run_step "$name" env GPUSNAP_BENCH_SPILL_SIZE="$arg" bench/spill.sh ;;
      bench-switch) run_step "$name" env GPUSNAP_BENCH_SWITCH_SIZE="$arg" bench/switch.sh ;;
      bench-incremental) run_step "$name" env GPUSNAP_BENCH_HELD_MIB="$arg" bench/incremental.sh ;;
      bench-compress) run_step "$name" env GPUSNAP_BENCH_HF_SIZE="$arg" bench/compress.sh ;;
      bench-store) run_step "$name" env GPUSNAP_BENCH_HF_SIZE="$arg" bench/store.sh ;;
      bench-live) run_step "$name" env GPUSNAP_BENCH_HF_SIZE="$arg" GPUSNAP_BENCH_NO_RESTORE=1 bench/live_pause.sh ;;
      demo) run_step demo make demo BUILD=build-demo ;;
      *) note "unknown step '$step' left out" ;;
    esac
  done
  echo ALLDONE >>"$PROGRESS"
}

case ${1:-} in
  start)
    shift
    [ $# -gt 0 ] || { echo "usage: $0 start STEP..." >&2; exit 2; }
    "$0" stop >/dev/null 2>&1
    rm -rf "$LEASE" && mkdir -p "$LEASE/out" || exit 1
    # the copy leaves out build folders and images: the plan builds its own
    mkdir -p "$LEASE/src" && tar -C "$SRC" --exclude=./build --exclude="./build-*" --exclude=./gpu-out -cf - . | tar -C "$LEASE/src" -xf - ||
      { echo "lease.sh: cannot copy $SRC to $LEASE/src" >&2; exit 1; }
    note "plan: $*"
    setsid "$LEASE/src/tests/gpu/lease.sh" plan-run "$@" </dev/null >"$LEASE/plan.log" 2>&1 &
    echo $! >"$LEASE/pid"
    echo "lease.sh: plan started (pid $(cat "$LEASE/pid")): $*"
    ;;
  plan-run)
    shift
    LEASE=${GPUSNAP_LEASE_DIR:-/tmp/gpusnap-lease} PROGRESS=$LEASE/progress
    plan "$@"
    ;;
  wait)
    end=$((SECONDS + ${2:-60}))
    while [ $SECONDS -lt "$end" ] && ! grep -q '^ALLDONE' "$PROGRESS" 2>/dev/null; do sleep 3; done
    cat "$PROGRESS" 2>/dev/null
    grep -q 'build FAILED' "$PROGRESS" 2>/dev/null && grep -E -A3 'error' "$LEASE/build.log" | head -n 60
    for d in "$LEASE"/out/*/; do
      [ -d "$d" ] || continue
      echo "== $(basename "$d")"
      if [ -f "$d/summary.txt" ]; then sed -n '1,/^$/p' "$d/summary.txt"; grep -A8 -E '^[a-z0-9-]+:$' "$d/summary.txt" | head -n 30; fi
      for f in "$d"/bench*.md; do [ -f "$f" ] && cat "$f"; done
      [ -f "$d/summary.txt" ] || ls "$d"/bench*.md >/dev/null 2>&1 || tail -n 12 "$d/step.log"
    done
    if [ -n "${OUT:-}" ]; then
      # what comes back is bounded (the device tool returns files of 16 MiB at most): tables, JSON lines,
      # the steps' logs and run.sh's tarballs, never images or models
      (cd "$LEASE" && find progress build.log criu.log out \( -name 'img*' -prune \) -o \
        \( -type f ! -name '*.img' ! -name '*.safetensors' -size -6M -print0 \) 2>/dev/null |
        tar --null -czf "$OUT/lease.tgz" -T - 2>/dev/null)
      [ "$(stat -c %s "$OUT/lease.tgz" 2>/dev/null || echo 0)" -le $((12 << 20)) ] ||
        (cd "$LEASE" && tar -czf "$OUT/lease.tgz" progress build.log out/*/summary.txt out/*/bench*.md out/*/bench*.jsonl 2>/dev/null)
      # what went in, so that a tarball the device tool leaves out (over its size limit) can be made smaller
      echo "lease.tgz: $(stat -c %s "$OUT/lease.tgz" 2>/dev/null || echo 0) bytes; largest entries:"
      du -a "$LEASE/out" 2>/dev/null | sort -rn | sed -n '2,6p'
      # one small report that comes back even when the tarball does not: the progress, each step's
      # summary, and the last lines of each failed test's log
      {
        cat "$PROGRESS" 2>/dev/null
        for d in "$LEASE"/out/*/; do
          [ -f "$d/summary.txt" ] || continue
          echo "== $(basename "$d")"
          cat "$d/summary.txt"
          w=$LEASE/work-$(basename "$d")/logs
          grep -h "FINDING:" "$w"/*.log 2>/dev/null # what a probe (t52, t53) learnt of the driver
          for t in $(sed -n 's/^  \(t[0-9][^ ]*\) *FAIL .*/\1/p' "$d/summary.txt"); do
            echo "---- $t (last 80 lines of logs/$t.log)"
            tail -n 80 "$w/$t.log" 2>/dev/null
          done
        done
      } >"$OUT/lease-report.txt"
    fi
    ;;
  stop)
    [ -s "$LEASE/pid" ] && kill -TERM -- "-$(cat "$LEASE/pid")" 2>/dev/null
    rm -f "$LEASE/pid"
    ;;
  *)
    sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d' >&2
    exit 2
    ;;
esac
