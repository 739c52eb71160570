#!/usr/bin/env python3
"""report.py - the benchmarks' results as JSON, and the report made from them.

    bench/report.py collect BENCH JSONL --json FILE [--md FILE] [--script NAME] [--set KEY=VALUE ...]
    bench/report.py collect table MD --bench NAME --json FILE [--script NAME] [--set KEY=VALUE ...]
    bench/report.py render [--doc docs/benchmarks.md] [--img docs/img] [--no-plots] [RESULT.json ...]

collect: the bench scripts' last step (bench/run.sh: suspend, bench/dump.sh: dump,
bench/warm_start.sh: warm_start). From the measurements the script appended to
JSONL (one line each, gpusnap's own --json inside) it computes the rows of the
table the script prints (figures and ratios), writes them as one JSON document
per run (FILE: device, driver, date, command, rows) and prints the markdown
table (also to --md). The command is the script's name with the GPUSNAP_BENCH_*
variables it ran under. --set adds run fields (device, driver, date, gpusnap, ...);
device and driver default to nvidia-smi's answer for GPU 0, date to now.
`collect table`: the benches whose table is their only output (bench/plugin.sh,
bench/cuda-plugin.sh, bench/overhead.sh): every markdown table in MD becomes
rows keyed by its column headings (cells that are a plain number as numbers).

render: reads run documents (default: bench/results/*.json), rewrites the part
of docs/benchmarks.md between the bench-report markers (the rest of the file
is left as it is) and draws docs/img/*.png with matplotlib (python3-matplotlib
in Debian): suspend/resume time against the GPU memory held per path with the
PCIe limit drawn, restore-to-first-answer against a fresh start, and the pause
of a periodic checkpoint (dump --leave-running). --no-plots: tables only.

A run document: {"format": "gpusnap-bench/1", "bench", "device", "driver",
"date", "command", "rows": [...]}, and "transcribed" where its figures were
copied from the text of docs/benchmarks.md rather than written by a bench run.
"""
import argparse
import glob
import itertools
import json
import os
import re
import statistics
import sys

