#!/usr/bin/env bash
# t35-switch-full-gpu.sh - two processes take turns on a GPU that has room
# for only one of them: a pattern app without the agent fills GPU 0 but for
# about one and a half times GPUSNAP_T35_SIZE (default 16G), and two pattern
# apps under the agent holding GPUSNAP_T35_SIZE each take turns
# GPUSNAP_T35_TURNS times (default 4) with `gpusnap switch`. IN never fits
# beside OUT, so every switch goes out-first (order_why names the GPU's free
# memory) and IN's resume follows once OUT's memory is free (retried while
# the driver still counts it); the one that comes back is verified bit for
# bit each turn, and the filler at the end.
. "$(dirname "$0")/lib.sh"
gs_test_init t35-switch-full-gpu

SIZE=${GPUSNAP_T35_SIZE:-16G}
TURNS=${GPUSNAP_T35_TURNS:-4}
gib=${SIZE%G}
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' ')
filler=$((free / 1024 - gib - gib / 2 - 2))
if [ "$filler" -lt 1 ]; then
  skip "GPU 0 has $free MiB free: too little to fill it around two apps of $SIZE"
  finish
fi
log "GPU 0: $free MiB free; a filler of ${filler} GiB leaves room for one app of $SIZE, not two"

app_start f 600 "$GS_APPS/pattern" --size "${filler}G" --alloc-size 1G --seed 350 || finish
app_start a 300 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 351 || finish
pa=${APP_PID[a]}
gs_run suspend "$pa" --json
expect_rc 0 "a suspended to make room for b" || finish
app_start b 300 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 352 || finish

out=b in=a
for ((turn = 1; turn <= TURNS; turn++)); do
  po=${APP_PID[$out]} pi=${APP_PID[$in]}
  gs_run switch "$po" "$pi" --json --timeout 60
  expect_rc 0 "turn $turn: switch $out out, $in in" || finish
  check "turn $turn: no room for both: one after the other ($(json_get "$GS_OUT" order_why))" \
    [ "$(json_get "$GS_OUT" order)" == out-first ]
  log "turn $turn: out $(json_get "$GS_OUT" out.time_s) s, in $(json_get "$GS_OUT" in.time_s) s, total $(json_get "$GS_OUT" total_s) s, retries $(json_get "$GS_OUT" retries)"
  check "turn $turn: $out's VRAM is 0" [ "$(pid_vram_mib "$po")" == 0 ]
  app_verify "$in" "turn $turn: $in's $SIZE" || finish
  t=$out out=$in in=$t
done
# $out runs, $in is suspended: resuming it beside $out is refused for lack of GPU memory, and it stays suspended
pi=${APP_PID[$in]}
gs_run resume "$pi"
expect_rc 14 "resume of $in beside $out: no room"
# (its state line may add why the last resume failed: the JSON state is the plain word)
gs_run state "$pi" --json
check "$in after the refused resume: suspended" [ "$(json_get "$GS_OUT" state)" == suspended ]
app_verify f "the filler's ${filler} GiB" || finish
app_quit f 120
gs_run resume "$pi"
expect_rc 0 "resume $in once the filler has gone" || finish
app_verify "$in" "$in's $SIZE at the end" || finish
app_quit a
app_quit b
finish
