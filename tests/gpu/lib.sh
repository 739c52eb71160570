# lib.sh - shared helpers of the GPU test scripts (tests/gpu/t*.sh), the
# benchmark (bench/run.sh) and the demo (scripts/demo.sh). Source it.
#
# - Apps (tests/gpu/apps) run with stdin/stdout on FIFOs: app_start, app_cmd,
#   app_expect, app_verify, app_quit. Every wait has a timeout and notices when
#   the app died, so a broken app fails a check instead of hanging the suite.
# - gpusnap runs through gs_run, which logs the command, exit code, time and
#   output and leaves them in GS_RC / GS_OUT / GS_ERR; json_get reads its --json.
# - VRAM of a process through nvidia-smi (a process it does not list holds 0).
# - pass/fail/skip record results; finish prints "RESULT ..." and exits 0 (all
#   passed), 77 (something skipped, nothing failed) or 1.
# - Everything started here is killed on exit (trap), also on a timeout.
#
# Environment: GPUSNAP_BUILD (build dir, default <repo>/build), GPUSNAP_BIN
# (default $GPUSNAP_BUILD/gpusnap), GPU_TEST_WORK (work/log dir of one test).

export LC_ALL=C
# nvidia-smi numbers GPUs in PCI bus order; make CUDA (apps and gpusnap) agree.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
# NVLink multicast (NVLS) stays off on the lent multi-GPU machines: NCCL, PyTorch's
# symmetric memory and NVSHMEM would otherwise create multicast objects.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

