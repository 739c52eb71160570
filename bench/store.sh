#!/usr/bin/env bash
# bench/store.sh - what periodic snapshots into a chunk store cost (`dump
# --store`, docs/FORMAT.md 4.12), against a plain full image, in the same run
# on the same disk. The Llama-shaped inference server of bench/compress.sh
# (tests/gpu/py/server.py --model hf, seeded random bf16 weights) runs under
# `gpusnap run`:
#   - a plain dump --leave-running into DIR/full (no store): its wall time,
#     GPU bytes copied and disk bytes (du);
#   - GPUSNAP_BENCH_SNAPSHOTS snapshots (default 10), one request answered
#     between two (only the KV cache and activations change), each a dump
#     --leave-running --store DIR/store -D DIR/snap-N: its wall time, the GPU
#     bytes it copied over PCIe (gpu_copied_bytes), its new objects, and the
#     disk the store and every snapshot so far take;
#   - the disk of all snapshots against the full image's (issue 26's target:
#     ten take <= 1.3x one);
#   - a restore of the full image and of the last snapshot, each from a cold
#     page cache (drop_caches), timed to the restored server's first answer,
#     which must equal what the server answered right after that dump (greedy
#     decoding): a mismatch fails the bench (target: the snapshot's restore
#     <= 1.05x the full image's);
#   - gc once all but the last snapshot are removed: what it frees.
#
# Writes $OUT/bench-store.md (the table) and one JSON line per measurement to
# $OUT/bench-store.jsonl (gpusnap's own --json inside); prints the table.
#
# Environment:
#   OUT                       where results go (default ./gpu-out)
#   GPUSNAP_BENCH_HF_SIZE     1b, 3b or 8b (default): Llama 3.2 1B/3B or 3.1 8B shapes (2.5, 7.2, 16 GB)
#   GPUSNAP_BENCH_SNAPSHOTS   snapshots into the store (default 10)
#   GPUSNAP_BENCH_DIR         where the model, the images and the store go (default /var/tmp/gpusnap-store)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/store.sh
bench_require_hf bench/store.sh
SIZE=${GPUSNAP_BENCH_HF_SIZE:-8b}
SNAPSHOTS=${GPUSNAP_BENCH_SNAPSHOTS:-10}
DIR=${GPUSNAP_BENCH_DIR:-/var/tmp/gpusnap-store}
MODEL=$DIR/llama-$SIZE
STORE=$DIR/store
PY=$GS_SRC/tests/gpu/py
mkdir -p "$OUT" "$DIR" || exit 1
chmod 700 "$DIR"
bench_outputs store

bench_work gs_cleanup
require_criu
bench_device
FAILED=0

