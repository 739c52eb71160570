#!/usr/bin/env bash
# bench/context_floor.sh - what the driver's checkpoint and restore cost for a
# process that holds no data of its own, the part of every agent suspend that
# the agent cannot move itself: bench/context_floor with its per-thread stack
# as the driver made it, and shrunk to STACKS (bytes) before the checkpoint.
# gpusnap suspend/resume --driver, REPEAT cycles each; after each resume the
# app runs its kernel again and must say "kernel ok". Prints one line per cycle.
#
# usage: bench/context_floor.sh        env: GPUSNAP_BUILD (default ./build),
#        GPUSNAP_FLOOR_STACKS (default "default 0 1024"), GPUSNAP_FLOOR_REPEAT (3),
#        GPUSNAP_FLOOR_CONTEXTS (contexts on the GPU, default "1"; e.g. "1 2")
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPUSNAP_BUILD:-$SRC/build}
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac
APP=$BUILD/bench/context_floor
GS=$BUILD/gpusnap
REPEAT=${GPUSNAP_FLOOR_REPEAT:-3}
WORK=$(mktemp -d /tmp/context_floor.XXXXXX)
fail=0
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); p=d["processes"][0]; t=p.get("times",{}); print(" ".join("%s=%.3f"%(k,v) for k,v in t.items()), "total=%.3f"%d["total_s"])' "$1"; }
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
for contexts in ${GPUSNAP_FLOOR_CONTEXTS:-1}; do
for stack in ${GPUSNAP_FLOOR_STACKS:-default 0 1024}; do
  "$APP" "$stack" "$contexts" >"$WORK/app.out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q '^ready' "$WORK/app.out" && break; sleep 0.1; done
  echo "contexts=$contexts stack=$stack: $(grep -v '^ready\|kernel ok' "$WORK/app.out" | tr '\n' ' ')"
  for c in $(seq "$REPEAT"); do
    "$GS" suspend --driver --json "$pid" >"$WORK/s.json" 2>"$WORK/s.err" || { echo "suspend failed: $(cat "$WORK/s.err")"; fail=1; break; }
    "$GS" resume --json "$pid" >"$WORK/r.json" 2>"$WORK/r.err" || { echo "resume failed: $(cat "$WORK/r.err")"; fail=1; break; }
    n=$(grep -c 'kernel ok' "$WORK/app.out")
    kill -USR1 "$pid"
    for _ in $(seq 100); do [ "$(grep -c 'kernel ok\|FAILED' "$WORK/app.out")" -gt "$n" ] && break; sleep 0.05; done
    k=$(grep 'kernel ok\|FAILED' "$WORK/app.out" | tail -n 1)
    [ "$k" = "kernel ok" ] || fail=1
    echo "  stack=$stack cycle $c: suspend $(field "$WORK/s.json") | resume $(field "$WORK/r.json") | $k"
  done
  echo "  after: $(grep 'stack_bytes_after' "$WORK/app.out" | tail -n 1)"
  kill "$pid"; wait "$pid" 2>/dev/null
done
done
rm -rf "$WORK"
exit $fail