GS_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GS_BUILD=${GPUSNAP_BUILD:-$GS_SRC/build}
case $GS_BUILD in /*) ;; *) GS_BUILD=$PWD/$GS_BUILD ;; esac
GPUSNAP=${GPUSNAP_BIN:-$GS_BUILD/gpusnap}
GS_APPS=$GS_BUILD/tests/gpu/apps
GS_TREE=$GS_SRC/tests/gpu/apps/tree.sh

GS_T0=$EPOCHREALTIME
GS_PASS=0 GS_FAIL=0 GS_SKIP=0
GS_TEST=${GS_TEST:-}
GS_WORK=${GS_WORK:-}
GS_N=0
GS_RC=0 GS_OUT='' GS_ERR='' GS_SECS=0
REPLY_LINE=

declare -A APP_PID APP_IN APP_OUT APP_ERRF APP_OWN APP_RCFILE APP_PARTIAL
GS_EXTRA_PIDS=()

# ---------------------------------------------------------------- logging

gs_elapsed() { # [T0] -> seconds since T0 (default: since this script started), 3 decimals
  awk -v a="${1:-$GS_T0}" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'
}

log() { printf '[%8s] %s\n' "$(gs_elapsed)" "$*"; }

# Prints a file or string indented, at most 60 lines (the rest is in the work dir).
log_block() { # PREFIX TEXT
  local prefix=$1 text=$2 n=0 line
  [ -n "$text" ] || return 0
  while IFS= read -r line; do
    n=$((n + 1))
    if [ $n -gt 60 ]; then
      printf '%s... (more in %s)\n' "$prefix" "$GS_WORK"
      break
    fi
    printf '%s%s\n' "$prefix" "$line"
  done <<<"$text"
}

pass() { GS_PASS=$((GS_PASS + 1)); printf 'PASS: %s\n' "$*"; }
fail() { GS_FAIL=$((GS_FAIL + 1)); printf 'FAIL: %s\n' "$*"; }
skip() { GS_SKIP=$((GS_SKIP + 1)); printf 'SKIP: %s\n' "$*"; }

check() { # DESC COND... : pass if the command COND succeeds
  local desc=$1
  shift
  if "$@"; then pass "$desc"; else fail "$desc"; fi
}

# between VALUE LO HI: VALUE is a whole number from LO to HI ("check DESC between ..."; a chain
# "check DESC [ A ] && [ B ]" would check A alone: lint-check-chains.sh refuses it)
between() { [ "$1" -ge "$2" ] 2>/dev/null && [ "$1" -le "$3" ]; }
# true once COND succeeds, tried every 0.1 s for up to SECONDS: what gpusnap finishes in the
# background (a spill read back is removed by a detached remover, src/cli/spill.c)
eventually() { # SECONDS COND...
  local end=$((SECONDS + $1))
  shift
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done
}
empty_dir() { [ -z "$(ls -A "$1")" ]; } # DIR: nothing in it

check_eq() { # DESC GOT WANT
  if [ "$2" == "$3" ]; then pass "$1: $2"; else fail "$1: got '$2', wanted '$3'"; fi
}

# Ends a test: a RESULT line for the runner and an exit code (0 pass, 77 skip, 1 fail).
finish() {
  local verdict=PASS code=0
  if [ $GS_FAIL -gt 0 ]; then
    verdict=FAIL code=1
  elif [ $GS_SKIP -gt 0 ]; then
    verdict=SKIP code=77
  elif [ $GS_PASS -eq 0 ]; then
    fail "no check ran"
    verdict=FAIL code=1
  fi
  echo "RESULT ${GS_TEST:-test}: $verdict ($GS_PASS passed, $GS_FAIL failed, $GS_SKIP skipped) in $(gs_elapsed)s"
  exit $code
}

# ---------------------------------------------------------------- setup and cleanup

# Sets up a test: work dir, cleanup trap, and checks that the binaries exist.
gs_test_init() { # NAME
  GS_TEST=$1
  gs_lib_init "${GPU_TEST_WORK:-}"
  trap gs_cleanup EXIT
  trap 'fail "interrupted by a signal (timeout?)"; exit 143' TERM INT HUP
  log "== $GS_TEST  (gpusnap: $GPUSNAP, apps: $GS_APPS, work: $GS_WORK)"
  local f
  for f in "$GPUSNAP" "$GS_APPS/pattern" "$GS_APPS/busy" "$GS_APPS/counter" "$GS_APPS/spin"; do
    if [ ! -x "$f" ]; then
      fail "missing $f (build with: cmake -S . -B build -DGPUSNAP_GPU_APPS=ON && cmake --build build -j)"
      finish
    fi
  done
}

# Work dir only (bench, demo): they install their own traps and call gs_cleanup.
gs_lib_init() { # [WORKDIR]
  if [ -n "${1:-}" ]; then
    GS_WORK=$1
    mkdir -p "$GS_WORK" || exit 1
  else
    GS_WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpusnap-${GS_TEST:-run}.XXXXXX") || exit 1
  fi
}

# For the bench/ scripts: a SKIP line and exit 0 without a GPU (make test on CI); OUT made absolute
# (default ./gpu-out).
bench_prologue() { # SCRIPT
  if ! have_gpu; then
    echo "SKIP: no NVIDIA GPU on this machine ($1)"
    exit 0
  fi
  OUT=${OUT:-$GS_SRC/gpu-out}
  case $OUT in /*) ;; *) OUT=$GS_SRC/$OUT ;; esac
}

# For the bench/ scripts: their results, $OUT/bench-NAME.jsonl (JSONL, one line per measurement,
# emptied) and $OUT/bench-NAME.md (MD, the table, written at the end; an old one removed); NAME "" is
# bench/run.sh's bench.jsonl and bench.md.
bench_outputs() { # NAME
  local stem=bench${1:+-$1}
  mkdir -p "$OUT" || exit 1
  JSONL=$OUT/$stem.jsonl
  MD=$OUT/$stem.md
  : >"$JSONL"
  rm -f "$MD"
}

# For the bench/ scripts: the work directory (GPUSNAP_BENCH_WORK, else a fresh one), cleaned up on exit by
# EXIT_CMD (gs_cleanup, or a function of the script's that calls it), and an interruption reported as one.
bench_work() { # EXIT_CMD
  gs_lib_init "${GPUSNAP_BENCH_WORK:-}"
  # shellcheck disable=SC2064 # EXIT_CMD is the caller's, expanded when the trap runs
  trap "$1" EXIT
  trap 'echo "ERROR: interrupted"; exit 143' TERM INT HUP
}

# For the bench/ scripts' records: GPU 0's name and driver, the source's git revision.
bench_device() {
  # shellcheck disable=SC2034 # the caller's records read them
  DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)
  # shellcheck disable=SC2034
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0 2>/dev/null)
  # shellcheck disable=SC2034
  GITREV=$(git -C "$GS_SRC" describe --always --dirty 2>/dev/null || echo unknown)
}

# For the bench/ scripts: gpusnap ARGS (its --json kept), one JSON line for it in $JSONL, the wall time in
# T; a failure is said in a FAIL line and sets FAILED=1.
bench_timed() { # PATH WHAT ARGS...
  local path=$1 what=$2
  shift 2
  gs_run "$@"
  # shellcheck disable=SC2034 # the caller's
  T=$GS_SECS
  python3 - "$JSONL" "$path" "$what" "$GS_RC" "$GS_SECS" "$GS_OUT" "$*" <<'EOF'
import json, sys
f, path, what, rc, wall, out, cmd = sys.argv[1:]
try:
    doc = json.loads(out)
except Exception:
    doc = None
with open(f, "a") as fh:
    fh.write(json.dumps({"path": path, "what": what, "rc": int(rc), "wall_s": float(wall), "command": "gpusnap " + cmd,
                         "gpusnap": doc}) + "\n")
EOF
  if [ "$GS_RC" != 0 ]; then
    echo "FAIL: $path: $what: exit $GS_RC: $(head -n 1 <<<"$GS_ERR")"
    # shellcheck disable=SC2034 # the caller's
    FAILED=1
    return 1
  fi
}

# For the bench/ scripts: ends the server (tests/gpu/py/server.py) whose HTTP port is PORT and waits until
# PID is gone (killing it if it does not go).
bench_quit_server() { # PORT PID
  python3 - "$1" <<'EOF' >/dev/null 2>&1
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
c.request("POST", "/quit", b"")
c.getresponse().read()
EOF
  wait_pid_gone "$2" || gs_kill_pid "$2"
}

# For the bench/ scripts that serve a Hugging Face model: a SKIP line and exit 0 where PyTorch with CUDA or
# transformers is missing.
bench_require_hf() { # SCRIPT
  if ! python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "SKIP: PyTorch with CUDA and transformers are not installed here ($1)"
    exit 0
  fi
}

# For the bench/ scripts: the Llama-shaped model of SIZE (1b, 3b, 8b; seeded random bf16 weights,
# tests/gpu/py/server.py --make-hf-model) in DIR, written unless it is there; exits the bench if it cannot.
bench_hf_model() { # DIR SIZE
  [ -f "$1/config.json" ] && return 0
  local t0=$EPOCHREALTIME
  rm -rf "$1"
  python3 "$GS_SRC/tests/gpu/py/server.py" --make-hf-model "$1" --hf-size "$2" --seed 7 >"$GS_WORK/make-model.log" 2>&1 ||
    { echo "ERROR: cannot write the model: $(tail -n 5 "$GS_WORK/make-model.log")"; exit 1; }
  log "wrote $1 ($(du -sh "$1" | cut -f1)) in $(gs_elapsed "$t0") s"
}

# For the bench/ scripts: the first answer of a server (tests/gpu/py/first_answer.py: seconds since SINCE,
# a Unix time as $EPOCHREALTIME, its tokens and cache sum) as JSON in ANSWER, logged; 1 if none came.
bench_first_answer() { # SINCE ARGS... (--ports-file FILE or --port P, and first_answer.py's others)
  local since=$1
  shift
  ANSWER=$(python3 "$GS_SRC/tests/gpu/py/first_answer.py" --since "$since" "$@" 2>"$GS_WORK/first_answer.err") || {
    log "no answer: $(cat "$GS_WORK/first_answer.err")"
    return 1
  }
  log "  answer: $ANSWER"
}

# The median of the numbers given; of an even count, the mean of the middle two (to 3 places).
bench_median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Empties the page cache (the bench's cold rows); says so where it cannot.
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "note: cannot drop the page cache"; }

pid_alive() { # PID: exists and is not a zombie
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

# Remembers a pid so the runner can kill it if this script is killed first.
gs_track_pid() { [ -n "$GS_WORK" ] && echo "$1" >>"$GS_WORK/pids"; }

gs_kill_pid() { # PID: TERM, then KILL after 3 s
  local pid=$1 i
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 30; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.1
  done
  log "pid $pid ignored SIGTERM for 3 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null
}

gs_cleanup() {
  local name pid
  for name in "${!APP_PID[@]}"; do
    pid=${APP_PID[$name]}
    if pid_alive "$pid"; then
      log "cleanup: killing app $name (pid $pid)"
      gs_kill_pid "$pid"
    fi
  done
  for pid in "${GS_EXTRA_PIDS[@]}"; do
    pid_alive "$pid" && gs_kill_pid "$pid"
  done
  # FIFOs would only get in the way of the log tarball.
  [ -n "$GS_WORK" ] && find "$GS_WORK" -type p -delete 2>/dev/null
  return 0
}

# ---------------------------------------------------------------- apps

# Closes, in a child about to exec, the FIFO ends this shell holds for other apps
# (an app holding another app's stdin open would never see end of input).
gs_close_app_fds() {
  local n fd
  for n in "${!APP_IN[@]}"; do
    fd=${APP_IN[$n]}; exec {fd}>&-
    fd=${APP_OUT[$n]}; exec {fd}>&-
  done
}

# Starts CMD as app NAME with stdin/stdout on FIFOs and waits for "READY <pid>".
# Sets APP_PID[NAME]. Returns 1 (after a FAIL line) if it does not get ready.
app_start() { # NAME READY_TIMEOUT CMD [ARGS...]
  local name=$1 timeout=$2
  shift 2
  local in="$GS_WORK/$name.in" out="$GS_WORK/$name.out" err="$GS_WORK/$name.stderr"
  # stderr is opened for appending: CRIU refuses to restore a process whose
  # open regular file changed size since the dump (the app writes on after
  # `dump --leave-running`, or a first restore writes before a second one),
  # except a write-only O_APPEND one, as logs are. GS_APP_STDERR=null drops it.
  [ "${GS_APP_STDERR:-file}" == null ] && err=/dev/null
  [ "$err" != /dev/null ] && : >"$err"
  rm -f "$in" "$out"
  mkfifo "$in" "$out" || { fail "mkfifo in $GS_WORK"; return 1; }
  log "start $name: $*"
  (
    gs_close_app_fds
    exec "$@"
  ) <"$in" >"$out" 2>>"$err" &
  local pid=$!
  gs_track_pid "$pid"
  app_attach "$name" "$pid" "$in" "$out" "$err" "" || return 1
  APP_OWN[$name]=1
  app_wait_ready "$name" "$timeout"
}

# Attaches to an app started elsewhere (tree.sh's children) through its FIFOs.
# Opening read-write never blocks, whatever the app has opened yet.
app_attach() { # NAME PID IN_FIFO OUT_FIFO STDERR_FILE RC_FILE
  local name=$1 pid=$2 wfd rfd
  exec {wfd}<>"$3" || { fail "cannot open $3"; return 1; }
  exec {rfd}<>"$4" || { fail "cannot open $4"; return 1; }
  APP_PID[$name]=$pid APP_IN[$name]=$wfd APP_OUT[$name]=$rfd APP_ERRF[$name]=$5 APP_RCFILE[$name]=$6
  APP_OWN[$name]=0 APP_PARTIAL[$name]=
}

app_wait_ready() { # NAME TIMEOUT
  local name=$1 pid=${APP_PID[$1]}
  if ! app_expect "$name" "READY" "$2"; then
    fail "$name (pid $pid) did not print READY within ${2}s"
    app_show_stderr "$name"
    return 1
  fi
  if [ "$REPLY_LINE" != "READY $pid" ]; then
    log "note: $name says '$REPLY_LINE' but was started as pid $pid"
  fi
  log "$name is ready (pid $pid)"
}

app_show_stderr() { # NAME
  local f=${APP_ERRF[$1]}
  [ -n "$f" ] && [ -s "$f" ] && log_block "    $1 stderr: " "$(tail -n 20 "$f")"
  return 0
}

app_send() { # NAME LINE
  local fd=${APP_IN[$1]}
  printf '    %s <- %s\n' "$1" "$2"
  printf '%s\n' "$2" >&"$fd"
}

# Reads lines from NAME until one starts with PREFIX (REPLY_LINE gets it); other
# lines (TICK ..., diagnostics) are logged and skipped. Returns 1 on timeout or if
# the app exits first.
app_expect() { # NAME PREFIX [TIMEOUT_S]
  local name=$1 prefix=$2 timeout=${3:-60}
  local fd=${APP_OUT[$name]} pid=${APP_PID[$name]}
  local t0=$EPOCHREALTIME line rc
  REPLY_LINE=
  while :; do
    line=
    IFS= read -r -t 1 -u "$fd" line
    rc=$?
    if [ $rc -eq 0 ]; then
      line=${APP_PARTIAL[$name]}$line
      APP_PARTIAL[$name]=
      printf '    %s -> %s\n' "$name" "$line"
      if [[ $line == "$prefix"* ]]; then
        REPLY_LINE=$line
        return 0
      fi
      continue
    fi
    # A timed-out read may have consumed part of a line: keep it for the next read.
    [ -n "$line" ] && APP_PARTIAL[$name]+=$line
    if [ $rc -le 128 ]; then
      log "$name: end of output while waiting for '$prefix'"
      return 1
    fi
    if ! pid_alive "$pid"; then
      # Drain what it wrote before it died.
      while IFS= read -r -t 0.2 -u "$fd" line; do
        printf '    %s -> %s\n' "$name" "$line"
        if [[ $line == "$prefix"* ]]; then REPLY_LINE=$line; return 0; fi
      done
      log "$name (pid $pid) exited while waiting for '$prefix'"
      app_show_stderr "$name"
      return 1
    fi
    if awk -v a="$t0" -v b="$EPOCHREALTIME" -v t="$timeout" 'BEGIN { exit !(b - a >= t) }'; then
      log "$name: no '$prefix' within ${timeout}s"
      return 1
    fi
  done
}

# True when app NAME has written nothing this shell has not read: no line waits on its output.
app_quiet() { # NAME
  [ -z "${APP_PARTIAL[$1]:-}" ] && ! IFS= read -r -t 0 -u "${APP_OUT[$1]}"
}

app_cmd() { # NAME COMMAND REPLY_PREFIX [TIMEOUT_S]
  app_send "$1" "$2" && app_expect "$1" "$3" "${4:-60}"
}

# verify -> PASS on "VERIFY OK", FAIL otherwise.
app_verify() { # NAME [WHAT] [TIMEOUT_S]
  local name=$1 what=${2:-data of $1}
  if app_cmd "$name" verify VERIFY "${3:-120}" && [[ $REPLY_LINE == "VERIFY OK"* ]]; then
    pass "$what verifies ($REPLY_LINE)"
    return 0
  fi
  fail "$what does not verify: ${REPLY_LINE:-no answer}"
  app_show_stderr "$name"
  return 1
}

# Sends COMMAND; PASS (WHAT and the answer) when the answer matches WANT, a
# bash pattern ("CHECK OK*"), else FAIL with the answer and NAME's stderr.
# For the Python apps' check (py/check_loop.py) and their like.
app_reply_ok() { # NAME COMMAND WANT TIMEOUT_S WHAT
  local name=$1 want=$3 what=$5
  # shellcheck disable=SC2053 # WANT is a pattern
  if app_cmd "$name" "$2" "${want%% *}" "$4" && [[ $REPLY_LINE == $want ]]; then
    pass "$what ($REPLY_LINE)"
    return 0
  fi
  fail "$what: ${REPLY_LINE:-no answer}"
  app_show_stderr "$name"
  return 1
}

# Sends quit and waits for the exit; PASS if it exits 0. APP_RC gets the status.
app_quit() { # NAME [TIMEOUT_S]
  local name=$1 timeout=${2:-60} pid=${APP_PID[$1]} i
  APP_RC=
  app_send "$name" quit
  if [ "${APP_OWN[$name]}" == restored ] && app_expect "$name" BYE "$timeout"; then
    APP_RC=${REPLY_LINE#BYE }
  fi
  for ((i = 0; i < timeout * 10; i++)); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  if pid_alive "$pid"; then
    fail "$name (pid $pid) still running ${timeout}s after quit"
    gs_kill_pid "$pid"
    return 1
  fi
  if [ "${APP_OWN[$name]}" == restored ]; then
    : # APP_RC from the BYE line above
  elif [ "${APP_OWN[$name]}" == 1 ]; then
    wait "$pid" 2>/dev/null
    APP_RC=$?
  else
    local f=${APP_RCFILE[$name]}
    for ((i = 0; i < 50; i++)); do
      [ -n "$f" ] && [ -s "$f" ] && break
      sleep 0.1
    done
    APP_RC=$(cat "$f" 2>/dev/null || echo '?')
  fi
  if [ "$APP_RC" == 0 ]; then
    pass "$name exits 0 after quit (no CUDA error seen by the app)"
    return 0
  fi
  fail "$name exits with status $APP_RC after quit"
  app_show_stderr "$name"
  return 1
}

# Closes this shell's FIFO ends for app NAME and forgets it (after it exited), so
# the name can be used again.
app_forget() { # NAME
  local fd
  fd=${APP_IN[$1]:-}; [ -n "$fd" ] && exec {fd}>&-
  fd=${APP_OUT[$1]:-}; [ -n "$fd" ] && exec {fd}>&-
  unset "APP_PID[$1]" "APP_IN[$1]" "APP_OUT[$1]" "APP_ERRF[$1]" "APP_OWN[$1]" "APP_RCFILE[$1]" "APP_PARTIAL[$1]"
}

# Starts tree.sh DIR N CMD...: a bash parent with N CUDA children, attached as
# apps <NAME>1..<NAME>N. Sets TREE_PID.
tree_start() { # NAME N READY_TIMEOUT CMD [ARGS...]
  local name=$1 n=$2 timeout=$3 i
  shift 3
  local dir="$GS_WORK/$name"
  mkdir -p "$dir"
  rm -f "$dir/started"
  log "start tree $name: $GS_TREE $dir $n $*"
  (
    gs_close_app_fds
    exec bash "$GS_TREE" "$dir" "$n" "$@"
  ) </dev/null >"$dir/tree.log" 2>&1 &
  TREE_PID=$!
  GS_EXTRA_PIDS+=("$TREE_PID")
  gs_track_pid "$TREE_PID"
  for ((i = 0; i < 100; i++)); do
    [ -s "$dir/started" ] && break
    sleep 0.1
  done
  if [ ! -s "$dir/started" ]; then
    fail "tree parent did not start its children"
    log_block "    tree: " "$(cat "$dir/tree.log" 2>/dev/null)"
    return 1
  fi
  for ((i = 1; i <= n; i++)); do
    local pid
    pid=$(cat "$dir/c$i.pid")
    gs_track_pid "$pid"
    app_attach "$name$i" "$pid" "$dir/c$i.in" "$dir/c$i.out" "$dir/c$i.err" "$dir/c$i.rc" || return 1
  done
  for ((i = 1; i <= n; i++)); do
    app_wait_ready "$name$i" "$timeout" || return 1
  done
}

# ---------------------------------------------------------------- gpusnap

# gs_check_json OUT ARGS...: where ARGS asked for --json, the document in OUT (the real driver's,
# NVML's figures and the agent's report in it) validates against docs/json/<command>.json; a
# mismatch is a failure of the test. Not checked for the mock (dry-run.sh), nor without
# python3-jsonschema (said once), nor where gpusnap was killed before it printed anything.
gs_check_json() {
  local out=$1 a json=0 py
  shift
  for a in "$@"; do
    [ "$a" = -- ] && break
    [ "$a" = --json ] && json=1
  done
  [ $json = 1 ] && [ -z "${GPUSNAP_MOCK_STATE:-}" ] || return 0
  [ "$GS_RC" -lt 124 ] || [ -s "$out" ] || return 0
  if [ -z "${GS_JSON_PY+set}" ]; then
    GS_JSON_PY=
    for py in python3 /usr/bin/python3; do
      "$py" -c 'import jsonschema' 2>/dev/null && GS_JSON_PY=$py && break
    done
    [ -n "$GS_JSON_PY" ] || log "python3-jsonschema is missing: --json documents are not checked against docs/json"
  fi
  [ -n "$GS_JSON_PY" ] || return 0
  if ! "$GS_JSON_PY" "$GS_SRC/tests/cli/json_schema.py" "$GS_SRC/docs/json" doc "$1" "$out" >"$out.schema" 2>&1; then
    fail "gpusnap $1 --json: the document does not match docs/json/$1.json: $(head -n 3 "$out.schema" | tr -s ' \n' ' ')"
  fi
}

# Runs gpusnap ARGS with a time limit; logs it; sets GS_RC, GS_OUT, GS_ERR, GS_SECS;
# a --json document is checked against its schema (gs_check_json).
gs_run() { # ARGS...
  GS_N=$((GS_N + 1))
  local base="$GS_WORK/gpusnap.$GS_N" t0=$EPOCHREALTIME limit=${GS_CMD_TIMEOUT:-120}
  log "\$ gpusnap $*"
  timeout -k 5 "$limit" "$GPUSNAP" "$@" >"$base.out" 2>"$base.err"
  GS_RC=$?
  GS_SECS=$(gs_elapsed "$t0")
  GS_OUT=$(cat "$base.out") GS_ERR=$(cat "$base.err")
  log "  exit $GS_RC after ${GS_SECS}s"
  log_block "  | " "$GS_OUT"
  log_block "  stderr| " "$GS_ERR"
  if [ $GS_RC -eq 124 ] || [ $GS_RC -eq 137 ]; then
    log "  gpusnap did not finish within ${limit}s and was killed"
  fi
  gs_check_json "$base.out" "$@"
  return 0
}

expect_rc() { # WANT DESC
  if [ "$GS_RC" == "$1" ]; then
    pass "$2: exit $GS_RC"
    return 0
  fi
  fail "$2: exit $GS_RC, wanted $1 ($(head -n 1 <<<"$GS_ERR"))"
  return 1
}

# Prints the value at PATH in a JSON document (on stdin of python): a.b.0.c, and
# list[key=value] picks the element whose key equals value (processes[pid=123]).
# Booleans print as true/false. Exit 1 if the path is absent, 2 if not JSON.
json_get() { # JSON PATH
  python3 -S -c '
import json, re, sys
try:
    d = json.loads(sys.stdin.read())
except Exception as e:
    print("not JSON: %s" % e, file=sys.stderr)
    sys.exit(2)
for part in [p for p in sys.argv[1].split(".") if p]:
    m = re.fullmatch(r"(\w+)\[(\w+)=([^\]]*)\]", part)
    try:
        if m:
            key, field, want = m.groups()
            d = next(x for x in d[key] if str(x.get(field)) == want)
        elif isinstance(d, list):
            d = d[int(part)]
        else:
            d = d[part]
    except (KeyError, IndexError, ValueError, StopIteration, TypeError, AttributeError):
        sys.exit(1)
if isinstance(d, bool):
    print("true" if d else "false")
elif d is None:
    print("null")
elif isinstance(d, (dict, list)):
    print(json.dumps(d))
else:
    print(d)
' "$2" <<<"$1"
}

# Checks `gpusnap state PID` prints WANT.
expect_state() { # PID WANT [DESC]
  gs_run state "$1"
  local got
  got=$(tr -d '[:space:]' <<<"$GS_OUT")
  if [ "$GS_RC" == 0 ] && [ "$got" == "$2" ]; then
    pass "${3:-state of $1}: $got"
    return 0
  fi
  fail "${3:-state of $1}: '$got' (exit $GS_RC), wanted '$2'"
  return 1
}

# Checks a --json answer: ok true, and processes[pid].state_after == WANT. Logs the times.
expect_json_process() { # PID WANT_STATE DESC
  local pid=$1 want=$2 desc=$3 ok state times total
  # One python run for all fields: "ok<TAB>state_after<TAB>total_s<TAB>times".
  IFS=$'\t' read -r ok state total times < <(python3 -S -c '
import json, sys
try:
    d = json.loads(sys.stdin.read())
except Exception:
    print("notjson\t\t\t")
    sys.exit(0)
p = next((x for x in d.get("processes", []) if str(x.get("pid")) == sys.argv[1]), {})
print("%s\t%s\t%s\t%s" % (json.dumps(d.get("ok")), p.get("state_after", "absent"), d.get("total_s"),
                          json.dumps(p.get("times"))))
' "$pid" <<<"$GS_OUT")
  if [ "$ok" == notjson ]; then
    fail "$desc: --json output is not JSON"
    return 1
  fi
  log "  $desc: total_s=$total times=$times"
  if [ "$ok" == true ] && [ "$state" == "$want" ]; then
    pass "$desc: JSON ok=true, state_after=$state"
    return 0
  fi
  fail "$desc: JSON ok=$ok, state_after of pid $pid '$state' (wanted $want)"
  return 1
}

# ---------------------------------------------------------------- nvidia-smi

have_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU '; }

gpu_uuid() { # INDEX
  nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1" 2>/dev/null | tr -d ' '
}

# MiB used on all GPUs together.
gpus_used_mib() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null |
    awk '{ s += $1 } END { print s + 0 }'
}

# MiB of GPU memory PID holds over all GPUs; 0 if nvidia-smi does not list it;
# "?" if it is listed without a number (or nvidia-smi fails).
pid_vram_mib() { # PID
  local apps
  apps=$(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits 2>/dev/null) ||
    { echo '?'; return 1; }
  awk -F', *' -v p="$1" '
    $1 == p { if ($3 ~ /^[0-9]+$/) s += $3; else na = 1 }
    END { if (na) print "?"; else print s + 0 }' <<<"$apps"
}

# UUIDs of the GPUs on which PID holds memory, one per line.
pid_gpu_uuids() { # PID
  nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2>/dev/null |
    awk -F', *' -v p="$1" '$1 == p { print $2 }' | sort -u
}

# Snapshot before a suspend: SNAP_PID_MIB (the process) and SNAP_GPU_MIB (all GPUs).
vram_snapshot() { # PID
  SNAP_PID_MIB=$(pid_vram_mib "$1")
  SNAP_GPU_MIB=$(gpus_used_mib)
}

# After a suspend: the process holds no VRAM. Where nvidia-smi did not list the
# process before (another PID namespace), the GPUs' total use must instead have
# dropped by at least 90% of EXPECT_MIB.
expect_vram_released() { # NAME PID PID_MIB_BEFORE GPU_MIB_BEFORE EXPECT_MIB
  local name=$1 pid=$2 before=$3 gpu_before=$4 expect=$5 now i
  if [[ $before =~ ^[0-9]+$ ]] && [ "$before" -gt 0 ]; then
    for ((i = 0; i < 10; i++)); do
      now=$(pid_vram_mib "$pid")
      [ "$now" == 0 ] && break
      sleep 0.5
    done
    if [ "$now" == 0 ]; then
      pass "VRAM of $name: $before MiB before suspend, 0 after"
      return 0
    fi
    fail "VRAM of $name after suspend: $now MiB (was $before MiB)"
    return 1
  fi
  now=$(gpus_used_mib)
  log "nvidia-smi did not list pid $pid before suspend ('$before'); judging by the GPUs' total use instead"
  if [ "$expect" -le 0 ]; then
    log "no data size to compare with: VRAM release of $name not checked"
    return 0
  fi
  if [ $((gpu_before - now)) -ge $((expect * 9 / 10)) ]; then
    pass "GPU memory in use fell from $gpu_before to $now MiB on suspend of $name (holds $expect MiB)"
    return 0
  fi
  fail "GPU memory in use $gpu_before -> $now MiB on suspend of $name, expected a drop of about $expect MiB"
  return 1
}

# suspend --json of PID that must take the agent path, checked: exit 0, the
# agent's path, and for a full suspend (no SUSPEND ARGS) the process's VRAM at
# 0. GS_OUT keeps the outcome. Returns 1 when the suspend failed.
agent_suspend_checked() { # WHAT PID [SUSPEND ARGS...]
  local what=$1 pid=$2
  shift 2
  gs_run suspend "$pid" --json "$@"
  expect_rc 0 "$what" || return 1
  check "$what took the agent path" grep -q '"path":"agent"' <<<"$GS_OUT"
  if [ $# -eq 0 ]; then
    check "$what: VRAM of the process is 0" [ "$(pid_vram_mib "$pid")" == 0 ]
  fi
  return 0
}

# The agent of PID can release at least MIN_BYTES (gpusnap state --json).
expect_agent_releasable() { # WHAT PID MIN_BYTES
  local bytes
  gs_run state "$2" --json
  bytes=$(json_get "$GS_OUT" agent.bytes)
  check "$1: the agent can release ${bytes:-?} bytes (at least $3)" awk -v b="${bytes:-0}" -v m="$3" 'BEGIN { exit !(b >= m) }'
}

# suspend --tree of a two-rank job (R0 leads the tree, R1 is in it), each rank
# checked suspended and, for a full suspend (no SUSPEND ARGS), its VRAM
# released (expect_vram_released with EXPECT_MIB per rank); then the caller's
# check between suspend and resume (BETWEEN: a function name, or ":"), and
# resume --tree with both ranks checked running. TREE_GPU_BEFORE is the GPUs'
# use before the suspend, for BETWEEN. Returns 1 when a command failed.
tree_cycle() { # WHAT R0 R1 EXPECT_MIB BETWEEN [SUSPEND ARGS...]
  local what=$1 r0=$2 r1=$3 expect=$4 between=$5 b0 b1
  shift 5
  b0=$(pid_vram_mib "$r0")
  b1=$(pid_vram_mib "$r1")
  TREE_GPU_BEFORE=$(gpus_used_mib)
  gs_run suspend "$r0" --tree --json "$@"
  expect_rc 0 "$what: suspend --tree of both ranks" || return 1
  expect_json_process "$r0" suspended "$what: rank 0"
  expect_json_process "$r1" suspended "$what: rank 1"
  if [ $# -eq 0 ]; then
    expect_vram_released "rank 0" "$r0" "$b0" "$TREE_GPU_BEFORE" "$expect"
    expect_vram_released "rank 1" "$r1" "$b1" "$TREE_GPU_BEFORE" "$expect"
  fi
  "$between" "$what" "$@"
  gs_run resume "$r0" --tree --json
  expect_rc 0 "$what: resume --tree" || return 1
  expect_json_process "$r0" running "$what: rank 0 after resume"
  expect_json_process "$r1" running "$what: rank 1 after resume"
}

# Checks nvidia-smi lists PID with at least MIN_MIB (the data it holds).
expect_vram_at_least() { # NAME PID MIN_MIB
  local now
  now=$(pid_vram_mib "$2")
  if [[ $now =~ ^[0-9]+$ ]] && [ "$now" -ge "$3" ]; then
    pass "VRAM of $1: $now MiB (>= $3 MiB of data)"
    return 0
  fi
  if [ "$now" == 0 ]; then
    # Not listed at all: nvidia-smi may not see this PID namespace. Not a failure of gpusnap.
    log "note: nvidia-smi does not list $1 (pid $2); VRAM checks fall back to the GPUs' total use"
    return 0
  fi
  fail "VRAM of $1: $now MiB, expected at least $3 MiB"
  return 1
}

# ---------------------------------------------------------------- suspend/resume steps

# gpusnap suspend --json of app NAME, then: exit 0, JSON ok and state_after
# suspended, `state` says suspended, its VRAM is released. EXPECT_MIB: data held.
suspend_checked() { # NAME EXPECT_MIB [EXTRA ARGS...]
  local name=$1 expect=$2 pid=${APP_PID[$1]}
  shift 2
  vram_snapshot "$pid"
  local pid_before=$SNAP_PID_MIB gpu_before=$SNAP_GPU_MIB
  gs_run suspend "$pid" --json "$@"
  expect_rc 0 "suspend $name (pid $pid)" || return 1
  expect_json_process "$pid" suspended "suspend $name"
  expect_state "$pid" suspended "state of $name after suspend"
  expect_vram_released "$name" "$pid" "$pid_before" "$gpu_before" "$expect"
}

# gpusnap resume --json of app NAME, then: exit 0, JSON ok and state_after running,
# `state` says running.
resume_checked() { # NAME [EXTRA ARGS...]
  local name=$1 pid=${APP_PID[$1]}
  shift
  gs_run resume "$pid" --json "$@"
  expect_rc 0 "resume $name (pid $pid)" || return 1
  expect_json_process "$pid" running "resume $name"
  expect_state "$pid" running "state of $name after resume"
  log "VRAM of $name after resume: $(pid_vram_mib "$pid") MiB"
}

# Driver-path cycle of app NAME with the override; prints a FINDING line and
# checks that gpusnap's account of the outcome is true. Returns 0 if resumed.
driver_multi_gpu_cycle() { # NAME WHAT
  local name=$1 what=$2 pid=${APP_PID[$1]} fault
  suspend_checked "$name" 64 --multi-gpu-driver || return 2
  gs_run resume "$pid" --json
  if [ "$GS_RC" == 0 ]; then
    log "FINDING: the driver restores a two-GPU process with $what"
    expect_state "$pid" running "$what: running after the resume"
    return 0
  fi
  log "FINDING: the driver does not restore a two-GPU process with $what: exit $GS_RC, $(head -n 1 <<<"$GS_ERR")"
  pass "$what: the failed resume says so: exit $GS_RC"
  check "$what: its message names the GPUs the process held" grep -q "GPUs" <<<"$GS_ERR"
  expect_state "$pid" suspended "$what: still suspended after the failed resume"
  gs_run state "$pid" --json
  fault=$(json_get "$GS_OUT" fault 2>/dev/null)
  check "$what: state's fault names the failed resume ($fault)" grep -q "last resume failed" <<<"$fault"
  return 1
}

# Skips the whole test (visibly) unless at least N GPUs are present.
require_gpus() { # N REASON
  local n
  n=$(gpu_count)
  if [ "$n" -lt "$1" ]; then
    skip "${2:-$GS_TEST needs $1 GPUs} (this machine has $n)"
    finish
  fi
}

# ---------------------------------------------------------------- dump/restore (CRIU)

# Makes CRIU usable for gpusnap dump/restore or skips the test visibly: GPUSNAP_CRIU
# if set, else the private copy in .cache/criu, else unpacked from .cache/criu-debs
# (scripts/get-criu.sh --offline: the device machine has no network), else criu on PATH.
require_criu() {
  if [ -z "${GPUSNAP_CRIU:-}" ]; then
    # also over an existing .cache/criu: it unpacks again only when the .debs changed (a 4.1.1 tree, say)
    if [ -d "$GS_SRC/.cache/criu-debs" ]; then
      "$GS_SRC/scripts/get-criu.sh" --offline >"$GS_WORK/get-criu.log" 2>&1 ||
        log_block "  get-criu| " "$(tail -n 5 "$GS_WORK/get-criu.log")"
    fi
    if [ -x "$GS_SRC/.cache/criu/bin/criu" ]; then
      export GPUSNAP_CRIU=$GS_SRC/.cache/criu/bin/criu
    elif ! command -v criu >/dev/null 2>&1; then
      skip "no CRIU: carry .cache/criu-debs (scripts/get-criu.sh on a machine with network) or install criu >= 4.2"
      finish
    fi
  fi
  log "criu: ${GPUSNAP_CRIU:-$(command -v criu)} ($("${GPUSNAP_CRIU:-criu}" --version 2>&1 | head -n 1))"
}

# Skips the test visibly without PyTorch that sees a GPU.
require_torch() { # [NGPUS]: PyTorch with CUDA (on NGPUS GPUs), or the test SKIPs
  local n=${1:-1}
  if ! python3 -c "import torch; assert torch.cuda.is_available() and torch.cuda.device_count() >= $n" 2>/dev/null; then
    skip "PyTorch with CUDA$([ "$n" -gt 1 ] && echo " on $n GPUs") is not installed here"
    finish
  fi
}

# app=GS_APPS/NAME, the test app built with -DGPUSNAP_GPU_APPS=ON, or the test FAILs (a missing app is a build fault).
require_app() { # NAME
  app=$GS_APPS/$1
  if [ ! -x "$app" ]; then
    fail "missing $app (build with -DGPUSNAP_GPU_APPS=ON)"
    finish
  fi
}

# The last 40 lines of the criu log a failed gpusnap command named ("(log: PATH)" in $GS_ERR).
log_criu_tail() {
  log_block "  criu log| " "$(sed -n 's/.*(log: \([^)]*\)).*/\1/p' <<<"$GS_ERR" | head -n 1 | xargs -r tail -n 40 2>/dev/null)"
}

