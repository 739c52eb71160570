#!/usr/bin/env bash
# bench/cuda-plugin.sh - gpusnap's CRIU plugin side by side with NVIDIA's way of
# checkpointing a CUDA process with CRIU, same run, same storage, the same
# pattern process (default 8 GiB), a fresh one per way, its data verified bit
# for bit after every restore. Four ways:
#   cuda_plugin      criu dump/restore --libdir with CRIU's own cuda_plugin.so
#                    alone (it runs cuda-checkpoint from PATH: lock, checkpoint;
#                    restore, unlock) - the baseline of the ratios
#   cuda-checkpoint  by hand: cuda-checkpoint --action lock, --action checkpoint,
#                    plain criu dump (no plugin); plain criu restore, then
#                    cuda-checkpoint --action restore, --action unlock
#   gpusnap driver   criu --libdir with gpusnap_criu.so alone, process without
#                    the agent (the driver path)
#   gpusnap agent    the same, process under `gpusnap run` (the agent path)
# Wall times: what the caller waits for; a restore counts until `gpusnap state`
# says running (an agent image's data is loaded after criu returned). A way
# that fails gets a FAIL row and its log excerpt below the table; the others
# still run. Writes $OUT/bench-cuda-plugin.md.
#
# Needs .cache/nvidia from scripts/get-cuda-checkpoint.sh (NVIDIA's
# cuda-checkpoint and CRIU's cuda_plugin.so; carry it to the GPU machine).
# Environment:
#   OUT                          where results go (default ./gpu-out)
#   GPUSNAP_BENCH_SIZES          sizes (default "8G")
#   GPUSNAP_BENCH_WAYS           ways, of: cuda_plugin cuda-checkpoint driver agent (default all four)
#   GPUSNAP_BENCH_DIR            image directory (default /dev/shm/gpusnap-bench-cuda-plugin)
#   GPUSNAP_NVIDIA_CACHE         what get-cuda-checkpoint.sh made (default .cache/nvidia)
#   GPUSNAP_BUILD, GPUSNAP_CRIU  as for tests/gpu
# Exit status: 0 every way worked and verified; 1 one failed; 0 with a SKIP line without a GPU.
set -u
export LC_ALL=C
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/gpu/lib.sh"
. "$SRC/tests/gpu/plugin_lib.sh"
cd "$SRC" || exit 1

