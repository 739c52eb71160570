#!/usr/bin/env bash
# bench/switch.sh - what `gpusnap switch` costs: two pattern apps under the
# agent (gpusnap run) holding GPUSNAP_BENCH_SWITCH_SIZE (default 16G) each
# on GPU 0, both in host memory when suspended, measured in one run:
#   - each half alone: `suspend A` (B already suspended) and `resume B`;
#   - a suspend followed by a resume: `suspend B` then `resume A`, two commands;
#   - `switch A B` (--overlap auto: the halves at once where the GPU has room,
#     as it has here) and `switch B A --overlap never` (one after the other);
# on the agent path and on the driver path (the same processes, every
# suspend and switch with --driver: the driver's checkpoint API moves the
# data, as cuda-checkpoint does), GPUSNAP_BENCH_REPEAT times each (default 3;
# the table gives medians), the data verified bit for bit after every
# resume and switch: a bench that breaks data fails.
#
# The table: the wall time of each command as a user waits for it, and the
# ratios the issue sets as targets (agent path): switch <= 1.25x the slower
# half alone, and suspend + resume >= 1.7x the switch; the last line says
# whether they were met. Writes $OUT/bench-switch.md and one JSON line per
# command (gpusnap's own --json inside) to $OUT/bench-switch.jsonl; prints
# the table last.
#
# Environment:
#   OUT                          where results go (default ./gpu-out)
#   GPUSNAP_BENCH_SWITCH_SIZE    what each app holds (default 16G)
#   GPUSNAP_BENCH_SWITCH_RUN     options of `gpusnap run` for both apps (default none; e.g. "--reserve 17G")
#   GPUSNAP_BENCH_SWITCH_PATHS   paths to measure (default "agent driver")
#   GPUSNAP_BENCH_REPEAT         rounds per path (default 3)
#   GPUSNAP_BUILD                build directory (default ./build)
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/switch.sh
SIZE=${GPUSNAP_BENCH_SWITCH_SIZE:-16G}
read -r -a RUN_ARGS <<<"${GPUSNAP_BENCH_SWITCH_RUN:-}"
PATHS=${GPUSNAP_BENCH_SWITCH_PATHS:-agent driver}
REPEAT=${GPUSNAP_BENCH_REPEAT:-3}
bench_outputs switch

if [ ! -x "$GPUSNAP" ] || [ ! -x "$GS_APPS/pattern" ]; then
  echo "ERROR: build gpusnap and the GPU apps first: cmake -S . -B build -DGPUSNAP_GPU_APPS=ON && cmake --build build -j"
  exit 1
fi
bench_work gs_cleanup

bench_device
VERSION=$("$GPUSNAP" --version 2>/dev/null | head -n 1)
DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
FAILED=0

gib=${SIZE%G}
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' ')
if [[ $free =~ ^[0-9]+$ ]] && [ "$free" -lt $((2 * gib * 1024 + 4096)) ]; then
  echo "SKIP: GPU 0 has $free MiB free; two apps of $SIZE and their contexts need more (bench/switch.sh)"
  exit 0
fi

verified() { # NAME WHAT
  if app_cmd "$1" verify VERIFY 300 && [[ $REPLY_LINE == "VERIFY OK"* ]]; then
    return 0
  fi
  echo "FAIL: $2: the data of $1 does not verify (${REPLY_LINE:-no answer})"
  FAILED=1
  return 1
}

log "== two pattern apps of $SIZE under the agent"
app_start a 600 "$GPUSNAP" run "${RUN_ARGS[@]}" -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 11 || exit 1
app_start b 600 "$GPUSNAP" run "${RUN_ARGS[@]}" -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 12 || exit 1
A=${APP_PID[a]} B=${APP_PID[b]}
# one untimed cycle each: the agents' staging is made once, as on a machine that has switched before
for n in a b; do
  bench_timed warmup "warm-up suspend $n" suspend "${APP_PID[$n]}" --json && bench_timed warmup "warm-up resume $n" resume "${APP_PID[$n]}" --json ||
    exit 1
done

