#!/bin/bash
# lint-test-numbers.sh - every test number is unique: tests/cli/tNNNN-*.sh and
# tests/gpu/tNN-*.sh are named by their number in reports, docs and ctest regexes,
# so two files sharing one make "t5003 failed" ambiguous. Fails naming each
# number used twice and its files (tests/README.md says which range is whose).
# Usage: tests/lint-test-numbers.sh [source-root]   (default: the checkout above)
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
status=0 checked=0
for dir in tests/cli tests/gpu; do
  [ -d "$root/$dir" ] || { echo "lint-test-numbers: no $root/$dir" >&2; exit 2; }
  dups=$(cd "$root/$dir" && ls t[0-9]*.sh 2>/dev/null | sed -n 's/^t\([0-9][0-9]*\)-.*\.sh$/\1/p' | sort | uniq -d)
  checked=$((checked + $(cd "$root/$dir" && ls t[0-9]*.sh 2>/dev/null | wc -l)))
  for n in $dups; do
    echo "lint-test-numbers: t$n is used by more than one test in $dir:" \
      $(cd "$root/$dir" && ls "t$n"-*.sh)
    status=1
  done
done
[ "$checked" -gt 0 ] || { echo "lint-test-numbers: no tests found under $root" >&2; exit 2; }
[ "$status" = 0 ] && echo "lint-test-numbers: $checked test files, every number unique"
exit "$status"
