#!/usr/bin/env bash
# t5007-criu-sockets - a server dumps and restores: a CPU process holding a
# listening TCP socket, an established connection (a client of this test keeps
# one open) and a UDP socket (tests/apps/socket_server, registered as a CUDA
# process in the fake libcuda, as in t5002) goes through `gpusnap dump --tcp-close`
# and `gpusnap restore`:
#  - without --tcp-close the dump is refused before anything moves (a
#    connection to a client outside the tree: CRIU's rule for established
#    connections), and --tcp-established too where neither iptables-restore
#    is on PATH nor CRIU can lock with nftables; the server runs on;
#  - without iptables-restore on PATH, --tcp-established goes through CRIU's
#    nftables lock (dump --leave-running, the connection carrying on) and the
#    image restores with that lock too;
#  - with it the server is dumped and gone; the kept-open client sees its
#    connection end; after restore the server answers TCP and UDP requests with
#    the count it had (its memory came back), twice from the same image;
#  - a listener without SO_REUSEADDR, whose connection the dump closed sits in
#    TIME_WAIT on its port: restore waits for it (up to 65 s) and restores;
#  - a connection whose two ends are in the tree (the daemon and a relay
#    child): dumped as it is without --tcp-*, with --tcp-established and
#    --network-lock=skip, and the relay's one connection works after restore
#    (the relay, a process under the dumped one that CRIU restores stopped,
#    runs again: restore lets the whole tree continue); after dump
#    --leave-running the connection carries on in the running tree;
#    --tcp-close says it closes the connections inside the tree too.
# Why this needs CRIU >= 4.2: from Linux 6.16 on the kernel refuses SO_PASSCRED and
# SO_PASSSEC on sockets other than AF_UNIX/AF_NETLINK, and CRIU 4.1.1 reads them
# from every socket it dumps: on this kernel (6.18) `criu dump` of this very
# server fails with "sockets: Can't get 1:16 opt: Operation not supported"
# (CRIU issues 2705 and 2718, fixed in 4.2). gpusnap refuses CRIU < 4.2 on such
# kernels up front (t5004-criu-limits); this test runs with the CRIU it is given.
# Needs root, python3; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
server=$build/tests/apps/socket_server

fake_cuda_env criu
command -v python3 >/dev/null || skip "no python3 (the test's client)"

cleanup_all() {
  exec 7<&- 2>/dev/null
  kill_test_procs socket_server
  cleanup_test
}
trap cleanup_all EXIT

# ask tcp|udp: one request on a new connection (or datagram); prints the answer
ask() {
  python3 - "$1" "$tcp_port" "$udp_port" <<'PY'
import socket, sys
kind, tcp, udp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if kind == "tcp":
    s = socket.create_connection(("127.0.0.1", tcp), timeout=5)
    s.sendall(b"hello\n")
    f = s.makefile("rb")
    print(f.readline().decode().strip())
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(b"hello", ("127.0.0.1", udp))
    print(s.recv(100).decode().strip())
PY
}
answers() { # answers KIND WANT
  local got; got=$(ask "$1" 2>&1)
  [ "$got" = "$2" ] || { echo "    $1 answer: '$got', want '$2'"; return 1; }
}
# the kept-open connection on fd 7: one request, one answer
keepalive_answers() {
  local line
  echo hello >&7 || return 1
  read -r -t 5 line <&7 || return 1
  [ "$line" = "$1" ] || { echo "    keep-alive answer: '$line', want '$1'"; return 1; }
}
# the kept-open connection ended: the read sees end-of-file or a reset, not an answer
keepalive_ended() {
  local line
  echo hello >&7 2>/dev/null
  ! read -r -t 5 line <&7 2>/dev/null
}
socket_kinds() { # the server's sockets as seen by ss: listening, established, udp
  ss -Htanp 2>/dev/null | grep "pid=$1," | awk '{print $1}' | sort | tr '\n' ' '
  ss -Huanp 2>/dev/null | grep -q "pid=$1," && echo -n "UDP"
}

pid=$("$server" --daemon "$TEST_TMP") || { echo "not ok - cannot start $server"; exit 1; }
TEST_PIDS+=("$pid")
echo "0 0" >"$FAKE_CUDA_DIR/$pid"
read -r tcp_port udp_port <"$TEST_TMP/ports"
exec 7<>"/dev/tcp/127.0.0.1/$tcp_port"
check "the kept-open connection is answered" keepalive_answers "count 1"
check "a TCP request is answered" answers tcp "count 2"
check "a UDP request is answered" answers udp "count 3"
if command -v ss >/dev/null; then
  check "the server holds a listening, an established TCP socket and a UDP socket" \
    [ "$(socket_kinds "$pid")" = "ESTAB LISTEN UDP" ]
fi

img=$TEST_TMP/img
run_gpusnap dump -D "$img" "$pid"
expect "dump without --tcp-* is refused (a connection to outside the tree)" 15 \
  "process $pid (socket_server) has a TCP connection to outside the dumped tree"
