#!/usr/bin/env bash
# install-deps.sh - makes sure the build tools are here (cmake, a C compiler, make),
# installing them with apt-get when run as root on Debian/Ubuntu. Idempotent and
# quiet when everything is present.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "gpusnap: missing build tools: ${missing[*]} (install them, then run make again)" >&2
  exit 1
fi
echo "gpusnap: installing ${missing[*]}" >&2
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
