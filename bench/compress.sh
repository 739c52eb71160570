#!/usr/bin/env bash
# bench/compress.sh - `gpusnap dump --compress`: ratio, dump time and restore
# time of the Llama-shaped inference server (tests/gpu/py/server.py --model
# hf: Llama 3.1 8B's shape by default, seeded random bf16 weights, as
# bench/warm_start.sh serves it) for each codec against no compression,
# measured in the same run on the same disk:
#   - the server is started under `gpusnap run`, answers once, and is dumped
#     with --compress CODEC (none: without it) onto the disk;
#   - the image's ratio (inspect --json: data bytes / stored bytes) and size;
#   - restore from a cold page cache (drop_caches), timed to the restored
#     server's first answer, which must equal the first start's (greedy
#     decoding, same weights): a mismatch fails the bench;
#   - the disk's own sequential write and read speed (dd, O_DIRECT), so the
#     table says whether the disk or decompression bounds a restore (the
#     issue's target: a compressed restore from cold disk beats the
#     uncompressed one by at least 0.9x the ratio's gain where the disk is
#     slower than decompression).
#
# Writes $OUT/bench-compress.md (the table), one JSON line per codec to
# $OUT/bench-compress.jsonl (gpusnap's own --json inside) and prints the table.
#
# Environment:
#   OUT                       where results go (default ./gpu-out)
#   GPUSNAP_BENCH_HF_SIZE     1b, 3b or 8b (default): Llama 3.2 1B/3B or 3.1 8B shapes (2.5, 7.2, 16 GB)
#   GPUSNAP_BENCH_CODECS      codecs (default "none lz4 zstd"; e.g. "none lz4 lz4:9 zstd zstd:9")
#   GPUSNAP_BENCH_DIR         where the model and the images go (default /var/tmp/gpusnap-compress)
#   GPUSNAP_BENCH_DD_BYTES    bytes dd writes and reads to measure the disk (default 4G)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/compress.sh
bench_require_hf bench/compress.sh
SIZE=${GPUSNAP_BENCH_HF_SIZE:-8b}
CODECS=${GPUSNAP_BENCH_CODECS:-none lz4 zstd}
DIR=${GPUSNAP_BENCH_DIR:-/var/tmp/gpusnap-compress}
DD_BYTES=${GPUSNAP_BENCH_DD_BYTES:-4G}
mkdir -p "$OUT" "$DIR" || exit 1
chmod 700 "$DIR"
bench_outputs compress

bench_work gs_cleanup
require_criu

bench_device
B_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
PY=$GS_SRC/tests/gpu/py
MODEL=$DIR/llama-$SIZE
FAILED=0
REF_TOKENS='' REF_SUM=''

# Sequential write and read speed of DIR's file system in GB/s (dd, 64 MiB blocks, O_DIRECT): SW, SR.
storage_speed() { # DIR
  local f=$1/dd.test bytes count t0 t1
  bytes=$(numfmt --from=iec "$DD_BYTES")
  count=$((bytes / 67108864))
  t0=$EPOCHREALTIME
  dd if=/dev/zero of="$f" bs=64M count="$count" oflag=direct status=none || log "dd write to $f failed"
  t1=$EPOCHREALTIME
  SW=$(awk -v b="$bytes" -v t0="$t0" -v t1="$t1" 'BEGIN { s = t1 - t0; printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }')
  drop_caches
  t0=$EPOCHREALTIME
  dd if="$f" of=/dev/null bs=64M iflag=direct status=none || log "dd read of $f failed"
  t1=$EPOCHREALTIME
  SR=$(awk -v b="$bytes" -v t0="$t0" -v t1="$t1" 'BEGIN { s = t1 - t0; printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }')
  rm -f "$f"
  log "disk $1: write $SW GB/s, read $SR GB/s"
}


# The answer must be the first start's (same weights, greedy decoding).
same_answer() { # WHAT
  local tokens sum
  tokens=$(json_get "$ANSWER" tokens) sum=$(json_get "$ANSWER" cache_sum)
  if [ -z "$REF_TOKENS" ]; then
    REF_TOKENS=$tokens REF_SUM=$sum
  elif [ "$tokens" != "$REF_TOKENS" ] || [ "$sum" != "$REF_SUM" ]; then
    echo "FAIL: $1: tokens $tokens, cache sum $sum; the first start answered $REF_TOKENS, $REF_SUM"
    FAILED=1
    return 1
  fi
}


record() { # one JSON line from the B_* variables
  python3 -S - >>"$JSONL" <<'EOF'
import json, os
e = os.environ
def js(s):
    try:
        return json.loads(s)
    except Exception:
        return None
print(json.dumps({
    "bench": "compress", "date": e["B_DATE"], "device": e["DEVICE"], "driver": e["DRIVER"], "git": e["GITREV"],
    "model": e["B_MODEL"], "codec": e["B_CODEC"], "status": e["B_STATUS"], "detail": e["B_DETAIL"],
    "storage_write_gbs": float(e["SW"] or 0), "storage_read_gbs": float(e["SR"] or 0),
    "dump_wall_s": float(e["B_DUMP_WALL"] or 0), "restore_first_answer_s": float(e["B_RES_S"] or 0),
    "image_bytes": int(e["B_IMAGE_BYTES"] or 0),
    "dump": js(e["B_DUMP_JSON"]), "restore": js(e["B_RES_JSON"]), "inspect": js(e["B_INSPECT_JSON"]),
}))
EOF
}

