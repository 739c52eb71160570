#!/usr/bin/env bash
# t7040 - what `cmake --install` and the Debian package (`make deb`) put in
# place works from there:
#  - an install under a prefix keeps every file under it (the CRIU plugin in
#    PREFIX/lib/criu), its gpusnap finds its agent (PREFIX/lib) and its pages;
#  - as root with dpkg: the package built here (CPack) declares libc and
#    recommends criu (>= 4.2); dpkg -i installs it; the installed gpusnap says
#    its version, suspends and resumes an app it started with the installed
#    agent (fake driver), man -w finds gpusnap-dump(1), the bash completion
#    loads; dpkg -r removes it and leaves the system as it was. A lock keeps
#    two runs (ctest -j, a second build folder) from meeting in dpkg; a
#    gpusnap already installed on the machine, or a file of the package
#    already there, is not touched: that part skips and says why.
# Needs GPUSNAP_BUILD (set by ctest).
. "$(dirname "$0")/lib.sh"
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}
unset GPUSNAP_AGENT
version=$("$GPUSNAP_BIN" --version)

# an install under a prefix
prefix=$TEST_TMP/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$TEST_TMP/install.log" 2>&1; then
  fail "cmake --install --prefix" "$(tail -n 5 "$TEST_TMP/install.log")"
  test_done
  exit
fi
pass "cmake --install --prefix $prefix"
for f in bin/gpusnap lib/libgpusnap.so lib/criu/gpusnap_criu.so share/man/man1/gpusnap.1 share/man/man1/gpusnap-dump.1 \
  share/bash-completion/completions/gpusnap share/zsh/vendor-completions/_gpusnap share/doc/gpusnap/README.md; do
  check "... installs $f" test -f "$prefix/$f"
done
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt")
check "... and nothing outside the prefix${outside:+: $outside}" test -z "$outside"
if ldd "$prefix/lib/libgpusnap.so" | grep -q libasan; then
  # gpusnap run puts the agent first in LD_PRELOAD, and an agent built with ASan cannot load before
  # the sanitizer's runtime in an uninstrumented program (sh): the normal build runs this check
  echo "SKIP: the installed gpusnap run preloads the installed agent: a sanitizer build's agent needs its runtime first"
else
  preload=$("$prefix/bin/gpusnap" run -- sh -c 'echo "$LD_PRELOAD"' 2>&1)
  check "the installed gpusnap run preloads the installed agent ($preload)" test "$preload" = "$(realpath "$prefix/lib/libgpusnap.so")"
fi
if command -v man >/dev/null; then
  out=$("$prefix/bin/gpusnap" help dump 2>&1)
  check "the installed gpusnap help dump shows the installed page" grep -q 'GPUSNAP-DUMP(1)' <<<"$out"
fi

