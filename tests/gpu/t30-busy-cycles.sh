#!/usr/bin/env bash
# t30-busy-cycles.sh - an app whose 4 threads keep launching kernels and copying
# (H2D and D2H) is suspended and resumed 20 times (GPUSNAP_BUSY_CYCLES). While
# suspended its threads make no progress; after each resume they go on, every
# check the app makes still holds (errors=0), and it exits 0.
# gpu-test-shared: yes
. "$(dirname "$0")/lib.sh"
gs_test_init t30-busy-cycles

cycles=${GPUSNAP_BUSY_CYCLES:-20}
status_field() { # FIELD -> value from the last STATUS line
  sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$REPLY_LINE"
}

app_start b 120 "$GS_APPS/busy" --threads 4 || finish
pid=${APP_PID[b]}
app_verify b "busy app before any suspend" || finish

done_cycles=0
for ((c = 1; c <= cycles; c++)); do
  log "-- cycle $c of $cycles"
  suspend_checked b 16 || break
  app_cmd b status STATUS 10 || { fail "no STATUS while suspended"; break; }
  it1=$(status_field iterations)
  sleep 0.5
  app_cmd b status STATUS 10 || { fail "no STATUS while suspended"; break; }
  it2=$(status_field iterations)
  check_eq "cycle $c: iterations frozen while suspended" "$it2" "$it1"
  resume_checked b || break
  app_verify b "cycle $c: busy app advances again with no error" || break
  app_cmd b status STATUS 10
  check_eq "cycle $c: errors seen by the app" "$(status_field errors)" 0
  done_cycles=$c
done
check_eq "suspend/resume cycles completed" "$done_cycles" "$cycles"
app_cmd b status STATUS 10 && log "final: $REPLY_LINE"
app_quit b 60
finish