check "in one line" one_line
check "... naming the process at the other end (this test's shell)" grep -qF "held by process $$ (bash)" "$ERR_TXT"
check "the server runs on" answers tcp "count 4"
check "its kept-open connection too" keepalive_answers "count 5"
# --tcp-established needs CRIU's network lock: iptables-restore, else CRIU's own nftables lock; with
# neither it is refused before anything moves (a CRIU whose nftables check fails stands for the latter)
noipt=/usr/bin:/bin
nonft=$TEST_TMP/criu-nonft
printf '#!/bin/sh\nif [ "$1 $2 $3" = "check --feature network_lock_nftables" ]; then exit 1; fi\nexec %s "$@"\n' \
  "$GPUSNAP_CRIU" >"$nonft"
chmod +x "$nonft"
if ! PATH=$noipt command -v iptables-restore >/dev/null; then
  GPUSNAP_CRIU=$nonft PATH=$noipt run_gpusnap dump --tcp-established -D "$img" "$pid"
  expect "dump --tcp-established with neither iptables-restore on PATH nor CRIU's nftables lock is refused" 15 \
    "iptables-restore, and there is none on PATH (nor can this CRIU lock it with nftables here)"
  check "the server runs on" answers tcp "count 6"
  check "its kept-open connection too" keepalive_answers "count 7"
else
  echo "SKIP: iptables-restore is in /usr/bin or /bin here: a host without it is not tested"
  answers tcp "count 6" >/dev/null && keepalive_answers "count 7" >/dev/null
fi

run_gpusnap dump --tcp-close -D "$img" "$pid"; expect "dump --tcp-close" 0 "dumped $pid (socket_server)"
check "the server is gone" wait_gone "$pid"
check "the kept-open connection ended" keepalive_ended
exec 7<&-
check "nothing listens on its port" bash -c "! python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", $tcp_port), timeout=2)' 2>/dev/null"

run_gpusnap restore -D "$img"; expect "restore" 0 "restored $pid (socket_server)"
check "after restore it answers TCP from its dumped count" answers tcp "count 8"
check "and UDP" answers udp "count 9"
exec 7<>"/dev/tcp/127.0.0.1/$tcp_port"
check "a new kept-open connection is answered" keepalive_answers "count 10"
exec 7<&-
kill -9 "$pid"; wait_gone "$pid"

run_gpusnap restore -D "$img"; expect "restore again from the same image" 0 "restored $pid (socket_server)"
check "it answers from the dumped count again" answers tcp "count 8"
check "and UDP" answers udp "count 9"
# no iptables-restore on PATH, a CRIU that locks with nftables: --tcp-established goes through
# (--leave-running: the connection carries on), and so does the restore of that image
if ! PATH=$noipt command -v iptables-restore >/dev/null && "$GPUSNAP_CRIU" check --feature network_lock_nftables >/dev/null 2>&1; then
  exec 7<>"/dev/tcp/127.0.0.1/$tcp_port"
  check "a kept-open connection to the restored server" keepalive_answers "count 10"
  img_nft=$TEST_TMP/img-nft
  PATH=$noipt run_gpusnap dump --tcp-established --leave-running -D "$img_nft" "$pid"
  expect "dump --tcp-established --leave-running without iptables-restore: CRIU's nftables lock" 0 "dumped $pid"
  check "... CRIU was told to lock with nftables" grep -rqx --include=gpusnap-criu-dump.args -- "--network-lock=nftables" "$img_nft"
  check "the server runs on" answers tcp "count 11"
  check "its kept-open connection carries on" keepalive_answers "count 12"
  kill -9 "$pid"; wait_gone "$pid"
  exec 7<&-
  PATH=$noipt run_gpusnap restore -D "$img_nft"; expect "its restore, locked with nftables too" 0 "restored $pid (socket_server)"
  check "it answers from the count it was dumped with" answers tcp "count 11"
else
  echo "SKIP: iptables-restore is on /usr/bin:/bin, or this CRIU cannot lock with nftables: the nftables lock is not tested"
fi
kill -9 "$pid"; wait_gone "$pid"

# A listener without SO_REUSEADDR (NCCL's bootstrap, PyTorch's store): the connection the dump
# closed stays in TIME_WAIT on the listener's port for 60 s once its peer closes, and until then
# the port cannot be bound again, whatever CRIU sets. Restore waits for it and restores.
pid=$(SOCKET_SERVER_NO_REUSEADDR=1 "$server" --daemon "$TEST_TMP") || { echo "not ok - cannot start $server"; exit 1; }
TEST_PIDS+=("$pid")
echo "0 0" >"$FAKE_CUDA_DIR/$pid"
read -r tcp_port udp_port <"$TEST_TMP/ports"
exec 7<>"/dev/tcp/127.0.0.1/$tcp_port"
check "without SO_REUSEADDR: the kept-open connection is answered" keepalive_answers "count 1"
rm -rf "$img"
run_gpusnap dump --tcp-close -D "$img" "$pid"; expect "without SO_REUSEADDR: dump --tcp-close" 0 "dumped $pid"
check "the server is gone" wait_gone "$pid"
exec 7<&-
tw_on_port() { awk -v p="$(printf '%04X' "$tcp_port")" '$4 == "06" && $2 ~ (":" p "$")' /proc/net/tcp | wc -l; }
for _ in $(seq 300); do [ "$(tw_on_port)" -gt 0 ] && break; sleep 0.1; done
check "its closed connection holds the port in TIME_WAIT ($(tw_on_port))" [ "$(tw_on_port)" -gt 0 ]
# a SIGTERM while restore waits ends the wait at once: the image stays, nothing runs
"$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/bg.out" 2>"$TEST_TMP/bg.err" &
bg=$!
for _ in $(seq 300); do grep -q "TIME_WAIT" "$TEST_TMP/bg.err" && break; sleep 0.1; done
check "a restore says it waits for the TIME_WAIT" grep -q "TIME_WAIT" "$TEST_TMP/bg.err"
t0=$(date +%s)
kill -TERM "$bg"
wait "$bg"; rc=$?
check "SIGTERM ends the waiting restore within 3 s (exit $rc after $(($(date +%s) - t0)) s)" \
  test "$rc" = 143 -a $(($(date +%s) - t0)) -le 3
