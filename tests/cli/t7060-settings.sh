#!/usr/bin/env bash
# t7060 - one table of settings (src/common/settings.c):
#  - README.md's table of variables is what `gpusnap _doc settings` prints;
#  - every GPUSNAP_* name in src/ is a row of the table, and no file but
#    settings.c calls getenv, except for the reads settings.h lists (PATH,
#    LD_PRELOAD);
#  - a command stops at its start (its options parsed, nothing done) on a bad
#    value of a variable it reads, with one line naming it and exit code 2, and
#    its --json document; -h and --version still answer; a bad value meant for
#    the agent does not stop a command;
#  - the agent, in the app, logs each bad value once and runs on the default.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}

# README.md between the markers against the table
sed -n '/^<!-- settings table: generated/,/^<!-- end of settings table -->/p' "$top/README.md" | sed '1d;$d' \
  >"$TEST_TMP/readme"
"$GPUSNAP_BIN" _doc settings >"$TEST_TMP/table"
if [ -s "$TEST_TMP/readme" ] && cmp -s "$TEST_TMP/readme" "$TEST_TMP/table"; then
  pass "README.md's table of variables is the settings table ($(wc -l <"$TEST_TMP/table") lines)"
else
  fail "README.md's table of variables is the settings table" \
    "regenerate it: gpusnap _doc settings, between the markers in README.md" \
    "$(diff "$TEST_TMP/readme" "$TEST_TMP/table" | head -n 10)"
fi

# every name src/ uses is a row
names=$(grep -rhoE '"GPUSNAP_[A-Z0-9_]+"' "$top/src" | sort -u | tr -d '"')
missing=""
for n in $names; do
  grep -q "\"$n\"" "$top/src/common/settings.c" || missing="$missing $n"
done
check "every GPUSNAP_* variable of src/ is a row of the settings table ($(echo "$names" | wc -l) names)" \
  test -z "$missing"
[ -z "$missing" ] || echo "    not in the table:$missing"

# getenv only in settings.c, and the raw reads it lists
others=$(grep -rn 'getenv(' "$top/src" | grep -v '^[^:]*src/common/settings\.c:' |
  grep -vE 'getenv\("(PATH|LD_PRELOAD)"\)' || true)
check "no getenv outside settings.c but PATH and LD_PRELOAD" test -z "$others"
[ -z "$others" ] || echo "$others" | sed 's/^/    /'

# commands: a bad value of theirs is a usage error, one line, before anything runs
run_gpusnap state 1 --json
RC0=$RC
GPUSNAP_CRIU_TIMEOUT=soon run_gpusnap dump -D "$TEST_TMP/img" 1
expect "dump with GPUSNAP_CRIU_TIMEOUT=soon: exit 2" 2 \
  "gpusnap: GPUSNAP_CRIU_TIMEOUT='soon' is not a number of seconds > 0"
check "the message is one line" one_line
check "nothing was written" test ! -e "$TEST_TMP/img"
GPUSNAP_LOG=loud run_gpusnap state 1
expect "state with GPUSNAP_LOG=loud: exit 2" 2 \
  "gpusnap: GPUSNAP_LOG='loud' is not one of error, warn, info, debug"
check "the message is one line" one_line
GPUSNAP_LOG=loud run_gpusnap state --json 1
expect "state --json with GPUSNAP_LOG=loud: exit 2" 2 "GPUSNAP_LOG='loud' is not one of"
check "... and its JSON document says so" \
  sh -c "grep -q '\"ok\": *false' '$OUT_TXT' && grep -qF \"GPUSNAP_LOG='loud'\" '$OUT_TXT'"
GPUSNAP_LOG=loud run_gpusnap state -h
expect "state -h answers whatever the settings" 0 "usage:"
GPUSNAP_LOG=loud run_gpusnap --version
expect "--version answers whatever the settings" 0 "gpusnap "
# the agent's own settings are the agent's to judge
GPUSNAP_IO_THREADS=x run_gpusnap state 1 --json
check "a bad GPUSNAP_IO_THREADS does not change what a command does (exit $RC, as without it: $RC0)" \
  test "$RC" = "$RC0"
check "nor what it says" sh -c "! grep -q GPUSNAP_IO_THREADS '$ERR_TXT'"

# the agent: each bad value logged once, the app runs on
agent=$build/libgpusnap.so
if [ -f "$agent" ]; then
  log=$TEST_TMP/agent.log
  # a sanitizer build's agent needs its runtime loaded first (as tests/cli/fake_agent.sh does)
  asan=$(ldd "$agent" | awk '/libasan/ {print $3; exit}')
  out=$(ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="${asan:+$asan }$agent" GPUSNAP_LIBCUDA=$GPUSNAP_FAKE_CUDA GPUSNAP_AGENT_LOG=$log GPUSNAP_IO_THREADS=x \
    GPUSNAP_CHUNK_SIZE=1G GPUSNAP_STAGING_MODE=weird sh -c 'echo ran' 2>"$TEST_TMP/app.err")
  check "the app runs with bad agent settings ($out)" test "$out" = ran
  check "its stderr stays the app's" test ! -s "$TEST_TMP/app.err"
  for want in "GPUSNAP_IO_THREADS='x' is not a number from 1 to 32: using the default" \
    "GPUSNAP_CHUNK_SIZE='1G' is not a size from 1M to 256M: using the default" \
    "GPUSNAP_STAGING_MODE='weird' is not one of bounce, pinned: using the default"; do
    check "the agent logs once: $want" test "$(grep -cF -- "$want" "$log")" = 1
  done
else
  skip "libgpusnap.so was not built (the agent is x86-64 only)"
fi

test_done
