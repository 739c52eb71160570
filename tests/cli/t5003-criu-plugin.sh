#!/usr/bin/env bash
# t5003-criu-plugin - gpusnap runs criu with a plugin folder of its own (--libdir
# RUN/criu/plugins), so a plugin in CRIU's default folder is never loaded. CRIU's
# cuda_plugin.so installed there would find gpusnap's already checkpointed process,
# record itself in the image, and restore and unlock the process itself, racing
# gpusnap's held restore. A stand-in plugin (tests/apps/criu_marker_plugin.c, named
# cuda_plugin.so) writes a marker when loaded:
#  - put in $CRIU_LIBS_DIR, a plain `criu dump` loads it (the test can fail);
#  - `gpusnap dump` and `gpusnap restore` (fake driver, a CPU process, as t5002)
#    never load it; the folder they name is private and empty;
#  - the same with it in /usr/lib/criu (CRIU's built-in default), where that folder
#    does not exist yet: it is created for the check and removed right after.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), CRIU's plugin
# header (the get-criu tree has it) and a C compiler; skips visibly otherwise.
. "$(dirname "$0")/lib.sh"

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}

fake_cuda_env criu

inc=""
for d in "$(dirname "$(readlink -f "$GPUSNAP_CRIU")")/../usr/include/criu" "$src/.cache/criu/usr/include/criu" \
  /usr/include/criu; do
  [ -f "$d/criu-plugin.h" ] && { inc=$d; break; }
done
[ -n "$inc" ] || skip "no criu-plugin.h (scripts/get-criu.sh brings one)"
cc=${CC:-cc}
command -v "$cc" >/dev/null || skip "no C compiler ($cc)"

plugins=$TEST_TMP/criu-default
mkdir -p "$plugins"
"$cc" -shared -fPIC -isystem "$inc" -o "$plugins/cuda_plugin.so" "$src/tests/apps/criu_marker_plugin.c" ||
  { echo "not ok - cannot build the stand-in plugin"; exit 1; }
marker=$TEST_TMP/marker
export GPUSNAP_TEST_PLUGIN_MARKER=$marker

made_usr_lib_criu=0
cleanup_all() {
  [ "$made_usr_lib_criu" = 1 ] && rm -rf /usr/lib/criu
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_all EXIT

no_marker() { [ ! -s "$marker" ] || { echo "    marker: $(cat "$marker")"; return 1; }; }

log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID

# ---- the control: plain criu loads the plugin from $CRIU_LIBS_DIR ----
mkdir -p "$TEST_TMP/plain"
CRIU_LIBS_DIR=$plugins "$GPUSNAP_CRIU" dump --tree "$pid" --images-dir "$TEST_TMP/plain" --leave-running \
  --log-file "$TEST_TMP/plain/dump.log" -v4 >"$TEST_TMP/plain.out" 2>&1
check "a plain criu dump succeeds" grep -q "Dumping finished successfully" "$TEST_TMP/plain/dump.log"
check "a plain criu dump loads the plugin of CRIU_LIBS_DIR" grep -q "^init 0 " "$marker"
rm -f "$marker"

# ---- gpusnap dump and restore never do ----
export CRIU_LIBS_DIR=$plugins
img=$TEST_TMP/img
run_gpusnap dump -D "$img" "$pid"; expect "gpusnap dump with a plugin in CRIU_LIBS_DIR" 0 "dumped $pid"
check "gpusnap dump did not load it" no_marker
own=$GPUSNAP_RUN_DIR/criu/plugins
check "the dump named gpusnap's own plugin folder" \
  grep -qxF -- "$own" <(grep -A1 -x -- --libdir "$img/cpu/gpusnap-criu-dump.args" | tail -n 1)
check "the dump gave criu cpu/ through gpusnap's descriptor (no path a rename could redirect)" \
  grep -qx -- '/proc/self/fd/[0-9]*' <(grep -A1 -x -- --images-dir "$img/cpu/gpusnap-criu-dump.args" | tail -n 1)
check "that folder is private" [ "$(stat -c '%a %u' "$own")" = "700 $(id -u)" ]
empty_dir() { [ -d "$1" ] && [ -z "$(ls -A "$1")" ]; }
check "that folder is empty" empty_dir "$own"
check "CRIU's log says no plugin was loaded" bash -c "! grep -q 'Plugin \"' '$img/cpu/dump.log'"
wait_gone "$pid"
run_gpusnap restore -D "$img"; expect "gpusnap restore with a plugin in CRIU_LIBS_DIR" 0 "restored $pid"
check "gpusnap restore did not load it" no_marker
check "the restored process runs" grows "$log"
kill -9 "$pid"; wait_gone "$pid"
unset CRIU_LIBS_DIR

# ---- CRIU's built-in default folder, /usr/lib/criu ----
# t7040 installs the package, and so a plugin, there: one of the two at a time
exec 9>/run/lock/gpusnap-test-system.lock
flock -w 900 9 || echo "# the lock of /usr/lib/criu (/run/lock/gpusnap-test-system.lock) not had in 15 min"
if [ -e /usr/lib/criu ]; then
  echo "# /usr/lib/criu exists here: left alone, its part skipped"
else
  made_usr_lib_criu=1
  mkdir -p /usr/lib/criu
  cp "$plugins/cuda_plugin.so" /usr/lib/criu/
  start_counter "$log"; pid=$NEWPID
  rm -rf "$TEST_TMP/plain"; mkdir -p "$TEST_TMP/plain"
  "$GPUSNAP_CRIU" dump --tree "$pid" --images-dir "$TEST_TMP/plain" --leave-running \
    --log-file "$TEST_TMP/plain/dump.log" -v4 >"$TEST_TMP/plain.out" 2>&1
  check "a plain criu dump loads the plugin of /usr/lib/criu" grep -q "^init 0 " "$marker"
  rm -f "$marker"
  rm -rf "$img"
  run_gpusnap dump -D "$img" "$pid"; expect "gpusnap dump with a plugin in /usr/lib/criu" 0 "dumped $pid"
  check "gpusnap dump did not load it" no_marker
  wait_gone "$pid"
  run_gpusnap restore -D "$img"; expect "gpusnap restore with a plugin in /usr/lib/criu" 0 "restored $pid"
  check "gpusnap restore did not load it" no_marker
  rm -rf /usr/lib/criu
  made_usr_lib_criu=0
  kill -9 "$pid"; wait_gone "$pid"
fi

test_done
