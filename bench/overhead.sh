#!/usr/bin/env bash
# overhead.sh - steady-state cost of the gpusnap agent: the same work with and
# without it, alternated (ROUNDS times) in one run on one GPU:
#  - a PyTorch training step and an inference step (tests/gpu/py/torch_model.py --bench)
#  - cudaMalloc/cudaFree pairs of several sizes and a kernel launch (bench/malloc_bench)
# Each round runs both, in alternating order (drift in GPU clocks or host load
# then falls on both sides alike), and gives one ratio per workload; the table
# shows the medians and the median ratio with the lowest and highest of the
# rounds, so a difference smaller than the spread is seen as such.
# Under the agent the PyTorch run also reports the driver calls of a step and the
# gate's cost per call, both measured inside the process; a second table gives
# their product as a share of the step, a bound that does not depend on how much
# two processes differ. Prints the tables and writes $OUT/overhead.md.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPUSNAP_BUILD:-$SRC/build}
OUT=${OUT:-$SRC/gpu-out}
ROUNDS=${GPUSNAP_OVERHEAD_ROUNDS:-3}
# The PyTorch model: the tests' small one (launch-bound: host noise shows) and,
# with GPUSNAP_OVERHEAD_LARGE=1, also a GPU-bound one (1024 wide, 4 layers,
# 16 x 256 tokens), whose GPU time per step is stable enough to show 1%.
MODELS=("small:")
[ "${GPUSNAP_OVERHEAD_LARGE:-0}" = 1 ] && MODELS+=("large:--dim 1024 --layers 4 --batch 16 --seq 256")
G=$BUILD/gpusnap
mkdir -p "$OUT"
raw=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  order="plain agent"
  ((r % 2 == 0)) && order="agent plain"
  for mode in $order; do
    pre=()
    [ "$mode" == agent ] && pre=("$G" run --)
    for m in "${MODELS[@]}"; do
      # shellcheck disable=SC2086 # the model's arguments are words
      "${pre[@]}" python3 "$SRC/tests/gpu/py/torch_model.py" --bench 100 ${m#*:} |
        sed "s/^BENCH /BENCH ${m%%:*} /; s/^CALLS /CALLS ${m%%:*} /; s/^/$r $mode /" >>"$raw"
    done
    "${pre[@]}" "$BUILD/bench/malloc_bench" 2000 | sed "s/^/$r $mode /" >>"$raw"
  done
done
python3 - "$raw" "$OUT/overhead.md" <<'PY'
import re, statistics, sys, collections
vals = collections.defaultdict(dict)  # (mode, workload) -> {round: value}
names = []
calls_seen = {}  # train / infer / gate_ns -> values over the rounds (agent runs only)
for line in open(sys.argv[1]):
    rnd, mode, rest = line.split(" ", 2)
    found = []
    if rest.startswith("BENCH"):
        model = rest.split()[1]
        found = [("PyTorch %s %s step (ms)" % (model, k.replace("_", " ")), float(v))
                 for k, v in re.findall(r"(\w+)_ms=([\d.]+)", rest)]
    elif rest.startswith("MALLOC_US"):
        size, v = re.match(r"MALLOC_US size=(\d+) ([\d.]+)", rest).groups()
        found = [("cudaMalloc+cudaFree %s B (us)" % size, float(v))]
    elif rest.startswith("LAUNCH_US"):
        found = [("kernel launch (us)", float(rest.split()[1]))]
    elif rest.startswith("CALLS") and mode == "agent":
        model = rest.split()[1]
        kv = dict(re.findall(r"(\w+)=([\d.eE+-]+)", rest))
        for k, v in kv.items():
            calls_seen.setdefault(k if k == "gate_ns" else model + " " + k, []).append(float(v))
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
# The bound that does not compare two processes: driver calls per step (counted by the
# agent) x what the gate adds to a call (timed by the agent in the same process).
if calls_seen.get("gate_ns"):
    gate = statistics.median(calls_seen["gate_ns"])
    # the probe runs one call site in a loop, so the gate's indirect jump back is always
    # predicted; in an app it may miss: the last column doubles the cost to cover that
    lines += ["", "| step | driver calls per step | gate cost per call (ns) | gate's share of the step | at twice that cost |",
              "|---|---|---|---|---|"]
    for k in ("small train", "small infer", "large train", "large infer"):
        step = vals.get(("agent", "PyTorch %s step (ms)" % k), {})
        if k in calls_seen and step:
            c = statistics.median(calls_seen[k])
            ms = statistics.median(step.values())
            share = 100.0 * c * gate * 1e-9 / (ms * 1e-3)
            lines.append("| %s | %.0f | %.1f | %.3f%% | %.3f%% |" % (k, c, gate, share, 2 * share))
text = "\n".join(lines) + "\n"
open(sys.argv[2], "w").write(text)
print(text)
PY
rm -f "$raw"
# the run's JSON document too (bench/report.py collect table: the table's rows, device, driver, date, command)
python3 "$SRC/bench/report.py" collect table "$OUT/overhead.md" --bench overhead --script bench/overhead.sh \
  --json "${GPUSNAP_BENCH_JSON_DIR:-$OUT}/bench-overhead-$(date -u +%Y%m%dT%H%M%SZ).json" ||
  echo "ERROR: bench/report.py collect table failed"
