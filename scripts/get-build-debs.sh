#!/bin/sh
# get-build-debs.sh - downloads the Debian packages a build of gpusnap needs beyond a
# compiler and cmake (the liblz4 and libzstd headers: liblz4-dev, libzstd-dev) into
# .cache/build-debs (or $GPUSNAP_BUILD_DEBS), for a machine without a network: carry the
# folder there and tests/gpu/run.sh unpacks the headers from it into .cache/build-deps
# (dpkg-deb -x, nothing installed system-wide) where the system has none; CMake looks
# there after the system's own. Only headers are needed: the libraries are loaded with
# dlopen at run time (src/image/codec.c). Downloads only what the folder lacks.
#
#   scripts/get-build-debs.sh
#
# Exit status: 0 the folder holds every package; 1 some could not be downloaded.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${GPUSNAP_BUILD_DEBS:-$root/.cache/build-debs}
pkgs="liblz4-dev libzstd-dev"
mkdir -p "$dir"
cd "$dir"
rc=0
for p in $pkgs; do
	ls "${p}"_*.deb >/dev/null 2>&1 && continue
	if ! apt-get download "$p" >/dev/null 2>&1; then
		echo "get-build-debs: cannot download $p (no network, or not in this machine's apt sources)" >&2
		rc=1
	fi
done
[ "$rc" = 0 ] && echo "get-build-debs: $(ls ./*.deb | wc -l) packages in $dir"
exit $rc
