#!/usr/bin/env bash
# t7051-bench-report-plots - bench/report.py render draws the plots (matplotlib,
# Debian's python3-matplotlib; the test skips without it): from the repository's
# bench/results, the suspend/resume plot (time against GPU memory held, PCIe
# limit), the warm-start plot and the leave-running pause plot, as PNG files, linked
# from the generated part of the document; a run set without a drawable row draws
# no plot and links none.
. "$(dirname "$0")/lib.sh"
SRC=${GPUSNAP_SRC:?}
T=$TEST_TMP
# the python3 on PATH, else the system's (a pyenv or venv python3 may lack Debian's matplotlib)
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || skip "no matplotlib (Debian: python3-matplotlib); the tables are tested by t7050"

mkdir -p "$T/docs"
printf '# doc\n\n<!-- bench-report: begin -->\n<!-- bench-report: end -->\n' >"$T/docs/benchmarks.md"
rc=0
(cd "$SRC" && "$PY" bench/report.py render --doc "$T/docs/benchmarks.md" --img "$T/docs/img" bench/results/*.json) \
  >"$T/out" 2>"$T/err" || rc=$?
check "render with plots exits 0" [ "$rc" = 0 ]
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 10000 ]; }
for png in suspend-resume warm-start leave-running-pause; do
  check "$png.png is a PNG image" is_png "$T/docs/img/$png.png"
  check "the document links img/$png.png" grep -qF "](img/$png.png)" "$T/docs/benchmarks.md"
done

# runs with no drawable row (a path the plot does not draw) draw nothing
mkdir -p "$T/other"
printf '{"format": "gpusnap-bench/1", "bench": "suspend", "device": "d", "driver": "v", "date": "2026-01-01", "command": "c", "rows": [{"size_bytes": 1073741824, "path": "agent-reserve-gpus2", "suspend_s": 1.0, "resume_s": 1.0}]}\n' \
  >"$T/other/r.json"
printf '# doc\n\n<!-- bench-report: begin -->\n<!-- bench-report: end -->\n' >"$T/other/doc.md"
rc=0
"$PY" "$SRC/bench/report.py" render --doc "$T/other/doc.md" --img "$T/other/img" "$T/other/r.json" >/dev/null 2>"$T/err" || rc=$?
check "render of a run without a drawable row exits 0" [ "$rc" = 0 ]
check "... draws no suspend plot" [ ! -e "$T/other/img/suspend-resume.png" ]
check "... and links none" sh -c "! grep -q 'png' '$T/other/doc.md'"
check "... but has the run's table" grep -qF '| 1 GiB | agent-reserve-gpus2 | 1.00 | 1.00 |' "$T/other/doc.md"

test_done