check "... and nothing was restored" wait_gone "$pid"
t0=$(date +%s)
run_gpusnap restore -D "$img"
expect "restore waits for the TIME_WAIT and restores" 0 "restored $pid (socket_server)"
said_why() { # the wait's reason in the restore's stderr, shown when it is not there
  grep -Eq "held by [0-9]+ connections? in TIME_WAIT that it closed when it was dumped" "$ERR_TXT" ||
    { sed 's/^/    stderr: /' "$ERR_TXT"; return 1; }
}
check "... saying why it waits" said_why
check "... after the TIME_WAIT, not before ($(($(date +%s) - t0)) s)" [ $(($(date +%s) - t0)) -ge 20 ]
check "after restore it answers TCP from its dumped count" answers tcp "count 2"
kill -9 "$pid"; wait_gone "$pid"

# A connection whose two ends are in the dumped tree (the daemon and its relay child, as torch's store
# and its clients): dumped as it is without being asked, no network lock, and it works after restore.
rm -f "$TEST_TMP/relay_port"
pid=$(SOCKET_SERVER_RELAY=1 "$server" --daemon "$TEST_TMP") || { echo "not ok - cannot start $server"; exit 1; }
TEST_PIDS+=("$pid")
echo "0 0" >"$FAKE_CUDA_DIR/$pid"
read -r tcp_port udp_port <"$TEST_TMP/ports"
for _ in $(seq 300); do [ -s "$TEST_TMP/relay_port" ] && break; sleep 0.1; done
relay_port=$(cat "$TEST_TMP/relay_port" 2>/dev/null)
relay_answers() { # WANT
  local got
  got=$(python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(b"x", ("127.0.0.1", int(sys.argv[1]))); print(s.recv(200).decode().strip())' "$relay_port" 2>&1)
  [ "$got" = "$1" ] || { echo "    relay answer: '$got', want '$1'"; return 1; }
}
check "the relay's connection inside the tree is answered" relay_answers "relay count 1"
# the relay alone (a CUDA process to the fake driver): its peer is the daemon above it, which the message names
relay=$(pgrep -P "$pid" socket_server | head -n 1)
echo "0 0" >"$FAKE_CUDA_DIR/$relay"
run_gpusnap dump -D "$TEST_TMP/img-relay" "$relay"
expect "dump of the relay alone is refused: its connection's other end is above it" 15 \
  "held by process $pid (socket_server) above it: gpusnap dump --tree $pid takes both ends"
check "the relay runs on" alive "$relay"
rm -f "$FAKE_CUDA_DIR/$relay"
img=$TEST_TMP/img-inside
run_gpusnap dump -D "$img" "$pid"; expect "dump of the tree, its connection inside it" 0 "dumped $pid (socket_server)"
check "the connection was dumped as it is, without a network lock" \
  grep -qx -e --network-lock=skip "$img/cpu/gpusnap-criu-dump.args"
check "... as --tcp-established" grep -qx -e --tcp-established "$img/cpu/gpusnap-criu-dump.args"
check "the server is gone" wait_gone "$pid"
run_gpusnap restore -D "$img"; expect "restore" 0 "restored $pid (socket_server)"
check "the relay answers over the same connection, the daemon from its dumped count" relay_answers "relay count 2"
check "the daemon answers new connections" answers tcp "count 3"
# --tcp-close closes them too, and the dump says so (--leave-running: the tree runs on, its connection
# taken out of repair mode, not closed)
run_gpusnap dump --tcp-close --leave-running -D "$TEST_TMP/img-inside-close" "$pid"
expect "dump --tcp-close --leave-running of the tree" 0 "closes the 2 TCP connection(s) between processes of the tree too"
check "the relay's connection carries on" relay_answers "relay count 4"
# --leave-running: the connection is taken out of repair mode and carries on in the running tree
run_gpusnap dump --leave-running -D "$TEST_TMP/img-inside-lr" "$pid"; expect "dump --leave-running of the tree" 0
check "the relay's connection carries on after it" relay_answers "relay count 5"
pkill -9 -s "$pid" 2>/dev/null; wait_gone "$pid"

test_done
