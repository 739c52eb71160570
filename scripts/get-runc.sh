#!/bin/sh
# get-runc.sh - keeps Debian's runc .deb in .cache/container-debs (or $1) for a
# machine without a registry: the GPU machine, where tests/gpu/t71-container-runc.sh
# unpacks it (dpkg -x) when no runc is installed. runc is one Go binary that needs
# only the C library and libseccomp2, so Debian 12's runs on Ubuntu 24.04 too.
# Nothing is installed here. Carry the folder with the device tool's `carry`.
#
#   scripts/get-runc.sh [DIR]
#
# Exit status: 0 the .deb is there; 1 it could not be downloaded.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.cache/container-debs}
mkdir -p "$dir"
if ls "$dir"/runc_*.deb >/dev/null 2>&1; then
	echo "get-runc: $(ls "$dir"/runc_*.deb | tail -n 1)"
	exit 0
fi
# apt-get download writes into the current folder; as root it warns that _apt cannot write there
(cd "$dir" && apt-get download runc >/dev/null 2>&1) || {
	echo "get-runc: apt-get download runc failed (no network, or no Debian/Ubuntu apt here)" >&2
	exit 1
}
echo "get-runc: $(ls "$dir"/runc_*.deb | tail -n 1)"