FORMAT = "gpusnap-bench/1"
PCIE_GBS = 55.0  # what one PCIe gen 5 x16 link carries in practice, per direction (GB/s)
BEGIN = "<!-- bench-report: begin"
END = "<!-- bench-report: end -->"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def human(b):
    for unit, n in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= n and b % n == 0:
            return "%d %s" % (b // n, unit)
    return "%d B" % b


def f(x, fmt="%.2f"):
    return fmt % x if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def g(d, *ks):
    for k in ks:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def div(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


# ---------------------------------------------------------------- suspend / resume (bench/run.sh)

def suspend_rows(recs):
    """Rows of bench/run.sh's table: medians per size and path; speed-up = driver time / path time,
    same size, same run. Returns (rows, notes)."""
    groups = {}
    for r in recs:
        groups.setdefault((r["size_bytes"], r["path"]), []).append(r)

    def med(rs, k):
        v = [r[k] for r in rs if r["status"] == "ok" and r.get(k) is not None]
        return statistics.median(v) if v else None

    def first_process(x, which):
        """The process's own part of a cycle's suspend or resume JSON (processes[0]), None if absent."""
        p = g(x, which, "processes")
        return p[0] if isinstance(p, list) and p and isinstance(p[0], dict) else None

    def agent_rate(rs, which, timing):
        """GB/s of the agent's data part (bytes / copy time), median over ok cycles."""
        v = []
        for x in rs:
            ag = g(first_process(x, which), "agent")
            if x["status"] == "ok" and isinstance(ag, dict) and ag.get(timing) and ag.get("bytes") is not None:
                v.append(ag["bytes"] / 1e9 / ag[timing])
        return statistics.median(v) if v else None

    def phase(rs, which, *ks):
        """Median over ok cycles of one phase of the process's own JSON (processes[0]...), None if absent."""
        v = []
        for x in rs:
            t = g(first_process(x, which), *ks)
            if x["status"] == "ok" and isinstance(t, (int, float)) and not isinstance(t, bool):
                v.append(t)
        return statistics.median(v) if v else None

    rows = []
    for size, path in sorted(groups, key=lambda k: (k[0], k[1] != "driver", k[1])):
        rs = groups[(size, path)]
        s, r = med(rs, "suspend_s"), med(rs, "resume_s")
        base = groups.get((size, "driver"), [])
        bs, br = med(base, "suspend_s"), med(base, "resume_s")
        bad = [x for x in rs if x["status"] != "ok"]
        rows.append({
            "size_bytes": size, "path": path, "cycles": len(rs),
            "suspend_s": s, "resume_s": r,
            "suspend_gbs": div(size / 1e9, s), "resume_gbs": div(size / 1e9, r),
            "data_out_gbs": agent_rate(rs, "suspend", "copy_out_s"),
            "data_in_gbs": agent_rate(rs, "resume", "copy_in_s"),
            "speedup_suspend": div(bs, s), "speedup_resume": div(br, r),
            "suspend_wall_s": med(rs, "suspend_wall_s"), "resume_wall_s": med(rs, "resume_wall_s"),
            "data": "verified" if not bad else "%s: %s" % (bad[0]["status"].upper(), bad[0]["detail"]),
        })
    notes = []
    per_gpu = {}
    for (size, path), rs in groups.items():
        if path.startswith("agent-reserve-gpus"):
            two = path.startswith("agent-reserve-gpus2")
            per_gpu.setdefault(size // (2 if two else 1), {})[path] = rs
    for each, d in sorted(per_gpu.items()):
        if "agent-reserve-gpus1" not in d:
            continue
        s1, r1 = med(d["agent-reserve-gpus1"], "suspend_s"), med(d["agent-reserve-gpus1"], "resume_s")
        for path in sorted(p for p in d if p.startswith("agent-reserve-gpus2")):
            s2, r2 = med(d[path], "suspend_s"), med(d[path], "resume_s")
            if s1 and r1 and s2 and r2:
                notes.append("Two GPUs in parallel (%s on each; goal <= 1.2x of one GPU; %s): suspend %.2f s vs %.2f s "
                             "(x%.2f), resume %.2f s vs %.2f s (x%.2f)." % (human(each), path, s2, s1, s2 / s1, r2, r1, r2 / r1))
                # where the time goes, two GPUs against one: what the goal has to beat
                one, two = d["agent-reserve-gpus1"], d[path]
                parts = [("copy out", "suspend", ("agent", "copy_out_s")),
                         ("its host side", "suspend", ("agent", "ring_host_s")),
                         ("driver checkpoint", "suspend", ("times", "checkpoint_s")),
                         ("copy in", "resume", ("agent", "copy_in_s")),
                         ("driver restore", "resume", ("times", "restore_s"))]
                said = ["%s %s / %s s" % (name, f(phase(two, which, *ks)), f(phase(one, which, *ks)))
                        for name, which, ks in parts if phase(two, which, *ks) is not None]
                if said:
                    notes.append("Phases, two GPUs / one (%s): %s." % (path, ", ".join(said)))
    return rows, notes


def md_table(head, rows, cells):
    """A Markdown table: a column per title in head, a line per row with the texts cells(row) gives."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(cells(r)) + " |" for r in rows]


def suspend_table(rows):
    return md_table(
        ["size", "path", "suspend_s", "resume_s", "suspend GB/s", "resume GB/s", "data part out / in GB/s",
         "speed-up vs driver (suspend / resume)", "wall suspend / resume s", "data"], rows,
        lambda r: [human(r["size_bytes"]), r["path"], f(r.get("suspend_s")), f(r.get("resume_s")),
                   f(r.get("suspend_gbs")), f(r.get("resume_gbs")),
                   "%s / %s" % (f(r.get("data_out_gbs"), "%.1f"), f(r.get("data_in_gbs"), "%.1f")),
                   "%s / %s" % (f(r.get("speedup_suspend"), "x%.2f"), f(r.get("speedup_resume"), "x%.2f")),
                   "%s / %s" % (f(r.get("suspend_wall_s")), f(r.get("resume_wall_s"))), r.get("data", "-")])


def suspend_md(run):
    lines = ["## gpusnap suspend/resume benchmark", "",
             "Device: %s, driver %s, %s, %s. Process: the pattern test app (1 GiB cudaMalloc allocations), "
             "data verified after every resume; median of %s cycle(s). GB/s = bytes held / time (1 GB = 1e9 B); "
             "speed-up = driver path time / this path's time, same size, same run." % (
                 run.get("device"), run.get("driver"), run.get("date"), run.get("gpusnap", "-"), run.get("repeat", 1)),
             ""]
    lines += suspend_table(run["rows"])
    for n in run.get("notes", []):
        lines += ["", n]
    return lines


# ---------------------------------------------------------------- dump / restore (bench/dump.sh)

def dump_rows(recs):
    rows = []
    for r in recs:
        b = r.get("image_bytes") or 0
        d, s = r.get("dump"), r.get("restore")
        dt, rt = g(d, "times", "total_s"), g(s, "times", "total_s")
        dg, rg = div(b / 1e9, dt), div(b / 1e9, rt)
        rows.append({
            "size_bytes": r["size_bytes"], "path": r["path"], "storage": r["storage"],
            "storage_write_gbs": r.get("storage_write_gbs"), "storage_read_gbs": r.get("storage_read_gbs"),
            "image_bytes": b, "dump_s": dt, "dump_gpu_s": g(d, "times", "gpu_s"), "dump_criu_s": g(d, "times", "criu_s"),
            "paused_s": g(d, "times", "paused_s"), "dump_gbs": dg, "dump_ratio": div(dg, r.get("storage_write_gbs")),
            "restore_s": rt, "restore_verify_s": g(s, "times", "verify_s"), "restore_criu_s": g(s, "times", "criu_s"),
            "restore_gpu_s": g(s, "times", "gpu_s"), "restore_gbs": rg, "restore_ratio": div(rg, r.get("storage_read_gbs")),
            "data": "ok" if r["status"] == "ok" else "%s: %s" % (r["status"], r.get("detail", "")),
        })
    return rows


def dump_table(rows):
    return md_table(
        ["size", "path", "storage", "storage W/R GB/s", "dump s (GPU / CRIU)", "paused s", "dump GB/s", "dump ratio",
         "restore s (verify / CRIU / GPU)", "restore GB/s", "restore ratio", "data"], rows,
        lambda r: [human(r["size_bytes"]), r["path"], r["storage"],
                   "%s / %s" % (f(r.get("storage_write_gbs")), f(r.get("storage_read_gbs"))),
                   "%s (%s / %s)" % (f(r.get("dump_s")), f(r.get("dump_gpu_s")), f(r.get("dump_criu_s"))),
                   f(r.get("paused_s")), f(r.get("dump_gbs")), f(r.get("dump_ratio")),
                   "%s (%s / %s / %s)" % (f(r.get("restore_s")), f(r.get("restore_verify_s")),
                                          f(r.get("restore_criu_s")), f(r.get("restore_gpu_s"))),
                   f(r.get("restore_gbs")), f(r.get("restore_ratio")), r.get("data", "-")])


def dump_md(run):
    lines = ["## gpusnap dump/restore benchmark", "",
             "Pattern test app (1 GiB allocations), data verified after every restore. GB/s = image bytes / time "
             "(1 GB = 1e9 B). ratio = that speed / the storage's own sequential speed (dd, same run, same file system). "
             "Disk restores start from a cold page cache. GPU part: driver lock + checkpoint (+ agent copy and image "
             "write) on dump; driver restore + unlock (+ agent image load and copy) on restore. Restore includes the "
             "checksum pass. Paths ending in -leave dump with --leave-running: paused s is how long the process stood "
             "still (it goes on before the image is published).", ""]
    return lines + dump_table(run["rows"])


# ---------------------------------------------------------------- warm start (bench/warm_start.sh)

WAYS = ["python", "python under gpusnap run", "gpusnap restore, agent path", "gpusnap restore, driver path"]


def warm_rows(recs):
    def med(way, cache, key="first_answer_s"):
        v = [r[key] for r in recs if r["way"] == way and r["cache"] == cache and r.get(key) is not None]
        return statistics.median(v) if v else None
    rows = []
    for cache in ("warm", "cold"):
        base, drv = med("python", cache), med("gpusnap restore, driver path", cache)
        for way in WAYS + sorted({r["way"] for r in recs} - set(WAYS)):
            s = med(way, cache)
            if s is None:
                continue
            rows.append({"way": way, "cache": cache, "first_answer_s": s,
                         "vs_python": div(base, s) if way != "python" else None,
                         "vs_driver_restore": div(drv, s) if way == "gpusnap restore, agent path" else None,
                         "next_answer_s": med(way, cache, "next_answer_s"),
                         "starts": len([r for r in recs if r["way"] == way and r["cache"] == cache])})
    return rows


def warm_table(rows):
    return md_table(
        ["start", "files", "first answer s", "vs python start", "vs driver-path restore", "the same request again s"],
        rows, lambda r: [r["way"], r["cache"], f(r.get("first_answer_s")), f(r.get("vs_python"), "x%.1f"),
                         f(r.get("vs_driver_restore"), "x%.2f"), f(r.get("next_answer_s"))])


def warm_md(run):
    gb = run.get("gpu_bytes")
    lines = ["## Warm start of an inference server: first answer (%s, %s GB on the GPU)" % (
                 run.get("model"), f(gb / 1e9 if isinstance(gb, (int, float)) else None, "%.1f")), "",
             "%s, driver %s, %s; median of %s start(s) per row. warm: files in the page cache; cold: after drop_caches." % (
                 run.get("device"), run.get("driver"), run.get("git", run.get("date")), run.get("repeat")), ""]
    lines += warm_table(run["rows"])
    same = run.get("same_answer")
    lines += ["", "Every answer the same tokens and cache checksum as the first start's: %s" % (
        "yes" if same else "NO" if same is not None else "-")]
    return lines


# ---------------------------------------------------------------- collect

# where a bench keeps its work files and this document: not what it measured
NOT_SETTINGS = ("GPUSNAP_BENCH_WORK", "GPUSNAP_BENCH_JSON_DIR")


def bench_command(script):
    env = " ".join("%s=%s" % (k, _quote(v)) for k, v in sorted(os.environ.items())
                   if k.startswith("GPUSNAP_BENCH_") and k not in NOT_SETTINGS and v != "")
    return (env + " " if env else "") + script


def _quote(v):
    return v if re.fullmatch(r"[\w@%+=:,./-]+", v) else "'" + v.replace("'", "'\\''") + "'"


def _num(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def md_tables(text):
    """Rows of every markdown table in text: {heading: cell}, a cell that is a plain number as a number."""
    rows, head = [], None
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            head = None
            continue
        cells = [c.strip() for c in line[1:-1].split("|")]
        if head is None:
            head = cells
        elif all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        else:
            rows.append({h: _num(c) if re.fullmatch(r"-?\d+(\.\d+)?", c) else c for h, c in zip(head, cells)})
    return rows


def nvidia_smi(field):
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + field, "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out.splitlines()[0].strip() if out else None


def collect(a):
    bench = a.bench if a.bench != "table" else a.name
    if not bench:
        raise SystemExit("report.py: collect table needs --bench NAME")
    run = {"format": FORMAT, "bench": bench}
    for kv in a.set or []:
        k, _, v = kv.partition("=")
        run[k] = _num(v) if k in ("repeat", "gpu_bytes") else v
    run["command"] = bench_command(a.script or "bench/" + {"suspend": "run.sh", "dump": "dump.sh",
                                                            "warm_start": "warm_start.sh"}.get(bench, bench + ".sh"))
    if a.bench == "table":
        with open(a.jsonl) as fh:
            run["rows"] = md_tables(fh.read())
        return write_run(a, run, None)
    recs = []
    with open(a.jsonl) as fh:
        for line in fh:
            if line.strip():
                recs.append(json.loads(line))
    if a.bench == "suspend":
        run["rows"], run["notes"] = suspend_rows(recs)
        md = suspend_md(run)
    elif a.bench == "dump":
        # the .jsonl is appended to over runs: this run's lines only (its date; older lines: its commit)
        if run.get("date") and any(r.get("date") == run["date"] for r in recs):
            recs = [r for r in recs if r.get("date") == run["date"]]
        elif run.get("git"):
            recs = [r for r in recs if r.get("git") == run["git"]]
        run["rows"] = dump_rows(recs)
        md = dump_md(run)
    else:
        run["same_answer"] = all(r.get("same_answer") for r in recs) if recs else None
        run["rows"] = warm_rows(recs)
        md = warm_md(run)
    for k in ("device", "driver"):  # from the measurements where the script did not say
        if not run.get(k) and recs and recs[0].get(k):
            run[k] = recs[0][k]
    return write_run(a, run, md)


def write_run(a, run, md):
    for k, field in (("device", "name"), ("driver", "driver_version")):
        if not run.get(k):
            run[k] = nvidia_smi(field) or "unknown"
    if not run.get("date"):
        import datetime
        run["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    first = ("format", "bench", "device", "driver", "date", "command")
    run = dict([(k, run[k]) for k in first if k in run] + [(k, v) for k, v in run.items() if k not in first])
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump(run, fh, indent=1)
            fh.write("\n")
    if md is None:
        return 0
    text = "\n".join(md) + "\n"
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(text)
    sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------- render

def load_runs(paths):
    runs = []
    for p in paths:
        with open(p) as fh:
            try:
                run = json.load(fh)
            except ValueError as e:
                raise SystemExit("report.py: %s is not JSON: %s" % (p, e))
        if run.get("format") != FORMAT:
            raise SystemExit("report.py: %s: format %r, not %s" % (p, run.get("format"), FORMAT))
        for k in ("bench", "device", "driver", "date", "command", "rows"):
            if k not in run:
                raise SystemExit("report.py: %s: no %r" % (p, k))
        run["_file"] = os.path.relpath(p, ROOT) if os.path.isabs(p) else p
        runs.append(run)
    runs.sort(key=lambda r: (r["bench"], r["date"], r["_file"]), reverse=False)
    return runs


def run_caption(run):
    s = "%s%s, driver %s, %s (`%s`):" % (run["device"], " (%s)" % run["machine"] if run.get("machine") else "",
                                         run["driver"], run["date"], run["_file"])
    if run.get("transcribed"):
        s += " transcribed from %s." % run["transcribed"]
    return s


def newest_first(runs):
    return sorted(runs, key=lambda r: (r["date"], r["_file"]), reverse=True)


def render_section(runs, img_rel, plots):
    out = [BEGIN + " (bench/report.py render writes this part from bench/results/*.json; edit those, not this) -->",
           "",
           "## The recorded runs (bench/results)",
           "",
           "Every table here is made from a run's JSON in bench/results (what bench/run.sh, bench/dump.sh and "
           "bench/warm_start.sh write next to their tables; `bench/report.py render` regenerates this part and "
           "the plots). GB/s = bytes the process holds / time (1 GB = 1e9 bytes). The PCIe line in the plot is "
           "the time %g GB/s would take (one gen 5 x16 link in practice)." % PCIE_GBS]
    by = {}
    for r in runs:
        by.setdefault(r["bench"], []).append(r)
    if by.get("suspend"):
        out += ["" if out[-1] else None, "### Suspend and resume: time against the GPU memory held", ""]
        if "suspend" in plots:
            out += ["![suspend and resume time against GPU memory held](%s/%s)" % (img_rel, plots["suspend"]), ""]
        for run in newest_first(by["suspend"]):
            out += [run_caption(run), "", "    " + run["command"], ""] + suspend_table(run["rows"])
            for n in run.get("notes", []):
                out += ["", n]
            out.append("")
    if by.get("warm_start"):
        out += ["" if out[-1] else None, "### A restored inference server's first answer against a fresh start", ""]
        if "warm_start" in plots:
            out += ["![first answer after a fresh start and after gpusnap restore](%s/%s)" % (img_rel, plots["warm_start"]), ""]
        for run in newest_first(by["warm_start"]):
            out += [run_caption(run) + " model %s, %s GB on the GPU." % (
                run.get("model", "-"), f(run["gpu_bytes"] / 1e9 if run.get("gpu_bytes") else None, "%.1f")),
                "", "    " + run["command"], ""] + warm_table(run["rows"]) + [""]
    if by.get("dump"):
        out += ["" if out[-1] else None, "### Dump and restore; the pause of a periodic checkpoint (`dump --leave-running`)", ""]
        if "dump" in plots:
            out += ["![how long dump --leave-running holds the process](%s/%s)" % (img_rel, plots["dump"]), ""]
        for run in newest_first(by["dump"]):
            out += [run_caption(run), "", "    " + run["command"], ""] + dump_table(run["rows"]) + [""]
    for bench in sorted(set(by) - {"suspend", "warm_start", "dump"}):
        out += ["" if out[-1] else None, "### %s" % bench, ""]
        for run in newest_first(by[bench]):
            out += [run_caption(run), "", "    " + run["command"], ""] + generic_table(run["rows"]) + [""]
    out = [x for x in out if x is not None]
    while out and out[-1] == "":
        out.pop()
    out += ["", END]
    return out


def generic_table(rows):
    """A `collect table` run's rows as one table per set of columns, in their order."""
    out = []
    for cols, group in itertools.groupby(rows, key=list):
        out += ([""] if out else []) + md_table(cols, group, lambda r: [str(r[c]) for c in cols])
    return out


def splice(doc_text, section):
    """doc_text with the part between the markers replaced; the rest as it was."""
    b = doc_text.find(BEGIN)
    e = doc_text.find(END)
    if b < 0 or e < 0 or e < b:
        raise SystemExit("report.py: the document has no '%s ... %s' markers" % (BEGIN, END))
    return doc_text[:b] + "\n".join(section) + doc_text[e + len(END):]


# the paths drawn, in this order, and how
PLOT_PATHS = [("driver", "driver path (--driver)", "tab:red"),
              ("agent", "agent, on demand", "tab:blue"),
              ("agent-reserve", "agent, --reserve", "tab:green")]


def plot_suspend(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # the newest run of each device that has a drawable row
    chosen = {}
    for run in newest_first(runs):
        if run["device"] not in chosen and any(r["path"] in dict((p[0], 1) for p in PLOT_PATHS) for r in run["rows"]):
            chosen[run["device"]] = run
    if not chosen:
        return False
    fig, axes = plt.subplots(1, len(chosen), figsize=(6.4 * len(chosen) + 2.6, 4.6), squeeze=False)
    for ax, (device, run) in zip(axes[0], sorted(chosen.items())):
        sizes = sorted({r["size_bytes"] for r in run["rows"]})
        for p, label, color in PLOT_PATHS:
            rs = sorted((r for r in run["rows"] if r["path"] == p), key=lambda r: r["size_bytes"])
            for key, style, what in (("suspend_s", "-", "suspend"), ("resume_s", "--", "resume")):
                pts = [(r["size_bytes"] / 2**30, r[key]) for r in rs if isinstance(r.get(key), (int, float))]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", color=color,
                            label="%s: %s" % (label, what))
        xs = [s / 2**30 for s in sizes]
        lo, hi = min(xs) / 1.5, max(xs) * 1.5
        ax.plot([lo, hi], [lo * 2**30 / PCIE_GBS / 1e9, hi * 2**30 / PCIE_GBS / 1e9], ":", color="black",
                label="PCIe limit (%g GB/s)" % PCIE_GBS)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels(["%g" % x for x in xs])
        ax.set_xlabel("GPU memory the process holds (GiB)")
        ax.set_ylabel("seconds")
        ax.set_title("%s, driver %s\n%s" % (device, run["driver"], run["date"]), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    legend = {}  # every device's lines, once each
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), fontsize=8, loc="center right")
    fig.suptitle("gpusnap suspend / resume: time against GPU memory held")
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / (6.4 * len(chosen) + 2.6), 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_warm(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    run = newest_first(runs)[0]
    rows = run["rows"]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    labels = ["%s (%s)" % (r["way"], r["cache"]) for r in rows]
    colors = ["tab:gray" if not r["way"].startswith("gpusnap") else
              "tab:green" if "agent" in r["way"] else "tab:red" for r in rows]
    vals = [r["first_answer_s"] for r in rows]
    ax.barh(range(len(rows)), vals, color=colors)
    label_bars(ax, vals, " %.1f s", labels)
    ax.set_xlabel("seconds to the first answer (start or restore command -> first generated reply)")
    ax.set_title("%s: restore to first token against booting\n%s, driver %s, %s" % (
        run.get("model", "inference server"), run["device"], run["driver"], run["date"]), fontsize=10)
    ax.set_xlim(0, max(vals) * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def label_bars(ax, vals, fmt, labels):
    """Horizontal bars, top to bottom: each bar's value written at its end, the rows named on the y axis."""
    for i, v in enumerate(vals):
        ax.text(v, i, fmt % v, va="center", fontsize=8)
    ax.set_yticks(range(len(vals)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()


def plot_dump(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = []
    for run in newest_first(runs):
        for r in run["rows"]:
            if isinstance(r.get("paused_s"), (int, float)):
                rows.append((run, r))
    if not rows:
        return False
    rows.sort(key=lambda x: (x[1]["size_bytes"], x[1]["storage"], x[1]["path"]))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.8))
    labels = ["%s %s, %s (%s)" % (human(r["size_bytes"]), r["path"].replace("-leave", ""), r["storage"], run["date"][:10])
              for run, r in rows]
    dump = [r.get("dump_s") or 0 for _, r in rows]
    paused = [r["paused_s"] for _, r in rows]
    colors = ["tab:green" if r["path"].startswith("agent") else "tab:red" for _, r in rows]
    ax.barh(range(len(rows)), dump, color="lightgray", label="whole dump (the app runs on meanwhile)")
    ax.barh(range(len(rows)), paused, color=colors, label="the app stood still (green: agent, red: driver path)")
    label_bars(ax, paused, " %.2f s", labels)
    ax.set_xlabel("seconds")
    ax.set_title("A periodic checkpoint: how long dump --leave-running holds the process\n%s" %
                 ", ".join(sorted({"%s, driver %s" % (run["device"], run["driver"]) for run, _ in rows})), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


PLOTS = {"suspend": ("suspend-resume.png", plot_suspend),
         "warm_start": ("warm-start.png", plot_warm),
         "dump": ("leave-running-pause.png", plot_dump)}


def render(a):
    paths = a.results or sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.json")))
    if not paths:
        raise SystemExit("report.py: no run documents (bench/results/*.json) to render")
    runs = load_runs(paths)
    plots = {}
    if not a.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("report.py: matplotlib is not installed (Debian: python3-matplotlib); "
                             "--no-plots makes the tables alone")
        os.makedirs(a.img, exist_ok=True)
        for bench, (name, fn) in PLOTS.items():
            rs = [r for r in runs if r["bench"] == bench]
            if rs and fn(rs, os.path.join(a.img, name)):
                plots[bench] = name
    else:  # the tables alone: keep the links to plots that are there
        for bench, (name, _) in PLOTS.items():
            if os.path.exists(os.path.join(a.img, name)):
                plots[bench] = name
    img_rel = os.path.relpath(a.img, os.path.dirname(os.path.abspath(a.doc)))
    with open(a.doc) as fh:
        text = fh.read()
    new = splice(text, render_section(runs, img_rel, plots))
    if new != text:
        with open(a.doc, "w") as fh:
            fh.write(new)
    print("report.py: %s from %d run(s)%s" % (a.doc, len(runs),
          "; plots: " + ", ".join(os.path.join(a.img, p) for p in plots.values()) if plots and not a.no_plots else ""))
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/report.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="a bench run's measurements -> its JSON document and table")
    c.add_argument("bench", choices=["suspend", "dump", "warm_start", "table"])
    c.add_argument("jsonl", help="the bench's .jsonl (table: its markdown file)")
    c.add_argument("--bench", dest="name", help="table: the bench's name (plugin, cuda-plugin, overhead)")
    c.add_argument("--json", help="where the run's JSON document goes")
    c.add_argument("--md", help="where the markdown table goes (it is printed too)")
    c.add_argument("--script", help="the bench script, for the command (default bench/<its name>)")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="a run field (device, driver, date, ...)")
    r = sub.add_parser("render", help="bench/results/*.json -> docs/benchmarks.md's tables and docs/img/*.png")
    r.add_argument("results", nargs="*", help="run documents (default bench/results/*.json)")
    r.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    r.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    r.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    a = ap.parse_args(argv)
    return collect(a) if a.cmd == "collect" else render(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
