#!/usr/bin/env bash
# demo.sh - `make demo`: gpusnap in one screen. A CUDA app keeps a counter in
# GPU memory (tests/gpu/apps/counter, started with the gpusnap agent: gpusnap
# run). It is
#   1. suspended (its VRAM drops to 0, the counter stops) and resumed (the
#      counter goes on from where it was);
#   2. dumped while it runs (dump --leave-running), killed, and restored from
#      the image (the counter goes on from the dumped value);
#   3. suspended and resumed again through the driver path (--driver), the two
#      paths' times side by side (from --json).
# Before that a quiet build, one line per stage (what the build printed goes
# to a log named on failure), and CRIU >= 4.2 (scripts/get-criu.sh) where none
# is at hand. Needs an NVIDIA GPU: without one it says so in one line and exits
# 1, before building anything. Needs root for part 2 (CRIU); without CRIU part
# 2 is skipped, said in one line, and the exit status is 1.
#
# usage: scripts/demo.sh [BUILD_DIR]      (default: build)
# Environment: GPUSNAP_DEMO_HOLD (GPU memory the app holds, default 2G),
# GPUSNAP_NO_BUILD=1 (use BUILD_DIR as it is), GPUSNAP_CRIU (a criu to use).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpusnap demo: no NVIDIA GPU found (this demo needs one)"
  exit 1
fi

export GPUSNAP_BUILD=$BUILD
. "$SRC/tests/gpu/lib.sh"
gs_lib_init "${GPUSNAP_DEMO_WORK:-}"
DEMO_LOG=$GS_WORK/demo.log
: >"$DEMO_LOG"
trap 'gs_cleanup >>"$DEMO_LOG" 2>&1; rm -rf "$GS_WORK/img"' EXIT
trap 'exit 130' INT TERM HUP
HOLD=${GPUSNAP_DEMO_HOLD:-2G}

if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
heading() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
row() { printf '   %-42s %s\n' "$1" "$2"; } # COMMAND WHAT_IT_DID
die() { printf '\ngpusnap demo: %s (details: %s)\n' "$*" "$DEMO_LOG"; exit 1; }
# ARGS: gpusnap ARGS (lib.sh's gs_run: output in GS_OUT/GS_ERR, logged), dies on failure
gpusnap_ok() {
  gs_run "$@" >>"$DEMO_LOG" 2>&1
  [ "$GS_RC" == 0 ] || die "gpusnap $* failed (exit $GS_RC): $(head -n 1 <<<"$GS_ERR")"
}
secs() { printf '%.2f' "$(json_get "$GS_OUT" "$1" 2>/dev/null || echo 0)"; } # JSON_PATH -> "1.23"
values=$GS_WORK/counter.values
lines() { if [ -f "$values" ]; then wc -l <"$values"; else echo 0; fi; }
last_value() { tail -n 1 "$values" 2>/dev/null; }
# values from line N+1 on, at most 6, once there are some (up to 10 s)
values_after() { # N
  local i
  for ((i = 0; i < 100; i++)); do [ "$(lines)" -ge $(($1 + 6)) ] && break; sleep 0.1; done
  sed -n "$(($1 + 1)),$(($1 + 6))p" "$values" | tr '\n' ' '
}

echo "gpusnap demo on $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"

# ---------------------------------------------------------------- build, CRIU
if [ "${GPUSNAP_NO_BUILD:-0}" == 1 ]; then
  echo "build: skipped (GPUSNAP_NO_BUILD=1, $BUILD)"
else
  "$SRC/scripts/install-deps.sh" build || exit 1
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  printf 'build: gpusnap, libgpusnap.so and the counter app in %s ... ' "$BUILD"
  t0=$EPOCHREALTIME
  if cmake -S "$SRC" -B "$BUILD" -DGPUSNAP_GPU_APPS=ON >"$GS_WORK/build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target gpusnap gpusnap_agent gpuapp_counter >>"$GS_WORK/build.log" 2>&1; then
    echo "ok ($(gs_elapsed "$t0" | cut -d. -f1) s)"
  else
    echo "FAILED"
    tail -n 15 "$GS_WORK/build.log"
    DEMO_LOG=$GS_WORK/build.log die "build failed"
  fi
fi

# CRIU: GPUSNAP_CRIU, else the private copy scripts/get-criu.sh makes (from carried .debs, or
# downloaded), else a criu on PATH
CRIU_OK=0
if [ "$(id -u)" != 0 ]; then
  echo "CRIU: not used (not root: dump and restore need root); part 2 is skipped"
else
  # the carried .debs alone first (no network on the GPU machine), then with a download
  if [ -z "${GPUSNAP_CRIU:-}" ] && { "$SRC/scripts/get-criu.sh" --offline >"$GS_WORK/get-criu.log" 2>&1 ||
    timeout 600 "$SRC/scripts/get-criu.sh" >>"$GS_WORK/get-criu.log" 2>&1; }; then
    export GPUSNAP_CRIU=$SRC/.cache/criu/bin/criu
  fi
  criu=${GPUSNAP_CRIU:-$(command -v criu)}
  version=$("${criu:-criu}" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -n 1)
  if [ -z "$criu" ] || [ -z "$version" ]; then
    echo "CRIU: none (scripts/get-criu.sh: $(tail -n 1 "$GS_WORK/get-criu.log" 2>/dev/null)); part 2 is skipped"
  elif [ "$(printf '%s\n4.2\n' "$version" | sort -V | head -n 1)" != 4.2 ]; then
    echo "CRIU: $criu is $version, older than 4.2 (docs/CRIU.md); part 2 is skipped"
  else
    export GPUSNAP_CRIU=$criu
    CRIU_OK=1
    echo "CRIU: $version (${criu#"$SRC"/})"
  fi
