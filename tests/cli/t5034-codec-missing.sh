#!/usr/bin/env bash
# t5034 - the codecs' libraries are loaded when used, not linked: an app whose
# mount namespace has no liblz4.so.1 and no libzstd.so.1 (each covered with an
# empty file, as in a minimal container) still gets the agent (gpusnap state
# sees it), and `dump --compress lz4` of it is refused before anything moves,
# in one line naming the library, exit 16, the app running with its data.
# Needs root (a mount namespace), CRIU as t5030, and the libraries on the host.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app criu
[ -n "$(ldd "$app" | awk '/libasan/')" ] && skip "an ASan build: the agent's sanitizer runtime is preloaded, no wrapper can stand in between"
command -v unshare >/dev/null || skip "needs unshare"
libs=()
for l in liblz4.so.1 libzstd.so.1; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
  [ -n "$p" ] || skip "$l is not on this host"
  libs+=("$p")
done
: >"$TEST_TMP/empty"
# the app, execed in place (its PID stays) in a mount namespace of its own without the two libraries
real=$app
app=$TEST_TMP/app-without-codecs
cat >"$app" <<WRAP
#!/bin/sh
exec unshare -m sh -c 'for l in ${libs[*]}; do mount --bind "$TEST_TMP/empty" "\$l" || exit 1; done; exec "\$0" "\$@"' "$real" "\$@"
WRAP
chmod 755 "$app"
SIGNALS_APP=agent_app

start_app
verify_ok "the app's data after allocation, with neither library in its namespace"
check "... where dlopen cannot find them" sh -c "! nsenter -t $APP -m sh -c 'grep -q . ${libs[0]}'"
run_gpusnap state --json "$APP"; expect "state" 0
check "the agent runs in it (path agent)" test "$(jget "['path']")" = agent
run_gpusnap dump --compress lz4 -D "$TEST_TMP/img" "$APP"
expect "dump --compress lz4: refused" 16 "cannot compress with lz4 in this process: liblz4.so.1 cannot be loaded here"
check "... in one line" one_error
check "... no image" test ! -e "$TEST_TMP/img"
check "... the app runs on the GPU" test "$(fake_state)" = 0
verify_ok "... with its data"
run_gpusnap dump --compress zstd -D "$TEST_TMP/img" "$APP"
expect "dump --compress zstd: refused" 16 "libzstd.so.1 cannot be loaded here"
verify_ok "... the app's data after both refusals"
test_done
