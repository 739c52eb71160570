#!/usr/bin/env bash
# t31-agent-spill.sh - the storage tier of suspend on the GPU (issue 24): a
# pattern process holding 8 GiB of written data under the agent is
# suspended with --spill-only into a spill directory: the agent streams its
# data into an image there (VRAM 0, the process alive, `state -v` and
# `state` say where the data is and how much), resume reads it back and
# every byte verifies, the spill is removed. Then GPUSNAP_SPILL_DIR with an
# app whose host memory is short (GPUSNAP_HOST_MEMORY_LIMIT=1G): it spills
# what does not fit by itself, the 1G that fits staying in host memory (a
# split: `state` shows both parts, resume brings both back); a spill file
# damaged while suspended: resume refuses naming the
# chunk (exit 11), the process stays suspended, and once the file is whole
# again resume brings every byte back. The rates are logged next to what dd
# reads and writes in the same directory (O_DIRECT).
# gpu-test-limit: 420
. "$(dirname "$0")/lib.sh"
gs_test_init t31-agent-spill

spill=$GS_WORK/spill
mkdir -m 700 "$spill"
jget() { json_get "$GS_OUT" "$1"; }

# dd's rates in the spill directory, O_DIRECT, as the targets compare against
dd_rates() {
  local f=$spill/dd.probe w r
  w=$(dd if=/dev/zero of="$f" bs=64M count=64 oflag=direct conv=fsync 2>&1 | tail -n 1)
  drop_caches
  r=$(dd if="$f" of=/dev/null bs=64M iflag=direct 2>&1 | tail -n 1)
  rm -f "$f"
  log "dd in $spill: write: $w; read: $r"
}

spill_cycle() { # NAME WHAT [SUSPEND ARGS...]; WHERE=split: host memory holds part of it
  local name=$1 what=$2 pid=${APP_PID[$1]} held folder where=${WHERE:-spill} line
  shift 2
  gs_run suspend "$pid" --json "$@"
  expect_rc 0 "$what: suspend" || return 1
  check "$what: the data went to the spill directory ($(jget processes.0.data))" \
    [ "$(jget processes.0.data.where)" == "$where" ] && [ "$(jget processes.0.data.dir)" == "$spill" ]
  if [ "$where" = split ]; then
    check "$what: host memory holds part, at most its 1G ($(jget processes.0.data.memory_bytes) bytes)" \
      [ "$(jget processes.0.data.memory_bytes)" -gt 0 ] && [ "$(jget processes.0.data.memory_bytes)" -le $((1 << 30)) ]
  fi
  held=$(jget processes.0.data.held_bytes)
  check "$what: it holds the 8 GiB written ($held bytes)" [ "${held:-0}" -ge $((8 << 30)) ]
  log "$what: spill write $(jget processes.0.agent.spill_write_s) s for $held bytes, suspend total $(jget total_s) s"
  check "$what: VRAM of the process is 0" [ "$(pid_vram_mib "$pid")" == 0 ]
  check "$what: the process is alive" pid_alive "$pid"
  folder=$(find "$spill" -maxdepth 1 -name "gpusnap-$pid-*" -type d)
  check "$what: its spill folder holds the image ($(du -sh "$folder" 2>/dev/null | cut -f1))" [ -d "$folder/image" ]
  gs_run state -v "$pid"
  line="^data: spilled to $spill, "
  [ "$where" = split ] && line="^data: in host memory, .*, and spilled to $spill, "
  check "$what: state -v says where the data is" grep -q "$line" <<<"$GS_OUT"
  gs_run state
  check "$what: the list sums it up for the host" grep -q "spilled to $spill (1 process)" <<<"$GS_OUT"
  drop_caches
  gs_run resume "$pid" --json
  expect_rc 0 "$what: resume from the spill (cold)" || return 1
  log "$what: resume total $(jget total_s) s, image read $(jget processes.0.agent.image_read_s) s"
  expect_state "$pid" running "$what: state after resume"
  app_verify "$name" "8 GiB after $what"
  check "$what: the spill is removed" [ ! -e "$folder" ]
}

dd_rates
app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 31 || finish
spill_cycle p "suspend --spill-only" --spill-only --spill "$spill" || finish
spill_cycle p "a second --spill-only" --spill-only --spill "$spill" || finish
app_quit p

# host memory short: GPUSNAP_SPILL_DIR takes the data by itself
export GPUSNAP_SPILL_DIR=$spill
GPUSNAP_HOST_MEMORY_LIMIT=1G app_start s 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 32 || finish
WHERE=split spill_cycle s "a suspend whose host memory is short (split)" || finish

# a damaged spill: refused naming the chunk, still suspended, whole again: every byte back
pid=${APP_PID[s]}
gs_run suspend "$pid" --json
expect_rc 0 "suspend to damage" || finish
folder=$(find "$spill" -maxdepth 1 -name "gpusnap-$pid-*" -type d)
data=$(find "$folder/image" -type f -name 'gpu-data-*' | head -n 1)
cp "$data" "$GS_WORK/whole"
printf 'XXXXXXXX' | dd of="$data" bs=1 seek=65536 conv=notrunc 2>/dev/null
gs_run resume "$pid"
expect_rc 11 "resume from a damaged spill is refused"
check "it names the chunk" grep -q "chunk .* is corrupt" <<<"$GS_ERR"
gs_run state "$pid"
check "state says suspended, and why ($GS_OUT)" grep -q "^suspended (the last resume failed" <<<"$GS_OUT"
# the driver put the context back before the agent's part failed: the 8 GiB are not back
check "its data is not back on the GPU ($(pid_vram_mib "$pid") MiB)" [ "$(pid_vram_mib "$pid")" -lt 2048 ]
cp "$GS_WORK/whole" "$data"
gs_run resume "$pid"
expect_rc 0 "resume once the file is whole again"
app_verify s "8 GiB after the repaired spill"
check "the spill is removed" [ ! -e "$folder" ]
app_quit s
unset GPUSNAP_SPILL_DIR
finish
