# shellcheck shell=bash
# plugin_lib.sh - plain criu runs through gpusnap_criu.so on the GPU machine
# (t87-criu-plugin.sh, bench/plugin.sh): what a container engine does. Source
# after lib.sh, once require_criu has run.
#
# plugin_init: a plugin folder with gpusnap_criu.so alone ($GS_PLUGIN_DIR).
# plugin_dump PID DIR [ARGS]: criu dump --tree PID into DIR (fresh) through it;
#   PLUGIN_RC, PLUGIN_SECS (wall), the log in DIR/dump.log.
# plugin_restore DIR [ARGS]: criu restore -d from DIR; PLUGIN_RC, PLUGIN_SECS, PLUGIN_PID.
# plugin_wait_loaded PID: until gpusnap state says running (an agent image's data
#   is loaded by the agent after criu returned); its wall time is added to PLUGIN_SECS.

plugin_init() {
  GS_PLUGIN_DIR=$GS_WORK/criu-plugins
  mkdir -p "$GS_PLUGIN_DIR"
  if [ ! -f "$GS_BUILD/src/criu_plugin/gpusnap_criu.so" ]; then
    fail "missing $GS_BUILD/src/criu_plugin/gpusnap_criu.so"
    finish
  fi
  cp "$GS_BUILD/src/criu_plugin/gpusnap_criu.so" "$GS_PLUGIN_DIR/"
  GS_CRIU_BIN=${GPUSNAP_CRIU:-criu}
}

# criu's options for a process as gpusnap dump would pass them: --shell-job when it is not its session's leader
plugin_job_args() { # PID
  local sid
  sid=$(awk '{print $6}' "/proc/$1/stat" 2>/dev/null)
  PLUGIN_JOB=()
  [ -n "$sid" ] && [ "$sid" != "$1" ] && PLUGIN_JOB=(--shell-job)
  return 0
}

plugin_dump() { # PID DIR [ARGS...]
  local pid=$1 dir=$2 t0
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir"
  plugin_job_args "$pid"
  # one option per line, and an empty file for none (printf of no words still writes a newline,
  # which restore would pass to criu as an empty argument)
  : >"$dir.job"
  [ ${#PLUGIN_JOB[@]} -eq 0 ] || printf '%s\n' "${PLUGIN_JOB[@]}" >"$dir.job"
  log "\$ criu dump --tree $pid -D $dir --libdir $GS_PLUGIN_DIR ${PLUGIN_JOB[*]} $*"
  t0=$EPOCHREALTIME
  timeout -k 5 "${GS_CMD_TIMEOUT:-300}" "$GS_CRIU_BIN" dump --tree "$pid" --images-dir "$dir" --libdir "$GS_PLUGIN_DIR" \
    --file-locks --log-file dump.log -v4 "${PLUGIN_JOB[@]}" "$@" >"$dir.out" 2>&1
  PLUGIN_RC=$?
  PLUGIN_SECS=$(gs_elapsed "$t0")
  log "  exit $PLUGIN_RC after ${PLUGIN_SECS}s"
  log_block "  plugin| " "$(grep 'gpusnap:' "$dir/dump.log" 2>/dev/null)"
  # criu killed the tree; a restored process's parent is init, which may reap it late, and
  # until then its PID is taken ("Can't fork for PID: File exists"): wait, outside the timing
  if [ "$PLUGIN_RC" == 0 ] && [[ " $* " != *" --leave-running "* ]]; then
    wait "$pid" 2>/dev/null # a child of this shell is reaped by it (no-op for others)
    wait_pid_reaped "$pid" || log "  pid $pid still held (not reaped) after 10 s"
  fi
  [ "$PLUGIN_RC" == 0 ] || log_block "  criu| " "$(grep -i 'error' "$dir/dump.log" 2>/dev/null | tail -n 10)"
}

plugin_restore() { # DIR [ARGS...]
  local dir=$1 t0 job=()
  shift
  [ -s "$dir.job" ] && mapfile -t job <"$dir.job"
  rm -f "$dir.pid"
  log "\$ criu restore -D $dir --libdir $GS_PLUGIN_DIR -d ${job[*]} $*"
  t0=$EPOCHREALTIME
  timeout -k 5 "${GS_CMD_TIMEOUT:-300}" "$GS_CRIU_BIN" restore --images-dir "$dir" --work-dir "$GS_WORK" \
    --libdir "$GS_PLUGIN_DIR" --file-locks -d --pidfile "$dir.pid" --log-file "restore-$$.log" -v4 "${job[@]}" "$@" \
    >"$dir.rout" 2>&1
  PLUGIN_RC=$?
  PLUGIN_SECS=$(gs_elapsed "$t0")
  PLUGIN_PID=$(cat "$dir.pid" 2>/dev/null)
  log "  exit $PLUGIN_RC after ${PLUGIN_SECS}s, pid ${PLUGIN_PID:-none}"
  log_block "  plugin| " "$(grep 'gpusnap:' "$GS_WORK/restore-$$.log" 2>/dev/null)"
  [ "$PLUGIN_RC" == 0 ] || log_block "  criu| " "$(grep -i 'error' "$GS_WORK/restore-$$.log" 2>/dev/null | tail -n 10)"
}

plugin_wait_loaded() { # PID
  local i t0=$EPOCHREALTIME st=''
  for ((i = 0; i < 6000; i++)); do
    st=$("$GPUSNAP" state "$1" 2>/dev/null | tr -d '[:space:]')
    [ "$st" == running ] && break
    sleep 0.05
  done
  local extra
  extra=$(gs_elapsed "$t0")
  PLUGIN_SECS=$(awk -v a="$PLUGIN_SECS" -v b="$extra" 'BEGIN { printf "%.3f", a + b }')
  [ "$st" == running ]
}

