#!/usr/bin/env bash
# bench/dump.sh - `gpusnap dump` and `gpusnap restore` of pattern processes
# (default 8 and 32 GiB) on the agent and the driver path, into tmpfs
# (/dev/shm) and onto disk (a directory under /var/tmp), with the data verified
# after every restore. The storage's own sequential write and read speed is
# measured in the same run on the same file system (dd, O_DIRECT where the file
# system takes it), for the ratio columns. Restores from disk start from a cold
# page cache (drop_caches), restores from tmpfs are from memory.
#
# Writes $OUT/bench-dump.md, appends one JSON object per measurement to
# $OUT/bench-dump.jsonl (gpusnap's own --json inside), writes the run's JSON
# document $OUT/bench-dump-DATE.json (bench/report.py: device, driver, date,
# command, the table's rows); prints the table last.
#
# Environment:
#   OUT                         where results go (default ./gpu-out)
#   GPUSNAP_BENCH_JSON_DIR      where the run's JSON document goes (default $OUT)
#   GPUSNAP_BENCH_SIZES         sizes (default "8G 32G")
#   GPUSNAP_BENCH_PATHS         paths (default "agent driver"); agent-leave and driver-leave dump with
#                               --leave-running (a periodic checkpoint: dump s is how long the app stood still)
#   GPUSNAP_BENCH_STORAGE       "NAME=DIR ..." (default "tmpfs=/dev/shm/gpusnap-bench disk=/var/tmp/gpusnap-bench")
#   GPUSNAP_BENCH_DD_BYTES      bytes dd writes and reads to measure the storage (default 4G)
#   GPUSNAP_BUILD, GPUSNAP_CRIU as for tests/gpu
set -u
export LC_ALL=C
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/gpu/lib.sh"
cd "$SRC" || exit 1

bench_prologue bench/dump.sh
SIZES=${GPUSNAP_BENCH_SIZES:-8G 32G}
PATHS=${GPUSNAP_BENCH_PATHS:-agent driver}
STORAGE=${GPUSNAP_BENCH_STORAGE:-tmpfs=/dev/shm/gpusnap-bench disk=/var/tmp/gpusnap-bench}
DD_BYTES=${GPUSNAP_BENCH_DD_BYTES:-4G}
mkdir -p "$OUT" || exit 1
JSONL=$OUT/bench-dump.jsonl
MD=$OUT/bench-dump.md

bench_work gs_cleanup
if [ -z "${GPUSNAP_CRIU:-}" ]; then
  if [ ! -x "$SRC/.cache/criu/bin/criu" ] && [ -d "$SRC/.cache/criu-debs" ]; then
    "$SRC/scripts/get-criu.sh" --offline >"$GS_WORK/get-criu.log" 2>&1
  fi
  if [ -x "$SRC/.cache/criu/bin/criu" ]; then
    export GPUSNAP_CRIU=$SRC/.cache/criu/bin/criu
  elif ! command -v criu >/dev/null 2>&1; then
    echo "SKIP: no CRIU (carry .cache/criu-debs or install criu >= 4.2) (bench/dump.sh)"
    exit 0
  fi
fi

bench_device
B_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
FAILED=0

size_bytes() { numfmt --from=iec "$1"; }

# Sequential write and read speed of the file system holding DIR, in GB/s: dd of
# DD_BYTES of zeros in 64 MiB blocks with O_DIRECT (tmpfs refuses it: buffered and
# fsync'ed there, read from memory). Sets SW and SR.
storage_speed() { # DIR
  local f=$1/dd.test count out flags_w="oflag=direct" flags_r="iflag=direct" bytes
  bytes=$(size_bytes "$DD_BYTES")
  count=$((bytes / 67108864))
  if ! dd if=/dev/zero of="$f" bs=64M count=1 oflag=direct 2>/dev/null; then
    flags_w="conv=fsync" flags_r=""
  fi
  rm -f "$f"
  # timed from outside: dd's own summary line differs between versions and locales
  local t0 t1
  t0=$EPOCHREALTIME
  # shellcheck disable=SC2086 # the flags are one word each, or none
  dd if=/dev/zero of="$f" bs=64M count="$count" $flags_w status=none || log "dd write to $f failed"
  t1=$EPOCHREALTIME
  SW=$(awk -v b="$bytes" -v t0="$t0" -v t1="$t1" 'BEGIN { s = t1 - t0; printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }')
  drop_caches
  t0=$EPOCHREALTIME
  # shellcheck disable=SC2086
  dd if="$f" of=/dev/null bs=64M $flags_r status=none || log "dd read of $f failed"
  t1=$EPOCHREALTIME
  SR=$(awk -v b="$bytes" -v t0="$t0" -v t1="$t1" 'BEGIN { s = t1 - t0; printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }')
  rm -f "$f"
  log "storage $1: write $SW GB/s, read $SR GB/s ($flags_w $flags_r)"
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
    "bench": "dump", "date": e["B_DATE"], "device": e["DEVICE"], "driver": e["DRIVER"], "git": e["GITREV"],
    "size_bytes": int(e["B_SIZE"]), "path": e["B_PATH"], "storage": e["B_STORAGE"], "dir": e["B_DIR"],
    "storage_write_gbs": float(e["B_SW"] or 0), "storage_read_gbs": float(e["B_SR"] or 0),
    "status": e["B_STATUS"], "detail": e["B_DETAIL"],
    "dump_wall_s": float(e["B_DUMP_WALL"] or 0), "restore_wall_s": float(e["B_RES_WALL"] or 0),
    "image_bytes": int(e["B_IMAGE_BYTES"] or 0),
    "dump": js(e["B_DUMP_JSON"]), "restore": js(e["B_RES_JSON"]),
}))
EOF
}

