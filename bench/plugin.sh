#!/usr/bin/env bash
# bench/plugin.sh - criu dump/restore through gpusnap_criu.so against gpusnap
# dump/restore of the same process, same run, same storage: a pattern process
# (default 8 GiB) on the agent and the driver path, each way dumped and
# restored once, the data verified after every restore. Wall times: what the
# caller waits for (for the plugin's agent path, the restore counts until the
# agent has loaded the data, which it does after criu returned). Prints a
# table with the ratios plugin/gpusnap (issue 12 asks for <= 1.10) and
# writes it to $OUT/bench-plugin.md.
#
# Environment:
#   OUT                         where results go (default ./gpu-out)
#   GPUSNAP_BENCH_SIZES         sizes (default "8G")
#   GPUSNAP_BENCH_PATHS         paths (default "agent driver")
#   GPUSNAP_BENCH_DIR           image directory (default /dev/shm/gpusnap-bench-plugin)
#   GPUSNAP_BENCH_REPEAT        cycles per path (default 1), each gpusnap dump/restore then criu
#                               dump/restore of the same process; with more than one the table
#                               gives the medians of cycles 2..N: from the second cycle on both
#                               sides work on a process CRIU restored (the first gpusnap dump
#                               meets the fresh one, whose memory CRIU lays out differently)
#   GPUSNAP_BENCH_LEAVE=1       periodic checkpoints instead: `gpusnap dump --leave-running` (its
#                               paused_s) against `criu dump --leave-running` until the agent runs
#                               again; no restores (the dump columns are the time the process stood
#                               still)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/gpu/lib.sh"
. "$SRC/tests/gpu/plugin_lib.sh"
cd "$SRC" || exit 1

bench_prologue bench/plugin.sh
SIZES=${GPUSNAP_BENCH_SIZES:-8G}
PATHS=${GPUSNAP_BENCH_PATHS:-agent driver}
DIR=${GPUSNAP_BENCH_DIR:-/dev/shm/gpusnap-bench-plugin}
mkdir -p "$OUT" "$DIR" || exit 1
MD=$OUT/bench-plugin.md

# shellcheck disable=SC2016 # $DIR is expanded when the trap runs
bench_work 'gs_cleanup; rm -rf "$DIR"'
GS_TEST=bench-plugin
require_criu
plugin_init

# The VM's first touch of memory is slow (tmpfs pages the host has not backed yet): whichever side
# wrote first would pay it. Write and delete the largest size once before measuring.
warm_storage() {
  local size mib=0 m
  for size in $SIZES; do
    case $size in *G) m=$((${size%G} * 1024)) ;; *M) m=${size%M} ;; *) m=0 ;; esac
    [ "$m" -gt "$mib" ] && mib=$m
  done
  [ "$mib" -gt 0 ] || return 0
  log "warming $DIR: $mib MiB written and deleted"
  dd if=/dev/zero of="$DIR/warm" bs=1M count="$mib" status=none 2>/dev/null
  rm -f "$DIR/warm"
}
warm_storage

