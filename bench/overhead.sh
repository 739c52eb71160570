#!/usr/bin/env bash
# overhead.sh - steady-state cost of the gpusnap agent: the same work with and
# without it, alternated (ROUNDS times) in one run on one GPU:
#  - a PyTorch training step and an inference step (tests/gpu/py/torch_model.py --bench)
#  - cudaMalloc/cudaFree pairs of several sizes and a kernel launch (bench/malloc_bench)
# Each round runs both, in alternating order (drift in GPU clocks or host load
# then falls on both sides alike), and gives one ratio per workload; the table
# shows the medians and the median ratio with the lowest and highest of the
# rounds, so a difference smaller than the spread is seen as such.
# Prints a markdown table and writes $OUT/overhead.md.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPUSNAP_BUILD:-$SRC/build}
OUT=${OUT:-$SRC/gpu-out}
ROUNDS=${GPUSNAP_OVERHEAD_ROUNDS:-3}
G=$BUILD/gpusnap
mkdir -p "$OUT"
raw=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  order="plain agent"
  ((r % 2 == 0)) && order="agent plain"
  for mode in $order; do
    pre=()
    [ "$mode" == agent ] && pre=("$G" run --)
    "${pre[@]}" python3 "$SRC/tests/gpu/py/torch_model.py" --bench 100 | sed "s/^/$r $mode /" >>"$raw"
    "${pre[@]}" "$BUILD/bench/malloc_bench" 2000 | sed "s/^/$r $mode /" >>"$raw"
  done
done
python3 - "$raw" "$OUT/overhead.md" <<'PY'
import re, statistics, sys, collections
vals = collections.defaultdict(dict)  # (mode, workload) -> {round: value}
names = []
for line in open(sys.argv[1]):
    rnd, mode, rest = line.split(" ", 2)
    found = []
    if rest.startswith("BENCH"):
        found = [("PyTorch %s step (ms)" % k, float(v)) for k, v in re.findall(r"(\w+)_ms=([\d.]+)", rest)]
    elif rest.startswith("MALLOC_US"):
        size, v = re.match(r"MALLOC_US size=(\d+) ([\d.]+)", rest).groups()
        found = [("cudaMalloc+cudaFree %s B (us)" % size, float(v))]
    elif rest.startswith("LAUNCH_US"):
        found = [("kernel launch (us)", float(rest.split()[1]))]
    for n, v in found:
        vals[(mode, n)][rnd] = v
        if n not in names:
            names.append(n)
lines = ["| workload | without agent | with agent | ratio (median of rounds) | lowest - highest ratio | rounds |",
         "|---|---|---|---|---|---|"]
for n in names:
    a, b = vals.get(("plain", n), {}), vals.get(("agent", n), {})
    rounds = sorted(set(a) & set(b))
    if not rounds:
        continue
    ratios = [b[r] / a[r] for r in rounds]
    lines.append("| %s | %.3f | %.3f | %.3f | %.3f - %.3f | %d |" % (
        n, statistics.median(a.values()), statistics.median(b.values()), statistics.median(ratios),
        min(ratios), max(ratios), len(rounds)))
text = "\n".join(lines) + "\n"
open(sys.argv[2], "w").write(text)
print(text)
PY
rm -f "$raw"
