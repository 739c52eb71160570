#!/usr/bin/env bash
# bench/spill.sh - the storage tier's speed against the disk's (issue 24's
# targets: resume from the spill tier at >= 90% of what dd reads from the
# same directory in the same run, O_DIRECT and cold; a suspend to it at >=
# 90% of what dd writes). One pattern app under the agent (gpusnap run)
# holding GPUSNAP_BENCH_SPILL_SIZE (default 16G) of non-zero data on GPU 0;
# each round, in the spill directory:
#   - dd writes that many bytes (oflag=direct, conv=fsync), then, the page
#     cache dropped, reads them back (iflag=direct); the file is removed;
#   - `suspend --spill-only --spill DIR`, the page cache dropped, `resume`
#     (cold: the agent reads the spill with O_DIRECT);
#   - for reference, the same suspend and resume through host memory, and
#     through the driver path (--driver: the driver's checkpoint API);
# GPUSNAP_BENCH_REPEAT rounds (default 3; the table gives medians), the data
# verified bit for bit after every resume: a bench that breaks data fails.
#
# The rates are the bytes the spill holds (the data less its zero chunks:
# here all of it) over the agent's data phase (`spill_write_s` out,
# `image_read_s` in: what the storage limits) and over the command's wall
# time (what a user waits for, the driver's checkpoint of the context
# included). The targets are judged on the data phase; the wall ratio is
# shown next to it. Writes $OUT/bench-spill.md and one JSON line per command
# (gpusnap's own --json inside) to $OUT/bench-spill.jsonl; prints the table
# last.
#
# Environment:
#   OUT                         where results go (default ./gpu-out)
#   GPUSNAP_BENCH_SPILL_SIZE    what the app holds (default 16G; the spill and dd's file are each this
#                               large, one at a time: the directory's file system needs it free, plus 1 GiB)
#   GPUSNAP_BENCH_SPILL_DIR     the spill directory (default $OUT/spill-bench; made 0700, emptied after)
#   GPUSNAP_BENCH_SPILL_PATHS   reference paths besides the spill (default "memory driver")
#   GPUSNAP_BENCH_REPEAT        rounds (default 3)
#   GPUSNAP_BUILD               build directory (default ./build)
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/spill.sh
SIZE=${GPUSNAP_BENCH_SPILL_SIZE:-16G}
DIR=${GPUSNAP_BENCH_SPILL_DIR:-$OUT/spill-bench}
PATHS=${GPUSNAP_BENCH_SPILL_PATHS:-memory driver}
REPEAT=${GPUSNAP_BENCH_REPEAT:-3}
bench_outputs spill

if [ ! -x "$GPUSNAP" ] || [ ! -x "$GS_APPS/pattern" ]; then
  echo "ERROR: build gpusnap and the GPU apps first: cmake -S . -B build -DGPUSNAP_GPU_APPS=ON && cmake --build build -j"
  exit 1
fi
if ! [[ $SIZE =~ ^[0-9]+G$ ]]; then
  echo "ERROR: GPUSNAP_BENCH_SPILL_SIZE='$SIZE': give whole GiB, e.g. 16G"
  exit 1
fi
gib=${SIZE%G}
BYTES=$((gib << 30))
cleanup_spill() {
  [ -d "$DIR" ] && find "$DIR" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null
  [ -n "$MADE_DIR" ] && rmdir "$DIR" 2>/dev/null
  gs_cleanup
}
MADE_DIR=
[ -d "$DIR" ] || MADE_DIR=1
bench_work cleanup_spill

if ! { mkdir -p "$DIR" && chmod 700 "$DIR"; }; then
  echo "ERROR: cannot make the spill directory '$DIR'"
  exit 1
fi
free_kib=$(df -Pk "$DIR" | awk 'NR == 2 { print $4 }')
if [[ $free_kib =~ ^[0-9]+$ ]] && [ "$free_kib" -lt $(((gib + 1) << 20)) ]; then
  echo "SKIP: '$DIR' has $((free_kib >> 20)) GiB free; a spill of $SIZE needs $((gib + 1)) GiB (GPUSNAP_BENCH_SPILL_SIZE, GPUSNAP_BENCH_SPILL_DIR)"
  exit 0
