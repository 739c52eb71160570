#!/bin/bash
# lint-agent-structure.sh - the agent's files keep the shape docs/DESIGN.md
# ("The agent") gives them: no loop of files that use each other is longer
# than two files, and no file uses a file of a part above its own
# (base < intercept < memory < movement < top). Reads the built agent's object
# files through scripts/agent-structure.py and fails printing its report.
# ctest runs it as lint.agent_structure once libgpusnap.so is built.
# Usage: tests/lint-agent-structure.sh BUILD_DIR [SOURCE_ROOT]
set -u
build=$1
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
if ! command -v nm >/dev/null || ! command -v python3 >/dev/null; then
  echo "SKIP: lint-agent-structure: needs nm and python3"
  exit 77
fi
report=$(python3 "$root/scripts/agent-structure.py" "$build" "$root/src/agent") || {
  echo "lint-agent-structure: scripts/agent-structure.py failed"; exit 1; }
loop=$(sed -n 's/^largest loop: \([0-9]*\) file(s)$/\1/p' <<<"$report")
up=$(sed -n 's/^# uses running up a part: \([0-9]*\)$/\1/p' <<<"$report")
nunits=$(sed -n '/^# uses/,/^$/p' <<<"$report" | grep -c ':')
if [ -z "$loop" ] || [ -z "$up" ] || [ "$nunits" -lt 10 ]; then
  echo "lint-agent-structure: cannot read the report (agent not built in $build?):"
  echo "$report"
  exit 1
fi
if [ "$loop" -gt 2 ] || [ "$up" -gt 0 ]; then
  echo "lint-agent-structure: largest loop $loop files (at most 2), $up uses running up a part (none allowed):"
  echo "$report"
  exit 1
fi
echo "lint-agent-structure: $nunits files, largest loop $loop, no use runs up a part"
