#!/usr/bin/env bash
# bench/warm_start.sh - a pre-warmed inference server: how long until a
# Hugging Face transformers model served over HTTP (tests/gpu/py/server.py
# --model hf: a Llama shape with seeded random weights, bf16) first answers,
#   - started the usual way: python, transformers' from_pretrained of the
#     weights from the local disk onto the GPU, a first generate, listen;
#   - restored with `gpusnap restore` from an image of the same server dumped
#     once it had answered, on the agent path (started with `gpusnap run`) and
#     on the driver path (started without it), in the same run, whole and
#     with `restore --lazy-pages` (CRIU's lazy-pages daemon fills the CPU
#     memory while the GPU part goes on; the first answer is awaited
#     alongside the restore, which returns only once every page is in);
# each with the files in the page cache (warm) and after drop_caches (cold).
# The time runs from the start (or the restore command) to the first answer
# of POST /generate (16 tokens; the same request's time once the server is
# going is shown beside it). Every answer must equal the first start's tokens and
# cache checksum (greedy decoding, same weights): a mismatch fails the bench.
#
# Writes $OUT/bench-warm-start.md, one JSON line per start to
# $OUT/bench-warm-start.jsonl and the run's JSON document
# $OUT/bench-warm-start-DATE.json (bench/report.py); prints the table last.
#
# Environment:
#   OUT                       where results go (default ./gpu-out)
#   GPUSNAP_BENCH_JSON_DIR    where the run's JSON document goes (default $OUT)
#   GPUSNAP_BENCH_HF_SIZE     1b, 3b (default) or 8b: Llama 3.2 1B/3B or 3.1 8B shapes (2.5, 7.2, 16 GB)
#   GPUSNAP_BENCH_DIR         where the model and the images go (default /var/tmp/gpusnap-warm)
#   GPUSNAP_BENCH_REPEAT      starts per row (default 2; the table gives the median)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C # $EPOCHREALTIME with a decimal point, for the Python client
. "$(dirname "$0")/../tests/gpu/lib.sh" # sets GS_SRC, the repository
cd "$GS_SRC" || exit 1

bench_prologue bench/warm_start.sh
bench_require_hf bench/warm_start.sh
SIZE=${GPUSNAP_BENCH_HF_SIZE:-3b}
DIR=${GPUSNAP_BENCH_DIR:-/var/tmp/gpusnap-warm}
REPEAT=${GPUSNAP_BENCH_REPEAT:-2}
mkdir -p "$OUT" "$DIR" || exit 1
bench_outputs warm-start

bench_work gs_cleanup
require_criu

bench_device
B_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
PY=$GS_SRC/tests/gpu/py
MODEL=$DIR/llama-$SIZE
FAILED=0
REF_TOKENS='' REF_SUM=''

# Reads every file under DIR: a "warm" row has its files in the page cache (an image written with
# O_DIRECT is not, after its dump).
warm_files() { find "$1" -type f -print0 | xargs -0 -r cat >/dev/null; }


# One start measured: appends a JSON line; fails the bench if the answer differs from the first one.
record() { # WAY CACHE
  local s tokens sum
  s=$(json_get "$ANSWER" s) tokens=$(json_get "$ANSWER" tokens) sum=$(json_get "$ANSWER" cache_sum)
  if [ -z "$REF_TOKENS" ]; then
    REF_TOKENS=$tokens REF_SUM=$sum
  elif [ "$tokens" != "$REF_TOKENS" ] || [ "$sum" != "$REF_SUM" ]; then
    echo "FAIL: $1 ($2): tokens $tokens, cache sum $sum; the first start answered $REF_TOKENS, $REF_SUM"
    FAILED=1
  fi
  printf '{"bench": "warm_start", "device": "%s", "driver": "%s", "git": "%s", "model": "llama-%s", "way": "%s", "cache": "%s", "first_answer_s": %s, "next_answer_s": %s, "same_answer": %s}\n' \
    "$DEVICE" "$DRIVER" "$GITREV" "$SIZE" "$1" "$2" "$s" "$(json_get "$ANSWER" next_s)" \
    "$([ "$tokens" == "$REF_TOKENS" ] && [ "$sum" == "$REF_SUM" ] && echo true || echo false)" >>"$JSONL"
  log "$1 ($2): first answer after $s s"
}

# Starts the server (LAUNCH... before python3: gpusnap run --, or nothing) as a session of its own with
# its ports in PORTS; SERVER_PID. Measures its first answer as WAY, CACHE.
start_server() { # WAY CACHE PORTS LAUNCH...
  local way=$1 cache=$2 ports=$3 t0
  shift 3
  rm -f "$ports"
  t0=$EPOCHREALTIME
  setsid "$@" python3 "$PY/server.py" --model hf --hf-dir "$MODEL" --seed 7 --ports-file "$ports" \
    </dev/null >/dev/null 2>/dev/null &
  SERVER_PID=$!
  disown "$SERVER_PID" # its end (a dump, /quit) is no job of this shell's to report
  gs_track_pid "$SERVER_PID"
  GS_EXTRA_PIDS+=("$SERVER_PID")
  bench_first_answer "$t0" --ports-file "$ports" || return 1
  record "$way" "$cache"
}