measure() { # CODEC
  local codec=$1 ports=$GS_WORK/ports.json img=$DIR/img pid port t0 args=()
  export B_CODEC=$codec B_MODEL=llama-$SIZE B_STATUS='' B_DETAIL='' B_DUMP_JSON='' B_RES_JSON='' B_INSPECT_JSON='' \
    B_DUMP_WALL='' B_RES_S='' B_IMAGE_BYTES='' SW SR DEVICE DRIVER GITREV B_DATE
  [ "$codec" != none ] && args=(--compress "$codec")
  log "== $codec"
  rm -rf "$img" "$ports"
  t0=$EPOCHREALTIME
  setsid "$GPUSNAP" run -- python3 "$PY/server.py" --model hf --hf-dir "$MODEL" --seed 7 --ports-file "$ports" \
    </dev/null >/dev/null 2>/dev/null &
  pid=$!
  disown "$pid"
  gs_track_pid "$pid"
  GS_EXTRA_PIDS+=("$pid")
  if ! bench_first_answer "$t0" --ports-file "$ports" || ! same_answer "$codec: first start"; then
    B_STATUS=failed B_DETAIL="the server did not answer" record
    FAILED=1
    gs_kill_pid "$pid"
    return
  fi
  port=$(json_get "$(cat "$ports")" http)
  GS_CMD_TIMEOUT=900 gs_run dump --json "${args[@]}" -D "$img" "$pid"
  B_DUMP_JSON=$GS_OUT B_DUMP_WALL=$GS_SECS
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $codec: dump exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    B_STATUS=failed B_DETAIL="dump exit $GS_RC" record
    FAILED=1
    gs_kill_pid "$pid"
    return
  fi
  wait_pid_gone "$pid"
  B_IMAGE_BYTES=$(du -sb "$img" | cut -f1)
  gs_run inspect --json "$img"
  B_INSPECT_JSON=$GS_OUT
  log "  dump $B_DUMP_WALL s, image $B_IMAGE_BYTES B, ratio $(json_get "$GS_OUT" image.chunks.ratio)"
  drop_caches
  t0=$EPOCHREALTIME
  GS_CMD_TIMEOUT=900 gs_run restore --json -D "$img"
  B_RES_JSON=$GS_OUT
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $codec: restore exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    B_STATUS=failed B_DETAIL="restore exit $GS_RC" record
    FAILED=1
    return
  fi
  pid=$(json_get "$GS_OUT" pid)
  GS_EXTRA_PIDS+=("$pid")
  if bench_first_answer "$t0" --port "$port" && same_answer "$codec: restored"; then
    B_RES_S=$(json_get "$ANSWER" s) B_STATUS=ok record
    log "  restore to first answer $B_RES_S s (restore $(json_get "$GS_OUT" times.total_s) s)"
  else
    B_STATUS=failed B_DETAIL="the restored server did not answer as the first start" record
    FAILED=1
  fi
  bench_quit_server "$port" "$pid"
  rm -rf "$img"
}

log "== bench/compress.sh: llama-$SIZE on $DEVICE (driver $DRIVER), codecs $CODECS, model and images in $DIR"
bench_hf_model "$MODEL" "$SIZE"
sync
storage_speed "$DIR"
for c in $CODECS; do
  measure "$c"
done

# The table: each codec against none of the same run
python3 - "$JSONL" "$MD" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = next((r for r in recs if r["codec"] == "none" and r["status"] == "ok"), None)
def g(d, *ks):
    for k in ks:
        d = d.get(k) if isinstance(d, dict) else None
    return d
out = []
if recs:
    r0 = recs[0]
    out.append("%s, driver %s, %s, git %s, model %s; disk write %.2f / read %.2f GB/s (dd, O_DIRECT)" % (
        r0["device"], r0["driver"], r0["date"], r0["git"], r0["model"], r0["storage_write_gbs"], r0["storage_read_gbs"]))
    out.append("")
out.append("| codec | ratio | image GB | dump s (GPU part) | dump vs none | restore s to first answer (GPU part) | restore vs none | gain expected from the ratio | data |")
out.append("|---|---|---|---|---|---|---|---|---|")
for r in recs:
    ratio = g(r, "inspect", "image", "chunks", "ratio") or 0
    dump_gpu = g(r, "dump", "times", "gpu_s")
    res_gpu = g(r, "restore", "times", "gpu_s")
    dv = rv = "-"
    if base and r["status"] == "ok":
        dv = "%.2fx" % (base["dump_wall_s"] / r["dump_wall_s"]) if r["dump_wall_s"] else "-"
        rv = "%.2fx" % (base["restore_first_answer_s"] / r["restore_first_answer_s"]) if r["restore_first_answer_s"] else "-"
    out.append("| %s | %.2f | %.2f | %.2f (%s) | %s | %.2f (%s) | %s | %.2fx | %s |" % (
        r["codec"], ratio, r["image_bytes"] / 1e9, r["dump_wall_s"], "%.2f" % dump_gpu if dump_gpu else "-", dv,
        r["restore_first_answer_s"], "%.2f" % res_gpu if res_gpu else "-", rv, 0.9 * ratio if ratio else 0,
        "ok" if r["status"] == "ok" else r["detail"]))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
echo
cat "$MD"
[ "$FAILED" = 0 ] || { echo "bench/compress.sh: FAILED (see above)"; exit 1; }
