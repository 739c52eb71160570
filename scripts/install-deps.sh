#!/usr/bin/env bash
# install-deps.sh - makes sure the build tools are here (cmake, a C compiler, make),
# and clang with libFuzzer for the fuzz harnesses (tests/fuzz), installing them
# with apt-get when run as root on Debian/Ubuntu. Idempotent and quiet when
# everything is present. Missing build tools are an error; missing fuzzing
# tools are not (`make test` then says it skips the fuzz run). Podman and runc
# (tests/cli/t6101: a container checkpointed through CRIU; Debian's crun is
# built without CRIU, so runc) are optional too: without them that test skips.
#
#   scripts/install-deps.sh [build]
#
# `build` (what `make demo` asks for): the build tools only, nothing for the tests.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)

if [ "${1:-}" == build ]; then
  [ ${#missing[@]} -eq 0 ] && exit 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "gpusnap: missing build tools: ${missing[*]} (install them, then run make again)" >&2
    exit 1
  fi
  echo "gpusnap: installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null 2>&1 || true # offline: the install below fails and says so
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { echo "gpusnap: could not install ${missing[*]}" >&2; exit 1; }
  exit 0
elif [ $# -gt 0 ]; then
  echo "gpusnap: install-deps.sh: unknown mode '$1' (known: build)" >&2
  exit 1
fi

# clang links a libFuzzer program (Debian 12: clang, and libclang-rt-dev for libFuzzer itself).
fuzzer_links() {
  command -v clang >/dev/null 2>&1 || return 1
  local d rc
  d=$(mktemp -d)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/f.c"
  clang -fsanitize=fuzzer,address,undefined "$d/f.c" -o "$d/f" >/dev/null 2>&1
  rc=$?
  rm -rf "$d"
  return $rc
}
fuzz_missing=()
fuzzer_links || fuzz_missing=(clang libclang-rt-dev)

engine_missing=()
command -v podman >/dev/null 2>&1 || engine_missing+=(podman)
command -v runc >/dev/null 2>&1 || engine_missing+=(runc)
command -v groff >/dev/null 2>&1 || engine_missing+=(groff-base) # t7020 renders the manual pages (groff -ww)
# the --json schema checks (t7001, t7002) and the Python client's tests (t7003), in Debian's python3
py_missing=()
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null || py_missing+=(python3-jsonschema)
/usr/bin/python3 -c 'import pytest' 2>/dev/null || py_missing+=(python3-pytest)
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || py_missing+=(python3-matplotlib) # t7051 draws the benchmark plots

if [ ${#missing[@]} -eq 0 ] && [ ${#fuzz_missing[@]} -eq 0 ] && [ ${#engine_missing[@]} -eq 0 ] && [ ${#py_missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  if [ ${#missing[@]} -ne 0 ]; then
    echo "gpusnap: missing build tools: ${missing[*]} (install them, then run make again)" >&2
    exit 1
  fi
  exit 0 # no clang with libFuzzer, no podman: those tests are skipped, and say so
fi
if [ ${#missing[@]} -ne 0 ]; then
  apt-get update -qq >/dev/null
  echo "gpusnap: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  apt-get update -qq >/dev/null 2>&1 || true # offline: the install below fails and says so
fi
if [ ${#fuzz_missing[@]} -ne 0 ]; then
  echo "gpusnap: installing ${fuzz_missing[*]} (for the fuzz harnesses)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${fuzz_missing[@]}" >/dev/null 2>&1 ||
    echo "gpusnap: could not install ${fuzz_missing[*]}; the fuzz run will be skipped" >&2
fi
if [ ${#engine_missing[@]} -ne 0 ]; then
  echo "gpusnap: installing ${engine_missing[*]} (for the container and manual-page tests)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${engine_missing[@]}" >/dev/null 2>&1 ||
    echo "gpusnap: could not install ${engine_missing[*]}; those tests will be skipped" >&2
fi
if [ ${#py_missing[@]} -ne 0 ]; then
  echo "gpusnap: installing ${py_missing[*]} (for the JSON schema, Python client and benchmark-plot tests)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${py_missing[@]}" >/dev/null 2>&1 ||
    echo "gpusnap: could not install ${py_missing[*]}; those tests will be skipped" >&2
fi