# gpusnap restore of IMG, timed to the restored server's first answer on PORT, asked alongside the
# restore (a lazy one answers before it returns); then it ends.
restore_server() { # WAY CACHE IMG PORT [RESTORE OPTIONS...]
  local way=$1 cache=$2 img=$3 port=$4 t0 pid asker
  shift 4
  t0=$EPOCHREALTIME
  python3 "$PY/first_answer.py" --since "$t0" --port "$port" >"$GS_WORK/answer.json" 2>"$GS_WORK/first_answer.err" &
  asker=$!
  GS_CMD_TIMEOUT=600 gs_run restore --json -D "$img" "$@"
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $way ($cache): restore exited $GS_RC: $GS_ERR"
    kill "$asker" 2>/dev/null
    wait "$asker" 2>/dev/null
    FAILED=1
    return 1
  fi
  pid=$(json_get "$GS_OUT" pid)
  GS_EXTRA_PIDS+=("$pid")
  if ! wait "$asker"; then
    log "no answer: $(cat "$GS_WORK/first_answer.err")"
    FAILED=1
    gs_kill_pid "$pid"
    return 1
  fi
  ANSWER=$(cat "$GS_WORK/answer.json")
  log "  answer: $ANSWER"
  record "$way" "$cache"
  log "  restore: CRIU $(json_get "$GS_OUT" times.criu_s) s, GPU $(json_get "$GS_OUT" times.gpu_s) s, checksums $(json_get "$GS_OUT" times.verify_s) s, ready $(json_get "$GS_OUT" times.ready_s) s, lazily $(json_get "$GS_OUT" lazy_pages) (every CPU page in $(json_get "$GS_OUT" times.lazy_pages_done_s) s), total $(json_get "$GS_OUT" times.total_s) s"
  bench_quit_server "$port" "$pid"
}

# Dumps the server PID into IMG (its path: WANT); it is gone after.
dump_server() { # PID IMG WANT
  GS_CMD_TIMEOUT=600 gs_run dump --json -D "$2" "$1"
  if [ "$GS_RC" != 0 ] || [ "$(json_get "$GS_OUT" path)" != "$3" ]; then
    echo "FAIL: dump of the server to $2 (exit $GS_RC, path $(json_get "$GS_OUT" path 2>/dev/null)): $GS_ERR"
    FAILED=1
    return 1
  fi
  log "  dump: GPU $(json_get "$GS_OUT" gpu_data_bytes) B in $(json_get "$GS_OUT" times.gpu_s) s, CPU $(json_get "$GS_OUT" cpu_bytes) B, CRIU $(json_get "$GS_OUT" times.criu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
  GPU_BYTES=$(json_get "$GS_OUT" gpu_data_bytes)
  wait_pid_gone "$1"
}

port_of() { json_get "$(cat "$1")" http; }

log "== bench/warm_start.sh: llama-$SIZE on $DEVICE (driver $DRIVER), model and images in $DIR"
bench_hf_model "$MODEL" "$SIZE"
sync

# The two servers to dump, each measured on its way up.
GPU_BYTES=0
warm_files "$MODEL"
start_server python warm "$GS_WORK/plain.json" || { echo "FAIL: the server did not start"; exit 1; }
PORT_D=$(port_of "$GS_WORK/plain.json")
dump_server "$SERVER_PID" "$DIR/img-driver" driver || exit 1
warm_files "$MODEL"
start_server "python under gpusnap run" warm "$GS_WORK/agent.json" "$GPUSNAP" run -- || exit 1
PORT_A=$(port_of "$GS_WORK/agent.json")
dump_server "$SERVER_PID" "$DIR/img-agent" agent || exit 1

for ((r = 1; r <= REPEAT; r++)); do
  log "== round $r of $REPEAT"
  if [ "$r" -gt 1 ]; then
    warm_files "$MODEL"
    start_server python warm "$GS_WORK/p.json" && bench_quit_server "$(port_of "$GS_WORK/p.json")" "$SERVER_PID"
    start_server "python under gpusnap run" warm "$GS_WORK/p.json" "$GPUSNAP" run -- &&
      bench_quit_server "$(port_of "$GS_WORK/p.json")" "$SERVER_PID"
  fi
  warm_files "$DIR/img-agent"
  restore_server "gpusnap restore, agent path" warm "$DIR/img-agent" "$PORT_A"
  warm_files "$DIR/img-driver"
  restore_server "gpusnap restore, driver path" warm "$DIR/img-driver" "$PORT_D"
  warm_files "$DIR/img-agent"
  restore_server "gpusnap restore --lazy-pages, agent path" warm "$DIR/img-agent" "$PORT_A" --lazy-pages
  warm_files "$DIR/img-driver"
  restore_server "gpusnap restore --lazy-pages, driver path" warm "$DIR/img-driver" "$PORT_D" --lazy-pages
  drop_caches
  start_server python cold "$GS_WORK/p.json" && bench_quit_server "$(port_of "$GS_WORK/p.json")" "$SERVER_PID"
  drop_caches
  restore_server "gpusnap restore, agent path" cold "$DIR/img-agent" "$PORT_A"
  drop_caches
  restore_server "gpusnap restore, driver path" cold "$DIR/img-driver" "$PORT_D"
  drop_caches
  restore_server "gpusnap restore --lazy-pages, agent path" cold "$DIR/img-agent" "$PORT_A" --lazy-pages
done

# The table and the run's JSON document (bench/report.py collect)
python3 "$GS_SRC/bench/report.py" collect warm_start "$JSONL" --md "$MD" --script bench/warm_start.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-warm-start-${B_DATE//[-:]/}.json" --set "device=$DEVICE" \
  --set "driver=$DRIVER" --set "date=$B_DATE" --set "git=$GITREV" --set "model=llama-$SIZE" \
  --set "gpu_bytes=$GPU_BYTES" --set "repeat=$REPEAT" >/dev/null || { echo "ERROR: bench/report.py collect failed"; FAILED=1; }
echo
cat "$MD"
[ "$FAILED" = 0 ] || { echo "bench/warm_start.sh: FAILED (see above)"; exit 1; }
