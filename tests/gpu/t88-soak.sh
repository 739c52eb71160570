#!/usr/bin/env bash
# t88-soak.sh - the inference server of t85 (tests/gpu/py/server.py, a small
# PyTorch transformer) answers a steady stream of requests from a client
# thread (tests/gpu/py/server_client.py's hammer, every answer compared with
# an uninterrupted twin's) throughout N agent suspend/resume cycles and then M
# dump/restore cycles (`--tcp-close`, the image replaced in place each time).
# After every resume and restore the server must answer a fresh request.
# Host RSS, open file descriptors and VRAM of the process are sampled at the
# first and the last cycle of each phase and must be flat:
#   RSS  +16 MiB at most: Python's and glibc's allocators move a few MiB
#        between two samples of an idle process; a leak of anything per cycle
#        (a staging buffer, a mapping) or per request exceeds it over the run;
#   fds  +2 at most: a connection of the client being replaced as the sample
#        is taken; a descriptor leaked per cycle exceeds it;
#   VRAM +4 MiB at most (nvidia-smi, whole MiB): the caching allocator may take
#        one more 2 MiB block for a shape it had not seen; a leaked allocation
#        or context per cycle exceeds it.
# Per-cycle times go to cycles.csv (in the test's log folder); a table of them
# and the figures is printed last and appended to $OUT/soak-summary.txt.
#
# Settings: GPUSNAP_SOAK_CYCLES (suspend/resume cycles, default 1000),
# GPUSNAP_SOAK_DUMPS (dump/restore cycles, default 100), GPUSNAP_SOAK_MAX_S
# (stop cycling, and fail, after this many seconds; default: the test's time
# limit from run.sh less 40 s, 560 s alone; one device call runs 10 minutes at
# most: run the soak in pieces, e.g. GPUSNAP_SOAK_CYCLES=500
# GPUSNAP_SOAK_DUMPS=0 twice, then GPUSNAP_SOAK_CYCLES=0 GPUSNAP_SOAK_DUMPS=50
# twice), GPUSNAP_SOAK_SUSPEND_ARGS (e.g. --keep-context), GPUSNAP_SOAK_DUMP_ARGS
# (default --tcp-close), GPUSNAP_SOAK_IMAGE_DIR (default under /dev/shm when it
# has 8 GiB free, else the log folder).
#
# Not in the default suite (it is long): tests/gpu/run.sh t88.
# gpu-test-limit: 600
# gpu-test-default: off
. "$(dirname "$0")/lib.sh"
gs_test_init t88-soak
export GS_APP_STDERR=null
cycles=${GPUSNAP_SOAK_CYCLES:-1000}
dumps=${GPUSNAP_SOAK_DUMPS:-100}
# stop cycling in time to report: before run.sh's limit for this test (GPU_TEST_LIMIT_S), less 40 s
max_s=${GPUSNAP_SOAK_MAX_S:-$((${GPU_TEST_LIMIT_S:-600} - 40))}
read -r -a suspend_args <<<"${GPUSNAP_SOAK_SUSPEND_ARGS:-}"
read -r -a dump_args <<<"${GPUSNAP_SOAK_DUMP_ARGS:---tcp-close}"
if [ -n "${GPUSNAP_SOAK_IMAGE_DIR:-}" ]; then
  img=$GPUSNAP_SOAK_IMAGE_DIR
elif [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -n 1)" -gt $((8 << 20)) ] 2>/dev/null; then
  img=/dev/shm/gpusnap-soak-$$/img
else
  img=$GS_WORK/img
