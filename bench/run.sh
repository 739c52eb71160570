#!/usr/bin/env bash
# bench/run.sh - suspend and resume time of processes holding 1, 8 and 32 GiB
# (the pattern test app), through `gpusnap suspend/resume --json`, with the data
# verified after every resume: a run that breaks data is a failure, not a number.
#
# Each path is a column group of the table: "driver" (the transparent path,
# suspend --driver; the baseline) and, once it exists, "agent" (the app started
# with `gpusnap run --`, suspend without --driver). The ratio column compares
# each path with the driver path measured in the same run, same size.
#
# Writes $OUT/bench.md (markdown table with device, driver, date),
# $OUT/bench.jsonl (one JSON object per measurement, gpusnap's own JSON inside)
# and the run's JSON document, $OUT/bench-suspend-DATE.json (bench/report.py:
# device, driver, date, command, the table's rows), and prints the table last.
#
# Environment:
#   OUT                   where results go (default ./gpu-out)
#   GPUSNAP_BENCH_JSON_DIR  where the run's JSON document goes (default $OUT; bench/results: the report's)
#   GPUSNAP_BENCH_SIZES   sizes held by the process (default "1G 8G 32G"; set but empty: none, the two-GPU case alone)
#   GPUSNAP_BENCH_PATHS   paths to measure (default "driver"; e.g. "driver agent")
#   GPUSNAP_BENCH_PATHS_<SIZE>  paths for one size only (e.g. GPUSNAP_BENCH_PATHS_32G="driver agent-reserve")
#                         A path may carry variables for the app: "agent-reserve-bounce+GPUSNAP_STAGING_THREADS=16"
#   GPUSNAP_BENCH_REPEAT  suspend/resume cycles per size and path (default 1; the table shows medians)
#   GPUSNAP_BENCH_TWO_GPUS  size held on each GPU for the two-GPU case (default 32G; 0: not measured):
#                         the multigpu app under the agent with a reserved pool, on GPU 0 alone (path
#                         agent-reserve-gpus1) and on GPUs 0 and 1 (agent-reserve-gpus2), same run; the table's
#                         last line compares them (goal: two GPUs within 1.2x of one). SKIP line on one GPU.
#   GPUSNAP_BENCH_TWO_GPUS_EXTRA  more two-GPU variants, each compared with agent-reserve-gpus1 too
#                         (e.g. "agent-reserve-gpus2+GPUSNAP_STAGING_THREADS=24")
#   GPUSNAP_BUILD         build directory (default ./build; built here if the binaries are missing)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/gpu/lib.sh"
cd "$SRC" || exit 1

bench_prologue bench
SIZES=${GPUSNAP_BENCH_SIZES-1G 8G 32G}
PATHS=${GPUSNAP_BENCH_PATHS:-driver}
REPEAT=${GPUSNAP_BENCH_REPEAT:-1}
bench_outputs ""

if [ ! -x "$GPUSNAP" ] || [ ! -x "$GS_APPS/pattern" ]; then
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  echo "building gpusnap and the GPU apps in $GS_BUILD"
  if ! cmake -S "$SRC" -B "$GS_BUILD" -DCMAKE_BUILD_TYPE=Release -DGPUSNAP_GPU_APPS=ON >/dev/null ||
    ! cmake --build "$GS_BUILD" -j "$(nproc)" --target gpusnap gpuapp_pattern gpuapp_multigpu >/dev/null; then
    echo "ERROR: build failed"
    exit 1
  fi
fi

bench_work gs_cleanup

bench_device
VERSION=$("$GPUSNAP" --version 2>/dev/null | head -n 1)
B_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
export B_DEVICE="$DEVICE" B_DRIVER="$DRIVER" B_VERSION="$VERSION ($GITREV)" B_DATE
FAILED=0

size_bytes() { # 8G -> 8589934592
  awk -v s="$1" 'BEGIN {
    n = s + 0; u = toupper(substr(s, length(n "") + 1, 1))
    m = (u == "K") ? 2^10 : (u == "M") ? 2^20 : (u == "G") ? 2^30 : (u == "T") ? 2^40 : 1
    printf "%.0f", n * m }'
}