declare -A R
for path in $PATHS; do
  D=()
  [ "$path" = driver ] && D=(--driver)
  log "== $path path"
  bench_timed "$path" "set-up: suspend b" suspend "$B" --json "${D[@]}" || break
  sus=() res=() sr=() sw=() swseq=() order=
  for ((rep = 1; rep <= REPEAT; rep++)); do
    # A runs, B is suspended
    bench_timed "$path" "suspend a alone" suspend "$A" --json "${D[@]}" || break
    sus+=("$T")
    bench_timed "$path" "resume b alone" resume "$B" --json || break
    res+=("$T")
    verified b "$path: resume alone" || break
    bench_timed "$path" "suspend b, then" suspend "$B" --json "${D[@]}" || break
    t1=$T
    bench_timed "$path" "resume a" resume "$A" --json || break
    sr+=("$(awk -v a="$t1" -v b="$T" 'BEGIN { printf "%.3f", a + b }')")
    verified a "$path: suspend then resume" || break
    bench_timed "$path" "switch a b" switch "$A" "$B" --json "${D[@]}" || break
    sw+=("$T")
    order=$(json_get "$GS_OUT" order)
    verified b "$path: switch" || break
    bench_timed "$path" "switch b a --overlap never" switch "$B" "$A" --json --overlap never "${D[@]}" || break
    swseq+=("$T")
    verified a "$path: switch --overlap never" || break
  done
  [ "$FAILED" = 0 ] || break
  R[$path.sus]=$(bench_median "${sus[@]}") R[$path.res]=$(bench_median "${res[@]}") R[$path.sr]=$(bench_median "${sr[@]}")
  R[$path.sw]=$(bench_median "${sw[@]}") R[$path.swseq]=$(bench_median "${swseq[@]}") R[$path.order]=$order
  # back to both running for the next path
  bench_timed "$path" "set-down: resume b" resume "$B" --json || break
done
for n in a b; do pid_alive "${APP_PID[$n]}" && app_quit "$n" 120; done

{
  echo "### gpusnap switch: two processes of $SIZE each"
  echo
  echo "$DEVICE, driver $DRIVER, $DATE, $VERSION ($GITREV):"
  echo
  # shellcheck disable=SC2016 # the quotes are the command's, for the reader to paste
  echo "    GPUSNAP_BENCH_SWITCH_SIZE=$SIZE GPUSNAP_BENCH_SWITCH_PATHS='$PATHS' GPUSNAP_BENCH_REPEAT=$REPEAT${GPUSNAP_BENCH_SWITCH_RUN:+ GPUSNAP_BENCH_SWITCH_RUN='$GPUSNAP_BENCH_SWITCH_RUN'} bench/switch.sh"
  echo
  echo "| path | suspend alone s | resume alone s | suspend + resume s | switch s (order) | switch --overlap never s | switch / slower half | (suspend + resume) / switch | data |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for path in $PATHS; do
    [ -n "${R[$path.sw]:-}" ] || { echo "| $path | failed | | | | | | | see the FAIL lines |"; continue; }
    awk -v p="$path" -v s="${R[$path.sus]}" -v r="${R[$path.res]}" -v sr="${R[$path.sr]}" -v sw="${R[$path.sw]}" \
      -v o="${R[$path.order]}" -v q="${R[$path.swseq]}" 'BEGIN {
        slow = s > r ? s : r
        printf "| %s | %.2f | %.2f | %.2f | %.2f (%s) | %.2f | x%.2f | x%.2f | verified |\n", p, s, r, sr, sw, o, q, sw / slow, sr / sw }'
  done
  if [ -n "${R[agent.sw]:-}" ]; then
    awk -v s="${R[agent.sus]}" -v r="${R[agent.res]}" -v sr="${R[agent.sr]}" -v sw="${R[agent.sw]}" 'BEGIN {
      slow = s > r ? s : r; a = sw / slow; b = sr / sw
      printf "\nTargets (agent path): switch <= 1.25x the slower half: x%.2f %s; suspend + resume >= 1.7x the switch: x%.2f %s\n",
        a, a <= 1.25 ? "met" : "NOT met", b, b >= 1.7 ? "met" : "NOT met" }'
  fi
  if [ -n "${R[agent.sw]:-}" ] && [ -n "${R[driver.sw]:-}" ]; then
    awk -v a="${R[agent.sw]}" -v d="${R[driver.sw]}" 'BEGIN { printf "Agent-path switch against the driver path'"'"'s: x%.2f faster\n", d / a }'
  fi
} >"$MD"
echo
cat "$MD"
[ "$FAILED" = 0 ]
