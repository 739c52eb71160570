#!/usr/bin/env bash
# t50-map.sh - resume onto another GPU (needs 2 GPUs): a pattern process on GPU 0
# is suspended and resumed with --map 0=1; its data verifies and nvidia-smi shows
# its memory on GPU 1. Then back with --map UUID1=UUID0 (the UUID form). gpusnap
# completes a partial map (the driver wants every GPU paired), so a refusal
# (exit 10) is a failure; the process must then still be suspended and resume
# without a map.
. "$(dirname "$0")/lib.sh"
gs_test_init t50-map
require_gpus 2 "--map needs 2 GPUs"

uuid0=$(gpu_uuid 0) uuid1=$(gpu_uuid 1)
log "GPU 0: $uuid0, GPU 1: $uuid1"

# Which GPUs PID's memory is on, as indexes of nvidia-smi ("0", "1", "0 1").
pid_gpus() {
  local u out=
  for u in $(pid_gpu_uuids "$1"); do
    [ "$u" == "$uuid0" ] && out+="0 "
    [ "$u" == "$uuid1" ] && out+="1 "
  done
  echo "${out% }"
}

# Resume with a map. Returns 0 if applied, 1 on a failure, 2 if refused (exit 10;
# then the process must still be suspended and resume without a map).
resume_mapped() { # MAP DESC
  gs_run resume "$pid" --json --map "$1"
  if [ "$GS_RC" == 10 ]; then
    fail "the driver refused --map $1: $(head -n 1 <<<"$GS_ERR")"
    expect_state "$pid" suspended "still suspended after the refused map"
    resume_checked p && app_verify p "pattern after resume without a map"
    return 2
  fi
  expect_rc 0 "$2" || return 1
  expect_json_process "$pid" running "$2"
  expect_state "$pid" running "state after $2"
}

app_start p 120 "$GS_APPS/pattern" --device 0 --size 2G --seed 50 || finish
pid=${APP_PID[p]}
visible=1
on=$(pid_gpus "$pid")
if [ -z "$on" ]; then
  visible=0
  log "note: nvidia-smi does not list pid $pid; placement checked through per-GPU memory use"
else
  check_eq "pattern's memory before suspend is on GPU" "$on" 0
fi

used_on() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$1" | tr -d ' '; }

suspend_checked p 2048 || finish
gpu1_before=$(used_on 1)
resume_mapped 0=1 "resume --map 0=1"
case $? in 1) finish ;; 2) app_quit p; finish ;; esac
app_verify p "2 GiB pattern after resume onto GPU 1" || finish
if [ $visible == 1 ]; then
  check_eq "pattern's memory after --map 0=1 is on GPU" "$(pid_gpus "$pid")" 1
else
  gpu1_after=$(used_on 1)
  check "GPU 1 memory use grew by >= 2 GiB ($gpu1_before -> $gpu1_after MiB)" \
    test $((gpu1_after - gpu1_before)) -ge 2048
fi
app_cmd p info INFO 10 && log "the app still believes: $REPLY_LINE"

suspend_checked p 2048 || finish
resume_mapped "$uuid1=$uuid0" "resume --map UUID1=UUID0"
case $? in 1) finish ;; 2) app_quit p; finish ;; esac
app_verify p "2 GiB pattern after resume back onto GPU 0 (UUID map)"
if [ $visible == 1 ]; then
  check_eq "pattern's memory after the UUID map is on GPU" "$(pid_gpus "$pid")" 0
fi
app_quit p
finish