measure() { # SIZE PATH STORAGE_NAME DIR
  local size=$1 path=$2 sname=$3 dir=$4 pid launch=() img
  export B_SIZE B_PATH=$path B_STORAGE=$sname B_DIR=$dir B_STATUS='' B_DETAIL='' B_DUMP_JSON='' B_RES_JSON='' \
    B_DUMP_WALL='' B_RES_WALL='' B_IMAGE_BYTES='' B_SW=$SW B_SR=$SR DEVICE DRIVER GITREV B_DATE
  B_SIZE=$(size_bytes "$size")
  img=$dir/img
  # PATH-leave: `dump --leave-running`, the periodic checkpoint; its dump time is how long the app
  # stood still (the agent reloads its data from the image before the app goes on)
  local base=${path%-leave} leave=()
  [ "$base" != "$path" ] && leave=(--leave-running)
  [ "$base" == agent ] && launch=("$GPUSNAP" run --)
  log "== $size, $path path, $sname ($dir)"
  if ! app_start b 300 "${launch[@]}" "$GS_APPS/pattern" --size "$size" --alloc-size 1G --seed 9; then
    B_STATUS=failed B_DETAIL="app did not start" record
    FAILED=1
    return
  fi
  pid=${APP_PID[b]}
  GS_CMD_TIMEOUT=600 gs_run dump --json "${leave[@]}" -D "$img" "$pid"
  B_DUMP_JSON=$GS_OUT B_DUMP_WALL=$GS_SECS
  if [ "$GS_RC" = 0 ] && [ ${#leave[@]} -gt 0 ]; then
    # it ran on: its data must be intact now, then it goes and the image is restored as any other
    if ! app_cmd b verify VERIFY 300 || [[ $REPLY_LINE != "VERIFY OK"* ]]; then
      echo "FAIL: $size $path $sname: data does not verify after dump --leave-running: ${REPLY_LINE:-no answer}"
      B_STATUS=failed B_DETAIL="data does not verify after the dump" record
      FAILED=1
    fi
    app_quit b 60 >/dev/null || gs_kill_pid "$pid"
  fi
  wait "$pid" 2>/dev/null
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $size $path $sname: dump exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    B_STATUS=failed B_DETAIL="dump exit $GS_RC" record
    FAILED=1
    gs_kill_pid "$pid"
    app_forget b
    return
  fi
  B_IMAGE_BYTES=$(du -sb "$img" | cut -f1)
  wait_pid_gone "$pid"
  [ "$sname" != tmpfs ] && drop_caches
  GS_CMD_TIMEOUT=600 gs_run restore --json -D "$img"
  B_RES_JSON=$GS_OUT B_RES_WALL=$GS_SECS
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $size $path $sname: restore exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    B_STATUS=failed B_DETAIL="restore exit $GS_RC" record
    FAILED=1
  elif app_cmd b verify VERIFY 300 && [[ $REPLY_LINE == "VERIFY OK"* ]]; then
    B_STATUS=ok record
  else
    echo "FAIL: $size $path $sname: data does not verify after restore: ${REPLY_LINE:-no answer}"
    B_STATUS=failed B_DETAIL="data does not verify after restore" record
    FAILED=1
  fi
  app_quit b 60 >/dev/null || gs_kill_pid "$pid"
  app_forget b
  rm -rf "$img"
}

for entry in $STORAGE; do
  sname=${entry%%=*} dir=${entry#*=}
  if ! mkdir -p "$dir" || ! chmod 700 "$dir"; then echo "ERROR: cannot use $dir"; FAILED=1; continue; fi
  storage_speed "$dir"
  for size in $SIZES; do
    for path in $PATHS; do
      measure "$size" "$path" "$sname" "$dir"
    done
  done
  rm -rf "$dir"
done

# The table and the run's JSON document (bench/report.py collect; this run's lines of the .jsonl)
python3 "$SRC/bench/report.py" collect dump "$JSONL" --md "$MD" --script bench/dump.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-dump-${B_DATE//[-:]/}.json" --set "device=$DEVICE" \
  --set "driver=$DRIVER" --set "date=$B_DATE" --set "git=$GITREV" ||
  { echo "ERROR: bench/report.py collect failed"; FAILED=1; }
exit $FAILED