bench_prologue bench/cuda-plugin.sh
SIZES=${GPUSNAP_BENCH_SIZES:-8G}
WAYS=${GPUSNAP_BENCH_WAYS:-cuda_plugin cuda-checkpoint driver agent}
DIR=${GPUSNAP_BENCH_DIR:-/dev/shm/gpusnap-bench-cuda-plugin}
NV=${GPUSNAP_NVIDIA_CACHE:-$SRC/.cache/nvidia}
case $NV in /*) ;; *) NV=$SRC/$NV ;; esac
mkdir -p "$OUT" "$DIR" || exit 1
MD=$OUT/bench-cuda-plugin.md

# shellcheck disable=SC2016 # $DIR is expanded when the trap runs
bench_work 'gs_cleanup; rm -rf "$DIR"'
GS_TEST=bench-cuda-plugin
require_criu
GS_MISSING=""
if [ -f "$GS_BUILD/src/criu_plugin/gpusnap_criu.so" ]; then
  plugin_init
else
  GS_MISSING="no $GS_BUILD/src/criu_plugin/gpusnap_criu.so (build gpusnap)"
  GS_PLUGIN_DIR=$GS_WORK/criu-plugins GS_CRIU_BIN=${GPUSNAP_CRIU:-criu}
fi
GS_GPUSNAP_PLUGINS=$GS_PLUGIN_DIR
# CRIU loads every plugin in --libdir: one folder per way, each with one plugin or none.
NV_PLUGINS=$GS_WORK/cuda-plugins
NO_PLUGINS=$GS_WORK/no-plugins
mkdir -p "$NV_PLUGINS" "$NO_PLUGINS"
CC=$NV/bin/cuda-checkpoint
NV_MISSING=""
# a copy that lost its mode bits on the way (it came through the device tool's carry)
[ -f "$CC" ] && [ ! -x "$CC" ] && chmod +x "$CC"
if [ -x "$CC" ] && [ -f "$NV/criu-plugins/cuda_plugin.so" ]; then
  cp "$NV/criu-plugins/cuda_plugin.so" "$NV_PLUGINS/"
  # CRIU's plugin runs "cuda-checkpoint" from PATH (criu passes its PATH on).
  export PATH=$NV/bin:$PATH
  log "NVIDIA side: $(tr '\n' ';' <"$NV/SOURCES" 2>/dev/null)"
  help=$("$CC" --help 2>&1)
  log_block "  cuda-checkpoint --help| " "$(head -n 25 <<<"$help")"
  # What CRIU's plugin checks before it enables itself (else it disables itself and says so).
  grep -q -- '--action' <<<"$help" || NV_MISSING="cuda-checkpoint --help does not list --action (driver r555 or newer needed): $(head -n 1 <<<"$help")"
else
  NV_MISSING="no $CC or $NV/criu-plugins/cuda_plugin.so: run scripts/get-cuda-checkpoint.sh where there is network (or a mirror) and carry .cache/nvidia"
fi
[ -z "$NV_MISSING" ] || log "NVIDIA's ways cannot run: $NV_MISSING"

ROWS=()     # "size|way|dump_s|restore_s|status|dump detail|restore detail"
FAILURES=() # "size way: reason" + log excerpt, shown under the table
FAILED=0

# cuda-checkpoint ACTION on PID with a time limit; CC_SECS, CC_RC, CC_OUT.
cc_action() { # ACTION PID
  local t0=$EPOCHREALTIME
  log "\$ cuda-checkpoint --action $1 --pid $2"
  CC_OUT=$(timeout -k 5 "${GS_CMD_TIMEOUT:-300}" "$CC" --action "$1" --pid "$2" 2>&1)
  CC_RC=$?
  CC_SECS=$(gs_elapsed "$t0")
  log "  exit $CC_RC after ${CC_SECS}s"
  log_block "  | " "$CC_OUT"
  [ "$CC_RC" == 0 ]
}

# Until `gpusnap state PID` says running, at most 60 s; WAIT_SECS.
wait_running() { # PID
  local t0=$EPOCHREALTIME st=''
  while :; do
    st=$("$GPUSNAP" state "$1" 2>/dev/null | tr -d '[:space:]')
    [ "$st" == running ] && break
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a >= 60) }' && break
    sleep 0.05
  done
  WAIT_SECS=$(gs_elapsed "$t0")
  log "  gpusnap state $1: ${st:-nothing} after ${WAIT_SECS}s"
  [ "$st" == running ]
}

add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

# The last lines of a CRIU log worth showing when a way fails.
excerpt() { # LOG
  grep -E 'Error|cuda_plugin|gpusnap:|WARN' "$1" 2>/dev/null | tail -n 12
}

# STATUS (and LOGF, the log to show) of the way now running: the first failure wins.
failed() { # REASON [LOG]
  [ "$STATUS" == ok ] || return 0
  STATUS="FAIL: $1"
  LOGF=${2:-}
}

# One way at SIZE: a fresh pattern process, dump, gone, restore, running, verify, quit.
run_way() { # SIZE WAY
  local size=$1 way=$2 name launch=() pid dir=$DIR/img
  local ds=- rs=- dd='' rd=''
  STATUS=ok LOGF=''
  case $way in
    cuda_plugin | cuda-checkpoint)
      if [ -n "$NV_MISSING" ]; then
        ROWS+=("$size|$way|-|-|FAIL: not run (below)||")
        FAILURES+=("$size $way: $NV_MISSING")
        FAILED=1
        return
      fi ;;
    driver | agent)
      if [ -n "$GS_MISSING" ]; then
        ROWS+=("$size|$way|-|-|FAIL: not run (below)||")
        FAILURES+=("$size $way: $GS_MISSING")
        FAILED=1
        return
      fi ;;
    *)
      ROWS+=("$size|$way|-|-|FAIL: unknown way||")
      FAILURES+=("$size $way: unknown way (GPUSNAP_BENCH_WAYS: cuda_plugin cuda-checkpoint driver agent)")
      FAILED=1
      return ;;
  esac
  [ "$way" == agent ] && launch=("$GPUSNAP" run --)
  name=w${way//[^a-z]/}
  log "== $size, $way"
  if ! app_start "$name" 300 "${launch[@]}" "$GS_APPS/pattern" --size "$size" --alloc-size 1G --seed 12; then
    ROWS+=("$size|$way|-|-|FAIL: app did not start||")
    FAILURES+=("$size $way: the pattern app did not start: $(tail -n 3 "${APP_ERRF[$name]}" 2>/dev/null | tr '\n' ' ')")
    FAILED=1
    pid_alive "${APP_PID[$name]:-0}" && gs_kill_pid "${APP_PID[$name]}"
    app_forget "$name"
    return
  fi
  pid=${APP_PID[$name]}

  # ---- dump
  case $way in
    cuda_plugin)
      GS_PLUGIN_DIR=$NV_PLUGINS plugin_dump "$pid" "$dir"
      ds=$PLUGIN_SECS
      log_block "  cuda_plugin| " "$(grep 'cuda_plugin:' "$dir/dump.log" 2>/dev/null)"
      if [ "$PLUGIN_RC" != 0 ]; then
        failed "criu dump exit $PLUGIN_RC" "$dir/dump.log"
      elif ! grep -q 'cuda_plugin: Checkpointing CUDA devices' "$dir/dump.log"; then
        failed "CRIU's cuda_plugin did not checkpoint the process" "$dir/dump.log"
      fi ;;
    cuda-checkpoint)
      local lock=0 ckpt=0
      if cc_action lock "$pid"; then
        lock=$CC_SECS
        if cc_action checkpoint "$pid"; then
          ckpt=$CC_SECS
          GS_PLUGIN_DIR=$NO_PLUGINS plugin_dump "$pid" "$dir"
          [ "$PLUGIN_RC" == 0 ] || failed "plain criu dump exit $PLUGIN_RC" "$dir/dump.log"
          ds=$(add "$(add "$lock" "$ckpt")" "$PLUGIN_SECS")
          dd="lock $lock + checkpoint $ckpt + criu $PLUGIN_SECS"
        else
          failed "cuda-checkpoint --action checkpoint exit $CC_RC: $(head -n 1 <<<"$CC_OUT")"
        fi
      else
        failed "cuda-checkpoint --action lock exit $CC_RC: $(head -n 1 <<<"$CC_OUT")"
      fi ;;
    driver | agent)
      GS_PLUGIN_DIR=$GS_GPUSNAP_PLUGINS plugin_dump "$pid" "$dir"
      ds=$PLUGIN_SECS
      if [ "$PLUGIN_RC" != 0 ]; then
        failed "criu dump exit $PLUGIN_RC" "$dir/dump.log"
      elif ! grep -q "is off the GPU: $way path" "$dir/dump.log"; then
        failed "gpusnap_criu.so did not take the $way path" "$dir/dump.log"
      fi ;;
  esac
  # keep the dump's log: the image folder goes after each way
  [ -f "$dir/dump.log" ] && cp "$dir/dump.log" "$GS_WORK/dump-$size-$way.log"
  [ "$LOGF" == "$dir/dump.log" ] && LOGF=$GS_WORK/dump-$size-$way.log
  if [ "$STATUS" == ok ] && ! wait_pid_gone "$pid"; then
    failed "process $pid still there 10 s after criu dump"
  fi
  [ -d "$dir" ] && log "  image: $(du -sh "$dir" 2>/dev/null | cut -f1)"

  # ---- restore
  if [ "$STATUS" == ok ]; then
    local libdir=$GS_GPUSNAP_PLUGINS
    case $way in
      cuda_plugin) libdir=$NV_PLUGINS ;;
      cuda-checkpoint) libdir=$NO_PLUGINS ;;
    esac
    GS_PLUGIN_DIR=$libdir plugin_restore "$dir"
    rs=$PLUGIN_SECS
    local rlog=$GS_WORK/restore-$$.log
    [ "$way" == cuda_plugin ] && log_block "  cuda_plugin| " "$(grep 'cuda_plugin:' "$rlog" 2>/dev/null)"
    # keep this restore's log: the next plugin_restore writes the same file
    cp "$rlog" "$GS_WORK/restore-$size-$way.log" 2>/dev/null
    rlog=$GS_WORK/restore-$size-$way.log
    if [ "$PLUGIN_RC" != 0 ]; then
      failed "criu restore exit $PLUGIN_RC" "$rlog"
    elif [ "$PLUGIN_PID" != "$pid" ]; then
      failed "criu restored pid '${PLUGIN_PID}', not $pid" "$rlog"
    fi
    [ "$STATUS" == ok ] && APP_OWN[$name]=restored
    if [ "$STATUS" == ok ] && [ "$way" == cuda-checkpoint ]; then
      local crs=$PLUGIN_SECS
      if cc_action restore "$pid"; then
        local restore=$CC_SECS
        if cc_action unlock "$pid"; then
          rs=$(add "$(add "$crs" "$restore")" "$CC_SECS")
          rd="criu $crs + restore $restore + unlock $CC_SECS"
        else
          failed "cuda-checkpoint --action unlock exit $CC_RC: $(head -n 1 <<<"$CC_OUT")"
        fi
      else
        failed "cuda-checkpoint --action restore exit $CC_RC: $(head -n 1 <<<"$CC_OUT")"
      fi
    fi
    if [ "$STATUS" == ok ]; then
      if wait_running "$pid"; then
        rs=$(add "$rs" "$WAIT_SECS")
      else
        failed "not running on the GPU 60 s after the restore (gpusnap state)" "$rlog"
      fi
    fi
    if [ "$STATUS" == ok ] && [ "$way" == cuda_plugin ] && ! grep -q 'cuda_plugin: resuming devices' "$rlog"; then
      failed "CRIU's cuda_plugin did not resume the process's devices" "$rlog"
    fi
  fi
  if [ "$STATUS" == ok ] && ! app_verify "$name" "$size pattern after $way"; then
    failed "data does not verify after restore: ${REPLY_LINE:-no answer}"
  fi
  rm -rf "$dir" "$dir.job" "$dir.out" "$dir.rout" "$dir.pid"
  if [ "$STATUS" == ok ]; then
    # it exits non-zero if it saw a CUDA error
    app_quit "$name" || failed "the app exits with status ${APP_RC:-?} after quit (it saw an error)"
  fi
  pid_alive "$pid" && gs_kill_pid "$pid"
  app_forget "$name"

  if [ "$STATUS" != ok ]; then
    FAILED=1
    FAILURES+=("$size $way: ${STATUS#FAIL: }")
    if [ -n "$LOGF" ] && [ -s "$LOGF" ]; then
      FAILURES+=("$(excerpt "$LOGF" | sed 's/^/    /')")
    fi
    log "FAIL: $size $way: ${STATUS#FAIL: }"
  fi
  ROWS+=("$size|$way|$ds|$rs|$STATUS|$dd|$rd")
}

for size in $SIZES; do
  for way in $WAYS; do
    run_way "$size" "$way"
  done
done

# ratio against the cuda_plugin row of the same size (when it worked)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }'; }
{
  echo "## CRIU's cuda_plugin (NVIDIA's cuda-checkpoint) vs gpusnap_criu.so"
  echo
  echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 2>/dev/null), $("$GS_CRIU_BIN" --version 2>/dev/null | head -n 1 | sed 's/Version: /CRIU /'), gpusnap $(git -C "$SRC" describe --always --dirty 2>/dev/null), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "NVIDIA side: $(tr '\n' ' ' <"$NV/SOURCES" 2>/dev/null || echo 'not there')"
  echo "Images in $DIR; a fresh pattern process (1 GiB allocations) per way, verified after restore."
  echo "Wall seconds; restore until \`gpusnap state\` says running; ratio = time / cuda_plugin's (below 1: faster)."
  echo "A FAIL row's times are what was measured before it failed."
  echo
  echo "| size | way | dump s | ratio | restore s | ratio | status | parts (cuda-checkpoint by hand) |"
  echo "|---|---|---|---|---|---|---|---|"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r size way ds rs status dd rd <<<"$row"
    bd=0 br=0
    for base in "${ROWS[@]}"; do
      IFS='|' read -r bsize bway bds brs bstatus _ _ <<<"$base"
      if [ "$bsize" == "$size" ] && [ "$bway" == cuda_plugin ] && [ "$bstatus" == ok ]; then bd=$bds br=$brs; fi
    done
    rd_d=$(ratio "$ds" "$bd") rd_r=$(ratio "$rs" "$br")
    [ "$status" == ok ] || { rd_d=- rd_r=-; }
    parts=""
    [ -n "$dd" ] && parts="dump: $dd; restore: ${rd:--}"
    echo "| $size | $way | $ds | $rd_d | $rs | $rd_r | $status | $parts |"
  done
  if [ ${#FAILURES[@]} -gt 0 ]; then
    echo
    echo "Failures (logs under $GS_WORK):"
    echo
    echo '```'
    printf '%s\n' "${FAILURES[@]}"
    echo '```'
  fi
} | tee "$MD"
# the run's JSON document too (bench/report.py collect table: the table's rows, device, driver, date, command)
python3 "$SRC/bench/report.py" collect table "$MD" --bench cuda-plugin --script bench/cuda-plugin.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-cuda-plugin-$(date -u +%Y%m%dT%H%M%SZ).json" ||
  echo "ERROR: bench/report.py collect table failed"
exit $FAILED
