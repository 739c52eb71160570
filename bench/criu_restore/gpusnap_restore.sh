#!/usr/bin/env bash
# gpusnap_restore.sh - what `gpusnap restore` of a CPU-heavy process takes
# until the process runs, whole (GPUSNAP_RESTORE_LAZY=off) and with CRIU's
# lazy pages (--lazy-pages), side by side in one run (docs/benchmarks.md,
# "CRIU restore"). No GPU: the tests' app (tests/agent/agent_app.c) holding
# MIB of CPU memory of its own and a little fake GPU data, under the agent
# on the host-memory fake driver. Root; a build tree with the tests.
#   bench/criu_restore/gpusnap_restore.sh BUILD [MIB] [RUNS]   (default 1430 MiB, 3 runs)
# CRIU: $GPUSNAP_CRIU or criu on PATH. Prints one line per restore, from
# restore --json: ready (the process runs with its GPU data), every CPU page
# in, criu's part, the checksums of CRIU's files before CRIU (lazy), total.
set -eu
build=$(cd "${1:?usage: gpusnap_restore.sh BUILD [MIB] [RUNS]}" && pwd)
mib=${2:-1430}
runs=${3:-3}
gpusnap=$build/gpusnap
app=$build/tests/agent/agent_app
if [ ! -x "$gpusnap" ] || [ ! -x "$app" ]; then echo "no gpusnap or tests/agent/agent_app in $build" >&2; exit 2; fi
command -v python3 >/dev/null || { echo "python3 is needed to read restore --json" >&2; exit 2; }
work=$(mktemp -d /var/tmp/gpusnap-restore.XXXXXX)
chmod 700 "$work"
export GPUSNAP_CRIU=${GPUSNAP_CRIU:-$(command -v criu)}
export GPUSNAP_RUN_DIR=$work/run GPUSNAP_LIBCUDA=$build/tests/agent/libfakevmm.so FAKE_CUDA_DIR=$work/fake
export FAKE_CUDA_CRIU=1 GPUSNAP_AGENT_LOG=$work/agent.log AGENT_APP_HOST_MB=$mib AGENT_APP_BIG_MB=64
mkdir -p "$FAKE_CUDA_DIR"
pid=""
gone() { [ -n "$pid" ] || return 0; kill -9 "$pid" 2>/dev/null || true; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; }
trap 'gone; rm -rf "$work"' EXIT

# the app: a session of its own, no inherited descriptors (CRIU dumps what it holds)
# (its subshell's end, killed by the dump, is not reported)
set +m
(for fd in "/proc/$BASHPID"/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
 exec setsid "$gpusnap" run -- "$app" --signals </dev/null >"$work/app.log" 2>"$work/app.err") &
for _ in $(seq 600); do pid=$(awk '/^READY/ {print $2; exit}' "$work/app.log"); [ -n "$pid" ] && break; sleep 0.1; done
[ -n "$pid" ] || { echo "the app did not start: $(cat "$work/app.err")" >&2; exit 1; }
t=$(date +%s.%N)
"$gpusnap" dump -D "$work/img" "$pid" >/dev/null
echo "dump: $(echo "$(date +%s.%N) - $t" | bc) s, $(du -sb "$work/img/cpu" | cut -f1) bytes of CRIU images"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done

restore() { # restore LABEL [options]: one restore, its line, the process killed after
  local label=$1
  shift
  cat "$work/img/cpu"/pages-*.img >/dev/null # in the page cache, as the checksum pass leaves it
  "$gpusnap" restore --json "$@" -D "$work/img" >"$work/out.json" || { cat "$work/out.json"; exit 1; }
  python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); t=d["times"]
print("%-12s ready %.2f s, every CPU page in %s, criu %.2f s, CRIU files checked first %.2f s, GPU part %.2f s, "
      "total %.2f s" % (sys.argv[2], t["ready_s"], "%.2f s" % t["lazy_pages_done_s"] if d["lazy_pages"] else "at ready",
                        t["criu_s"], t["verify_cpu_s"], t["gpu_s"], t["total_s"]))' "$work/out.json" "$label"
  gone
}
for _ in $(seq "$runs"); do
  GPUSNAP_RESTORE_LAZY=off restore "whole"
  restore "--lazy-pages" --lazy-pages
done