# Appends one measurement to bench.jsonl. Inputs in B_* variables.
record() {
  python3 - "$JSONL" <<'EOF'
import json, os, sys
e = os.environ
def load(s):
    try:
        return json.loads(s)
    except Exception:
        return None
def secs(j, wall):
    if isinstance(j, dict) and isinstance(j.get("total_s"), (int, float)):
        return float(j["total_s"])
    return float(wall) if wall else None
sus, res = load(e.get("B_SUS_JSON", "")), load(e.get("B_RES_JSON", ""))
rec = {
    "date": e["B_DATE"], "device": e["B_DEVICE"], "driver": e["B_DRIVER"], "gpusnap": e["B_VERSION"],
    "size_bytes": int(e["B_SIZE"]), "path": e["B_PATH"], "repeat": int(e["B_REP"]),
    "status": e["B_STATUS"], "detail": e.get("B_DETAIL", ""),
    "suspend_s": secs(sus, e.get("B_SUS_WALL")) if e.get("B_SUS_RC") == "0" else None,
    "resume_s": secs(res, e.get("B_RES_WALL")) if e.get("B_RES_RC") == "0" else None,
    "suspend_wall_s": float(e["B_SUS_WALL"]) if e.get("B_SUS_WALL") else None,
    "resume_wall_s": float(e["B_RES_WALL"]) if e.get("B_RES_WALL") else None,
    "vram_suspended_mib": e.get("B_VRAM_SUSPENDED"),
    "suspend": sus, "resume": res,
}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}