REPEAT=${GPUSNAP_BENCH_REPEAT:-1}
case $REPEAT in '' | *[!0-9]* | 0) echo "GPUSNAP_BENCH_REPEAT must be a positive number, not '$REPEAT'"; exit 2 ;; esac
median() { # an even count: the mean of the middle two
  [ $# -gt 0 ] || { echo 0; return; }
  printf '%s\n' "$@" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# One periodic checkpoint each way of the running process b (pid): gd and pd, how long it stood still.
leave_cycle() { # CYCLE
  gs_run dump --leave-running --json -D "$DIR/gs" "$pid"
  [ "$GS_RC" == 0 ] && gd=$(json_get "$GS_OUT" times.paused_s) || status="gpusnap dump --leave-running exit $GS_RC"
  [ "$status" == ok ] && { app_verify b "after gpusnap dump --leave-running ($size, $path, cycle $1)" || status="verify failed"; }
  rm -rf "$DIR/gs"
  if [ "$status" == ok ]; then
    plugin_dump "$pid" "$DIR/criu" --leave-running
    if [ "$PLUGIN_RC" == 0 ] && plugin_wait_loaded "$pid"; then pd=$PLUGIN_SECS; else status="criu dump --leave-running exit $PLUGIN_RC"; fi
  fi
  [ "$status" == ok ] && { app_verify b "after criu dump --leave-running ($size, $path, cycle $1)" || status="verify failed"; }
  rm -rf "$DIR/criu" "$DIR"/criu.*
  log "cycle $1: stood still: gpusnap $gd s, criu through the plugin $pd s"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
ROWS=()
for size in $SIZES; do
  for path in $PATHS; do
    launch=()
    [ "$path" == agent ] && launch=("$GPUSNAP" run --)
    log "== $size, $path path"
    if ! app_start b 300 "${launch[@]}" "$GS_APPS/pattern" --size "$size" --alloc-size 1G --seed 9; then
      ROWS+=("| $size | $path | app did not start | | | | | |")
      continue
    fi
    pid=${APP_PID[b]}
    status=ok
    GDS=() GRS=() PDS=() PRS=()
    for ((cycle = 1; cycle <= REPEAT; cycle++)); do
      [ "$status" == ok ] || break
      gd=0 gr=0 pd=0 pr=0
      if [ "${GPUSNAP_BENCH_LEAVE:-0}" == 1 ]; then
        leave_cycle "$cycle"
        if [ "$REPEAT" -eq 1 ] || [ "$cycle" -gt 1 ]; then GDS+=("$gd") PDS+=("$pd"); fi
        continue
      fi
      gs_run dump --json -D "$DIR/gs" "$pid"
      [ "$GS_RC" == 0 ] && gd=$GS_SECS || status="gpusnap dump exit $GS_RC"
      wait "$pid" 2>/dev/null
      wait_pid_reaped "$pid"
      if [ "$status" == ok ]; then
        gs_run restore --json -D "$DIR/gs"
        [ "$GS_RC" == 0 ] && gr=$GS_SECS || status="gpusnap restore exit $GS_RC"
        APP_OWN[b]=restored
      fi
      [ "$status" == ok ] && { app_verify b "after gpusnap restore ($size, $path, cycle $cycle)" || status="verify failed after gpusnap restore"; }
      rm -rf "$DIR/gs"
      if [ "$status" == ok ]; then
        plugin_dump "$pid" "$DIR/criu"
        [ "$PLUGIN_RC" == 0 ] && pd=$PLUGIN_SECS || status="criu dump exit $PLUGIN_RC"
        wait_pid_gone "$pid"
      fi
      if [ "$status" == ok ]; then
        plugin_restore "$DIR/criu"
        if [ "$PLUGIN_RC" == 0 ] && plugin_wait_loaded "$pid"; then pr=$PLUGIN_SECS; else status="criu restore exit $PLUGIN_RC"; fi
      fi
      [ "$status" == ok ] && { app_verify b "after criu restore through the plugin ($size, $path, cycle $cycle)" || status="verify failed after criu restore"; }
      rm -rf "$DIR/criu"
      log "cycle $cycle: gpusnap $gd / $gr s, criu through the plugin $pd / $pr s"
      # the first of several cycles is a warm-up (see GPUSNAP_BENCH_REPEAT above)
      if [ "$REPEAT" -eq 1 ] || [ "$cycle" -gt 1 ]; then
        GDS+=("$gd") GRS+=("$gr") PDS+=("$pd") PRS+=("$pr")
      fi
    done
    gd=$(median "${GDS[@]}") gr=$(median "${GRS[@]}") pd=$(median "${PDS[@]}") pr=$(median "${PRS[@]}")
    app_quit b >/dev/null || gs_kill_pid "$pid"
    app_forget b
    ROWS+=("| $size | $path | $gd | $pd | $(ratio "$pd" "$gd") | $gr | $pr | $(ratio "$pr" "$gr") | $status |")
  done
done

{
  echo "criu through gpusnap_criu.so vs gpusnap (wall seconds; images in $DIR; $REPEAT cycle(s) per path$([ "$REPEAT" -gt 1 ] && echo ", medians of cycles 2..$REPEAT"))"
  [ "${GPUSNAP_BENCH_LEAVE:-0}" == 1 ] && echo "--leave-running: the dump columns are how long the process stood still; no restores"
  echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 2>/dev/null), $(git -C "$SRC" describe --always --dirty 2>/dev/null)"
  echo
  echo "| size | path | gpusnap dump | criu dump (plugin) | ratio | gpusnap restore | criu restore (plugin) | ratio | status |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$MD"
# the run's JSON document too (bench/report.py collect table: the table's rows, device, driver, date, command)
python3 "$SRC/bench/report.py" collect table "$MD" --bench plugin --script bench/plugin.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-plugin-$(date -u +%Y%m%dT%H%M%SZ).json" ||
  echo "ERROR: bench/report.py collect table failed"