fi
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' ')
if [[ $free =~ ^[0-9]+$ ]] && [ "$free" -lt $((gib * 1024 + 2048)) ]; then
  echo "SKIP: GPU 0 has $free MiB free; an app of $SIZE and its context need more (bench/spill.sh)"
  exit 0
fi

bench_device
VERSION=$("$GPUSNAP" --version 2>/dev/null | head -n 1)
DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
FS=$(df -PT "$DIR" | awk 'NR == 2 { print $2 " on " $1 }')
FAILED=0

verified() { # WHAT
  if app_cmd p verify VERIFY 300 && [[ $REPLY_LINE == "VERIFY OK"* ]]; then
    return 0
  fi
  echo "FAIL: $1: the data does not verify (${REPLY_LINE:-no answer})"
  FAILED=1
  return 1
}
# dd_timed WHAT ARGS...: dd ARGS, its wall time in T (dd's own line logged)
dd_timed() {
  local what=$1 t0=$EPOCHREALTIME line
  shift
  line=$(dd "$@" 2>&1 | tail -n 1)
  local rc=${PIPESTATUS[0]}
  T=$(gs_elapsed "$t0")
  log "dd $what: $line (${T}s)"
  python3 -c 'import json, sys; print(json.dumps({"path": "dd", "what": sys.argv[1], "rc": int(sys.argv[2]), "wall_s": float(sys.argv[3]), "command": sys.argv[4], "dd": sys.argv[5]}))' \
    "$what" "$rc" "$T" "dd $*" "$line" >>"$JSONL"
  if [ "$rc" != 0 ]; then
    echo "FAIL: dd $what: $line"
    FAILED=1
    return 1
  fi
}
jnum() { local v; v=$(json_get "$GS_OUT" "$1" 2>/dev/null); [[ $v =~ ^[0-9.e+-]+$ ]] && echo "$v" || echo 0; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.2f", b / s / 1e9; else print 0 }'; }
# One row of the rates table: dd's rate, the data phase's and the whole command's, their ratios to dd's
# and the target. The comparisons sit outside printf's arguments, where awk would read '>' as a redirection.
ratio_row() { # DIRECTION DD_GBS DATA_GBS WHOLE_GBS
  awk -v what="$1" -v d="$2" -v s="$3" -v w="$4" 'BEGIN {
    rs = 0; rw = 0; met = "NOT met"
    if (d > 0) { rs = 100 * s / d; rw = 100 * w / d }
    if (d > 0 && s / d >= 0.9) met = "met"
    printf "| %s | %.2f | %.2f | %.0f%% | %.2f | %.0f%% | >= 90%% of dd: %s |\n", what, d, s, rs, w, rw, met
  }'
}

log "== a pattern app of $SIZE under the agent; spill directory $DIR ($FS)"
app_start p 600 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 41 || exit 1
P=${APP_PID[p]}
# one untimed cycle: the agent's staging is made once, as on a machine that has suspended before
bench_timed warmup "warm-up suspend" suspend "$P" --json && bench_timed warmup "warm-up resume" resume "$P" --json || exit 1