fi
for f in "$GPUSNAP" "$GS_APPS/counter"; do
  [ -x "$f" ] || die "missing $f (build with: cmake -S . -B build -DGPUSNAP_GPU_APPS=ON && cmake --build build)"
done

# ---------------------------------------------------------------- 1. suspend, resume
heading "1. Suspend and resume: the app keeps its GPU state while the GPU gets its memory back"
rm -f "$values"
# no stdin and a session of its own, as CRIU dumps a process without --shell-job; its stderr a
# file of its own that nothing else writes (CRIU restores an open file only at the size it had)
setsid "$GPUSNAP" run -- "$GS_APPS/counter" --no-stdin --hold "$HOLD" --out "$values" --quiet \
  </dev/null >/dev/null 2>>"$GS_WORK/counter.stderr" &
pid=$!
GS_EXTRA_PIDS+=("$pid")
for ((i = 0; i < 600; i++)); do [ "$(lines)" -ge 10 ] && break; pid_alive "$pid" || break; sleep 0.1; done
[ "$(lines)" -ge 10 ] || die "the counter app did not start counting: $(tail -n 1 "$GS_WORK/counter.stderr")"
row "gpusnap run -- counter --hold $HOLD" "pid $pid, $(pid_vram_mib "$pid") MiB of VRAM, counting: $(values_after 0)..."

gpusnap_ok suspend "$pid" --json
agent_sus=$(secs total_s)
for ((i = 0; i < 30; i++)); do [ "$(pid_vram_mib "$pid")" == 0 ] && break; sleep 0.1; done # nvidia-smi lags
sleep 0.3 # a tick that had read the counter before the suspend still writes its line
stopped=$(last_value)
sleep 2
[ "$(last_value)" == "$stopped" ] || die "the counter moved while suspended ($stopped -> $(last_value))"
row "gpusnap suspend $pid" "$agent_sus s; VRAM now $(pid_vram_mib "$pid") MiB; the counter stays at $stopped (2 s)"
n=$(lines)
gpusnap_ok resume "$pid" --json
agent_res=$(secs total_s)
row "gpusnap resume $pid" "$agent_res s; the counter goes on: $(values_after "$n")..."
awk 'NR != $1 { exit 1 }' "$values" || die "the counter did not go on where it was"

# ---------------------------------------------------------------- 2. dump, kill, restore
SKIPPED=0
if [ $CRIU_OK == 1 ]; then
  heading "2. Dump, kill, restore: the app survives the loss of its process"
  img=$GS_WORK/img
  before=$(lines)
  GS_CMD_TIMEOUT=300 gpusnap_ok dump --json --leave-running -D "$img" "$pid"
  after=$(lines)
  row "gpusnap dump --leave-running -D IMG $pid" "$(secs times.total_s) s (the app stood still $(secs times.paused_s) s); the app runs on"
  row "" "IMG=$img ($(du -sh "$img" | cut -f1))"
  sleep 1
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  wait_pid_reaped "$pid" || die "pid $pid still exists after kill -9"
  killed_at=$(last_value)
  row "kill -9 $pid" "the app is gone; its counter had reached $killed_at"
  n=$(lines)
  GS_CMD_TIMEOUT=300 gpusnap_ok restore --json -D "$img"
  pid=$(json_get "$GS_OUT" pid)
  GS_EXTRA_PIDS+=("$pid")
  got=$(values_after "$n")
  first=${got%% *}
  row "gpusnap restore -D IMG" "$(secs times.total_s) s; pid $pid goes on from the image: $got..."
  # the dump caught the value $before..$after (the line for it may not have been written yet)
  if [ -z "$first" ] || [ "$first" -lt "$before" ] || [ "$first" -gt $((after + 1)) ]; then
    die "the restored counter starts at '$first', not at the dumped value ($before..$((after + 1)))"
  fi
else
  SKIPPED=1
  heading "2. Dump, kill, restore: skipped (no CRIU >= 4.2, see above)"
fi

# ---------------------------------------------------------------- 3. the driver path
heading "3. The same suspend through the driver path (--driver: without the agent's help)"
gpusnap_ok suspend "$pid" --driver --json
driver_sus=$(secs total_s)
n=$(lines)
gpusnap_ok resume "$pid" --json
driver_res=$(secs total_s)
row "gpusnap suspend --driver $pid" "$driver_sus s"
row "gpusnap resume $pid" "$driver_res s; the counter goes on: $(values_after "$n")..."
echo
printf '   %-28s %10s %10s\n' "counter app, $HOLD held" suspend resume
printf '   %-28s %8s s %8s s\n' "agent path (gpusnap run)" "$agent_sus" "$agent_res" "driver path (--driver)" "$driver_sus" "$driver_res"
printf '   %-28s %10s %10s\n' "agent path faster by" \
  "$(awk -v a="$agent_sus" -v d="$driver_sus" 'BEGIN { if (a > 0) printf "x%.1f", d / a; else print "-" }')" \
  "$(awk -v a="$agent_res" -v d="$driver_res" 'BEGIN { if (a > 0) printf "x%.1f", d / a; else print "-" }')"
gs_kill_pid "$pid" >>"$DEMO_LOG" 2>&1

echo
if [ $SKIPPED == 1 ]; then
  echo "Done, without part 2 (no CRIU). Log: $DEMO_LOG"
  exit 1
fi
echo "Done: the counter kept its GPU state through a suspend, a kill and a restore. Log: $DEMO_LOG"
exit 0