# the Debian package
part_b() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: not root: the package is not installed"; return; }
  if ! command -v dpkg >/dev/null || ! command -v cpack >/dev/null; then
    echo "SKIP: no dpkg or cpack: the package is not built"
    return
  fi
  if ldd "$GPUSNAP_BIN" | grep -q libasan; then
    echo "SKIP: a sanitizer build: the package is the normal build's"
    return
  fi
  if ! (cd "$build" && cpack -G DEB -B "$TEST_TMP/pkg") >"$TEST_TMP/cpack.log" 2>&1; then
    fail "cpack -G DEB builds the package" "$(tail -n 5 "$TEST_TMP/cpack.log")"
    return
  fi
  local deb
  deb=$(ls "$TEST_TMP"/pkg/gpusnap_*.deb 2>/dev/null | head -n 1)
  check "cpack -G DEB builds the package (${deb##*/})" test -f "$deb"
  [ -f "$deb" ] || return
  check "... Depends on libc6 ($(dpkg-deb -f "$deb" Depends))" sh -c "dpkg-deb -f '$deb' Depends | grep -q libc6"
  check "... Recommends criu (>= 4.2)" test "$(dpkg-deb -f "$deb" Recommends)" = "criu (>= 4.2)"
  check "... says older distributions lack CRIU 4.2" sh -c "dpkg-deb -f '$deb' Description | grep -q 'older than Debian 13'"
  local paths
  paths=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|; s|/$||' | grep -v '^$')
  for f in /usr/bin/gpusnap /usr/lib/libgpusnap.so /usr/lib/criu/gpusnap_criu.so /usr/share/man/man1/gpusnap-dump.1 \
    /usr/share/bash-completion/completions/gpusnap /usr/share/zsh/vendor-completions/_gpusnap /usr/share/doc/gpusnap/README.md; do
    check "... holds $f" grep -qx "$f" <<<"$paths"
  done

  # one run at a time in dpkg and /usr/lib/criu (t5003-criu-plugin puts one there too); the system as it
  # was before is what is left after
  exec 9>/run/lock/gpusnap-test-system.lock
  flock -w 900 9 || { fail "the lock /run/lock/gpusnap-test-system.lock within 15 min"; return; }
  if dpkg-query -W -f='${db:Status-Status}' gpusnap 2>/dev/null | grep -qv not-installed; then
    echo "SKIP: a gpusnap package is installed on this machine: not touched"
    return
  fi
  local p there=
  for p in $paths; do [ -d "$p" ] || [ ! -e "$p" ] || there+=" $p"; done
  if [ -n "$there" ]; then
    echo "SKIP: files of the package are already on this machine (make install?):$there"
    return
  fi
  local before
  before=$(for p in $paths; do [ -e "$p" ] && echo "$p"; done)
  INSTALLED=1
  if ! dpkg -i "$deb" >"$TEST_TMP/dpkg.log" 2>&1; then
    fail "dpkg -i installs the package" "$(tail -n 5 "$TEST_TMP/dpkg.log")"
  else
    pass "dpkg -i installs the package"
    local listed
    listed=$(dpkg -L gpusnap | grep -c -e '^/usr/bin/gpusnap$' -e '^/usr/lib/criu/gpusnap_criu.so$')
    check "... dpkg -L lists the binary and the CRIU plugin" test "$listed" = 2
    check "/usr/bin/gpusnap --version: $version" test "$(/usr/bin/gpusnap --version)" = "$version"
    if command -v man >/dev/null; then
      check "man -w gpusnap-dump finds the page ($(man -w gpusnap-dump 2>&1))" \
        sh -c 'man -w gpusnap-dump | grep -qx /usr/share/man/man1/gpusnap-dump.1'
    fi
    check "the installed bash completion loads and completes gpusnap du<TAB>" \
      bash -c '. /usr/share/bash-completion/completions/gpusnap; COMP_WORDS=(gpusnap du); COMP_CWORD=1; _gpusnap; [ "${COMPREPLY[*]}" = dump ]'
    installed_suspend_resume
  fi
  if dpkg -r gpusnap >"$TEST_TMP/dpkg.log" 2>&1; then
    INSTALLED=
    pass "dpkg -r removes it"
  else
    fail "dpkg -r removes it" "$(tail -n 5 "$TEST_TMP/dpkg.log")"
  fi
  local after
  after=$(for p in $paths; do [ -e "$p" ] && echo "$p"; done)
  check "... and leaves no file of it behind$(diff <(echo "$before") <(echo "$after") | grep '^>' | tr '\n' ' ')" \
    test "$before" = "$after"
  # its postrm (CPack's ldconfig call) keeps it listed as "config-files" after -r: purged, as it was before
  dpkg -P gpusnap >>"$TEST_TMP/dpkg.log" 2>&1
  check "... and dpkg -P drops it from dpkg's list" \
    sh -c "! dpkg-query -W -f='\${db:Status-Status}' gpusnap 2>/dev/null | grep -qv not-installed"
}

# an app started by the installed gpusnap run, on the fake driver: the installed agent, suspended and resumed
installed_suspend_resume() {
  app=$build/tests/agent/agent_app
  if [ ! -x "$app" ] || [ ! -f "$build/libgpusnap.so" ] || ! command -v python3 >/dev/null; then
    echo "SKIP: no agent app or python3: the installed suspend and resume are not run"
    return
  fi
  (
    . "$(dirname "$0")/fake_agent.sh"
    GPUSNAP_BIN=/usr/bin/gpusnap
    TEST_PASSED=0 TEST_FAILED=0
    fake_agent_env
    start_app
    check "the app runs with the installed agent (/usr/lib/libgpusnap.so)" grep -q ' /usr/lib/libgpusnap.so$' "/proc/$APP/maps"
    run_gpusnap suspend "$APP"; expect "the installed gpusnap suspends it (fake driver)" 0
    run_gpusnap resume "$APP"; expect "... and resumes it" 0
    verify_ok "its data after the resume"
    quit_app "the app ends well"
    echo "$TEST_PASSED $TEST_FAILED" >"$TEST_TMP/sub.counts"
  )
  local p f
  read -r p f <"$TEST_TMP/sub.counts" || { p=0; f=1; }
  TEST_PASSED=$((TEST_PASSED + p))
  TEST_FAILED=$((TEST_FAILED + f))
}

# a test killed in the middle still removes what it installed
INSTALLED=
trap '[ -n "$INSTALLED" ] && dpkg -P gpusnap >/dev/null 2>&1; cleanup_test' EXIT
part_b
test_done