ddw=() ddr=() sw=() sr=() sww=() srw=() held=
declare -A W # PATH.sus / PATH.res: wall times, a list each
for ((rep = 1; rep <= REPEAT; rep++)); do
  log "== round $rep"
  probe=$DIR/dd.probe
  dd_timed "write $SIZE (oflag=direct)" if=/dev/zero of="$probe" bs=64M count=$((gib * 16)) oflag=direct conv=fsync || break
  ddw+=("$(rate "$BYTES" "$T")")
  drop_caches
  dd_timed "read $SIZE (iflag=direct, cold)" if="$probe" of=/dev/null bs=64M iflag=direct || break
  ddr+=("$(rate "$BYTES" "$T")")
  rm -f "$probe"

  bench_timed spill "suspend --spill-only" suspend "$P" --json --spill-only --spill "$DIR" || break
  if [ "$(json_get "$GS_OUT" processes.0.data.where 2>/dev/null)" != spill ]; then
    echo "FAIL: the suspend did not go to the spill directory ($(json_get "$GS_OUT" processes.0.data 2>/dev/null))"
    FAILED=1
    break
  fi
  held=$(jnum processes.0.data.held_bytes)
  sw+=("$(rate "$held" "$(jnum processes.0.agent.spill_write_s)")")
  sww+=("$(rate "$held" "$T")")
  W[spill.sus]+=" $T"
  log "spill: $held bytes, $(jnum processes.0.agent.image_direct_bytes) of them O_DIRECT"
  drop_caches
  bench_timed spill "resume from the spill (cold)" resume "$P" --json || break
  sr+=("$(rate "$held" "$(jnum processes.0.agent.image_read_s)")")
  srw+=("$(rate "$held" "$T")")
  W[spill.res]+=" $T"
  verified "resume from the spill" || break
  # removed in the background (src/cli/spill.c): waited for, so that it neither fills the disk
  # nor shares it with the next round's dd
  t_rm=$EPOCHREALTIME
  if ! eventually 300 empty_dir "$DIR"; then
    echo "FAIL: the spill was not removed after the resume: $(ls -A "$DIR")"
    FAILED=1
    break
  fi
  log "spill: removed in the background, gone $(gs_elapsed "$t_rm") s after the resume returned"

  for path in $PATHS; do
    D=()
    [ "$path" = driver ] && D=(--driver)
    bench_timed "$path" "suspend ($path)" suspend "$P" --json "${D[@]}" || break 2
    W[$path.sus]+=" $T"
    bench_timed "$path" "resume ($path)" resume "$P" --json || break 2
    W[$path.res]+=" $T"
    verified "resume ($path)" || break 2
  done
done
pid_alive "$P" && app_quit p 120

{
  echo "### The storage tier against dd: $SIZE to and from a spill directory"
  echo
  echo "$DEVICE, driver $DRIVER, $DATE, $VERSION ($GITREV), spill directory on $FS:"
  echo
  echo "    GPUSNAP_BENCH_SPILL_SIZE=$SIZE GPUSNAP_BENCH_SPILL_DIR=$DIR GPUSNAP_BENCH_SPILL_PATHS='$PATHS' GPUSNAP_BENCH_REPEAT=$REPEAT bench/spill.sh"
  echo
  if [ ${#sr[@]} -gt 0 ]; then
    m_ddw=$(bench_median "${ddw[@]}") m_ddr=$(bench_median "${ddr[@]}")
    m_sw=$(bench_median "${sw[@]}") m_sr=$(bench_median "${sr[@]}") m_sww=$(bench_median "${sww[@]}") m_srw=$(bench_median "${srw[@]}")
    echo "Medians of ${#sr[@]} rounds, GB/s of the $held bytes the spill holds (1 GB = 1e9 bytes):"
    echo
    echo "| direction | dd (O_DIRECT) GB/s | spill, data phase GB/s | ratio | spill, whole command GB/s | ratio | target |"
    echo "|---|---|---|---|---|---|---|"
    ratio_row "suspend / write" "$m_ddw" "$m_sw" "$m_sww"
    ratio_row "resume / read (cold)" "$m_ddr" "$m_sr" "$m_srw"
    echo
    echo "| path | suspend s | resume s | data |"
    echo "|---|---|---|---|"
    for path in spill $PATHS; do
      [ -n "${W[$path.res]:-}" ] || { echo "| $path | failed | | see the FAIL lines |"; continue; }
      # shellcheck disable=SC2086 # the lists are words
      awk -v p="$path" -v s="$(bench_median ${W[$path.sus]})" -v r="$(bench_median ${W[$path.res]})" 'BEGIN {
        name = p == "spill" ? "spill (--spill-only, resume cold)" : p == "memory" ? "host memory" : p == "driver" ? "driver (--driver)" : p
        printf "| %s | %.2f | %.2f | verified |\n", name, s, r }'
    done
  else
    echo "No round completed: see the FAIL lines."
  fi
} >"$MD"
echo
cat "$MD"
[ "$FAILED" = 0 ]
