#!/usr/bin/env bash
# t97-agent-no-vram.sh - resume while another process holds the VRAM: a
# pattern process under the agent holding 8 GiB is suspended (VRAM -> 0);
# another process (no agent) then takes all but 2 GiB of the GPU's free
# memory. `gpusnap resume` must fail with exit 14 (no-vram) naming the
# shortage, and leave the process suspended with its data (state
# "suspended", no more than its context on the GPU, nothing half mapped). Once
# the other process is gone, resume succeeds and every byte verifies.
. "$(dirname "$0")/lib.sh"
gs_test_init t97-agent-no-vram

app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 97 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192

gs_run suspend "$pid" --json
expect_rc 0 "agent suspend of 8 GiB" || finish
check "suspend took the agent path" grep -q '"path":"agent"' <<<"$GS_OUT"
expect_state "$pid" suspended "state after the suspend"

# the filler: everything free on GPU 0 but 2 GiB (the suspended process's context fits, its 8 GiB do not)
free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' ')
fill_mib=$((free_mib - 2048))
log "GPU 0: $free_mib MiB free; the filler takes $fill_mib MiB"
app_start f 300 "$GS_APPS/pattern" --size "${fill_mib}M" --alloc-size 1G --seed 7 || finish
expect_vram_at_least f "${APP_PID[f]}" $((fill_mib - 1024))

gs_run resume "$pid" --json
expect_rc 14 "resume while the VRAM is taken fails with no-vram"
check "it names the shortage" grep -q "not enough free GPU memory" <<<"$GS_ERR"
# the state stays suspended, and says why the last resume failed
gs_run state --json "$pid"
check "state after the failed resume: suspended" [ "$(json_get "$GS_OUT" state)" == suspended ]
gs_run state "$pid"
check "state names the failed resume and that resume retries" \
  grep -q "suspended (the last resume failed: not enough free GPU memory.*gpusnap resume retries" <<<"$GS_OUT"
after=$(pid_vram_mib "$pid")
check "the process holds no more than its context on the GPU (${after} MiB)" between "$after" 0 1535
gs_run state -v "$pid"
check "the agent still holds the data" grep -q '^agent: suspended' <<<"$GS_OUT"

app_quit f
gs_run resume "$pid" --json
expect_rc 0 "resume once the VRAM is free again" || finish
expect_state "$pid" running "state after the resume"
expect_vram_at_least p "$pid" 8192
app_verify p "8 GiB bit for bit after the failed and the good resume" || finish
app_quit p
finish
