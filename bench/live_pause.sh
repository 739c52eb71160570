#!/usr/bin/env bash
# bench/live_pause.sh - how long `gpusnap dump --leave-running` stops a
# Hugging Face transformers server under load (tests/gpu/py/server.py --model
# hf, a Llama shape with seeded random weights, as bench/warm_start.sh), and,
# in the same run, its restores to the first token (bench/warm_start.sh: from
# the page cache and cold, next to booting from safetensors and the driver
# path). For the pause, a client (tests/gpu/py/answer_gaps.py) sends requests
# one after another while the server is dumped GPUSNAP_BENCH_REPEAT times with
# --leave-running to the local disk, 10 s apart; per way:
#   staged:   the default, the GPU data copied into the dump's memory in the
#             pause, the image written after it (GPUSNAP_STAGE_DIR=/dev/shm);
#   unstaged: GPUSNAP_STAGE_DIR on the disk, so the data goes into the image
#             inside the pause through the page cache (as before the stage);
# the row gives the longest gap between two answers of the stream, the
# dumps' paused_s (median, max), stage_write_s and total_s; every answer must
# equal the first (greedy decoding): a mismatch fails the bench.
#
# Writes $OUT/bench-live-pause.md and $OUT/bench-live-pause.jsonl, then runs
# bench/warm_start.sh (its own files in $OUT); prints both tables.
#   OUT=/tmp/gpu-out GPUSNAP_BENCH_HF_SIZE=8b bench/live_pause.sh
# Environment: as bench/warm_start.sh (GPUSNAP_BENCH_HF_SIZE default 8b here,
# GPUSNAP_BENCH_DIR, GPUSNAP_BENCH_REPEAT default 3); GPUSNAP_BENCH_NO_RESTORE=1
# skips the restore half.
set -u
export LC_ALL=C
. "$(dirname "$0")/../tests/gpu/lib.sh"
cd "$GS_SRC" || exit 1

bench_prologue bench/live_pause.sh
bench_require_hf bench/live_pause.sh
export GPUSNAP_BENCH_HF_SIZE=${GPUSNAP_BENCH_HF_SIZE:-8b}
SIZE=$GPUSNAP_BENCH_HF_SIZE
DIR=${GPUSNAP_BENCH_DIR:-/var/tmp/gpusnap-warm}
REPEAT=${GPUSNAP_BENCH_REPEAT:-3}
mkdir -p "$OUT" "$DIR" || exit 1
bench_outputs live-pause
bench_work gs_cleanup
require_criu
bench_device
PY=$GS_SRC/tests/gpu/py
MODEL=$DIR/llama-$SIZE
FAILED=0

bench_hf_model "$MODEL" "$SIZE"
sync

ports=$GS_WORK/live.json
rm -f "$ports"
setsid "$GPUSNAP" run -- python3 "$PY/server.py" --model hf --hf-dir "$MODEL" --seed 7 --ports-file "$ports" \
  </dev/null >/dev/null 2>&1 &
PID=$!
disown "$PID"
gs_track_pid "$PID"
GS_EXTRA_PIDS+=("$PID")
python3 "$PY/first_answer.py" --since "$EPOCHREALTIME" --ports-file "$ports" >/dev/null || { echo "ERROR: the server did not start"; exit 1; }
PORT=$(json_get "$(cat "$ports")" http)
log "== bench/live_pause.sh: llama-$SIZE on $DEVICE (driver $DRIVER), server $PID on port $PORT, images in $DIR"

pause_way() { # WAY STAGE_DIR
  local way=$1 stage=$2 i paused=() writes=() totals=() staged=""
  coproc GAPS { python3 "$PY/answer_gaps.py" --port "$PORT"; }
  read -r -t 300 line <&"${GAPS[0]}" || { echo "FAIL: $way: no stream of answers"; FAILED=1; return 1; }
  sleep 5
  for ((i = 1; i <= REPEAT; i++)); do
    GPUSNAP_STAGE_DIR=$stage GS_CMD_TIMEOUT=600 gs_run dump --leave-running --json -D "$DIR/live-img" "$PID"
    if [ "$GS_RC" != 0 ]; then
      echo "FAIL: $way: dump --leave-running $i exited $GS_RC: $GS_ERR"
      FAILED=1
      break
    fi
    paused+=("$(json_get "$GS_OUT" times.paused_s)")
    writes+=("$(json_get "$GS_OUT" times.stage_write_s 2>/dev/null || echo null)")
    totals+=("$(json_get "$GS_OUT" times.total_s)")
    staged=$(json_get "$GS_OUT" staged)
    log "  $way dump $i: paused ${paused[-1]} s, staged $staged, image written ${writes[-1]} s after, total ${totals[-1]} s"
    sleep 10
  done
  echo stop >&"${GAPS[1]}"
  read -r -t 300 line <&"${GAPS[0]}" || line='{}'
  wait "$GAPS_PID" 2>/dev/null
  log "  $way stream: $line"
  [ "$(json_get "$line" same 2>/dev/null)" == True ] || { echo "FAIL: $way: an answer differed from the first"; FAILED=1; }
  python3 - "$way" "$line" "$DEVICE" "$DRIVER" "$SIZE" "$staged" "${paused[*]}" "${writes[*]}" "${totals[*]}" >>"$JSONL" <<'PY'
import json, statistics, sys
way, line, device, driver, size, staged = sys.argv[1:7]
num = lambda s: [float(x) for x in s.split() if x not in ("null", "None")]
paused, writes, totals = (num(a) for a in sys.argv[7:10])
g = json.loads(line) if line.strip().startswith("{") else {}
med = lambda v: round(statistics.median(v), 3) if v else None
print(json.dumps({"bench": "live_pause", "device": device, "driver": driver, "model": "llama-" + size, "way": way,
                  "staged": staged == "True", "dumps": len(paused), "max_gap_s": g.get("max_gap_s"),
                  "median_answer_s": g.get("median_s"), "paused_s_median": med(paused),
                  "paused_s_max": max(paused) if paused else None, "stage_write_s_median": med(writes),
                  "total_s_median": med(totals)}))
PY
}
pause_way staged /dev/shm
mkdir -p "$DIR/not-tmpfs"
pause_way unstaged "$DIR/not-tmpfs"
python3 - "$JSONL" >"$MD" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| way | dumps | longest gap in answers s | paused_s median | paused_s max | image written after s | dump total s |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s | %s | %s | %s | %s | %s |" % (r["way"], r["dumps"], r["max_gap_s"], r["paused_s_median"],
          r["paused_s_max"], r["stage_write_s_median"], r["total_s_median"]))
PY
gs_kill_pid "$PID"
echo
cat "$MD"
if [ "${GPUSNAP_BENCH_NO_RESTORE:-0}" != 1 ]; then
  GPUSNAP_BENCH_DIR=$DIR bench/warm_start.sh || FAILED=1
fi
[ "$FAILED" = 0 ] || { echo "bench/live_pause.sh: FAILED (see above)"; exit 1; }
