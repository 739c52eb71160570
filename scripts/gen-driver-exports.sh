#!/bin/sh
# gen-driver-exports.sh - writes the list of CUDA driver entry points that the
# agent exports (src/agent/intercept/driver_exports.txt) from the toolkit's headers.
#
# The driver (libcuda.so.1) exports every API function under each of its
# versioned names: the plain one (cuMemAlloc, kept for old binaries), the
# versions selected by cuda.h's "#define cuMemAlloc cuMemAlloc_v2" lines, and
# the per-thread default-stream variants (_ptds/_ptsz). The preprocessor knows
# the rules, so we let it expand the prototypes in three modes (default,
# __CUDA_API_VERSION_INTERNAL which also declares the legacy names, and
# CUDA_API_PER_THREAD_DEFAULT_STREAM) and collect every "CUresult cuXxx(".
# Headers that cannot be preprocessed here (cudaVDPAU.h needs vdpau.h) are
# scanned as text instead. Static inline helpers (cuGetProcAddress_v2_ptsz in
# CUDA 13's cuda.h) are not driver exports and are left out.
#
# Usage: scripts/gen-driver-exports.sh [CUDA_INCLUDE_DIR] > src/agent/intercept/driver_exports.txt
set -eu
inc=${1:-/usr/local/cuda/include}
[ -f "$inc/cuda.h" ] || { echo "gen-driver-exports: no cuda.h in '$inc'" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

proto='CUresult[[:space:]]+(__attribute__\(\(deprecated\)\)[[:space:]]+)?cu[A-Z][A-Za-z0-9_]*[[:space:]]*\('
for h in cuda.h cudaGL.h cudaEGL.h cudaProfiler.h; do
	[ -f "$inc/$h" ] || continue
	for mode in "" -D__CUDA_API_VERSION_INTERNAL -DCUDA_API_PER_THREAD_DEFAULT_STREAM; do
		echo "#include <$h>" | cc -E -P $mode -I"$inc" - 2>/dev/null |
			grep -v 'static' | grep -oE "$proto" | grep -oE 'cu[A-Z][A-Za-z0-9_]*' >>"$tmp" || true
	done
done
for h in cudaVDPAU.h; do
	[ -f "$inc/$h" ] || continue
	grep -oE 'CUDAAPI[[:space:]]+cu[A-Z][A-Za-z0-9_]*' "$inc/$h" | grep -oE 'cu[A-Z][A-Za-z0-9_]*' >>"$tmp" || true
	sed -nE 's/^[[:space:]]*#define[[:space:]]+(cu[A-Z][A-Za-z0-9_]*)[[:space:]]+(cu[A-Z][A-Za-z0-9_]*)[[:space:]]*$/\2/p' \
		"$inc/$h" >>"$tmp"
done

version=$(sed -nE 's/^#define CUDA_VERSION[[:space:]]+([0-9]+).*/\1/p' "$inc/cuda.h" | head -n1)
echo "# CUDA driver entry points exported by libgpusnap.so (generated from cuda.h of CUDA_VERSION $version"
echo "# by scripts/gen-driver-exports.sh; one name per line, '#' starts a comment)."
LC_ALL=C sort -u "$tmp"
