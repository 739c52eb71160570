#!/usr/bin/env bash
# plugin-restore-time.sh - wall time of `criu restore` through two builds of
# gpusnap_criu.so on the same image, alternating (docs/benchmarks.md, "criu
# restore through the plugin"). No GPU: the host-memory fake driver. The
# tree: a bash, the agent's test app with BIG_MB MiB of fake GPU memory (a
# gpusnap image with that many chunk bytes) and a python3 holding HOST_MB MiB
# (CRIU's pages). Needs root, a build (GPUSNAP_BUILD, default ./build) with
# the tests, CRIU (GPUSNAP_CRIU) and python3.
#
#   scripts/plugin-restore-time.sh BEFORE.so AFTER.so [ROUNDS]
set -u
[ $# -ge 2 ] || { echo "usage: $0 BEFORE.so AFTER.so [ROUNDS]" >&2; exit 2; }
before=$(readlink -f "$1") after=$(readlink -f "$2") rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
export GPUSNAP_SRC=$src GPUSNAP_BUILD=${GPUSNAP_BUILD:-$src/build}
export GPUSNAP_BIN=$GPUSNAP_BUILD/gpusnap GPUSNAP_FAKE_CUDA=$GPUSNAP_BUILD/tests/unit/libfakecuda.so
cd "$src/tests/cli" || exit 1
. ./lib.sh
. ./fake_agent.sh
. ./plugin_lib.sh
app=$GPUSNAP_BUILD/tests/agent/agent_app
fake_agent_env criu
plugin_env
export AGENT_APP_BIG_MB=${BIG_MB:-1500}
hostmb=${HOST_MB:-2048}
tree=
trap '[ -n "$tree" ] && kill -9 "$tree" 2>/dev/null; kill_our_apps agent_app; pkill -9 -f "[b]ytearray.*$hostmb << 20"; cleanup_test' EXIT
la=$TEST_TMP/a.log
: >"$la"
(close_inherited_fds && exec setsid bash -c "'$GPUSNAP_BIN' run -- '$app' --signals >>'$la' 2>/dev/null </dev/null &
  python3 -c 'import time; x = bytearray(b\"\\x5a\") * ($hostmb << 20); time.sleep(100000)' </dev/null >/dev/null 2>&1 &
  wait" </dev/null >/dev/null 2>&1) &
disown
tree=$!
pa=
for _ in $(seq 600); do pa=$(awk '/^READY/ {print $2; exit}' "$la"); [ -n "$pa" ] && break; sleep 0.1; done
[ -n "$pa" ] || { echo "the app did not start" >&2; exit 1; }
sleep 3 # python3 has filled its memory
criu_dump "$TEST_TMP/img" "$tree"
[ "$RC" = 0 ] || { echo "criu dump failed: $(tail -n 3 "$TEST_TMP/criu.out")" >&2; exit 1; }
tree=
echo "image: $(du -sh "$TEST_TMP/img" | cut -f1) (GPU data $AGENT_APP_BIG_MB MiB, host memory $hostmb MiB)"
for ((round = 1; round <= rounds; round++)); do
  for which in before after; do
    [ "$which" = before ] && so=$before || so=$after
    cp "$so" "$PLUGIN_DIR/gpusnap_criu.so"
    cat "$TEST_TMP"/img/pages-*.img "$TEST_TMP"/img/gpusnap/*/* >/dev/null 2>&1 # in the page cache for both
    t0=$(date +%s.%N)
    criu_restore "$TEST_TMP/img"
    t1=$(date +%s.%N)
    pass=$(grep -o 'checksums of its GPU image good ([0-9.]* s' "$TEST_TMP/restore.log" | grep -o '[0-9.]* s')
    waited=$(grep -o 'waited [0-9.]* s' "$TEST_TMP/restore.log" | grep -o '[0-9.]* s')
    printf '%s round %d: criu restore rc %s, %.2f s; the pass %s; criu waited for it %s\n' "$which" "$round" "$RC" \
      "$(echo "$t1 - $t0" | bc)" "${pass:-?}" "${waited:--}"
    [ -n "$RPID" ] && { pkill -9 -P "$RPID"; kill -9 "$RPID"; } 2>/dev/null
    wait_gone "$pa" 20
    sleep 1
  done
done
