#!/usr/bin/env bash
# demo.sh - `make demo`: a CUDA app keeps a counter in GPU memory; started with
# the gpusnap agent (gpusnap run), it is suspended (its VRAM drops to 0, the
# counter stops), resumed, and the counter goes on from where it was. Needs an NVIDIA GPU; without one it says
# so in one line and exits 1.
#
# usage: scripts/demo.sh [BUILD_DIR]      (default: build)
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
gs_lib_init ""
DEMO_LOG=$GS_WORK/demo.log
trap 'gs_cleanup >>"$DEMO_LOG" 2>&1' EXIT
trap 'exit 130' INT TERM HUP

if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
heading() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
say() { printf '   %s\n' "$*"; }
die() { printf '\ngpusnap demo: %s (details: %s)\n' "$*" "$DEMO_LOG"; exit 1; }
values_file=$GS_WORK/counter.values
last_values() { tail -n 6 "$values_file" 2>/dev/null | tr '\n' ' '; }
last_value() { tail -n 1 "$values_file" 2>/dev/null; }
vram_line() { # PID
  local mib
  mib=$(pid_vram_mib "$1")
  if [ "$mib" == 0 ]; then
    say "VRAM held by pid $1: 0 MiB (nvidia-smi lists no memory for it)"
  else
    say "VRAM held by pid $1: $mib MiB"
  fi
}

heading "Building gpusnap and the counter app ($BUILD)"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ "${GPUSNAP_NO_BUILD:-0}" == 1 ]; then
  say "skipped (GPUSNAP_NO_BUILD=1)"
elif cmake -S "$SRC" -B "$BUILD" -DGPUSNAP_GPU_APPS=ON >"$DEMO_LOG" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target gpusnap gpusnap_agent gpuapp_counter >>"$DEMO_LOG" 2>&1; then
  say "ok"
else
  tail -n 20 "$DEMO_LOG"
  die "build failed"
fi

heading "Starting a CUDA app that counts in GPU memory (a kernel adds 1 every 100 ms), with the gpusnap agent"
say "gpusnap run -- counter   (the agent is preloaded; the app is unchanged)"
app_start counter 60 "$GPUSNAP" run -- "$GS_APPS/counter" --out "$values_file" --quiet >>"$DEMO_LOG" 2>&1 ||
  die "the counter app did not start"
pid=${APP_PID[counter]}
sleep 1.5
say "pid $pid on $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)"
say "counter: $(last_values) ..."
vram_line "$pid"

heading "gpusnap suspend $pid"
"$GPUSNAP" suspend "$pid" 2>&1 | sed 's/^/   | /'
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || die "gpusnap suspend failed (exit $rc)"
say "state: $("$GPUSNAP" state "$pid" 2>&1)"
vram_line "$pid"
stopped_at=$(last_value)
say "counter stopped at $stopped_at; waiting 2 s ..."
sleep 2
now=$(last_value)
say "counter after 2 s: $now"
[ "$now" == "$stopped_at" ] || die "the counter moved while suspended ($stopped_at -> $now)"

heading "gpusnap resume $pid"
"$GPUSNAP" resume "$pid" 2>&1 | sed 's/^/   | /'
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || die "gpusnap resume failed (exit $rc)"
say "state: $("$GPUSNAP" state "$pid" 2>&1)"
sleep 1.5
vram_line "$pid"
after=$(grep -A 8 -x "$stopped_at" "$values_file" | tr '\n' ' ')
say "counter: $after..."
if ! awk 'NR != $1 { exit 1 }' "$values_file"; then
  die "the counter did not continue where it was: $(awk 'NR != $1 { print "line " NR " holds " $1; exit }' "$values_file")"
fi
[ "$(last_value)" -gt "$stopped_at" ] || die "the counter did not move after resume"
app_quit counter 30 >>"$DEMO_LOG" 2>&1 || die "the counter app did not exit cleanly"

heading "Done"
say "The counter went on from $stopped_at to $(last_value) (never back to 1): its GPU state was kept"
say "while its VRAM was given back to the GPU."
exit 0
