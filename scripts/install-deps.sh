#!/usr/bin/env bash
# install-deps.sh [build|test] - makes sure what gpusnap needs is here, installing
# what is missing with apt-get when run as root on Debian/Ubuntu. Idempotent.
#
#   build   cmake, a C compiler, make, liblz4-dev and libzstd-dev (headers only):
#           what `make` and `make demo` need. Missing
#           ones are an error. Quiet when all are present.
#   test    (the default; `make test`) the build tools, then each group of
#           test_groups below, one line per group: present, installed, or not
#           to be had (then the tests that need it say they skip; not an error).
#
# The Debian packages the tests use are listed in ONE place: test_groups. A test
# that needs another package adds it to a group's line (or a line of its own).
set -euo pipefail
mode=${1:-test}
case "$mode" in
build | test) ;;
-h | --help)
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
*)
  echo "install-deps: unknown mode '$mode' (build or test)" >&2
  exit 2
  ;;
esac

say() { echo "gpusnap: $*"; }
have() { command -v "$1" >/dev/null 2>&1; }
# have_pkgs PKG...: every Debian package is installed (where there is no dpkg: cannot tell, taken as yes)
have_pkgs() {
  have dpkg-query || return 0
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || return 1
  done
}
# clang links a libFuzzer program (Debian 12: clang, and libclang-rt-dev for libFuzzer itself).
fuzzer_links() {
  have clang || return 1
  local d rc=0
  d=$(mktemp -d)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/f.c"
  clang -fsanitize=fuzzer,address,undefined "$d/f.c" -o "$d/f" >/dev/null 2>&1 || rc=1
  rm -rf "$d"
  return $rc
}

# What the tests need, one group a line: WHAT|CHECK|PACKAGES. CHECK is shell code
# that succeeds when the group is usable here; PACKAGES are what apt-get installs
# when it is not. Podman and runc: tests/cli/t6101, a container checkpointed
# through CRIU (Debian's crun is built without CRIU, hence runc). CRIU itself is
# not here: scripts/get-criu.sh brings a private one (`make test` runs it).
test_groups=(
  "fuzz tools (clang with libFuzzer)|fuzzer_links|clang libclang-rt-dev"
  "container tools (podman, runc)|have podman && have runc|podman runc"
  "Python for the tests|have python3 && have_pkgs python3|python3"
  "manual-page renderer (groff; t7020)|have groff|groff-base"
  "Python test modules (jsonschema: t7001, t7002; pytest: t7003; matplotlib: t7051)|/usr/bin/python3 -c 'import jsonschema, pytest, matplotlib' 2>/dev/null|python3-jsonschema python3-pytest python3-matplotlib"
)

can_install() { [ "$(id -u)" -eq 0 ] && have apt-get; }
updated=0
apt_update() {
  [ "$updated" = 1 ] && return 0
  updated=1
  apt-get update -qq >/dev/null 2>&1 || true # offline: the install fails and says so
}
apt_install() { # apt_install PKG...
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

# ---- build tools ----
missing=()
have cmake || missing+=(cmake)
have cc || missing+=(gcc)
have make || missing+=(make)
# chunk compression (src/image/codec.c) builds against the headers of Debian's liblz4 and libzstd. Where
# they are missing and .cache/build-debs holds their .debs (scripts/get-build-debs.sh, carried to a machine
# without a network), they are unpacked into .cache/build-deps, where CMake looks after the system's.
root=$(cd "$(dirname "$0")/.." && pwd)
headers() { [ -f /usr/include/lz4.h ] && [ -f /usr/include/zstd.h ] ||
  { [ -f "$root/.cache/build-deps/usr/include/lz4.h" ] && [ -f "$root/.cache/build-deps/usr/include/zstd.h" ]; }; }
if ! headers && ls "$root"/.cache/build-debs/*.deb >/dev/null 2>&1 && have dpkg-deb; then
  for deb in "$root"/.cache/build-debs/*.deb; do dpkg-deb -x "$deb" "$root/.cache/build-deps" || true; done
  headers && say "codec headers: unpacked from .cache/build-debs into .cache/build-deps"
fi
if ! headers; then
  have_pkgs liblz4-dev || missing+=(liblz4-dev)
  have_pkgs libzstd-dev || missing+=(libzstd-dev)
fi
if [ ${#missing[@]} -ne 0 ]; then
  if ! can_install; then
    echo "gpusnap: missing build tools or libraries: ${missing[*]} (install them, then run make again)" >&2
    exit 1
  fi
  say "build tools: installing ${missing[*]} (apt-get)"
  if ! apt_install "${missing[@]}"; then
    echo "gpusnap: could not install ${missing[*]} (apt-get failed; offline?)" >&2
    exit 1
  fi
elif [ "$mode" = test ]; then
  say "build tools: cmake, cc, make present"
fi
[ "$mode" = build ] && exit 0

# ---- what the tests need ----
for g in "${test_groups[@]}"; do
  IFS='|' read -r what check pkgs <<<"$g"
  if eval "$check"; then
    say "$what: present"
    continue
  fi
  if ! can_install; then
    say "$what: missing and not installable here (not root or no apt-get); the tests that need it skip"
    continue
  fi
  say "$what: installing $pkgs (apt-get)"
  # shellcheck disable=SC2086 # the package list is split on purpose
  if ! apt_install $pkgs || ! eval "$check"; then
    say "$what: could not install $pkgs; the tests that need it skip"
  fi
done
