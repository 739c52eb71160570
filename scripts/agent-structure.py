#!/usr/bin/env python3
"""agent-structure.py - who uses whom among the agent's files.

Reads the agent's object files (nm: what each defines, what each needs) and
its sources (#include "agent/..."), groups a .c with its .h as one unit, and
prints: each unit's uses, the strongly connected components (loops of units
that use each other), and, when units live in part folders
(base < intercept < memory < movement < top), the uses that run up a part.

usage: agent-structure.py [--all-symbols] BUILD_DIR [SRC_DIR]
"""
import os, re, subprocess, sys
from collections import defaultdict

PARTS = ["base", "intercept", "memory", "movement", "top"]
# libc functions the agent exports its own versions of (dlsym, syscall): a
# file that calls them calls libc; --all-symbols counts them as uses anyway
LIBC_NAMES = {"dlsym", "dlvsym", "syscall"}

def main():
    args = [a for a in sys.argv[1:] if a != "--all-symbols"]
    all_syms = len(args) != len(sys.argv) - 1
    build = args[0]
    src = args[1] if len(args) > 1 else "src/agent"
    objdir = os.path.join(build, "src/agent/CMakeFiles/gpusnap_agent.dir")
    defs, needs = {}, defaultdict(set)
    units = []
    for root, _, files in os.walk(objdir):
        for f in files:
            if not f.endswith(".o"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, objdir)[:-2]
            if not os.path.exists(os.path.join(src, rel)):
                continue  # a file moved away since the build
            unit = re.sub(r"\.(c|S)$", "", rel)
            units.append(unit)
            out = subprocess.run(["nm", path], capture_output=True, text=True).stdout
            for line in out.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "TDBR":
                    defs[p[2]] = unit
                elif len(p) == 2 and p[0] == "U":
                    needs[unit].add(p[1])
    uses = defaultdict(set)
    for u in units:
        for s in needs[u]:
            d = defs.get(s)
            if not all_syms and s in LIBC_NAMES:
                continue  # the agent's own export of a libc function: the caller names libc, not a file
            if d and d != u:
                uses[u].add(d)
    # includes of another unit's header count as uses too
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".c"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            u = rel[:-2]
            if u not in units:
                continue
            for m in re.finditer(r'#include "agent/([^"]+)\.h"', open(os.path.join(root, f)).read()):
                h = m.group(1)
                if h in units and h != u:
                    uses[u].add(h)
    units.sort()
    print("# uses (calls into another file, or includes its header)")
    for u in units:
        print(f"{u}: {' '.join(sorted(uses[u]))}")
    # Tarjan
    idx, low, onst, st, comps, n = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); onst.add(v)
        for w in uses[v]:
            if w not in idx:
                sc(w); low[v] = min(low[v], low[w])
            elif w in onst:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); onst.discard(w); c.append(w)
                if w == v:
                    break
            comps.append(sorted(c))
    for u in units:
        if u not in idx:
            sc(u)
    loops = sorted([c for c in comps if len(c) > 1], key=len, reverse=True)
    print("\n# loops (files that use each other, directly or around)")
    for c in loops:
        print(f"{len(c)}: {' '.join(c)}")
    print(f"largest loop: {len(loops[0]) if loops else 1} file(s)")
    # levels over the condensed graph
    comp_of = {u: i for i, c in enumerate(comps) for u in c}
    level = {}
    def lv(i):
        if i in level:
            return level[i]
        level[i] = 0
        best = 0
        for u in comps[i]:
            for w in uses[u]:
                j = comp_of[w]
                if j != i:
                    best = max(best, lv(j) + 1)
        level[i] = best
        return best
    for i in range(len(comps)):
        lv(i)
    print(f"levels: {max(level.values()) + 1}")
    def part(u):
        p = u.split("/")[0]
        return PARTS.index(p) if p in PARTS else PARTS.index("top")
    if any("/" in u for u in units):
        up = [(u, w) for u in units for w in sorted(uses[u]) if part(w) > part(u)]
        print(f"\n# uses running up a part: {len(up)}")
        for u, w in up:
            print(f"{u} -> {w}")
    else:
        # one folder: a use runs up when it goes to a higher level than its own
        up = [(u, w) for u in units for w in sorted(uses[u])
              if comp_of[w] == comp_of[u] or level[comp_of[w]] > level[comp_of[u]]]
        print(f"\n# uses inside a loop (running back up): {len(up)}")

if __name__ == "__main__":
    main()
