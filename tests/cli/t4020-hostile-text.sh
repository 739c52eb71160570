#!/usr/bin/env bash
# t4020 - nothing a process, an agent or an image controls reaches the
# terminal raw (common/printable.h), and an agent's absurd numbers are refused:
#  - a process that names itself with escape sequences and a newline (and
#    maps a file named libcuda.so.1, as any user can, to enter the list) is
#    shown with '?' for them by state (the list, -v, one PID), suspend,
#    resume and "is not a CUDA process": every message one line, no control
#    byte anywhere; --json keeps the exact name, escaped, and stays valid;
#  - an agent's fault text holding them is shown the same way;
#  - an agent that reports 2^64-1 bytes or a negative time is a failed agent
#    (16) naming the field, the numbers never printed, the process untouched;
#  - with CRIU: dump and restore of such a process print its name the same
#    way, and a file in an image whose name holds a newline and ESC is named
#    in one printable line by inspect and restore.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/standin_agent.sh"

standin_env

# the name every process of this test gives itself (15 bytes at most, as comm holds)
NAME=$'a\033[2J\nb\033]0;t\a'
SHOWN='a?[2J?b?]0;t?'
FAULT=$'undo failed\n\033[31mgpusnap: all fine\033[0m'

cat >"$TEST_TMP/agent.py" <<'PY'
# A stand-in agent with a hostile name: HELLO/STATUS -> INFO (state, fault),
# anything else -> RESULT 0 with a timing and a counter; "absurd-info" and
# "absurd-result" put 2^64-1 bytes and a negative time there.
import os, struct, sys
from standin_agent import HELLO, INFO, RESULT, STATUS, field, frame, named, serve, u64
mode, state, name, fault = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open("/proc/self/comm", "wb") as f:
    f.write(name.encode())
big = 2**64 - 1
def reply(mtype):
    if mtype in (HELLO, STATUS):
        p = u64(1, os.getpid()) + u64(5, 1) + u64(6, state) + u64(3, 2)
        p += u64(4, big if mode == "absurd-info" else 8192)
        if fault:
            p += field(19, 3, fault.encode() + b"\0")
        return frame(INFO, p)
    p = u64(13, 0) + field(14, 3, b"\0")
    p += named(15, 6, "copy_out", struct.pack("<d", -1.0 if mode == "absurd-result" else 0.25))
    p += named(16, 5, "bytes", struct.pack("<Q", big if mode == "absurd-result" else 8192))
    return frame(RESULT, p)
serve("answer", reply)
PY

start_agent() { standin_start "$TEST_TMP/agent.py" "$1" "$2" "$NAME" "$3"; } # MODE STATE FAULT

# clean: the last run's stdout and stderr hold no control byte but newlines
clean() {
  if LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <"$OUT_TXT") <(tr -d '\n' <"$ERR_TXT"); then
    echo "    stdout: $(cat -v "$OUT_TXT")"; echo "    stderr: $(cat -v "$ERR_TXT")"; return 1
  fi
}
# row PID: the list's line for PID
row() { awk -v p="$1" '$1 == p' "$OUT_TXT"; }
# untouched PID: alive, and running as the fake driver sees it (nothing moved)
untouched() { kill -0 "$1" && [ "$(cut -d' ' -f1 "$FAKE_CUDA_DIR/$1")" = 0 ]; }
# unprinted: the last run printed no 2^64-1 anywhere
unprinted() { ! grep -q 18446744073709551615 "$OUT_TXT"; }

start_agent normal 0 ""
check "... as the kernel keeps it" [ "$(cat "/proc/$AGENT/comm")" = "$NAME" ]

run_gpusnap state; expect "state lists the process that mapped a file named libcuda.so.1" 0
check "... its line shows the name with '?' ($(row "$AGENT" | cat -v))" grep -qE "^$AGENT .* a\?\[2J\?b\?\]0;t\?\$" "$OUT_TXT"
check "... no control byte in the output" clean
check "... one line for it" [ "$(grep -c "^$AGENT " "$OUT_TXT")" = 1 ]
run_gpusnap state --json; expect "state --json" 0
check "... valid JSON carrying the exact name, escaped, in ASCII" python3 -c '
import json, sys
raw = open(sys.argv[1], "rb").read()
d = json.loads(raw)
x = next(p for p in d["processes"] if p["pid"] == int(sys.argv[2]))
sys.exit(not (x["comm"] == sys.argv[3] and all(0x20 <= b < 0x7f or b == 10 for b in raw)))' "$OUT_TXT" "$AGENT" "$NAME"
run_gpusnap state "$AGENT"; expect "state PID" 0
check "... clean" clean

run_gpusnap suspend "$AGENT"; expect "suspend through the stand-in agent" 0
check "... says 'suspended $AGENT ($SHOWN)' on one line" grep -qF "suspended $AGENT ($SHOWN) [agent]" "$OUT_TXT"
check "... clean" clean
run_gpusnap resume "$AGENT"; expect "resume" 0
check "... says 'resumed $AGENT ($SHOWN)'" grep -qF "resumed $AGENT ($SHOWN)" "$OUT_TXT"
check "... clean" clean
kill "$AGENT"

