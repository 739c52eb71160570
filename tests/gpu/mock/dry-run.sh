#!/usr/bin/env bash
# dry-run.sh - runs the GPU suite's plumbing (run.sh, lib.sh, every t*.sh and
# bench/run.sh) where there is no GPU, against mocks: mock_app.py for the test
# apps, a mock gpusnap and a mock nvidia-smi sharing a state dir. It checks the
# scripts (FIFOs, timeouts, parsing, exit codes, the summary and tarball), not
# gpusnap or CUDA. t62 (readelf on real binaries) is expected to fail here.
#
# usage: tests/gpu/mock/dry-run.sh [NGPUS] [TEST...]    (NGPUS default 1)
set -u
MOCK=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$MOCK/../../.." && pwd)
ngpus=${1:-1}
shift || true
D=$(mktemp -d /tmp/gpusnap-dryrun.XXXXXX)
mkdir -p "$D/build/tests/gpu/apps" "$D/state" "$D/bin"
ln -s "$MOCK/gpusnap" "$D/build/gpusnap"
ln -s "$MOCK/nvidia-smi" "$D/bin/nvidia-smi"
for app in pattern pattern_shared multigpu busy counter spin; do
  printf '#!/bin/sh\nexec python3 %s %s "$@"\n' "$MOCK/mock_app.py" "$app" >"$D/build/tests/gpu/apps/$app"
  chmod +x "$D/build/tests/gpu/apps/$app"
done
echo "dry run in $D with $ngpus mock GPU(s)"
PATH=$D/bin:$PATH GPUSNAP_MOCK_STATE=$D/state GPUSNAP_MOCK_GPUS=$ngpus GPUSNAP_BUILD=$D/build \
  GPUSNAP_NO_BUILD=1 GPUSNAP_NO_CTEST=1 GPUSNAP_BUSY_CYCLES=${GPUSNAP_BUSY_CYCLES:-3} \
  GPUSNAP_BENCH_SIZES=${GPUSNAP_BENCH_SIZES:-1G 8G} GPUSNAP_GPU_WORK=$D/work OUT=$D/out \
  bash "$SRC/tests/gpu/run.sh" "$@"
