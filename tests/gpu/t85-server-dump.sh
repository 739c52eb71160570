#!/usr/bin/env bash
# t85-server-dump.sh - an inference server (tests/gpu/py/server.py: HTTP with
# keep-alive, a UDP socket, a small PyTorch transformer answering generate
# requests greedily) started with `gpusnap run` is dumped while a client holds
# an idle keep-alive connection to it, and restored: `--tcp-close` (the
# connection comes back closed, the client reconnects), `--tcp-established`
# (the idle connection works on; CRIU locks the network with iptables, or
# with nftables where no iptables-restore is on PATH; a visible SKIP with neither)
# and the driver path (`--driver`). After each restore every answer, over
# HTTP and UDP, equals what an uninterrupted twin (started the same way, never
# dumped) gives for the same prompts (tests/gpu/py/server_client.py compares).
# Then both paths again with `restore --lazy-pages` (CRIU's lazy-pages daemon
# fills the CPU memory while the driver restores the process and the agent
# loads the GPU data): the same answers, --json says lazily and when every
# page was in.
# Two PyTorch start-ups and ten CRIU runs of a PyTorch process:
# gpu-test-limit: 600
. "$(dirname "$0")/lib.sh"
gs_test_init t85-server-dump
export GS_APP_STDERR=null # CRIU restores a process only if its regular files kept their size
require_torch
require_criu

# One summary line per variant, printed last: ok, FAILED or skipped.
SUMMARY=()
variant_begin() { V_FAIL0=$GS_FAIL; }
variant_end() { # NAME
  if [ "$GS_FAIL" -gt "$V_FAIL0" ]; then SUMMARY+=("$1: FAILED"); else SUMMARY+=("$1: ok"); fi
}
print_summary() {
  echo "== t85 summary"
  printf '  %s\n' "${SUMMARY[@]}"
}

server_pair_start 85 || finish
pid=${APP_PID[srv]}
log "server ports: $(cat "$GS_WORK/srv.json"), twin: $(cat "$GS_WORK/twin.json")"
server_client_start 85 || finish
client_ask open OPEN "OPEN SAME" "keep-alive connections to the server and its twin"
client_same_as_twin "before any dump"

# Ends the test after a dump or restore failed: nothing after it can be checked.
stop_here() { variant_end "$1"; print_summary; finish; }

# 1. agent path, --tcp-close: the idle keep-alive connection comes back closed.
variant_begin
dump_checked "$pid" "$GS_WORK/img-close" agent --tcp-close || stop_here "agent path, --tcp-close"
restore_checked "$GS_WORK/img-close" "$pid" || stop_here "agent path, --tcp-close"
client_ask keepalive KEEPALIVE "KEEPALIVE CLOSED" "--tcp-close: the idle keep-alive connection comes back closed"
client_same_as_twin "after dump --tcp-close and restore"
variant_end "agent path, --tcp-close"

# 2. --tcp-established: CRIU locks the connections with iptables while it works, or with nftables
# where iptables-restore is not on PATH (gpusnap picks it: criu.c gs_criu_tcp_plan).
if command -v iptables >/dev/null 2>&1 && iptables -w -n -L >/dev/null 2>&1; then
  netlock=iptables
elif ! command -v iptables-restore >/dev/null 2>&1 && "$GPUSNAP_CRIU" check --feature network_lock_nftables >/dev/null 2>&1; then
  netlock=nftables
else
  netlock=
fi
if [ -n "$netlock" ]; then
  log "--tcp-established: CRIU locks the network with $netlock"
  variant_begin
  client_ask open OPEN "OPEN SAME" "a new idle keep-alive connection before dump --tcp-established"
  dump_checked "$pid" "$GS_WORK/img-established" agent --tcp-established || stop_here "agent path, --tcp-established"
  restore_checked "$GS_WORK/img-established" "$pid" || stop_here "agent path, --tcp-established"
  client_ask keepalive KEEPALIVE "KEEPALIVE SAME" "--tcp-established: the idle keep-alive connection answers on, as the twin"
  client_same_as_twin "after dump --tcp-established and restore"
  variant_end "agent path, --tcp-established"
else
  skip "dump --tcp-established: neither a working iptables nor CRIU's nftables lock here (CRIU locks established connections with one)"
  SUMMARY+=("agent path, --tcp-established: skipped (no network lock)")
fi

# 3. the driver path: the driver checkpoints the GPU state, the agent stands aside.
variant_begin
client_ask open OPEN "OPEN SAME" "a new idle keep-alive connection before dump --driver"
dump_checked "$pid" "$GS_WORK/img-driver" driver --driver --tcp-close || stop_here "driver path, --tcp-close"
restore_checked "$GS_WORK/img-driver" "$pid" || stop_here "driver path, --tcp-close"
client_ask keepalive KEEPALIVE "KEEPALIVE CLOSED" "--driver --tcp-close: the idle keep-alive connection comes back closed"
client_same_as_twin "after dump --driver and restore"
variant_end "driver path, --tcp-close"

# 4. and 5. restore --lazy-pages, agent path and driver path (the driver's restore then reads the
# process's memory, its saved GPU state among it, as the daemon brings it in)
lazy_variant() { # NAME HOW [DUMP ARGS...]
  local name=$1 how=$2
  shift 2
  variant_begin
  client_ask open OPEN "OPEN SAME" "a new idle keep-alive connection before the dump ($name)"
  dump_checked "$pid" "$GS_WORK/img-lazy-$how" "$how" "$@" --tcp-close || stop_here "$name"
  restore_checked "$GS_WORK/img-lazy-$how" "$pid" --lazy-pages || stop_here "$name"
  check_eq "$name: restored lazily" "$(json_get "$RESTORE_OUT" lazy_pages)" true
  log "$name: running after $(json_get "$RESTORE_OUT" times.ready_s) s, every CPU page in after $(json_get "$RESTORE_OUT" times.lazy_pages_done_s) s"
  client_ask keepalive KEEPALIVE "KEEPALIVE CLOSED" "$name: the idle keep-alive connection comes back closed"
  client_same_as_twin "after dump and restore --lazy-pages ($name)"
  variant_end "$name"
}
lazy_variant "agent path, restore --lazy-pages" agent
lazy_variant "driver path, restore --lazy-pages" driver --driver

app_cmd client server-stats SERVERSTATS 30 && log "server after the restores: $REPLY_LINE"
app_quit client 30
app_quit srv 60
app_quit twin 60
print_summary
finish