# One size on one path: start, REPEAT x (suspend, resume, verify), quit.
measure() { # SIZE PATH[+VAR=VALUE...]
  local size=$1 path=$2 bytes rep pid launch=() susp_args=() extra_env=() app=("$GS_APPS/pattern") gpus=1
  bytes=$(size_bytes "$size")
  # PATH+VAR=VALUE+...: the same path with the app started under those variables (a tuning sweep)
  if [[ $path == *+* ]]; then
    IFS='+' read -r -a extra_env <<<"${path#*+}"
  fi
  export B_SIZE=$bytes B_PATH=$path B_REP=0 B_STATUS='' B_DETAIL='' B_SUS_JSON='' B_RES_JSON='' B_SUS_WALL='' B_RES_WALL='' \
    B_SUS_RC='' B_RES_RC='' B_VRAM_SUSPENDED=''
  case ${path%%+*} in
    driver) susp_args=(--driver) ;;
    agent) launch=("$GPUSNAP" run --) ;;
    # a staging pool kept ready (--reserve): the data part at line rate
    agent-reserve) launch=("$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) ;;
    # a pinned reserved pool (the default bounces a reserved pool), unpinned as the copies complete
    agent-reserve-unpin)
      launch=(env GPUSNAP_STAGING_MODE=pinned "$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) ;;
    # a pinned reserved pool left pinned while the driver holds the process
    agent-reserve-pinned)
      launch=(env GPUSNAP_STAGING_MODE=pinned GPUSNAP_STAGING_UNPIN=0 "$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) ;;
    # the same with more threads populating, pinning and unpinning the staging (GPUSNAP_BENCH_THREADS, default 14)
    agent-reserve-threads)
      launch=(env GPUSNAP_STAGING_THREADS="${GPUSNAP_BENCH_THREADS:-14}" "$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) ;;
    # bounce staging: the pool is never pinned, copies go through a small pinned ring plus a host memcpy
    agent-bounce) launch=(env GPUSNAP_STAGING_MODE=bounce "$GPUSNAP" run --) ;;
    # the same with a reserved pool; its ring is kept pinned across cycles
    agent-reserve-bounce)
      launch=(env GPUSNAP_STAGING_MODE=bounce "$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) ;;
    # the same with 2 MiB huge pages for staging (the system's pool sized for it here)
    agent-reserve-huge)
      launch=("$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --)
      HUGE_BEFORE=$(cat /proc/sys/vm/nr_hugepages)
      echo $(((bytes / 1073741824 + 2) * 512)) >/proc/sys/vm/nr_hugepages 2>/dev/null ||
        { echo "SKIP: $size on $path: cannot set nr_hugepages"; return; } ;;
    # only the data leaves the GPU; the context stays
    agent-keep) launch=("$GPUSNAP" run --) susp_args=(--keep-context) ;;
    agent-reserve-keep) launch=("$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --) susp_args=(--keep-context) ;;
    # SIZE on each of 1 or 2 GPUs (the multigpu app holds it on every GPU it sees), with a reserved pool for
    # all of it, so the host's page faults do not hide how the GPUs move
    agent-reserve-gpus1)
      launch=(env CUDA_VISIBLE_DEVICES=0 "$GPUSNAP" run --reserve "$((bytes / 1073741824 + 1))G" --)
      app=("$GS_APPS/multigpu") ;;
    agent-reserve-gpus2)
      launch=(env "CUDA_VISIBLE_DEVICES=0,1" "$GPUSNAP" run --reserve "$((2 * bytes / 1073741824 + 1))G" --)
      app=("$GS_APPS/multigpu") gpus=2 ;;
    *) echo "ERROR: unknown path '$path' in GPUSNAP_BENCH_PATHS"; FAILED=1; return ;;
  esac
  if ((${#extra_env[@]})); then
    launch=(env "${extra_env[@]}" "${launch[@]}")
  fi
  local free need gpu
  need=$((bytes / 1048576 + 1024))
  for ((gpu = 0; gpu < gpus; gpu++)); do
    free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i "$gpu" | tr -d ' ')
    if [[ $free =~ ^[0-9]+$ ]] && [ "$free" -lt "$need" ]; then
      echo "SKIP: $size on $path: GPU $gpu has $free MiB free, $need needed"
      B_STATUS=skipped B_DETAIL="not enough free GPU memory on GPU $gpu ($free MiB)" record
      return
    fi
  done
  # the bytes the process holds, for the table's rates
  B_SIZE=$((bytes * gpus))
  log "== $size, $path path"
  if ! app_start b 300 "${launch[@]}" "${app[@]}" --size "$size" --alloc-size 1G --seed 7; then
    echo "FAIL: $size on $path: the pattern app did not start"
    B_STATUS=failed B_DETAIL="app did not start" record
    FAILED=1
    return
  fi
  pid=${APP_PID[b]}
  # a reserved pool fills in the background after the app's first allocation: let it finish
  [[ $path == agent-reserve* ]] && sleep "$((B_SIZE / 4000000000 + 2))"
  for ((rep = 1; rep <= REPEAT; rep++)); do
    export B_REP=$rep B_SUS_JSON='' B_RES_JSON='' B_SUS_WALL='' B_RES_WALL='' B_SUS_RC='' B_RES_RC='' B_VRAM_SUSPENDED='' B_DETAIL=''
    gs_run suspend "$pid" --json "${susp_args[@]}"
    B_SUS_RC=$GS_RC B_SUS_JSON=$GS_OUT B_SUS_WALL=$GS_SECS
    if [ "$GS_RC" != 0 ]; then
      echo "FAIL: $size on $path: suspend exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
      B_STATUS=failed B_DETAIL="suspend exit $GS_RC" record
      FAILED=1
      break
    fi
    B_VRAM_SUSPENDED=$(pid_vram_mib "$pid")
    gs_run resume "$pid" --json
    B_RES_RC=$GS_RC B_RES_JSON=$GS_OUT B_RES_WALL=$GS_SECS
    if [ "$GS_RC" != 0 ]; then
      echo "FAIL: $size on $path: resume exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
      B_STATUS=failed B_DETAIL="resume exit $GS_RC" record
      FAILED=1
      break
    fi
    if app_cmd b verify VERIFY 120 && [[ $REPLY_LINE == "VERIFY OK"* ]]; then
      B_STATUS=ok record
    else
      echo "FAIL: $size on $path: data does not verify after resume: ${REPLY_LINE:-no answer}"
      B_STATUS=failed B_DETAIL="data does not verify after resume: ${REPLY_LINE:-no answer}" record
      FAILED=1
      break
    fi
  done
  [ "${path%%+*}" == agent-reserve-huge ] && echo "${HUGE_BEFORE:-0}" >/proc/sys/vm/nr_hugepages 2>/dev/null
  if ! app_quit b 60 >/dev/null; then
    echo "FAIL: $size on $path: the pattern app did not exit cleanly (status ${APP_RC:-?})"
    FAILED=1
  fi
  app_forget b
}

for size in $SIZES; do
  paths_var=GPUSNAP_BENCH_PATHS_$size
  for path in ${!paths_var:-$PATHS}; do
    measure "$size" "$path"
  done
done

TWO_GPUS=${GPUSNAP_BENCH_TWO_GPUS:-32G}
if [ "$TWO_GPUS" != 0 ]; then
  if [ "$(gpu_count)" -lt 2 ]; then
    echo "SKIP: two GPUs in parallel ($TWO_GPUS on each): this machine has $(gpu_count) GPU"
  elif [ ! -x "$GS_APPS/multigpu" ]; then
    echo "FAIL: two GPUs in parallel: missing $GS_APPS/multigpu"
    FAILED=1
  else
    measure "$TWO_GPUS" agent-reserve-gpus1
    measure "$TWO_GPUS" agent-reserve-gpus2
    for path in ${GPUSNAP_BENCH_TWO_GPUS_EXTRA:-}; do
      case $path in agent-reserve-gpus[12]+*) measure "$TWO_GPUS" "$path" ;;
        *) echo "ERROR: GPUSNAP_BENCH_TWO_GPUS_EXTRA: '$path' is not agent-reserve-gpus1+... or agent-reserve-gpus2+..."; FAILED=1 ;;
      esac
    done
  fi
fi

# The table and the run's JSON document (bench/report.py collect): medians per size and path;
# speed-up = driver time / path time, same size, this run.
python3 "$SRC/bench/report.py" collect suspend "$JSONL" --md "$MD" --script bench/run.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-suspend-${B_DATE//[-:]/}.json" --set "device=$DEVICE" \
  --set "driver=$DRIVER" --set "date=$B_DATE" --set "gpusnap=$B_VERSION" --set "repeat=$REPEAT" >/dev/null ||
  { echo "ERROR: bench/report.py collect failed"; FAILED=1; }
echo
cat "$MD"
exit $FAILED
