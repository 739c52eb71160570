#!/usr/bin/env bash
# t69-torch-stack.sh - what users run on top of PyTorch, under the agent
# (gpusnap run): Hugging Face transformers (a Llama model's greedy generate()
# through SDPA and a KV cache), torch.compile (Inductor's Triton kernels,
# JIT-compiled and loaded as modules in the process, and mode="reduce-overhead"
# with its CUDA graph trees and their pool) and torchvision's resnet18 through
# cuDNN, trained on batches from a DataLoader's forked worker processes,
# besides 1 GiB of seeded data and NVML queried through pynvml
# (py/torch_stack.py). Every result
# computed again after two agent suspend/resume cycles (VRAM 0 while
# suspended), a --keep-context cycle, a --driver cycle and a dump, kill and
# restore is bit-identical to the one computed before; Inductor's compile
# workers (CUDA processes too) and the DataLoader's workers (which inherit
# the driver's device mappings through fork, and lose them to the agent) are
# dumped and restored with the app, by a dump without --tree. A
# package that is not installed leaves its part out, with a SKIP line.
# gpu-test-limit: 480
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t69-torch-stack
py=$(dirname "$0")/py/torch_stack.py
require_criu

parts=
for part in llama:transformers compile:triton vision:torchvision; do
  if python3 -c "import ${part#*:}" 2>/dev/null; then
    parts+=${parts:+ }${part%%:*}
  else
    skip "${part#*:} is not installed here: no ${part%%:*} part"
  fi
done
[ -n "$parts" ] || { skip "none of transformers, triton, torchvision is installed"; finish; }
# NVML, kept open by the app (pynvml), is checked where installed; it is named last in CHECK OK
python3 -c "import pynvml" 2>/dev/null && want_tag="$parts nvml" || { want_tag=$parts; skip "pynvml is not installed: NVML is not checked"; }

check_ok() { app_reply_ok stack check "CHECK OK $want_tag" 180 "$1"; } # WHAT

# As users run it: Inductor compiles in worker processes of the app's own,
# which initialize CUDA (T69_ENV=TORCHINDUCTOR_COMPILE_THREADS=1 compiles in
# the process instead).
app_start stack 420 env ${T69_ENV:-GS_T69=1} "$GPUSNAP" run -- python3 "$py" --seed 69 --parts "${parts// /,}" || finish
pid=${APP_PID[stack]}
check_ok "results before any suspend"
expect_agent_releasable stack "$pid" $((1 << 30))
for cycle in 1 2; do
  agent_suspend_checked "agent suspend $cycle" "$pid" || break
  log "suspend $cycle: $(json_get "$GS_OUT" 'processes.0.agent.bytes') bytes, $(json_get "$GS_OUT" total_s) s"
  gs_run resume "$pid" --json
  expect_rc 0 "resume $cycle" || break
  check_ok "bit-identical results after cycle $cycle"
done
gs_run suspend "$pid" --keep-context --json
expect_rc 0 "suspend --keep-context"
gs_run resume "$pid" --json
expect_rc 0 "resume after --keep-context"
check_ok "bit-identical after a --keep-context cycle"
gs_run suspend "$pid" --driver --json
expect_rc 0 "suspend --driver (the driver moves everything)"
gs_run resume "$pid" --json
expect_rc 0 "resume after --driver"
check_ok "bit-identical after a --driver cycle"
# CRIU dumps the app with its worker processes: where they use CUDA, a dump
# without --tree is the tree's, each CUDA process of it with its GPU state
kids=$(pgrep -P "$pid" | sort -n | tr '\n' ' ')
log "the app's processes: $(ps -o pid=,ppid=,args= --ppid "$pid" --pid "$pid" | cut -c1-150 | tr '\n' ';')"
gs_run dump --json -D "$GS_WORK/img" "$pid"
if expect_rc 0 "dump of the app and whatever runs under it"; then
  if [ "$(json_get "$GS_OUT" tree)" == true ]; then
    check_eq "the app's own GPU state took the agent path" "$(json_get "$GS_OUT" "processes[pid=$pid].path")" agent
    log "the dump took the tree: $(json_get "$GS_OUT" processes)"
  else
    check_eq "dump path" "$(json_get "$GS_OUT" path)" agent
  fi
  log "dump: $(json_get "$GS_OUT" times)"
  wait "$pid" 2>/dev/null
  check "process $pid is gone after dump" wait_pid_gone "$pid"
  if restore_checked "$GS_WORK/img" "$pid"; then
    check_eq "the app's child processes are back" "$(pgrep -P "$pid" | sort -n | tr '\n' ' ')" "$kids"
    check_ok "bit-identical after dump, kill and restore (the DataLoader's workers feeding the training step)"
  fi
fi
app_quit stack 60
finish
