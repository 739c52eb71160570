#!/usr/bin/env bash
# overhead.sh - steady-state cost of the gpusnap agent: the same work with and
# without it, alternated (ROUNDS times) in one run on one GPU:
#  - a PyTorch training step and an inference step (tests/gpu/py/torch_model.py --bench)
#  - cudaMalloc/cudaFree pairs of several sizes and a kernel launch (bench/malloc_bench)
# Prints a markdown table (median of the rounds) and writes $OUT/overhead.md.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPUSNAP_BUILD:-$SRC/build}
OUT=${OUT:-$SRC/gpu-out}
ROUNDS=${GPUSNAP_OVERHEAD_ROUNDS:-3}
G=$BUILD/gpusnap
mkdir -p "$OUT"
raw=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in plain agent; do
    pre=()
    [ $mode == agent ] && pre=("$G" run --)
    "${pre[@]}" python3 "$SRC/tests/gpu/py/torch_model.py" --bench 100 | sed "s/^/$mode /" >>"$raw"
    "${pre[@]}" "$BUILD/bench/malloc_bench" 2000 | sed "s/^/$mode /" >>"$raw"
  done
done
python3 - "$raw" "$OUT/overhead.md" <<'PY'
import re, statistics, sys, collections
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, rest = line.split(" ", 1)
    if rest.startswith("BENCH"):
        for k, v in re.findall(r"(\w+)_ms=([\d.]+)", rest):
            vals[(mode, "PyTorch %s step (ms)" % k)].append(float(v))
    elif rest.startswith("MALLOC_US"):
        size, v = re.match(r"MALLOC_US size=(\d+) ([\d.]+)", rest).groups()
        vals[(mode, "cudaMalloc+cudaFree %s B (us)" % size)].append(float(v))
    elif rest.startswith("LAUNCH_US"):
        vals[(mode, "kernel launch (us)")].append(float(rest.split()[1]))
names = []
for (m, n) in vals:
    if n not in names:
        names.append(n)
lines = ["| workload | without agent | with agent | ratio |", "|---|---|---|---|"]
for n in names:
    a, b = vals.get(("plain", n)), vals.get(("agent", n))
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    lines.append("| %s | %.3f | %.3f | %.3f |" % (n, ma, mb, mb / ma))
text = "\n".join(lines) + "\n"
open(sys.argv[2], "w").write(text)
print(text)
PY
rm -f "$raw"