# One JSON line: KIND, then NAME=VALUE pairs (numbers, or JSON for *_json names).
record() { # KIND NAME=VALUE...
  python3 -S - "$JSONL" "$DEVICE" "$DRIVER" "$GITREV" "llama-$SIZE" "$@" <<'EOF'
import json, sys
path, device, driver, git, model, kind = sys.argv[1:7]
rec = {"bench": "store", "device": device, "driver": driver, "git": git, "model": model, "kind": kind}
for pair in sys.argv[7:]:
    k, _, v = pair.partition("=")
    try:
        rec[k] = json.loads(v)
    except ValueError:
        rec[k] = v
with open(path, "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}

# A request the server at PORT answers now: its answer (tokens, cache sum) in ANSWER.
ask() { bench_first_answer "$EPOCHREALTIME" --port "$1"; }
answer_key() { echo "$(json_get "$1" tokens) $(json_get "$1" cache_sum)"; }

# dump --leave-running of PID into IMG with ARGS: D_WALL, D_JSON; 1 on failure (said).
dump_live() { # PID IMG ARGS...
  local pid=$1 img=$2
  shift 2
  GS_CMD_TIMEOUT=900 gs_run dump --json --leave-running "$@" -D "$img" "$pid"
  D_WALL=$GS_SECS D_JSON=$GS_OUT
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: dump into $img: exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    FAILED=1
    return 1
  fi
}

# Restore of IMG from a cold page cache to the first answer, which must be WANT (answer_key): R_S.
restore_cold() { # IMG PORT WANT WHAT
  local img=$1 port=$2 want=$3 what=$4 pid t0
  R_S=0
  drop_caches
  t0=$EPOCHREALTIME
  GS_CMD_TIMEOUT=900 gs_run restore --json -D "$img"
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $what: restore exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    FAILED=1
    return 1
  fi
  pid=$(json_get "$GS_OUT" pid)
  GS_EXTRA_PIDS+=("$pid")
  local restore_json=$GS_OUT
  if ! bench_first_answer "$t0" --port "$port" || [ "$(answer_key "$ANSWER")" != "$want" ]; then
    echo "FAIL: $what: the restored server did not answer as the server did after that dump"
    FAILED=1
    gs_kill_pid "$pid"
    return 1
  fi
  R_S=$(json_get "$ANSWER" s)
  record restore what="\"$what\"" first_answer_s="$R_S" restore_json="$restore_json"
  log "  $what: restore to first answer $R_S s"
  bench_quit_server "$port" "$pid"
}

log "== bench/store.sh: llama-$SIZE on $DEVICE (driver $DRIVER), $SNAPSHOTS snapshots, in $DIR"
bench_hf_model "$MODEL" "$SIZE"
rm -rf "$DIR/full" "$DIR"/snap-* "$STORE"
ports=$GS_WORK/ports.json
t0=$EPOCHREALTIME
setsid "$GPUSNAP" run -- python3 "$PY/server.py" --model hf --hf-dir "$MODEL" --seed 7 --ports-file "$ports" \
  </dev/null >/dev/null 2>/dev/null &
pid=$!
disown "$pid"
gs_track_pid "$pid"
GS_EXTRA_PIDS+=("$pid")
bench_first_answer "$t0" --ports-file "$ports" || { echo "ERROR: the server did not answer"; exit 1; }
port=$(json_get "$(cat "$ports")" http)

# the plain full image, and what the server answers right after it
dump_live "$pid" "$DIR/full" || exit 1
ask "$port" || exit 1
FULL_WANT=$(answer_key "$ANSWER")
FULL_BYTES=$(du -sb "$DIR/full" | cut -f1)
record full dump_wall_s="$D_WALL" disk_bytes="$FULL_BYTES" dump_json="$D_JSON"
log "  full image: $D_WALL s, $FULL_BYTES bytes on disk"

SNAP_WANT=''
for ((n = 1; n <= SNAPSHOTS; n++)); do
  dump_live "$pid" "$DIR/snap-$n" --store "$STORE" || break
  ask "$port" || break
  SNAP_WANT=$(answer_key "$ANSWER")
  disk=$(du -scb "$STORE" "$DIR"/snap-* | tail -n 1 | cut -f1)
  copied=$(json_get "$D_JSON" gpu_copied_bytes)
  record snapshot n="$n" dump_wall_s="$D_WALL" gpu_copied_bytes="${copied:-0}" disk_bytes="$disk" dump_json="$D_JSON"
  log "  snapshot $n: $D_WALL s, copied ${copied:-?} bytes over PCIe, $(json_get "$D_JSON" store_new_objects) new objects, $disk bytes on disk so far"
done
bench_quit_server "$port" "$pid"

restore_cold "$DIR/full" "$port" "$FULL_WANT" "full image"
[ -n "$SNAP_WANT" ] && restore_cold "$DIR/snap-$SNAPSHOTS" "$port" "$SNAP_WANT" "snapshot $SNAPSHOTS (store)"

# the series trimmed to its last snapshot: what gc gives back
for ((n = 1; n < SNAPSHOTS; n++)); do rm -rf "$DIR/snap-$n"; done
gs_run gc --json "$STORE"
if [ "$GS_RC" = 0 ]; then
  record gc disk_bytes="$(du -scb "$STORE" "$DIR"/snap-* | tail -n 1 | cut -f1)" gc_json="$GS_OUT"
else
  echo "FAIL: gc exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
  FAILED=1
fi

python3 - "$JSONL" "$MD" "$SNAPSHOTS" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[3])
full = next((r for r in recs if r["kind"] == "full"), None)
snaps = [r for r in recs if r["kind"] == "snapshot"]
rest = {r["what"]: r for r in recs if r["kind"] == "restore"}
gc = next((r for r in recs if r["kind"] == "gc"), None)
gib = lambda b: "%.2f" % (b / 2**30)
out = []
if full:
    out.append("bench/store.sh: %s on %s (driver %s, %s)" % (full["model"], full["device"], full["driver"], full["git"]))
    out.append("")
    out.append("| image | dump s | copied over PCIe GiB | disk GiB (all so far) | disk / full image |")
    out.append("|---|---|---|---|---|")
    fd = full["dump_json"] or {}
    out.append("| full (no store) | %.2f | %s | %s | 1.00x |" % (full["dump_wall_s"], gib(fd.get("gpu_copied_bytes", 0)),
                                                           gib(full["disk_bytes"])))
    for s in snaps:
        out.append("| snapshot %d | %.2f | %s | %s | %.2fx |" % (s["n"], s["dump_wall_s"], gib(s["gpu_copied_bytes"]),
                                                               gib(s["disk_bytes"]), s["disk_bytes"] / full["disk_bytes"]))
    if snaps:
        last = snaps[-1]["disk_bytes"] / full["disk_bytes"]
        out.append("")
        out.append("%d snapshots take %.2fx the disk of one full image (target <= 1.3x for 10): %s" %
                   (len(snaps), last, "met" if last <= 1.3 else "NOT met"))
    fr, sr = rest.get("full image"), rest.get("snapshot %d (store)" % n)
    if fr and sr:
        q = sr["first_answer_s"] / fr["first_answer_s"] if fr["first_answer_s"] else 0
        out.append("restore to first answer, cold: full image %.2f s, snapshot %d %.2f s (%.2fx; target <= 1.05x): %s" %
                   (fr["first_answer_s"], n, sr["first_answer_s"], q, "met" if q <= 1.05 else "NOT met"))
    if gc:
        g = gc["gc_json"] or {}
        out.append("gc after keeping the last snapshot only: %s GiB left on disk (%s)" %
                   (gib(gc["disk_bytes"]), "removed %s objects, %s GiB" % (g.get("objects_removed", "?"), gib(g.get("bytes_removed", 0)))))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
[ "$FAILED" = 0 ]
