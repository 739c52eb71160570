# shellcheck shell=bash
# json_lib.sh - checking --json documents against docs/json (t7001, t7002).
# Sourced after lib.sh; the test sets $schemas and calls json_lib_init.
# shellcheck disable=SC2154 # schemas is the sourcing test's

# json_lib_init: JSON_PY, a python3 that has jsonschema (ctest's own, else
# Debian's, which scripts/install-deps.sh installs it into), else the test skips.
json_lib_init() {
  JSON_CHECK=$(dirname "${BASH_SOURCE[0]}")/json_schema.py
  JSON_PY=
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import jsonschema' 2>/dev/null; then
      JSON_PY=$(command -v "$py")
      return 0
    fi
  done
  skip "python3-jsonschema is not installed (scripts/install-deps.sh installs it for make test)"
}

# valid CMD TITLE: the last run_gpusnap's stdout is one document of CMD, valid against docs/json/CMD.json
valid() {
  if "$JSON_PY" "$JSON_CHECK" "$schemas" doc "$1" "$OUT_TXT" >"$TEST_TMP/valid.log"; then
    pass "$2: valid $1 document"
  else
    fail "$2: valid $1 document" "$(cat "$TEST_TMP/valid.log")" "stdout: $(head -c 600 "$OUT_TXT")"
  fi
}
