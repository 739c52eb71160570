#!/usr/bin/env bash
# t34-switch-turns.sh - two CUDA processes with known data take turns on one
# GPU with `gpusnap switch`: two pattern apps under the agent (gpusnap run),
# each holding GPUSNAP_T34_SIZE (default 8G), switch GPUSNAP_T34_TURNS times
# (default 8), the one that comes back verified bit for bit each turn and
# the other's VRAM down to 0. With room on the GPU for both, the default
# (--overlap auto) runs the halves at once (order together, overlap_s > 0);
# --overlap never runs them one after the other. Then a pattern app without
# the agent (driver path) takes turns with an agent one, both ways; then a
# failure in the middle (switch-after-both) puts both back, data intact.
. "$(dirname "$0")/lib.sh"
gs_test_init t34-switch-turns

SIZE=${GPUSNAP_T34_SIZE:-8G}
TURNS=${GPUSNAP_T34_TURNS:-8}
mib=$((${SIZE%G} * 1024))

app_start a 300 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 341 || finish
app_start b 300 "$GPUSNAP" run -- "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 342 || finish
pa=${APP_PID[a]} pb=${APP_PID[b]}
expect_vram_at_least a "$pa" "$mib"
expect_vram_at_least b "$pb" "$mib"
gs_run suspend "$pb" --json
expect_rc 0 "b suspended before the turns" || finish

out=a in=b
for ((turn = 1; turn <= TURNS; turn++)); do
  po=${APP_PID[$out]} pi=${APP_PID[$in]}
  args=()
  [ $((turn % 4)) = 0 ] && args=(--overlap never)
  gs_run switch "$po" "$pi" --json "${args[@]}"
  expect_rc 0 "turn $turn: switch $out out, $in in ${args[*]}" || finish
  check "turn $turn: both halves on the agent path" \
    [ "$(json_get "$GS_OUT" out.path)/$(json_get "$GS_OUT" in.path)" == agent/agent ]
  if [ ${#args[@]} = 0 ]; then
    check "turn $turn: room on the GPU: the halves ran at once ($(json_get "$GS_OUT" order_why))" \
      [ "$(json_get "$GS_OUT" order)" == together ]
    check "turn $turn: they overlapped ($(json_get "$GS_OUT" overlap_s) s of $(json_get "$GS_OUT" total_s) s)" \
      awk -v o="$(json_get "$GS_OUT" overlap_s)" 'BEGIN { exit !(o > 0) }'
  else
    check "turn $turn: --overlap never: one after the other" [ "$(json_get "$GS_OUT" order)" == out-first ]
  fi
  log "turn $turn: out $(json_get "$GS_OUT" out.time_s) s, in $(json_get "$GS_OUT" in.time_s) s, total $(json_get "$GS_OUT" total_s) s"
  check "turn $turn: $out's VRAM is 0" [ "$(pid_vram_mib "$po")" == 0 ]
  expect_state "$po" suspended "turn $turn: $out"
  app_verify "$in" "turn $turn: $in's $SIZE" || finish
  t=$out out=$in in=$t
done
# now $out runs, $in is suspended

# a process without the agent: the driver path on one side
app_start c 300 "$GS_APPS/pattern" --size "$SIZE" --alloc-size 1G --seed 343 || finish
pc=${APP_PID[c]}
gs_run suspend "$pc" --json
expect_rc 0 "c (no agent) suspended" || finish
po=${APP_PID[$out]}
gs_run switch "$po" "$pc" --json
expect_rc 0 "switch $out (agent) out, c (driver) in" || finish
check "agent out, driver in" [ "$(json_get "$GS_OUT" out.path)/$(json_get "$GS_OUT" in.path)" == agent/driver ]
app_verify c "c's $SIZE after the driver path's resume" || finish
gs_run switch "$pc" "$po" --json
expect_rc 0 "switch c (driver) out, $out (agent) in" || finish
app_verify "$out" "$out's $SIZE after the mixed turns" || finish

# a failure after both halves: both back where they were
pi=${APP_PID[$in]}
GPUSNAP_FAULT=switch-after-both gs_run switch "$po" "$pi" --json
expect_rc 1 "a failure after both halves"
check "it was undone" grep -q "undone, process $po runs on, process $pi stays suspended" <<<"$GS_ERR"
expect_state "$pi" suspended "$in after the undo"
app_verify "$out" "$out's $SIZE after the undo" || finish
gs_run switch "$po" "$pi"
expect_rc 0 "the switch afterwards" || finish
app_verify "$in" "$in's $SIZE after an undone switch and a switch" || finish
gs_run resume "$po"
expect_rc 0 "resume the last one out" || finish
app_verify "$out" "$out's $SIZE at the end" || finish
gs_run resume "$pc"
expect_rc 0 "resume c" || finish
app_verify c "c's $SIZE at the end" || finish
app_quit a
app_quit b
app_quit c
finish
