#!/usr/bin/env bash
# t4013 - what an agent sends never reaches the terminal raw: a stand-in agent
# (a Python server speaking the control protocol in a process registered
# with the fake driver as a CUDA process) answers with escape sequences and
# codes gpusnap does not have, or not at all:
#  - its message comes out with every unprintable byte replaced, and a code
#    that is not one of gpusnap's exits 16 (agent), naming it;
#  - a code of gpusnap's, 9 for the agent's own GPU-work timeout, is kept;
#  - an agent that accepts and never answers is a failed agent (16), never the
#    GPU-work timeout's 9.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip "python3 is needed for the stand-in agent"
export GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA
export FAKE_CUDA_DIR=$TEST_TMP/fake
mkdir -p "$FAKE_CUDA_DIR" "$GPUSNAP_RUN_DIR"
chmod 700 "$GPUSNAP_RUN_DIR"

cat >"$TEST_TMP/agent.py" <<'PY'
# A stand-in agent: answers HELLO/STATUS with INFO (running, can suspend) and
# SUSPEND with RESULT(code, message) from the command line, or never answers.
import os, socket, struct, sys, time
mode, code, message = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
MAGIC, VERSION = 0x504E5347, 1
def field(tag, ftype, value):
    return struct.pack("<HBBI", tag, ftype, 0, len(value)) + value
def u64(tag, v):
    return field(tag, 1, struct.pack("<Q", v))
def frame(mtype, payload):
    return struct.pack("<IHHII", MAGIC, VERSION, mtype, len(payload), 0) + payload
def recv_all(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b
path = os.path.join(os.environ["GPUSNAP_RUN_DIR"], "agent-%d.sock" % os.getpid())
with open(os.path.join(os.environ["FAKE_CUDA_DIR"], str(os.getpid())), "w") as f:
    f.write("0 0\n")
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o600)
s.listen(8)
print("READY", os.getpid(), flush=True)
while True:
    c, _ = s.accept()
    if mode == "silent":
        time.sleep(30)
        continue
    try:
        magic, version, mtype, plen, _ = struct.unpack("<IHHII", recv_all(c, 16))
        recv_all(c, plen)
    except EOFError:
        c.close()
        continue
    if mtype in (1, 5):  # HELLO, STATUS -> INFO: pid, state running, caps suspend
        reply = frame(2, u64(1, os.getpid()) + u64(5, 1) + u64(6, 0))
    else:  # RESULT: code, message
        reply = frame(7, u64(13, code) + field(14, 3, message + b"\0"))
    c.sendall(reply)
    c.close()
PY

start_agent() { # MODE CODE MESSAGE
  python3 "$TEST_TMP/agent.py" "$@" >"$TEST_TMP/agent.out" 2>"$TEST_TMP/agent.err" &
  AGENT=$!
  TEST_PIDS+=("$AGENT")
  for _ in $(seq 100); do grep -q READY "$TEST_TMP/agent.out" && return 0; sleep 0.1; done
  echo "the stand-in agent did not start: $(cat "$TEST_TMP/agent.err")"
  exit 1
}
no_control_bytes() { ! LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <"$1"); }

start_agent answer 200 '\x1b[2J\x1b]0;owned\x07done\x9b31m'
run_gpusnap suspend "$AGENT"
expect "an unknown code from the agent is the agent failing" 16 "the agent answered with an unknown code 200"
check "its message reaches the terminal without control bytes ($(cat -v "$ERR_TXT"))" no_control_bytes "$ERR_TXT"
check "... with them replaced, the text kept" grep -q '?\[2J?\]0;owned?done?31m' "$ERR_TXT"
kill "$AGENT"

start_agent answer 9 'gpu work did not finish within 30 s'
run_gpusnap suspend "$AGENT"
expect "the agent's own timeout keeps its code" 9 "gpu work did not finish within 30 s"
kill "$AGENT"

start_agent answer 6 $'line one\nline two'
run_gpusnap suspend "$AGENT"
expect "a known code is kept" 6 "line one?line two"
kill "$AGENT"

start_agent silent 0 ''
run_gpusnap state "$AGENT"
expect "an agent that never answers is a failed agent, not a GPU-work timeout" 16 "did not answer within 5 s"
kill "$AGENT"
test_done
