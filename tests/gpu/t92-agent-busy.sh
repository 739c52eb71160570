#!/usr/bin/env bash
# t92-agent-busy.sh - the busy app (4 threads launching kernels and copying)
# under the agent, suspended and resumed 100 times (GPUSNAP_AGENT_CYCLES):
# no corruption, no deadlock, no error seen by the app.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t92-agent-busy

cycles=${GPUSNAP_AGENT_CYCLES:-100}
status_field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$REPLY_LINE"; }

app_start b 120 "$GPUSNAP" run -- "$GS_APPS/busy" --threads 4 || finish
pid=${APP_PID[b]}
app_verify b "busy app under the agent before any suspend" || finish
done_cycles=0
for ((c = 1; c <= cycles; c++)); do
  gs_run suspend "$pid" --json
  [ "$GS_RC" == 0 ] || { fail "cycle $c: suspend exit $GS_RC ($(head -n1 <<<"$GS_ERR"))"; break; }
  gs_run resume "$pid" --json
  [ "$GS_RC" == 0 ] || { fail "cycle $c: resume exit $GS_RC ($(head -n1 <<<"$GS_ERR"))"; break; }
  if [ $((c % 10)) == 0 ]; then
    app_verify b "cycle $c: busy app advances with no error" || break
  fi
  done_cycles=$c
done
check_eq "agent suspend/resume cycles completed" "$done_cycles" "$cycles"
app_cmd b status STATUS 10
check_eq "errors seen by the app" "$(status_field errors)" 0
app_quit b 60
finish
