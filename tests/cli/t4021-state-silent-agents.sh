#!/usr/bin/env bash
# t4021 - `gpusnap state` (the list of every CUDA process) is never held
# hostage: stand-in agents (Python, in processes that map a file named
# libcuda.so.1 and are registered with the fake driver, as any user can
# arrange) that accept and never answer, or never even accept, are asked
# together with a normal one:
#  - the list comes at once, text and --json: its agents' part is bounded
#    by 2 s for all together, where one after another each cost 5 s (20 s
#    here); the check allows 10 s, for a loaded machine;
#  - each silent one is listed as not-answering on the agent path, with a
#    note naming it; the normal one beside them is listed as running.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/standin_agent.sh"

standin_env

cat >"$TEST_TMP/agent.py" <<'PY'
# silent: accepts and never answers; deaf: never accepts; normal: INFO, running.
import os, sys
from standin_agent import INFO, frame, serve, u64
def reply(mtype):
    return frame(INFO, u64(1, os.getpid()) + u64(5, 1) + u64(6, 0) + u64(3, 1) + u64(4, 4096))
serve(sys.argv[1], reply)
PY

AGENTS=()
start_agent() { # MODE -> NEWPID
  standin_start "$TEST_TMP/agent.py" "$1"
  NEWPID=$AGENT
  AGENTS+=("$NEWPID")
}
row() { awk -v p="$1" '$1 == p' "$OUT_TXT"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

silent=()
for _ in 1 2 3; do start_agent silent; silent+=("$NEWPID"); done
start_agent deaf; silent+=("$NEWPID")
start_agent normal; normal=$NEWPID

t0=$(date +%s%N)
run_gpusnap state
took=$(ms_since "$t0")
expect "state lists them all" 0
check "... within the bound, not 5 s per silent agent one after another (20 s): $took ms" [ "$took" -lt 10000 ]
for p in "${silent[@]}"; do
  check "... $p as not-answering on the agent path ($(row "$p"))" sh -c "echo '$(row "$p")' | grep -qE '^$p +not-answering +agent +.* python3\$'"
  check "... with a note naming it" grep -qF "gpusnap: note: the agent of process $p did not answer within 2 s" "$ERR_TXT"
done
check "... the normal agent beside them as running ($(row "$normal"))" \
  sh -c "echo '$(row "$normal")' | grep -qE '^$normal +running +agent '"

t0=$(date +%s%N)
run_gpusnap state --json
took=$(ms_since "$t0")
expect "state --json" 0
check "... within the bound: $took ms" [ "$took" -lt 10000 ]
check "... the silent ones not-answering with the reason, the normal one running on its agent" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
by = {p["pid"]: p for p in d["processes"]}
silent, normal = [int(x) for x in sys.argv[3].split()], int(sys.argv[2])
ok = all(by[p]["state"] == "not-answering" and by[p]["path"] == "agent" and "did not answer" in by[p]["not_answering"] for p in silent)
ok = ok and by[normal]["state"] == "running" and by[normal]["agent"]["state"] == "running" and by[normal]["agent"]["bytes"] == 4096
sys.exit(not ok)' "$OUT_TXT" "$normal" "${silent[*]}"

run_gpusnap state "$normal"; expect "state PID of the normal one" 0 "running"
test_done
