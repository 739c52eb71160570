#!/usr/bin/env bash
# t4017 - io_uring, which CRIU cannot dump, and the agent (tests/agent/
# agent_app.c --signals on the host-memory fake driver, FAKE_APP_IO_URING
# asking for rings through syscall(3) as libuv does: at start, and from the
# executable's preinit_array, before the agent's constructor has run):
#  - under the agent both calls get ENOSYS and the process holds no ring;
#    the agent's log says so once; other system calls through syscall(3)
#    are untouched (the app's own getpid and close through it);
#  - such a process dumps and restores with CRIU, its data intact;
#  - GPUSNAP_ALLOW_IO_URING=1 lets both through (where the kernel allows
#    io_uring); `gpusnap dump` and `dump --tree` of that process are then
#    refused before anything moves (exit 15, one line naming the process and
#    io_uring), the process runs on with its data, nothing is published;
#  - a CUDA process without the agent holding a ring: the driver-path dump
#    is refused the same way and the driver never locked it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app
export GPUSNAP_LOG=info

rings() { find "/proc/$1/fd" -lname 'anon_inode:\[io_uring\]' 2>/dev/null | wc -l; }
io_uring_line() { grep '^IO_URING' "$log" | tail -n 1; }

# ---- under the agent: refused, before its constructor and after ----
FAKE_APP_IO_URING=preinit,start start_app
check "both io_uring_setup calls got ENOSYS ($(io_uring_line))" test "$(io_uring_line)" = "IO_URING preinit=ENOSYS start=ENOSYS"
check "the process holds no io_uring" test "$(rings "$PID")" = 0
check "the agent's log says so once" test "$(grep -c "io_uring_setup refused" "$GPUSNAP_AGENT_LOG")" = 1
verify_ok "the app's data with io_uring refused"

if have_criu; then
  img=$TEST_TMP/img
  run_gpusnap dump -D "$img" "$PID"; expect "dump of the process whose io_uring was refused" 0
  check "the dumped process is gone" wait_gone "$PID" 5
  run_gpusnap restore -D "$img"; expect "its restore" 0
  verify_ok "every byte is back after the restore"
else
  echo "SKIP: no usable CRIU here: the dump and restore of the process are not tested"
fi
kill_our_apps agent_app
wait_gone "$PID" 5

# ---- GPUSNAP_ALLOW_IO_URING=1: the rings are made, and a dump is refused before anything moves ----
GPUSNAP_ALLOW_IO_URING=1 FAKE_APP_IO_URING=preinit,start start_app
line=$(io_uring_line)
if [[ $line =~ ^IO_URING\ preinit=[0-9]+\ start=[0-9]+$ ]]; then
  check "the process holds both rings ($line)" test "$(rings "$PID")" = 2
  if have_criu; then
    phys0=$(phys)
    for how in "" --tree; do
      img=$TEST_TMP/img-allowed$how
      run_gpusnap dump $how -D "$img" "$PID"
      expect "dump $how of a process holding an io_uring is refused" 15 "process $PID (agent_app) holds an io_uring"
      check "in one line" one_line
      check "the process runs on" alive "$PID"
      check "its memory stayed on the GPU" test "$(phys)" = "$phys0"
      check "nothing was published" test ! -e "$img"
      check "no temporary directory is left" test -z "$(tmp_dirs "$img")"
      verify_ok "its data after the refused dump $how"
    done
    run_gpusnap state "$PID"; expect "state after the refusals" 0 "" running
  else
    echo "SKIP: no usable CRIU here: the refused dump is not tested"
  fi
else
  echo "SKIP: this kernel gives no io_uring ($line): the refusal of a dump is not tested"
fi
kill_our_apps agent_app
wait_gone "$PID" 5

# ---- without the agent: the driver path refuses the same way, the driver never locked the process ----
if have_criu && [[ $line =~ ^IO_URING\ preinit=[0-9]+ ]]; then
  : >"$log"
  (close_inherited_fds && FAKE_APP_IO_URING=start exec setsid "$app" --signals </dev/null >>"$log" 2>"$TEST_TMP/bare.err") &
  disown
  PID=
  for _ in $(seq 300); do
    PID=$(awk '/^READY/ {print $2; exit}' "$log")
    [ -n "$PID" ] && break
    sleep 0.1
  done
  check "the app without the agent started and holds its ring ($(io_uring_line))" test -n "$PID" -a "$(rings "${PID:-0}")" = 1
  run_gpusnap dump -D "$TEST_TMP/img-bare" "$PID"
  expect "the driver-path dump of a process holding an io_uring is refused" 15 "holds an io_uring"
  check "the driver never locked it" test "$(fake_state)" = 0
  check "it runs on" alive "$PID"
else
  echo "SKIP: no CRIU or no io_uring here: the driver-path refusal is not tested"
fi

test_done
