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

command -v python3 >/dev/null || skip "python3 is needed for the stand-in agents"
export GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA
export FAKE_CUDA_DIR=$TEST_TMP/fake
mkdir -p "$FAKE_CUDA_DIR" "$GPUSNAP_RUN_DIR" "$TEST_TMP/lib"
chmod 700 "$GPUSNAP_RUN_DIR"
head -c 4096 /dev/zero >"$TEST_TMP/lib/libcuda.so.1"

cat >"$TEST_TMP/agent.py" <<'PY'
# silent: accepts and never answers; deaf: never accepts; normal: INFO, running.
import mmap, os, socket, struct, sys, time
mode = sys.argv[1]
lib = open(os.environ["LIBCUDA_FILE"], "rb")
mapped = mmap.mmap(lib.fileno(), 4096, prot=mmap.PROT_READ)
path = os.path.join(os.environ["GPUSNAP_RUN_DIR"], "agent-%d.sock" % os.getpid())
with open(os.path.join(os.environ["FAKE_CUDA_DIR"], str(os.getpid())), "w") as f:
    f.write("0 0\n")
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o600)
s.listen(8)
print("READY", os.getpid(), flush=True)
held = []
while True:
    if mode == "deaf":
        time.sleep(60)
        continue
    c, _ = s.accept()
    if mode == "silent":
        held.append(c)
        continue
    hdr = b""
    while len(hdr) < 16:
        hdr += c.recv(16 - len(hdr))
    def u64(tag, v):
        return struct.pack("<HBBIQ", tag, 1, 0, 8, v)
    p = u64(1, os.getpid()) + u64(5, 1) + u64(6, 0) + u64(3, 1) + u64(4, 4096)
    c.sendall(struct.pack("<IHHII", 0x504E5347, 1, 2, len(p), 0) + p)
    c.close()
PY

AGENTS=()
start_agent() { # MODE -> NEWPID
  local out=$TEST_TMP/agent-${#AGENTS[@]}.out
  LIBCUDA_FILE=$TEST_TMP/lib/libcuda.so.1 python3 "$TEST_TMP/agent.py" "$1" >"$out" 2>"$out.err" &
  NEWPID=$!
  TEST_PIDS+=("$NEWPID")
  AGENTS+=("$NEWPID")
  for _ in $(seq 100); do grep -q READY "$out" && return 0; sleep 0.1; done
  echo "a stand-in agent did not start: $(cat "$out.err")"
  exit 1
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