# restore_job DESC DIR APP TWIN: gpusnap restore --json -D DIR of APP's image; on failure the criu log's
# tail, APP forgotten, TWIN quit and the test finished; else the timings logged and APP marked restored
restore_job() {
  local desc=$1 dir=$2 app=$3 twin=$4
  GS_CMD_TIMEOUT=300 gs_run restore --json -D "$dir"
  if ! expect_rc 0 "$desc"; then
    log_criu_tail
    app_forget "$app"
    app_quit "$twin" 120
    finish
  fi
  log "restore: CRIU $(json_get "$GS_OUT" times.criu_s) s, GPU $(json_get "$GS_OUT" times.gpu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
  APP_OWN[$app]=restored
}

# Waits up to 10 s until PID is gone (CRIU killed it; its parent reaps it).
wait_pid_gone() { # PID
  local i
  for ((i = 0; i < 100; i++)); do
    pid_alive "$1" || return 0
    sleep 0.1
  done
  return 1
}

wait_pid_reaped() { # PID: gone from /proc (a zombie not yet reaped still holds the PID)
  local i
  for ((i = 0; i < 100; i++)); do
    [ -e "/proc/$1" ] || return 0
    sleep 0.1
  done
  return 1
}

# gpusnap dump --json of PID into DIR (EXTRA ARGS: --leave-running, --driver), then:
# exit 0, JSON ok, the path taken (WANT_PATH: agent|driver), the process gone
# (or running with --leave-running). Logs the GPU and CRIU parts.
dump_checked() { # PID DIR WANT_PATH [EXTRA ARGS...]
  local pid=$1 dir=$2 want=$3 leave=0 a
  shift 3
  for a in "$@"; do [ "$a" == --leave-running ] && leave=1; done
  gs_run dump --json -D "$dir" "$pid" "$@"
  expect_rc 0 "dump of $pid to $dir" || return 1
  check_eq "dump path" "$(json_get "$GS_OUT" path)" "$want"
  log "dump: GPU part $(json_get "$GS_OUT" times.gpu_s) s, CRIU part $(json_get "$GS_OUT" times.criu_s) s, total $(json_get "$GS_OUT" times.total_s) s, GPU data $(json_get "$GS_OUT" gpu_data_bytes) B, CPU $(json_get "$GS_OUT" cpu_bytes) B"
  if [ $leave == 1 ]; then
    check "process $pid keeps running after dump --leave-running" pid_alive "$pid"
  else
    # reaps it when it is a child of ours (a wait on a running child would never return)
    wait "$pid" 2>/dev/null
    check "process $pid is gone after dump" wait_pid_gone "$pid"
  fi
}

