#!/usr/bin/env bash
# t4007 - every agent step of suspend, resume, dump and restore failing, on
# the host-memory fake driver (tests/fake/fake_vmm_driver.c): one table of
# fault points (src/common/fault.h, GPUSNAP_FAULT in the app's environment)
# times steps. Each row starts the app of t4002 (tests/agent/agent_app.c
# --signals) with the fault, runs the step, and checks that the command
# failed as it should (exit code, the cause named) and that the process ends
# as the row says:
#   running    the app runs on with every byte (it checks), its memory mapped
#   suspended  the undo failed too: the process stays suspended with its data,
#              `gpusnap state` says why, and `gpusnap resume` brings it back
#   suspended-plain  a killed gpusnap left it suspended: `state` says
#              suspended, `gpusnap resume` brings it back
#   suspended-resume a resume failed: `state` says so and why (the agent's
#              fault), `gpusnap resume` brings it back
#   gone       the app exited mid-step; the next command says so (exit 3)
# The gpusnap command itself is killed (kill -9) too: between the agents and
# the driver, while the agent works, between the driver and the agents.
#   restorable the restore failed, the restored copy is gone and the image
#              is unchanged and verifies
# Dump and restore rows need root and CRIU; rows on the image's fault points
# (image-write, image-read) run where that part of issue 10 wires them, and
# are reported as skipped (not passed) where it does not.
# Needs GPUSNAP_BUILD (set by ctest), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app
# several chunks in one allocation beside the slabs: the @N faults hit mid-way
export AGENT_APP_BIG_MB=40
export GPUSNAP_IO_THREADS=2
have_criu=0
if [ "$(id -u)" = 0 ] && { [ -n "${GPUSNAP_CRIU:-}" ] || [ -x "${GPUSNAP_SRC:-/nonexistent}/.cache/criu/bin/criu" ]; }; then
  : "${GPUSNAP_CRIU:=$GPUSNAP_SRC/.cache/criu/bin/criu}"
  export GPUSNAP_CRIU
  "$GPUSNAP_CRIU" check >/dev/null 2>&1 && have_criu=1 && export FAKE_CUDA_CRIU=1 && chmod 700 "$TEST_TMP"
fi

fired() { grep -q "injected at '$1'" "$GPUSNAP_AGENT_LOG" 2>/dev/null; }
mapped_all() { test "$(phys)" = "$phys0"; }

# back TITLE [RESUME ARGS...]: a suspended process comes back with `gpusnap resume` (ARGS)
back() {
  local t=$1
  shift
  run_gpusnap resume "$@" "$PID"; expect "$t: resume brings it back" 0
  check "$t: its memory is all mapped again ($(phys) of $phys0 bytes)" mapped_all
  verify_ok "$t: every byte is the app's after the resume"
  run_gpusnap state "$PID"
  check "$t: state says running, no fault left ($(cat "$OUT_TXT"))" grep -qx running "$OUT_TXT"
}

# after TITLE WANT: the process's condition after the failed step (see the top)
after() {
  local t=$1 want=$2 kept=${3:-}
  case $want in
    running)
      check "$t: the process runs" alive "$PID"
      check "$t: its memory is all mapped ($(phys) of $phys0 bytes)" mapped_all
      verify_ok "$t: every byte is the app's"
      run_gpusnap state "$PID"; expect "$t: state answers" 0
      check "$t: state says running ($(cat "$OUT_TXT"))" grep -qx running "$OUT_TXT"
      ;;
    suspended | suspended-image)
      check "$t: the process is alive" alive "$PID"
      run_gpusnap state "$PID"; expect "$t: state answers" 0
      check "$t: state says it stays suspended and why ($(cat "$OUT_TXT"))" grep -q "^suspended (rollback failed: " "$OUT_TXT"
      if [ "$want" = suspended ]; then back "$t"; else back "$t" --image "$kept"; fi
      ;;
    suspended-plain)
      check "$t: the process is alive" alive "$PID"
      run_gpusnap state "$PID"
      check "$t: state says suspended ($(cat "$OUT_TXT"))" grep -qx suspended "$OUT_TXT"
      back "$t"
      ;;
    suspended-resume)
      check "$t: the process is alive" alive "$PID"
      run_gpusnap state "$PID"
      check "$t: state says suspended, the last resume failed and why ($(cat "$OUT_TXT"))" \
        grep -q "^suspended (the last resume failed: .*; its GPU data is in host memory, gpusnap resume retries)$" "$OUT_TXT"
      back "$t"
      ;;
    gone)
      check "$t: the app is gone" wait_gone "$PID" 5
      run_gpusnap state "$PID"; expect "$t: the next command says so" 3
      ;;
    restorable)
      check "$t: no restored process is left" wait_gone "$PID" 5
      check "$t: the image is unchanged" test "$(sums "$img")" = "$sums0"
      run_gpusnap inspect --verify "$img"; expect "$t: the image still verifies" 0
      ;;
  esac
}

