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
. "$(dirname "$0")/standin_agent.sh"

standin_env

cat >"$TEST_TMP/agent.py" <<'PY'
# answers HELLO/STATUS with INFO (running, can suspend) and SUSPEND with
# RESULT(code, message) from the command line, or never answers.
import os, sys
from standin_agent import HELLO, INFO, RESULT, STATUS, field, frame, serve, u64
mode, code, message = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
def reply(mtype):
    if mtype in (HELLO, STATUS):  # INFO: pid, state running, caps suspend
        return frame(INFO, u64(1, os.getpid()) + u64(5, 1) + u64(6, 0))
    return frame(RESULT, u64(13, code) + field(14, 3, message + b"\0"))
serve(mode, reply)
PY

start_agent() { standin_start "$TEST_TMP/agent.py" "$@"; } # MODE CODE MESSAGE
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