# gpusnap restore --json from DIR (EXTRA ARGS: --map ...), then: exit 0, the PID it
# had (WANT_PID), running, `state` says running.
# The restore's --json answer stays in RESTORE_OUT (the state check after it replaces GS_OUT).
restore_checked() { # DIR WANT_PID [EXTRA ARGS...]
  local dir=$1 want=$2
  shift 2
  gs_run restore --json -D "$dir" "$@"
  # shellcheck disable=SC2034 # for the test that called it
  RESTORE_OUT=$GS_OUT
  expect_rc 0 "restore from $dir" || return 1
  check_eq "restored pid" "$(json_get "$GS_OUT" pid)" "$want"
  log "restore: checksums $(json_get "$GS_OUT" times.verify_s) s, CRIU part $(json_get "$GS_OUT" times.criu_s) s, GPU part $(json_get "$GS_OUT" times.gpu_s) s, total $(json_get "$GS_OUT" times.total_s) s"
  check "restored process $want is alive" pid_alive "$want"
  expect_state "$want" running "state after restore"
  # CRIU restored it: it is no child of ours, its exit status comes from its BYE line
  local n
  for n in "${!APP_PID[@]}"; do
    [ "${APP_PID[$n]}" == "$want" ] && APP_OWN[$n]=restored
  done
  return 0
}

