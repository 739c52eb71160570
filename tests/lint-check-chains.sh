#!/bin/bash
# lint-check-chains.sh - no shell test writes `check DESC [ A ] && [ B ]`: check
# runs only `[ A ]`, and B, outside it, can fail without a FAIL line (a check
# that cannot fail). Such a range is written `check DESC between V LO HI`
# (tests/gpu/lib.sh), or the whole condition is one command (`bash -c '...'`).
# Looks at the tracked tests/**/*.sh; fails naming each file and line. ctest runs
# it as lint.check_chains.
# Usage: tests/lint-check-chains.sh [source-root]   (default: the checkout above)
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP: lint-check-chains: $root is not a git checkout"
  exit 77
fi
# a check whose own command is a bare test ("[" or "test") chained to another test by && or ||
# on the same line ("check ... || finish" stays allowed: it stops the test, it checks nothing)
pattern='^[[:space:]]*check[[:space:]]+("[^"]*"|'"'"'[^'"'"']*'"'"'|[^[:space:]]+)[[:space:]]+(\[|test)[[:space:]].*(&&|\|\|)[[:space:]]*(\[|test[[:space:]])'
hits=$(git ls-files -z -- 'tests/*.sh' | xargs -0 grep -nE "$pattern" -- 2>/dev/null | grep -vE '(bash|sh) -c ')
if [ -n "$hits" ]; then
  echo "lint-check-chains: a check followed by && or ||, which the check does not cover (use between in tests/gpu, test A -a B, or one command):"
  echo "$hits"
  exit 1
fi
echo "lint-check-chains: $(git ls-files -- 'tests/*.sh' | wc -l) test scripts, every check one command"