# the agent's fault text
start_agent normal 1 "$FAULT"
run_gpusnap state "$AGENT"; expect "state PID with a fault from the agent" 0
check "... on one line with '?' for the controls ($(cat -v "$OUT_TXT"))" \
  grep -qxF 'suspended (undo failed??[31mgpusnap: all fine?[0m)' "$OUT_TXT"
check "... clean" clean
run_gpusnap state -v "$AGENT"; expect "state -v PID" 0
check "... clean" clean
check "... two lines: the state, the agent's" [ "$(wc -l <"$OUT_TXT")" = 2 ]
run_gpusnap state -v; expect "state -v (the list)" 0
check "... clean" clean
run_gpusnap state --json "$AGENT"; expect "state --json PID" 0
check "... valid JSON, its fault shown as on the terminal" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (d["fault"] == "undo failed??[31mgpusnap: all fine?[0m" and d["comm"] == sys.argv[2]))' "$OUT_TXT" "$NAME"
kill "$AGENT"

# absurd numbers
start_agent absurd-info 0 ""
run_gpusnap state "$AGENT"
expect "an INFO with 2^64-1 bytes is a failed agent" 16 "bad field 4: 18446744073709551615, more than a process can hold (2^57)"
check "... one line" one_line
run_gpusnap suspend "$AGENT"; expect "suspend refuses before anything moves" 16 "more than a process can hold"
check "... the process untouched: alive, running on the driver" untouched "$AGENT"
run_gpusnap state; expect "the list shows the failed agent's process" 0
check "... its line" grep -q "^$AGENT " "$OUT_TXT"
check "... its number never printed" unprinted
kill "$AGENT"
start_agent absurd-result 0 ""
run_gpusnap suspend "$AGENT"
expect "a RESULT with 2^64-1 bytes or a negative time is a failed agent" 16 "agent sent a result message with a bad field"
check "... one line" one_line
check "... its numbers never printed" unprinted
check "... the process untouched: alive, not checkpointed by the driver" untouched "$AGENT"
kill "$AGENT"

# not a CUDA process (the same name, set by the process itself)
python3 -c 'import sys, time; open("/proc/self/comm", "wb").write(sys.argv[1].encode()); print("READY", flush=True); time.sleep(300)' \
  "$NAME" >"$TEST_TMP/plain.out" &
plain=$!
TEST_PIDS+=("$plain")
wait_lines "$TEST_TMP/plain.out" 1
run_gpusnap suspend "$plain"
expect "suspend of a process that is no CUDA process" 4 "process $plain ($SHOWN) is not a CUDA process"
check "... one line" one_line
check "... clean" clean
run_gpusnap state "$plain"
expect "state of it" 4 "process $plain ($SHOWN) is not a CUDA process"
check "... one line" one_line
kill "$plain"
wait "$plain" 2>/dev/null

# ---- with CRIU: dump and restore print the name the same way; a file name inside an image ----
if ! have_criu; then
  echo "SKIP: no usable CRIU here: dump, restore and image file names are not checked"
  test_done
  exit
fi
export FAKE_CUDA_CRIU=1
chmod 700 "$TEST_TMP"
cleanup_counters() {
  kill_test_procs "$(printf '%.15s' "$NAME")"
  cleanup_test
}
trap cleanup_counters EXIT
mkdir -p "$TEST_TMP/bin"
cp "$GPUSNAP_BUILD/tests/apps/cpu_counter" "$TEST_TMP/bin/$NAME"
log=$TEST_TMP/counter.log
pid=$("$TEST_TMP/bin/$NAME" --daemon "$log")
echo "0 0" >"$FAKE_CUDA_DIR/$pid"
wait_lines "$log" 10
check "the counter is called by the hostile name" [ "$(cat "/proc/$pid/comm")" = "$(printf '%.15s' "$NAME")" ]
img=$TEST_TMP/img
run_gpusnap dump -D "$img" "$pid"; expect "dump" 0
check "... says 'dumped $pid ($SHOWN)'" grep -qF "dumped $pid ($SHOWN)" "$OUT_TXT"
check "... clean" clean
wait_gone "$pid"
bad=$TEST_TMP/bad
cp -a "$img" "$bad"
evil=$'extra\n\033[2J.img'
echo x >"$bad/cpu/$evil"
chmod 600 "$bad/cpu/$evil"
for c in inspect restore; do
  run_gpusnap "$c" "$bad"
  expect "a file whose name holds a newline and ESC: $c names it" 11 "cpu/extra??[2J.img' is not one of the image's files"
  check "... in one line" one_line
  check "... clean" clean
done
run_gpusnap restore "$img"; expect "restore" 0
check "... says 'restored $pid ($SHOWN)'" grep -qF "restored $pid ($SHOWN)" "$OUT_TXT"
check "... clean" clean
kill -9 "$pid" 2>/dev/null
test_done