# ---------------------------------------------------------------- the counter (tests/gpu/apps/counter.cu)

# The counter app without stdin, a session leader of its own (as CRIU dumps it without --shell-job),
# writing 1, 2, 3, ... to COUNTER_VALUES ($GS_WORK/counter.values); COUNTER_PID. Checks it counts.
counter_start() {
  COUNTER_VALUES=$GS_WORK/counter.values
  rm -f "$COUNTER_VALUES"
  setsid "$GS_APPS/counter" --no-stdin --out "$COUNTER_VALUES" --quiet </dev/null >/dev/null 2>/dev/null &
  COUNTER_PID=$!
  GS_EXTRA_PIDS+=("$COUNTER_PID")
  gs_track_pid "$COUNTER_PID"
  local i
  for ((i = 0; i < 300; i++)); do [ "$(counter_lines)" -ge 10 ] && break; sleep 0.1; done
  check "counter is counting ($(counter_lines) lines)" test "$(counter_lines)" -ge 10
}
counter_lines() { wc -l <"$COUNTER_VALUES" 2>/dev/null || echo 0; }

# The counter's file (FILE, default COUNTER_VALUES) runs 1, 2, 3, ... with no reset or gap.
counter_check_sequence() { # [FILE]
  local f=${1:-$COUNTER_VALUES}
  if awk 'NR != $1 { bad = 1; exit } END { exit bad }' "$f"; then
    pass "the counter's file runs 1..$(wc -l <"$f") with no reset or gap"
  else
    fail "the counter's file is not 1, 2, 3, ...: $(awk 'NR != $1 { print "line " NR " holds " $1; exit }' "$f")"
  fi
}