fi
soak_cleanup() {
  gs_cleanup
  [[ $img == /dev/shm/gpusnap-soak-$$/* ]] && rm -rf "/dev/shm/gpusnap-soak-$$"
  return 0
}
trap soak_cleanup EXIT
mkdir -p "$(dirname "$img")"

require_torch
[ "$dumps" -gt 0 ] && require_criu
log "soak: $cycles suspend/resume cycles (suspend ${suspend_args[*]:-default}), $dumps dump/restore cycles (${dump_args[*]}), image $img, limit ${max_s}s"

server_pair_start 97 || finish
pid=${APP_PID[srv]}
server_client_start 97 --wait-s 150 || finish
app_cmd client hammer-start HAMMER 10 || finish


csv=$GS_WORK/cycles.csv
echo "phase,cycle,op1_s,op2_s,answer_s" >"$csv"
op_base=$GS_WORK/op

# Runs gpusnap without gs_run's per-call logging (thousands of calls); OP_RC, OP_S.
op() { # ARGS...
  local t0=${EPOCHREALTIME/./}
  timeout -k 5 "${GS_CMD_TIMEOUT:-120}" "$GPUSNAP" "$@" >"$op_base.out" 2>"$op_base.err"
  OP_RC=$?
  local us=$((${EPOCHREALTIME/./} - t0))
  printf -v OP_S '%d.%06d' $((us / 1000000)) $((us % 1000000))
}

op_failed() { # DESC
  fail "$1: exit $OP_RC ($(head -n 1 "$op_base.err"))"
  log_block "  stderr| " "$(cat "$op_base.err")"
}

# The server answers a request that completes after this point; ANSWER_S: how long it took to come.
fresh_answer() { # DESC
  if app_cmd client next ANSWERED 160 && [[ $REPLY_LINE =~ ^ANSWERED\ [0-9]+\ ([0-9.]+)$ ]]; then
    ANSWER_S=${BASH_REMATCH[1]}
    return 0
  fi
  fail "$1: no fresh answer from the server within 150 s (${REPLY_LINE:-no reply from the client})"
  return 1
}

# SAMPLE_<LABEL>: "rss_kib fds vram_mib torch_reserved twin_vram_mib" of the server now (the last:
# the uninterrupted twin's VRAM, which grows too as CUDA loads kernels lazily for new shapes).
sample() { # LABEL
  local line rss=0 fds vram treserved tvram
  while read -r line; do
    [[ $line == VmRSS:* ]] && { read -r _ rss _ <<<"$line"; break; }
  done <"/proc/$pid/status"
  fds=(/proc/"$pid"/fd/*)
  vram=$(pid_vram_mib "$pid")
  treserved='?'
  if app_cmd client server-stats SERVERSTATS 30; then
    treserved=$(json_get "${REPLY_LINE#SERVERSTATS }" torch_reserved) || treserved='?'
  fi
  tvram=$(pid_vram_mib "${APP_PID[twin]}")
  printf -v "SAMPLE_$1" '%s %s %s %s %s' "$rss" "${#fds[@]}" "$vram" "$treserved" "$tvram"
  log "sample $1: rss ${rss} KiB, ${#fds[@]} fds, VRAM ${vram} MiB (nvidia-smi), torch reserved ${treserved} B, twin's VRAM ${tvram} MiB"
}

# First against last of one phase, with the tolerances in the header.
flat() { # PHASE FIRST_SAMPLE LAST_SAMPLE
  local r1 f1 v1 t1 w1 r2 f2 v2 t2 w2 twin_growth=0
  read -r r1 f1 v1 t1 w1 <<<"$2"
  read -r r2 f2 v2 t2 w2 <<<"$3"
  [[ $w1 =~ ^[0-9]+$ ]] && [[ $w2 =~ ^[0-9]+$ ]] && [ "$w2" -gt "$w1" ] && twin_growth=$((w2 - w1))
  check "$1: host RSS flat (first ${r1} KiB, last ${r2} KiB, +16 MiB allowed)" [ $((r2 - r1)) -le 16384 ]
  check "$1: open fds flat (first $f1, last $f2, +2 allowed)" [ $((f2 - f1)) -le 2 ]
  if [[ $v1 =~ ^[0-9]+$ ]] && [[ $v2 =~ ^[0-9]+$ ]] && [ "$v1" -gt 0 ]; then
    check "$1: VRAM flat (first $v1 MiB, last $v2 MiB, +4 allowed beyond the twin's own growth of $twin_growth MiB)" \
      [ $((v2 - v1 - twin_growth)) -le 4 ]
  elif [[ $t1 =~ ^[0-9]+$ ]] && [[ $t2 =~ ^[0-9]+$ ]]; then
    log "$1: nvidia-smi does not list the server ('$v1', '$v2'): VRAM judged by PyTorch's reserved bytes"
    check "$1: PyTorch's reserved VRAM flat (first $t1 B, last $t2 B, +4 MiB allowed)" [ $((t2 - t1)) -le $((4 << 20)) ]
  else
    fail "$1: VRAM not measured (nvidia-smi: '$v1', '$v2'; PyTorch: '$t1', '$t2')"
  fi
}

hammer_clean() { # WHEN: the hammer has seen no difference and no error so far
  app_cmd client stats STATS 30 || { fail "$1: no stats from the client"; return 1; }
  if [[ $REPLY_LINE == *" diff=0 "* ]] && [[ $REPLY_LINE != *error=* ]]; then return 0; fi
  fail "$1: the server answered unlike its twin or the client failed: $REPLY_LINE"
  return 1
}

fresh_answer "before the first cycle" || finish

over_time() { [ "$SECONDS" -ge "$max_s" ]; }
PARTIAL=

# ---- phase 1: agent suspend/resume cycles under load
done_cycles=0
for ((c = 1; c <= cycles; c++)); do
  if over_time; then PARTIAL+="suspend/resume: $done_cycles of $cycles cycles; "; break; fi
  op suspend "$pid" "${suspend_args[@]}"
  [ "$OP_RC" == 0 ] || { op_failed "cycle $c: suspend"; break; }
  s_s=$OP_S
  op resume "$pid"
  [ "$OP_RC" == 0 ] || { op_failed "cycle $c: resume"; break; }
  fresh_answer "cycle $c: after resume" || break
  echo "suspend,$c,$s_s,$OP_S,$ANSWER_S" >>"$csv"
  done_cycles=$c
  [ "$c" == 1 ] && sample cycles_first
  if [ $((c % 10)) == 0 ]; then
    log "soak: cycle $c: VRAM $(pid_vram_mib "$pid") MiB, twin's $(pid_vram_mib "${APP_PID[twin]}") MiB"
  fi
  if [ $((c % 50)) == 0 ]; then
    log "soak: cycle $c/$cycles (suspend ${s_s}s, resume ${OP_S}s, next answer ${ANSWER_S}s)"
    hammer_clean "cycle $c" || break
  fi
done
if [ "$done_cycles" -gt 0 ]; then
  sample cycles_last
  flat "suspend/resume cycles" "$SAMPLE_cycles_first" "$SAMPLE_cycles_last"
fi
[ "$cycles" -gt 0 ] && check_eq "suspend/resume cycles completed, each followed by a fresh answer" "$done_cycles" "$cycles"

# ---- phase 2: dump/restore cycles under load (the client reconnects after each)
done_dumps=0
for ((d = 1; d <= dumps; d++)); do
  if over_time; then PARTIAL+="dump/restore: $done_dumps of $dumps cycles; "; break; fi
  op dump -D "$img" "$pid" "${dump_args[@]}"
  [ "$OP_RC" == 0 ] || { op_failed "dump $d"; break; }
  dump_s=$OP_S
  wait "$pid" 2>/dev/null
  wait_pid_gone "$pid" || { fail "dump $d: the process still runs"; break; }
  op restore -D "$img"
  [ "$OP_RC" == 0 ] || { op_failed "restore $d"; break; }
  APP_OWN[srv]=restored
  pid_alive "$pid" || { fail "restore $d: process $pid is not back"; break; }
  fresh_answer "dump $d: after restore" || break
  echo "dump,$d,$dump_s,$OP_S,$ANSWER_S" >>"$csv"
  done_dumps=$d
  [ "$d" == 1 ] && sample dumps_first
  if [ $((d % 5)) == 0 ]; then
    log "soak: dump $d: VRAM $(pid_vram_mib "$pid") MiB, twin's $(pid_vram_mib "${APP_PID[twin]}") MiB"
  fi
  if [ $((d % 10)) == 0 ]; then
    log "soak: dump $d/$dumps (dump ${dump_s}s, restore ${OP_S}s, next answer ${ANSWER_S}s)"
    hammer_clean "dump $d" || break
  fi
done
if [ "$done_dumps" -gt 0 ]; then
  sample dumps_last
  flat "dump/restore cycles" "$SAMPLE_dumps_first" "$SAMPLE_dumps_last"
fi
[ "$dumps" -gt 0 ] && check_eq "dump/restore cycles completed, each followed by a fresh answer" "$done_dumps" "$dumps"

# ---- the whole stream: every answer equal to the twin's
if app_cmd client hammer-stop STOPPED 200; then
  hammer=$REPLY_LINE
  answered=$(sed -n 's/.* answered=\([0-9]*\).*/\1/p' <<<"$hammer")
  stream_clean() { [[ $hammer == *" diff=0 "* ]] && [[ $hammer != *error=* ]] && [ "${answered:-0}" -gt 0 ]; }
  check "every answer of the stream equal to the twin's ($hammer)" stream_clean
else
  fail "the client does not stop its stream"
fi
[ -n "$PARTIAL" ] && fail "soak stopped at its time limit (GPUSNAP_SOAK_MAX_S=$max_s): ${PARTIAL% ; }; run it in pieces"

# ---- summary: times per phase, the figures, last
summary=$GS_WORK/soak-summary.txt
{
  echo "t88-soak $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$GS_SRC" describe --always --dirty 2>/dev/null):" \
    "$done_cycles of $cycles suspend/resume cycles (${suspend_args[*]:-default suspend}), $done_dumps of $dumps" \
    "dump/restore cycles (${dump_args[*]}), ${SECONDS}s"
  python3 -S - "$csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = {"suspend": ("suspend", "resume"), "dump": ("dump", "restore")}
print("| phase | step | cycles | first s | median s | p95 s | max s | last s |")
print("|---|---|---|---|---|---|---|---|")
for phase, (op1, op2) in names.items():
    rs = [r for r in rows if r["phase"] == phase]
    if not rs:
        continue
    for key, step in (("op1_s", op1), ("op2_s", op2), ("answer_s", "next answer")):
        v = [float(r[key]) for r in rs]
        s = sorted(v)
        print("| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            phase, step, len(v), v[0], s[len(s) // 2], s[min(len(s) - 1, int(len(s) * 0.95))], s[-1], v[-1]))
EOF
  for label in cycles_first cycles_last dumps_first dumps_last; do
    var=SAMPLE_$label
    [ -n "${!var:-}" ] && echo "$label: rss_kib fds vram_mib torch_reserved_B twin_vram_mib = ${!var}"
  done
  echo "stream: ${hammer:-none}"
} >"$summary"
if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
  { cat "$summary"; echo; } >>"$OUT/soak-summary.txt"
fi
app_quit client 30
app_quit srv 60
app_quit twin 60
echo "== soak summary (also $summary)"
cat "$summary"
finish
