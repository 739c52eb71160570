#!/bin/bash
# t5001-criu-cpu.sh - a CPU-only process dumped and restored through gpusnap's CRIU
# driving (src/criu via tests/apps/criu_driver) with the real CRIU 4:
#  - a daemon counter is dumped, is gone, restored, and counts on from where it was;
#  - a second restore from the same image while the first runs is refused (PID in use);
#  - after killing the first restore, the image restores again, from the same point;
#  - the restored process runs on the system's libc, not on the private CRIU's;
#  - a shell job (not its own session leader) is detected and dumped with --shell-job;
#  - --leave-running keeps the process, and that image restores too.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
# Skips (77) visibly when not root, when CRIU cannot be had, or when `criu check` fails.
set -u

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
app=$build/tests/apps/cpu_counter
driver=$build/tests/apps/criu_driver

skip() {
	echo "SKIP: $*"
	exit 77
}
fail() {
	echo "FAIL: $*"
	exit 1
}

[ "$(id -u)" = 0 ] || skip "criu needs root"
if [ ! -x "$app" ] || [ ! -x "$driver" ]; then
	fail "test apps not built ($app, $driver)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/t5001.XXXXXX")
started=()
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	for p in "${started[@]}"; do
		# only our counters: the PID is reused by restores, so check the name
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = cpu_counter ] && kill -9 "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${GPUSNAP_CRIU:-}" ]; then
	"$src/scripts/get-criu.sh" >"$tmp/get-criu.log" 2>&1
	rc=$?
	if [ "$rc" = 3 ]; then
		skip "cannot get CRIU: $(tail -n 1 "$tmp/get-criu.log")"
	elif [ "$rc" != 0 ]; then
		cat "$tmp/get-criu.log"
		fail "scripts/get-criu.sh failed ($rc)"
	fi
	export GPUSNAP_CRIU=$src/.cache/criu/bin/criu
fi
found=$("$driver" find) || fail "criu not usable: $found"
echo "criu: $found"
if ! "$driver" check >"$tmp/check.log" 2>&1; then
	skip "criu check fails on this kernel: $(tail -n 1 "$tmp/check.log")"
fi

# Waits (up to 30 s: a loaded machine only delays it) until FILE has at least N lines.
wait_lines() {
	local i
	for ((i = 0; i < 3000; i++)); do
		[ "$(wc -l 2>/dev/null <"$1" || echo 0)" -ge "$2" ] && return 0
		sleep 0.01
	done
	fail "$1 stopped at $(wc -l 2>/dev/null <"$1" || echo 0) lines, expected $2"
}

