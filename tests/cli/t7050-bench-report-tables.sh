#!/usr/bin/env bash
# t7050-bench-report-tables - bench/report.py without a GPU and without matplotlib:
# `collect` turns the measurements bench/run.sh, bench/dump.sh and bench/warm_start.sh
# append to their .jsonl into one JSON document per run (device, driver, date,
# command, the table's rows with its figures and ratios) and the table they print,
# and `collect table` the markdown tables of the other benches into rows;
# `render --no-plots` rewrites only the part of a document between the
# bench-report markers, the same way twice, and refuses a document without them;
# and docs/benchmarks.md's generated part is what bench/results/*.json make.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "no python3"
SRC=${GPUSNAP_SRC:?}
REPORT=$SRC/bench/report.py
T=$TEST_TMP
G=1073741824

# ---------------------------------------------------------------- collect: suspend (bench/run.sh)
cat >"$T/s.jsonl" <<EOF
{"date": "2026-11-29T01:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "size_bytes": $((8 * G)), "path": "driver", "repeat": 1, "status": "ok", "detail": "", "suspend_s": 4.0, "resume_s": 2.0, "suspend_wall_s": 4.1, "resume_wall_s": 2.1, "suspend": {"total_s": 4.0}, "resume": {"total_s": 2.0}}
{"date": "2026-11-29T01:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "size_bytes": $((8 * G)), "path": "agent", "repeat": 1, "status": "ok", "detail": "", "suspend_s": 0.5, "resume_s": 0.4, "suspend_wall_s": 0.6, "resume_wall_s": 0.5, "suspend": {"total_s": 0.5, "processes": [{"agent": {"bytes": $((8 * G)), "copy_out_s": 0.25}}]}, "resume": {"total_s": 0.4, "processes": [{"agent": {"bytes": $((8 * G)), "copy_in_s": 0.2}}]}}
{"date": "2026-11-29T01:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "size_bytes": $((8 * G)), "path": "agent", "repeat": 2, "status": "ok", "detail": "", "suspend_s": 0.7, "resume_s": 0.6, "suspend_wall_s": 0.8, "resume_wall_s": 0.7, "suspend": null, "resume": null}
{"date": "2026-11-29T01:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "size_bytes": $((32 * G)), "path": "agent", "repeat": 1, "status": "failed", "detail": "resume exit 5", "suspend_s": 1.0, "resume_s": null, "suspend": null, "resume": null}
EOF
rc=0
GPUSNAP_BENCH_SIZES="8G 32G" GPUSNAP_BENCH_PATHS="driver agent" GPUSNAP_BENCH_WORK=/tmp/w python3 "$REPORT" collect suspend "$T/s.jsonl" \
  --json "$T/out/suspend.json" --md "$T/suspend.md" --set device="NVIDIA H200" --set driver=580.1 \
  --set date=2026-11-29T01:00:00Z --set repeat=2 >"$T/suspend.out" 2>"$T/err" || rc=$?
check "collect suspend exits 0" [ "$rc" = 0 ]
jq_() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }
check "suspend JSON: format, bench, device, driver, date" \
  [ "$(jq_ "$T/out/suspend.json" '(d["format"], d["bench"], d["device"], d["driver"], d["date"])')" = \
  "('gpusnap-bench/1', 'suspend', 'NVIDIA H200', '580.1', '2026-11-29T01:00:00Z')" ]
check "suspend JSON: the command names the script and its GPUSNAP_BENCH_* settings" \
  [ "$(jq_ "$T/out/suspend.json" 'd["command"]')" = "GPUSNAP_BENCH_PATHS='driver agent' GPUSNAP_BENCH_SIZES='8G 32G' bench/run.sh" ]
check "suspend JSON: one row per size and path" [ "$(jq_ "$T/out/suspend.json" 'len(d["rows"])')" = 3 ]
check "suspend JSON: the agent row's median times and speed-up vs the driver (4.0 / 0.6, 2.0 / 0.5)" \
  [ "$(jq_ "$T/out/suspend.json" '[(r["suspend_s"], r["resume_s"], round(r["speedup_suspend"], 3), round(r["speedup_resume"], 3)) for r in d["rows"] if r["path"] == "agent" and r["size_bytes"] == 8 << 30]')" = \
  "[(0.6, 0.5, 6.667, 4.0)]" ]
check "suspend JSON: the agent's data rate from its --json (8 GiB / 0.25 s)" \
  [ "$(jq_ "$T/out/suspend.json" '[round(r["data_out_gbs"], 2) for r in d["rows"] if r["path"] == "agent" and r["size_bytes"] == 8 << 30]')" = "[34.36]" ]
check "suspend JSON: a failed cycle is in its row" \
  grep -q '"data": "FAILED: resume exit 5"' "$T/out/suspend.json"
check "suspend table printed and written to --md" cmp -s "$T/suspend.out" "$T/suspend.md"
check "suspend table: the agent row as bench/run.sh prints it" \
  grep -qF '| 8 GiB | agent | 0.60 | 0.50 | 14.32 | 17.18 | 34.4 / 42.9 | x6.67 / x4.00 | 0.70 / 0.60 | verified |' "$T/suspend.md"

# ---------------------------------------------------------------- collect: dump (bench/dump.sh)
cat >"$T/d.jsonl" <<EOF
{"bench": "dump", "date": "2026-11-28T00:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "git": "old", "size_bytes": $((8 * G)), "path": "agent", "storage": "tmpfs", "dir": "/x", "storage_write_gbs": 2.0, "storage_read_gbs": 4.0, "status": "ok", "detail": "", "image_bytes": 8000000000, "dump": {"times": {"total_s": 99.0}}, "restore": {"times": {"total_s": 99.0}}}
{"bench": "dump", "date": "2026-11-29T01:00:00Z", "device": "NVIDIA H200", "driver": "580.1", "git": "new", "size_bytes": $((8 * G)), "path": "agent-leave", "storage": "disk", "dir": "/x", "storage_write_gbs": 2.0, "storage_read_gbs": 4.0, "status": "ok", "detail": "", "image_bytes": 8000000000, "dump": {"times": {"total_s": 4.0, "gpu_s": 3.0, "criu_s": 0.5, "paused_s": 1.5}}, "restore": {"times": {"total_s": 2.5, "verify_s": 2.0, "criu_s": 0.4, "gpu_s": 1.0}}}
EOF
rc=0
python3 "$REPORT" collect dump "$T/d.jsonl" --json "$T/out/dump.json" --md "$T/dump.md" --set device="NVIDIA H200" \
  --set driver=580.1 --set date=2026-11-29T01:00:00Z --set git=new >/dev/null 2>"$T/err" || rc=$?
check "collect dump exits 0" [ "$rc" = 0 ]
check "dump JSON: this run's line only (the .jsonl keeps older runs)" [ "$(jq_ "$T/out/dump.json" 'len(d["rows"])')" = 1 ]
check "dump JSON: paused, GB/s and ratios (8 GB / 4 s = 2 GB/s, ratio 1.0; 8 GB / 2.5 s = 3.2 GB/s, ratio 0.8)" \
  [ "$(jq_ "$T/out/dump.json" '[(r["paused_s"], r["dump_gbs"], r["dump_ratio"], r["restore_gbs"], round(r["restore_ratio"], 3)) for r in d["rows"]]')" = \
  "[(1.5, 2.0, 1.0, 3.2, 0.8)]" ]
check "dump table row" \
  grep -qF '| 8 GiB | agent-leave | disk | 2.00 / 4.00 | 4.00 (3.00 / 0.50) | 1.50 | 2.00 | 1.00 | 2.50 (2.00 / 0.40 / 1.00) | 3.20 | 0.80 | ok |' "$T/dump.md"

# ---------------------------------------------------------------- collect: warm start (bench/warm_start.sh)
for l in "python warm 20.0 0.6" "python warm 22.0 0.6" "gpusnap restore, agent path|warm|4.0|0.7" \
  "gpusnap restore, driver path|warm|10.0|0.9" "python cold 30.0 0.6" "gpusnap restore, agent path|cold|12.0|0.7"; do
  IFS='|' read -r way cache s n <<<"$l"
  [ -z "$cache" ] && read -r way cache s n <<<"$l"
  printf '{"bench": "warm_start", "device": "NVIDIA H200", "driver": "580.1", "git": "g", "model": "llama-1b", "way": "%s", "cache": "%s", "first_answer_s": %s, "next_answer_s": %s, "same_answer": true}\n' \
    "$way" "$cache" "$s" "$n" >>"$T/w.jsonl"
done
rc=0
python3 "$REPORT" collect warm_start "$T/w.jsonl" --json "$T/out/warm.json" --md "$T/warm.md" --set date=2026-11-29T01:00:00Z \
  --set model=llama-1b --set gpu_bytes=2500000000 --set repeat=2 >/dev/null 2>"$T/err" || rc=$?
check "collect warm_start exits 0" [ "$rc" = 0 ]
check "warm JSON: device and driver from the measurements, gpu_bytes a number" \
  [ "$(jq_ "$T/out/warm.json" '(d["device"], d["driver"], d["gpu_bytes"], d["same_answer"])')" = "('NVIDIA H200', '580.1', 2500000000, True)" ]
check "warm JSON: medians and ratios (python warm 21.0: x5.2 for the agent's 4.0, x2.5 against the driver's 10.0)" \
  [ "$(jq_ "$T/out/warm.json" '[(r["first_answer_s"], r["vs_python"], r["vs_driver_restore"]) for r in d["rows"] if r["cache"] == "warm"]')" = \
  "[(21.0, None, None), (4.0, 5.25, 2.5), (10.0, 2.1, None)]" ]
check "warm table row" grep -qF '| gpusnap restore, agent path | cold | 12.00 | x2.5 | - | 0.70 |' "$T/warm.md"

# ---------------------------------------------------------------- collect table (bench/plugin.sh, cuda-plugin.sh, overhead.sh)
printf 'Intro\n\n| size | path | gpusnap dump | ratio | status |\n|---|---|---|---|---|\n| 8 GiB | agent | 2.30 | 1.01 | ok |\n\nText.\n\n| workload | ratio |\n|---|---|\n| train step | 0.996 |\n' \
  >"$T/plugin.md"
rc=0
python3 "$REPORT" collect table "$T/plugin.md" --bench plugin --json "$T/out/plugin.json" --set device=D --set driver=V \
  --set date=2026-11-29T02:00:00Z >"$T/out.txt" 2>"$T/err" || rc=$?
check "collect table exits 0" [ "$rc" = 0 ]
check "collect table prints nothing (the table was the bench's)" [ ! -s "$T/out.txt" ]
check "collect table: both tables' rows, keyed by their headings, numbers as numbers" \
  [ "$(jq_ "$T/out/plugin.json" '(d["bench"], d["command"], d["rows"])')" = \
  "('plugin', 'bench/plugin.sh', [{'size': '8 GiB', 'path': 'agent', 'gpusnap dump': 2.3, 'ratio': 1.01, 'status': 'ok'}, {'workload': 'train step', 'ratio': 0.996}])" ]
rc=0
python3 "$REPORT" collect table "$T/plugin.md" --json "$T/out/x.json" >/dev/null 2>"$T/err" || rc=$?
check "collect table without --bench: refused" [ "$rc" = 1 ]

# ---------------------------------------------------------------- render --no-plots
printf '# Title\n\nText before, kept.\n\n<!-- bench-report: begin -->\nold generated text\n<!-- bench-report: end -->\n\n## Later\n\nText after, kept.\n' >"$T/doc.md"
rc=0
python3 "$REPORT" render --no-plots --doc "$T/doc.md" --img "$T/img" "$T/out/suspend.json" "$T/out/dump.json" "$T/out/warm.json" \
  "$T/out/plugin.json" >"$T/render.out" 2>"$T/err" || rc=$?
check "render --no-plots exits 0 without matplotlib's help" [ "$rc" = 0 ]
check "render: the old generated text is gone" sh -c "! grep -q 'old generated text' '$T/doc.md'"
check "render: the text before the markers is kept" [ "$(sed -n '1,5p' "$T/doc.md")" = "$(printf '# Title\n\nText before, kept.\n\n<!-- bench-report: begin (bench/report.py render writes this part from bench/results/*.json; edit those, not this) -->')" ]
check "render: the text after the markers is kept" [ "$(sed -n '/bench-report: end/,$p' "$T/doc.md")" = "$(printf '<!-- bench-report: end -->\n\n## Later\n\nText after, kept.')" ]
for want in '| 8 GiB | agent | 0.60 | 0.50 |' '| 8 GiB | agent-leave | disk |' '| gpusnap restore, agent path | warm | 4.00 | x5.2 | x2.50 |' \
  "    GPUSNAP_BENCH_PATHS='driver agent' GPUSNAP_BENCH_SIZES='8G 32G' bench/run.sh" 'NVIDIA H200, driver 580.1, 2026-11-29T01:00:00Z' \
  '### plugin' '| size | path | gpusnap dump | ratio | status |' '| 8 GiB | agent | 2.3 | 1.01 | ok |' '| train step | 0.996 |'; do
  check "render: the section holds '$want'" grep -qF -- "$want" "$T/doc.md"
done
check "render: no plot linked where none was drawn" sh -c "! grep -q '](.*\\.png)' '$T/doc.md'"
cp "$T/doc.md" "$T/doc1.md"
python3 "$REPORT" render --no-plots --doc "$T/doc.md" --img "$T/img" "$T/out/suspend.json" "$T/out/dump.json" "$T/out/warm.json" \
  "$T/out/plugin.json" >/dev/null 2>&1
check "render twice: the same document" cmp -s "$T/doc.md" "$T/doc1.md"

printf '# no markers\n' >"$T/bare.md"
rc=0
python3 "$REPORT" render --no-plots --doc "$T/bare.md" --img "$T/img" "$T/out/suspend.json" >"$T/out.txt" 2>"$T/err" || rc=$?
one_line_error() { # RC PATTERN: exit RC was 1 and stderr is one line matching PATTERN
  [ "$1" = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$2" "$T/err"
}
check "render refuses a document without markers, in one line" one_line_error "$rc" '^report.py: the document has no'
check "... and leaves it as it was" [ "$(cat "$T/bare.md")" = "# no markers" ]
printf '{"format": "gpusnap-bench/1", "bench": "suspend", "device": "x", "driver": "y", "rows": []}\n' >"$T/nodate.json"
rc=0
python3 "$REPORT" render --no-plots --doc "$T/doc.md" --img "$T/img" "$T/nodate.json" >/dev/null 2>"$T/err" || rc=$?
check "render refuses a run without a date or a command, in one line" one_line_error "$rc" "nodate.json: no 'date'"

# ---------------------------------------------------------------- the repository's generated part
mkdir -p "$T/repo/docs/img"
cp "$SRC/docs/benchmarks.md" "$T/repo/docs/benchmarks.md"
cp "$SRC"/docs/img/*.png "$T/repo/docs/img/" 2>/dev/null
(cd "$SRC" && python3 "$REPORT" render --no-plots --doc "$T/repo/docs/benchmarks.md" --img "$T/repo/docs/img" bench/results/*.json) \
  >/dev/null 2>"$T/err"
check "docs/benchmarks.md's generated part is what bench/results makes (bench/report.py render)" \
  cmp -s "$T/repo/docs/benchmarks.md" "$SRC/docs/benchmarks.md"
check "every run in bench/results says where its figures come from" python3 -c '
import glob, json, sys
for p in glob.glob(sys.argv[1] + "/bench/results/*.json"):
    d = json.load(open(p))
    assert all(d.get(k) for k in ("device", "driver", "date", "command")), p
' "$SRC"

test_done
