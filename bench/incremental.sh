#!/usr/bin/env bash
# bench/incremental.sh - incremental dumps (`dump --parent`) against full ones,
# same run, same disk: a PyTorch process under `gpusnap run` holding
# GPUSNAP_BENCH_HELD of seeded random data (tests/gpu/py/torch_model.py
# --held-mib, in 64 MiB tensors) is dumped full (--leave-running), then gets
# new data in place in GPUSNAP_BENCH_CHANGED_PCT percent of it (its touch
# command) and is dumped with --parent the previous image, GPUSNAP_BENCH_CHAIN
# times (a chain). Measured: each dump's wall time and the GPU data it wrote
# (inspect: stored bytes) against the full dump's (the issue's target: <= 8%
# of the bytes in <= 15% of the time for 5% changed), and a cold-cache
# restore (drop_caches) through the whole chain against one of the full
# image (target: <= 1.05x), the process's data checked bit for bit after
# each restore (a mismatch fails the bench).
#
# Writes $OUT/bench-incremental.md and one JSON line per measurement to
# $OUT/bench-incremental.jsonl (gpusnap's own --json inside); prints the table.
#
# Environment:
#   OUT                          where results go (default ./gpu-out)
#   GPUSNAP_BENCH_HELD_MIB       MiB held (default 32768)
#   GPUSNAP_BENCH_CHANGED_PCT    percent changed before each incremental dump (default 5)
#   GPUSNAP_BENCH_CHAIN          incremental dumps in the chain (default 5)
#   GPUSNAP_BENCH_DIR            where the images go (default /var/tmp/gpusnap-incremental)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/incremental.sh
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "SKIP: PyTorch with CUDA is not installed here (bench/incremental.sh)"
  exit 0
fi
HELD=${GPUSNAP_BENCH_HELD_MIB:-32768}
PCT=${GPUSNAP_BENCH_CHANGED_PCT:-5}
CHAIN=${GPUSNAP_BENCH_CHAIN:-5}
DIR=${GPUSNAP_BENCH_DIR:-/var/tmp/gpusnap-incremental}
TOUCH=$((HELD * PCT / 100))
rm -rf "$DIR" && mkdir -p "$DIR" && chmod 700 "$DIR" || exit 1
bench_outputs incremental

bench_work gs_cleanup
require_criu
export GS_APP_STDERR=null

bench_device
B_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
FAILED=0

record() { # KIND NAME WALL_S STORED_BYTES JSON
  printf '{"bench": "incremental", "device": "%s", "driver": "%s", "git": "%s", "date": "%s", "held_mib": %s, "changed_pct": %s, "kind": "%s", "image": "%s", "wall_s": %s, "stored_bytes": %s, "gpusnap": %s}\n' \
    "$DEVICE" "$DRIVER" "$GITREV" "$B_DATE" "$HELD" "$PCT" "$1" "$2" "$3" "$4" "${5:-null}" >>"$JSONL"
}
stored_of() { gs_run inspect --json "$1" && json_get "$GS_OUT" image.chunks.stored_bytes; }
check_data() { # WHAT
  if app_cmd t check CHECK 600 && [[ $REPLY_LINE == "CHECK OK"* ]]; then
    log "data checked: $1"
  else
    echo "FAIL: data differs $1: $REPLY_LINE"
    FAILED=1
  fi
}

log "== bench/incremental.sh: $HELD MiB held, $PCT% ($TOUCH MiB) changed per dump, a chain of $CHAIN, on $DEVICE (driver $DRIVER)"
app_start t 600 "$GPUSNAP" run -- python3 "$GS_SRC/tests/gpu/py/torch_model.py" --seed 26 --held-mib "$HELD" \
  --held-tensor-mib 64 --touch-mib "$TOUCH" || { echo "FAIL: the app did not start"; exit 1; }
pid=${APP_PID[t]}
GS_CMD_TIMEOUT=900 gs_run dump --json --leave-running -D "$DIR/img0" "$pid"
[ "$GS_RC" = 0 ] || { echo "FAIL: full dump exit $GS_RC: $GS_ERR"; exit 1; }
full_s=$GS_SECS full_json=$GS_OUT
full_b=$(stored_of "$DIR/img0")
record full img0 "$full_s" "$full_b" "$full_json"
log "full dump: $full_s s, $full_b bytes stored"
prev=$DIR/img0
for ((i = 1; i <= CHAIN; i++)); do
  app_cmd t touch TOUCH 600 || { echo "FAIL: touch: $REPLY_LINE"; FAILED=1; }
  GS_CMD_TIMEOUT=900 gs_run dump --json --leave-running --parent "$prev" -D "$DIR/img$i" "$pid"
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: incremental dump $i exit $GS_RC: $GS_ERR"
    FAILED=1
    break
  fi
  inc_s=$GS_SECS inc_json=$GS_OUT
  inc_b=$(stored_of "$DIR/img$i")
  record incremental "img$i" "$inc_s" "$inc_b" "$inc_json"
  log "incremental dump $i: $inc_s s, $inc_b bytes stored, $(json_get "$inc_json" parent_bytes) left in the parent"
  prev=$DIR/img$i
done
check_data "after the dumps"
# killed, not quit: the restores bring it back with its pipes to this script (as tests/gpu t82 does)
gs_kill_pid "$pid"
wait_pid_gone "$pid"

restore_timed() { # KIND IMG
  drop_caches
  GS_CMD_TIMEOUT=900 gs_run restore --json -D "$2"
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: restore of $2 exit $GS_RC: $GS_ERR"
    FAILED=1
    return 1
  fi
  record "$1" "$(basename "$2")" "$GS_SECS" 0 "$GS_OUT"
  log "$1 restore of $2: $GS_SECS s"
  # shellcheck disable=SC2034 # tests/gpu/lib.sh's: CRIU restored it, it is no child of ours
  APP_OWN[t]=restored
  check_data "after the $1 restore"
  gs_kill_pid "$pid"
  wait_pid_gone "$pid"
}
restore_timed restore-full "$DIR/img0"
restore_timed restore-chain "$prev"

python3 - "$JSONL" "$MD" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
full = next((r for r in recs if r["kind"] == "full"), None)
rf = next((r for r in recs if r["kind"] == "restore-full"), None)
out = []
if recs:
    r0 = recs[0]
    out.append("%s, driver %s, %s, git %s: %d MiB held, %d%% changed before each incremental dump" % (
        r0["device"], r0["driver"], r0["date"], r0["git"], r0["held_mib"], r0["changed_pct"]))
    out.append("")
out.append("| what | image | wall s | vs full | GPU bytes stored | vs full |")
out.append("|---|---|---|---|---|---|")
for r in recs:
    base = rf if r["kind"].startswith("restore") else full
    tv = "%.3f" % (r["wall_s"] / base["wall_s"]) if base and base["wall_s"] else "-"
    bv = "%.3f" % (r["stored_bytes"] / full["stored_bytes"]) if full and full["stored_bytes"] and r["stored_bytes"] else "-"
    out.append("| %s | %s | %.2f | %s | %s | %s |" % (r["kind"], r["image"], r["wall_s"], tv,
               r["stored_bytes"] or "-", bv))
out.append("")
out.append("Targets: an incremental dump <= 0.08 of the full dump's bytes in <= 0.15 of its time; the restore through the chain <= 1.05 of the full image's.")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
echo
cat "$MD"
[ "$FAILED" = 0 ] || { echo "bench/incremental.sh: FAILED (see above)"; exit 1; }