# row STEP FAULT RC MESSAGE AFTER: the app started with GPUSNAP_FAULT=FAULT, STEP run on it
# (FAULT cli:SPEC: the gpusnap command of the step gets GPUSNAP_FAULT=SPEC instead)
row() {
  local step=$1 fault=$2 rc=$3 msg=$4 want=$5 t="$1 with $2"
  local app_fault=$fault cli_fault="" sums0="" kept=""
  case $fault in cli:*) cli_fault=${fault#cli:} app_fault="" ;; esac
  local point=${fault#cli:}
  point=${point%%[@=,]*}
  img=$TEST_TMP/img
  case $step in dump* | restore*) if [ $have_criu = 0 ]; then echo "# SKIP $t: needs root and CRIU"; return; fi ;; esac
  : >"$GPUSNAP_AGENT_LOG"
  GPUSNAP_FAULT=$app_fault start_app
  verify_ok "$t: the app's data after allocation"
  phys0=$(phys)
  case $step in
    suspend) GPUSNAP_FAULT=$cli_fault run_gpusnap suspend "$PID" ;;
    suspend-timeout) run_gpusnap suspend --timeout 1 "$PID" ;;
    suspend-killed) # gpusnap killed while the agent works; the agent finishes on its own
      "$GPUSNAP_BIN" suspend "$PID" >"$TEST_TMP/out" 2>"$TEST_TMP/err" &
      local s=$!
      for _ in $(seq 300); do fired agent-reply && break; sleep 0.1; done
      kill -9 "$s"
      RC=0
      wait "$s" || RC=$?
      # the agent finishes its suspend alone, its 3 s hold included (it refuses another operation
      # meanwhile): wait for it to settle (60 s at most: a loaded machine), not for a guessed time
      for _ in $(seq 600); do
        [ "$("$GPUSNAP_BIN" state "$PID" 2>/dev/null)" = suspended ] && break
        sleep 0.1
      done
      OUT_TXT=$TEST_TMP/out ERR_TXT=$TEST_TMP/err ;;
    resume)
      run_gpusnap suspend "$PID"; expect "$t: the suspend before" 0
      GPUSNAP_FAULT=$cli_fault run_gpusnap resume "$PID" ;;
    dump) run_gpusnap dump -D "$img" "$PID" ;;
    restore)
      run_gpusnap dump -D "$img" "$PID"; expect "$t: the dump before" 0
      wait_gone "$PID" 5
      sums0=$(sums "$img")
      run_gpusnap restore -D "$img" ;;
  esac
  if ! fired "$point"; then
    case $point in image-*)
      echo "# SKIP $t: the $point fault point is not wired in this build"
      kill -9 "$PID" 2>/dev/null; wait_gone "$PID"; rm -rf "$img" "$(tmp_dirs "$img")"; return ;;
    esac
  fi
  if [ -n "$cli_fault" ]; then
    check "$t: the fault fired" test "$RC" = 137 -o -n "$(grep "injected at '$point'" "$ERR_TXT")"
  else
    check "$t: the fault fired" fired "$point"
  fi
  expect "$t: the command fails naming the cause" "$rc" "$msg"
  if [ "$step" = dump ]; then
    # a kept image gets a name no later dump removes (DIR.kept-PID-TIME)
    kept=$(ls -d "$img".kept-* 2>/dev/null | head -n 1)
    [ -n "$kept" ] || kept=$(tmp_dirs "$img")
    check "$t: nothing is published" test ! -e "$img"
    if [ "$want" = suspended-image ]; then
      check "$t: the error says where the data is" grep -q "gpusnap resume --image" "$ERR_TXT"
      check "$t: the temporary image is kept ($kept)" test -n "$kept"
    else
      check "$t: no temporary image is left ($kept)" test -z "$kept$(tmp_dirs "$img")"
    fi
  fi
  after "$t" "$want" "$kept"
  case $want in gone | restorable) ;; *) check "$t: nothing stays pinned ($(pinned) bytes)" test "$(pinned)" = 0 ;; esac
  kill -9 "$PID" 2>/dev/null
  wait_gone "$PID"
  rm -rf "$img" $kept
}

# The table. Release and recreate count regions (@2: the second one); copies count chunks.
#   STEP             FAULT (in the app)                                RC  MESSAGE                          AFTER
row suspend          agent-quiesce                                     16  "error while synchronizing"      running
row suspend-timeout  agent-quiesce=hold:4                               9  "GPU work still running"         running
row suspend          agent-copy-out@3                                  16  "copy of"                        running
row suspend          agent-release@2                                   16  "cannot release GPU memory"      running
row suspend          agent-release@2,agent-recreate                    16  "the process stays suspended"    suspended
row suspend          agent-release@2,agent-copy-in@2                   16  "the process stays suspended"    suspended
row suspend          agent-reply                                       16  "injected failure"               running
row suspend          agent-copy-out@2=exit:3                           16  ""                               gone
# gpusnap dies (kill -9): between the agent and the driver, while the agent works, between driver and agent
row suspend          cli:suspend-after-agent=kill                     137  ""                               suspended-plain
row suspend          cli:suspend-after-agent                            1  "(injected): undone"             running
row suspend-killed   agent-reply=hold:3                               137  ""                               suspended-plain
row resume           cli:resume-after-driver=kill                     137  ""                               suspended-plain
row resume           agent-recreate@2                                  14  "not enough free GPU memory"     suspended-resume
row resume           agent-copy-in@2                                   16  "copy of"                        suspended-resume
row resume           agent-stack                                       14  "its stack back"                 suspended-resume
row dump             agent-copy-out@2                                  16  "copy of"                        running
row dump             agent-release@2                                   16  "cannot release GPU memory"      running
# the agent's own undo fails, the command's retry from the image works: it runs on
row dump             agent-release@2,agent-recreate                    16  "cannot release GPU memory"      running
# both fail: the only copy is the temporary image, kept, and resume --image takes it back
row dump             agent-release@2,agent-recreate,agent-copy-in      16  "gpusnap resume --image"         suspended-image
row dump             agent-reply                                       16  "injected failure"               running
row dump             image-write=fail:ENOSPC                           13  ""                               running
row dump             image-write@3=fail:EIO                             1  ""                               running
row dump             agent-copy-out@2=exit:3                           16  ""                               gone
row restore          agent-recreate                                    14  "not enough free GPU memory"     restorable
row restore          agent-copy-in@3                                   16  "copy of"                        restorable
row restore          agent-stack                                       14  "its stack back"                 restorable
row restore          image-read@2=fail:EIO                             11  ""                               restorable
test_done