# ---------------------------------------------------------------- the inference server (tests/gpu/py)

# Starts tests/gpu/py/server.py twice with `gpusnap run`: app srv (the one a test interrupts) and
# app twin (never touched), their ports in $GS_WORK/srv.json and twin.json. 1 if one does not start.
server_pair_start() { # SEED
  local name
  for name in srv twin; do
    rm -f "$GS_WORK/$name.json"
    app_start "$name" 240 "$GPUSNAP" run -- python3 "$GS_SRC/tests/gpu/py/server.py" --seed "$1" \
      --ports-file "$GS_WORK/$name.json" || return 1
  done
}

# Starts tests/gpu/py/server_client.py as app client, comparing srv's answers with twin's.
server_client_start() { # SEED [CLIENT ARGS...]
  local seed=$1
  shift
  GS_APP_STDERR="file" app_start client 60 python3 "$GS_SRC/tests/gpu/py/server_client.py" --seed "$seed" "$@" \
    --a "$GS_WORK/srv.json" --b "$GS_WORK/twin.json"
}

# Sends a command to app client (server_client_start); PASS if the answer starts with WANT.
client_ask() { # COMMAND REPLY_PREFIX WANT DESC [TIMEOUT_S]
  if app_cmd client "$1" "$2" "${5:-300}" && [[ $REPLY_LINE == "$3"* ]]; then
    pass "$4 ($REPLY_LINE)"
    return 0
  fi
  fail "$4: ${REPLY_LINE:-no answer}"
  return 1
}

# Answers of the restored server against the twin's, over HTTP (reconnecting) and UDP.
client_same_as_twin() { # WHEN
  client_ask "compare 20" COMPARE "COMPARE SAME" "$1: 20 answers equal to the twin's"
  client_ask "udp 3" UDP "UDP SAME" "$1: UDP ping and generation answered as by the twin"
}
