#!/usr/bin/env bash
# t35-switch-full-gpu.sh - two processes that each fill most of the GPU take
# turns with `gpusnap switch`: two pattern apps under the agent, each holding
# GPUSNAP_T35_PERCENT (default 60) percent of GPU 0's memory, so IN never
# fits beside OUT: the switch goes out-first (order_why names the GPU's free
# memory), IN's resume follows once OUT's memory is free (retried while the
# driver still counts it), GPUSNAP_T35_TURNS times (default 4), the data of
# the one that comes back verified bit for bit each turn. The suspended
# one's data is in host memory: skipped where MemAvailable cannot hold it.
. "$(dirname "$0")/lib.sh"
gs_test_init t35-switch-full-gpu

PERCENT=${GPUSNAP_T35_PERCENT:-60}
TURNS=${GPUSNAP_T35_TURNS:-4}
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
gib=$((total * PERCENT / 100 / 1024))
avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
if [ "$avail" -lt $((gib + gib / 4)) ]; then
  skip "host memory: ${avail} GiB available, ${gib} GiB (and a margin) needed for the suspended process's data"
  finish
fi
log "GPU 0: $total MiB; each process holds ${gib} GiB ($PERCENT%)"

app_start a 600 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "${gib}G" --alloc-size 1G --seed 351 || finish
pa=${APP_PID[a]}
gs_run suspend "$pa" --json
expect_rc 0 "a (${gib} GiB) suspended to make room for b" || finish
app_start b 600 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "${gib}G" --alloc-size 1G --seed 352 || finish

out=b in=a
# shellcheck disable=SC2034 # gs_run reads it: a switch of this size may take minutes
GS_CMD_TIMEOUT=600
for ((turn = 1; turn <= TURNS; turn++)); do
  po=${APP_PID[$out]} pi=${APP_PID[$in]}
  gs_run switch "$po" "$pi" --json --timeout 120
  expect_rc 0 "turn $turn: switch $out out, $in in (${gib} GiB each)" || finish
  check "turn $turn: no room for both: one after the other ($(json_get "$GS_OUT" order_why))" \
    [ "$(json_get "$GS_OUT" order)" == out-first ]
  log "turn $turn: out $(json_get "$GS_OUT" out.time_s) s, in $(json_get "$GS_OUT" in.time_s) s, total $(json_get "$GS_OUT" total_s) s, retries $(json_get "$GS_OUT" retries)"
  check "turn $turn: $out's VRAM is 0" [ "$(pid_vram_mib "$po")" == 0 ]
  app_verify "$in" "turn $turn: $in's ${gib} GiB" 300 || finish
  t=$out out=$in in=$t
done
# $out runs, $in is suspended: the suspended one comes back once the other has gone
app_quit "$out" 120
gs_run resume "${APP_PID[$in]}"
expect_rc 0 "resume $in once $out has quit" || finish
app_verify "$in" "$in's ${gib} GiB at the end" 300 || finish
app_quit "$in" 120
finish
