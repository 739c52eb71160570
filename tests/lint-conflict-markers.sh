#!/bin/bash
# lint-conflict-markers.sh - no file of the repository holds a merge's conflict
# markers: a "<<<<<<< " or ">>>>>>> " line at the start of a line, or a line of
# exactly seven '=' between them, left behind by a merge resolved in haste
# (C fails to build with them, but docs and scripts would carry them silently).
# Looks at the files git tracks (the working tree's version of each); fails
# naming each file and line. ctest runs it as lint.conflict_markers.
# Usage: tests/lint-conflict-markers.sh [source-root]   (default: the checkout above)
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP: lint-conflict-markers: $root is not a git checkout"
  exit 77
fi
# binary files (-I) are left out; the markers' own text below is split so this file passes itself
open='<<<<<<''< '
close='>>>>>>''> '
hits=$(git ls-files -z | xargs -0 grep -InE "^(${open}|${close})" -- 2>/dev/null)
if [ -n "$hits" ]; then
  echo "lint-conflict-markers: merge conflict markers left in these files:"
  echo "$hits"
  exit 1
fi
echo "lint-conflict-markers: $(git ls-files | wc -l) tracked files, no conflict markers"
