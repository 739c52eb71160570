#!/usr/bin/env bash
# t7052-demo - `make demo` (scripts/demo.sh) where there is no GPU: one line,
# exit 1, nothing built; and its whole course against the GPU suite's mocks
# (tests/gpu/mock: a mock gpusnap, nvidia-smi and counter app; a criu that only
# says its version): the three parts in under 40 lines, the counter going on
# after the resume and from the image after the kill, both paths' times side
# by side; with a CRIU older than 4.2, part 2 skipped in one line and exit 1.
# The real run is the GPU machine's: `make demo` as root.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "no python3 (the mocks are Python)"
command -v setsid >/dev/null 2>&1 || skip "no setsid"
SRC=${GPUSNAP_SRC:?}
MOCK=$SRC/tests/gpu/mock
T=$TEST_TMP
mkdir -p "$T/nogpu" "$T/bin" "$T/build/tests/gpu/apps" "$T/state"

# ---------------------------------------------------------------- no GPU
# an nvidia-smi that finds no GPU, first on PATH (the machine may have a real one)
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' \
  >"$T/nogpu/nvidia-smi"
chmod +x "$T/nogpu/nvidia-smi"
rc=0
PATH=$T/nogpu:$PATH "$SRC/scripts/demo.sh" "$T/nobuild" >"$T/out" 2>&1 || rc=$?
check "no GPU: exit 1" [ "$rc" = 1 ]
check "no GPU: one line" [ "$(cat "$T/out")" = "gpusnap demo: no NVIDIA GPU found (this demo needs one)" ]
check "no GPU: nothing built" [ ! -e "$T/nobuild" ]
if command -v make >/dev/null 2>&1; then
  rc=0
  PATH=$T/nogpu:$PATH make -s -C "$SRC" demo BUILD="$T/nobuild-make" >"$T/out" 2>&1 || rc=$?
  check "no GPU, through make: fails" [ "$rc" != 0 ]
  check "no GPU, through make: the demo's line, and no build output" \
    [ "$(grep -Ev '^g?make(\[[0-9]+\])?: \*\*\* ' "$T/out")" = "gpusnap demo: no NVIDIA GPU found (this demo needs one)" ]
  check "no GPU, through make: nothing built" [ ! -e "$T/nobuild-make" ]
fi

# ---------------------------------------------------------------- the whole demo against mocks
ln -s "$MOCK/gpusnap" "$T/build/gpusnap"
ln -s "$MOCK/nvidia-smi" "$T/bin/nvidia-smi"
printf '#!/bin/sh\nexec python3 %s counter "$@"\n' "$MOCK/mock_app.py" >"$T/build/tests/gpu/apps/counter"
chmod +x "$T/build/tests/gpu/apps/counter"
printf '#!/bin/sh\necho "Version: 4.2.1"\n' >"$T/bin/criu-4.2"
printf '#!/bin/sh\necho "Version: 4.1.1"\n' >"$T/bin/criu-4.1"
chmod +x "$T/bin/criu-4.2" "$T/bin/criu-4.1"
demo() { # CRIU: runs the demo against the mocks; output in $T/out, exit status in rc
  rc=0
  env -u GPUSNAP_BIN PATH="$T/bin:$PATH" GPUSNAP_MOCK_STATE="$T/state" GPUSNAP_NO_BUILD=1 GPUSNAP_CRIU="$1" \
    GPUSNAP_DEMO_WORK="$T/work-${1##*-}" timeout 180 "$SRC/scripts/demo.sh" "$T/build" >"$T/out" 2>&1 || rc=$?
}
[ "$(id -u)" = 0 ] || skip "the demo's dump part needs root (CRIU)"
demo "$T/bin/criu-4.2"
check "mock GPU: exit 0" [ "$rc" = 0 ]
check "mock GPU: under 40 lines ($(wc -l <"$T/out"))" [ "$(wc -l <"$T/out")" -lt 40 ]
check "mock GPU: nothing on stderr or out of place (every line a heading, an indented row or a known line)" \
  sh -c "! grep -Ev '^(gpusnap demo on |build: |CRIU: |== |   |\$|Done: )' '$T/out'"
for want in "== 1. Suspend and resume" "== 2. Dump, kill, restore" "== 3. The same suspend through the driver path" \
  "gpusnap suspend " "gpusnap resume " "gpusnap dump --leave-running -D IMG " "kill -9 " "gpusnap restore -D IMG " \
  "gpusnap suspend --driver " "agent path (gpusnap run)" "driver path (--driver)" "agent path faster by" "CRIU: 4.2.1"; do
  check "mock GPU: the output shows '$want'" grep -qF -- "$want" "$T/out"
done
check "mock GPU: VRAM 0 while suspended" grep -q 'VRAM now 0 MiB' "$T/out"
# the counter's values in the demo's lines: after the resume it goes on from where it stopped ...
stayed=$(sed -n 's/.*the counter stays at \([0-9]*\).*/\1/p' "$T/out")
went_on=$(sed -n 's/^   gpusnap resume .*the counter goes on: \([0-9]*\) .*/\1/p' "$T/out" | head -n 1)
check "mock GPU: after the resume the counter goes on from $stayed (at $went_on)" [ "$went_on" = $((stayed + 1)) ]
# ... and after the restore from the dumped value, below where it was killed
killed=$(sed -n 's/.*its counter had reached \([0-9]*\).*/\1/p' "$T/out")
restored=$(sed -n 's/.*goes on from the image: \([0-9]*\) .*/\1/p' "$T/out")
between() { [ -n "$1" ] && [ -n "$2" ] && [ -n "$3" ] && [ "$1" -lt "$2" ] && [ "$2" -lt "$3" ]; } # A < B < C
check "mock GPU: the restored counter goes on from the image ($restored), not from where it was killed ($killed)" \
  between "$went_on" "$restored" "$killed"
# both paths' times, as numbers, from the demo's --json reads
check "mock GPU: the table has both paths' times" \
  grep -Eq '^   agent path \(gpusnap run\) +[0-9]+\.[0-9]{2} s +[0-9]+\.[0-9]{2} s$' "$T/out"
check "mock GPU: ... the driver's too" grep -Eq '^   driver path \(--driver\) +[0-9]+\.[0-9]{2} s +[0-9]+\.[0-9]{2} s$' "$T/out"
check "mock GPU: the image was removed" [ ! -e "$T/work-4.2/img" ]
check "mock GPU: the apps it started are gone" sh -c "! pgrep -f '$T/work-4.2/[c]ounter.values' >/dev/null"

demo "$T/bin/criu-4.1"
check "CRIU 4.1: exit 1" [ "$rc" = 1 ]
check "CRIU 4.1: says why part 2 is skipped, in one line" \
  [ "$(grep -c 'older than 4.2 (docs/CRIU.md); part 2 is skipped' "$T/out")" = 1 ]
check "CRIU 4.1: parts 1 and 3 still shown" grep -q '^   driver path (--driver) ' "$T/out"
check "CRIU 4.1: no dump" sh -c "! grep -q 'gpusnap dump' '$T/out'"

test_done