# Waits (up to 10 s) until PID no longer exists (an orphan's zombie is reaped by init).
wait_gone() {
	local i
	for ((i = 0; i < 1000; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.01
	done
	fail "process $1 still exists: $(head -n 3 "/proc/$1/status" 2>/dev/null | tr '\n' ' ')"
}

# Line N+1 of LOG must be VALUE+1 and the 10 lines from there consecutive: the
# counter went on from the dumped memory, not from a fresh start.
check_continues() {
	local log=$1 n=$2 value=$3 what=$4
	wait_lines "$log" $((n + 10))
	local got
	got=$(sed -n "$((n + 1)),$((n + 10))p" "$log" | tr '\n' ' ')
	local want="" i
	for ((i = 1; i <= 10; i++)); do want+="$((value + i)) "; done
	[ "$got" = "$want" ] || fail "$what: after line $n (value $value) the log has '$got', expected '$want'"
	echo "ok: $what continues at $((value + 1))"
}

# Checks that LOG no longer grows (its writer was dumped); prints "lines last_value".
settled() {
	local log=$1 a b
	a=$(wc -l <"$log")
	sleep 0.1
	b=$(wc -l <"$log")
	[ "$a" = "$b" ] || fail "$log still grows after the dump ($a -> $b lines)"
	echo "$b $(tail -n 1 "$log")"
}

# ---- a daemon: own session and process group ----
log=$tmp/counter.log
pid=$("$app" --daemon "$log") || fail "cannot start $app"
started+=("$pid")
wait_lines "$log" 20
"$driver" dump "$pid" "$tmp/img" 2>"$tmp/err" || fail "dump of $pid failed: $(cat "$tmp/err")"
wait_gone "$pid"
echo "ok: dumped $pid and it is gone"
grep -qx -- --shell-job "$tmp/img/gpusnap-criu-dump.args" && fail "a session leader was dumped with --shell-job"
grep -q "Dumping finished successfully" "$tmp/img/dump.log" || fail "dump.log does not say the dump finished"
open=$(find "$tmp/img" -type f -perm /077)
[ -z "$open" ] || fail "image files readable by others: $open"
read -r n value < <(settled "$log")
[ "$value" -ge 20 ] || fail "counter at $value before the dump"

rpid=$("$driver" restore "$tmp/img" 2>"$tmp/err") || fail "restore failed: $(cat "$tmp/err")"
[ "$rpid" = "$pid" ] || fail "restored pid $rpid, expected the dumped pid $pid"
check_continues "$log" "$n" "$value" "first restore"
grep -q "/usr/lib/x86_64-linux-gnu/libc.so.6\|/lib/x86_64-linux-gnu/libc.so.6" "/proc/$rpid/maps" ||
	fail "restored process does not map the system libc"
grep -q "\.cache/criu\|/glibc/" "/proc/$rpid/maps" && fail "restored process maps CRIU's private libraries"
tr '\0' '\n' <"/proc/$rpid/environ" | grep -q '^LD_LIBRARY_PATH=.*criu' &&
	fail "restored process inherited CRIU's LD_LIBRARY_PATH"
echo "ok: restored process runs on the system's libc"

# ---- a second restore while the first runs: the PID is taken ----
if "$driver" restore "$tmp/img" >"$tmp/out" 2>"$tmp/err"; then
	fail "second restore while $rpid runs succeeded: $(cat "$tmp/out")"
else
	rc=$?
fi
[ "$rc" = 15 ] || fail "second restore exited $rc, expected 15 (criu): $(cat "$tmp/err")"
grep -q "pid $pid, which the image needs, is in use by 'cpu_counter'" "$tmp/err" ||
	fail "unclear message for a PID in use: $(cat "$tmp/err")"
grep -q RLIMIT "$tmp/err" && fail "RLIMIT noise reported as the error: $(cat "$tmp/err")"
echo "ok: restore refused while the pid is in use: $(cat "$tmp/err")"

# ---- kill the first restore, restore again from the same image ----
kill -9 "$rpid"
# a write in flight when the kill came still lands: count the lines once it is gone
wait_gone "$rpid"
m=$(wc -l <"$log")
rpid=$("$driver" restore "$tmp/img" 2>"$tmp/err") || fail "restore after kill failed: $(cat "$tmp/err")"
started+=("$rpid")
check_continues "$log" "$m" "$value" "second restore from the same image"

# ---- --leave-running: the process stays, and that image restores too ----
"$driver" dump "$rpid" "$tmp/img2" --leave-running 2>"$tmp/err" || fail "dump --leave-running failed: $(cat "$tmp/err")"
sleep 0.1
kill -0 "$rpid" 2>/dev/null || fail "process $rpid gone after dump --leave-running"
before=$(wc -l <"$log")
wait_lines "$log" $((before + 5))
echo "ok: dump --leave-running left $rpid running"
kill -9 "$rpid"
wait_gone "$rpid"
rpid=$("$driver" restore "$tmp/img2" 2>"$tmp/err") || fail "restore of the --leave-running image failed: $(cat "$tmp/err")"
before=$(wc -l <"$log")
wait_lines "$log" $((before + 5))
echo "ok: --leave-running image restored"
kill -9 "$rpid"
wait_gone "$rpid"

# ---- a shell job: not its own session leader ----
log2=$tmp/job.log
# started through a subshell, so its parent becomes init and it is reaped after the dump
pid2=$(
	"$app" "$log2" </dev/null >/dev/null 2>&1 &
	echo $!
)
started+=("$pid2")
wait_lines "$log2" 10
# Where this test itself runs in a session whose leader is outside its PID
# namespace (some CI containers), the kernel shows session 0 and CRIU cannot dump
# the job at all: then the dump must refuse up front, clearly, and leave it running.
read -r -a stat2 <<<"$(sed 's/.*) //' "/proc/$pid2/stat")"
if [ "${stat2[3]}" = 0 ]; then
	if "$driver" dump "$pid2" "$tmp/img3" 2>"$tmp/err"; then
		fail "dump of $pid2, whose session leader is outside its PID namespace, succeeded"
	else
		rc=$?
	fi
	[ "$rc" = 15 ] || fail "dump of an outside-session job exited $rc, expected 15: $(cat "$tmp/err")"
	grep -q "session whose leader is outside its PID namespace" "$tmp/err" ||
		fail "unclear message for an outside-session job: $(cat "$tmp/err")"
	kill -0 "$pid2" 2>/dev/null || fail "process $pid2 gone after a refused dump"
	[ ! -e "$tmp/img3" ] || fail "a refused dump left $tmp/img3 behind"
	echo "ok: shell job whose session leader is outside the PID namespace refused: $(cat "$tmp/err")"
	kill -9 "$pid2"
else
	"$driver" dump "$pid2" "$tmp/img3" 2>"$tmp/err" || fail "dump of shell job $pid2 failed: $(cat "$tmp/err")"
	grep -qx -- --shell-job "$tmp/img3/gpusnap-criu-dump.args" || fail "shell job dumped without --shell-job"
	wait_gone "$pid2"
	read -r n value < <(settled "$log2")
	rpid=$("$driver" restore "$tmp/img3" 2>"$tmp/err") || fail "restore of shell job failed: $(cat "$tmp/err")"
	[ "$rpid" = "$pid2" ] || fail "restored pid $rpid, expected $pid2"
	check_continues "$log2" "$n" "$value" "shell job restore"
	kill -9 "$rpid"
fi

# ---- errors: a process that does not exist ----
if "$driver" dump 2147483600 "$tmp/img4" 2>"$tmp/err"; then
	fail "dump of a missing process succeeded"
else
	rc=$?
fi
[ "$rc" = 3 ] || fail "dump of a missing process exited $rc, expected 3: $(cat "$tmp/err")"
echo "ok: all"
exit 0
