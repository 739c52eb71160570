#!/usr/bin/env bash
# t90-agent-pattern.sh - the fast path: a pattern process started with the
# agent (gpusnap run) holding 8 GiB is suspended (the agent moves the data,
# the driver the rest: VRAM -> 0), resumed and verified bit for bit, its
# context's stack limit (set by the app to 4096) shrunk for the driver's
# checkpoint and given back; a suspend during the app's open global-mode
# stream capture refused, the capture unbroken; then a --keep-context cycle (VRAM drops to the context only) and a --driver cycle
# on the same process, each verified.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t90-agent-pattern

app_start p 180 "$GPUSNAP" run -- "$GS_APPS/pattern" --size 8G --alloc-size 1G --seed 90 --stack 4096 || finish
pid=${APP_PID[p]}
expect_vram_at_least p "$pid" 8192
gs_run state "$pid" --json
check "the agent answers in process $pid" grep -q '"path":"agent"' <<<"$GS_OUT"

gs_run suspend "$pid" --json
expect_rc 0 "agent suspend of 8 GiB" || finish
check "suspend took the agent path" grep -q '"path":"agent"' <<<"$GS_OUT"
check "the agent moved the 8 GiB" grep -q '"bytes":85[0-9]*' <<<"$GS_OUT"
check "the agent shrank the context's stack for the driver" grep -q '"stacks_shrunk":1' <<<"$GS_OUT"
expect_state "$pid" suspended "state after an agent suspend"
check "VRAM of the process is 0 after an agent suspend" [ "$(pid_vram_mib "$pid")" == 0 ]
gs_run state -v "$pid"
check "state -v reports the agent holding the data" grep -q '^agent: suspended' <<<"$GS_OUT"
resume_checked p || finish
app_verify p "8 GiB after an agent suspend/resume" || finish
app_cmd p stack STACK
check "the context has the app's stack limit back ($REPLY_LINE)" [ "$REPLY_LINE" == "STACK 4096" ]

# a global-mode stream capture open in the app: the suspend is refused (6), the
# app runs on, and its capture ends and runs as a graph; then a suspend works
app_cmd p capture-open CAPTURE
check "the app left a global-mode capture open ($REPLY_LINE)" [ "$REPLY_LINE" == "CAPTURE OPEN" ]
gs_run suspend "$pid" --json
expect_rc 6 "a suspend during the app's global-mode capture is refused"
check "it says why" grep -q "capturing a CUDA graph in global mode" <<<"$GS_ERR"
app_cmd p capture-close CAPTURE
check "the app's capture was not broken: it ends and runs ($REPLY_LINE)" [ "$REPLY_LINE" == "CAPTURE CLOSED" ]
app_verify p "8 GiB after the refused suspend" || finish

# keep-context: only the data goes; the process keeps its context (~0.5 GiB
# with the default 1 KiB stack; this app's 4 KiB stack makes it ~1.3 GiB: the
# local memory is sized for every thread the GPU can run at once)
vram_snapshot "$pid"
before=$SNAP_PID_MIB
gs_run suspend "$pid" --keep-context --json
expect_rc 0 "suspend --keep-context" || finish
after=$(pid_vram_mib "$pid")
if [[ $before =~ ^[0-9]+$ ]] && [ "$before" -gt 8192 ]; then
  check "keep-context leaves only the context (${after} MiB of ${before})" [ "$after" -lt 1536 ]
fi
gs_run state "$pid"
check "state says suspended with the context kept" grep -q '^suspended' <<<"$GS_OUT"
resume_checked p || finish
app_verify p "8 GiB after a keep-context cycle" || finish

# --driver on an agent process: the driver moves everything, the agent stays out of it
gs_run suspend "$pid" --json --driver
expect_rc 0 "suspend --driver of an agent process" || finish
check "--driver took the driver path" grep -q '"path":"driver"' <<<"$GS_OUT"
expect_state "$pid" suspended "state after suspend --driver"
resume_checked p || finish
app_verify p "8 GiB after a --driver cycle" || finish
app_quit p
finish
