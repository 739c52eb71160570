#!/bin/bash
# lint-test-numbers.sh - every test number is unique: tests/cli/tNNNN-*.sh and
# tests/gpu/tNN-*.sh are named by their number in reports, docs and ctest
# regexes, so two files sharing one make "t5003 failed" ambiguous. Fails
# naming each number used twice and its files (tests/README.md says which
# range is whose). ctest runs it as lint.test_numbers.
# Usage: tests/lint-test-numbers.sh [source-root]   (default: the checkout above)
set -u
shopt -s nullglob
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
status=0 checked=0
for dir in tests/cli tests/gpu; do
  [ -d "$root/$dir" ] || { echo "lint-test-numbers: no $root/$dir" >&2; exit 2; }
  declare -A files=()
  for path in "$root/$dir"/t[0-9]*.sh; do
    name=${path##*/}
    num=${name%%-*}
    checked=$((checked + 1))
    files[$num]+=" $name"
  done
  for num in "${!files[@]}"; do
    # shellcheck disable=SC2086 # the list is space-separated file names without spaces
    set -- ${files[$num]}
    if [ $# -gt 1 ]; then
      echo "lint-test-numbers: $num is used by more than one test in $dir:${files[$num]}"
      status=1
    fi
  done
  unset files
done
[ "$checked" -gt 0 ] || { echo "lint-test-numbers: no tests found under $root" >&2; exit 2; }
[ "$status" = 0 ] && echo "lint-test-numbers: $checked test files, every number unique"
exit "$status"
