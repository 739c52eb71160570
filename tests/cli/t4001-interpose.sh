#!/bin/bash
# t4001-interpose.sh - the agent's interposer, run inside a test app that
# reaches a fake driver by linking, dlsym and cuGetProcAddress
# (tests/agent/interpose_app.c, tests/fake/fake_driver.c):
#  - every call's result is the same with and without LD_PRELOAD=libgpusnap.so
#    (stack-passed, float, double and struct-returning calls included);
#  - gate and replacement tests, with membarrier and with the seq_cst fallback;
#  - 16 threads calling while the gate closes and opens 1000 times;
#  - only the intended symbols are exported (the driver's entry points, dlsym/dlvsym, close_range/closefrom,
#    syscall (agent_io_uring.h), the probes);
#  - the per-call cost is printed.
# Needs GPUSNAP_BUILD (set by ctest).
set -u
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD must point at the build directory}
agent=$build/libgpusnap.so
fake=$build/tests/agent/libfakecudadrv.so
app=$build/tests/agent/interpose_app
if [ ! -f "$agent" ]; then
	echo "SKIP: libgpusnap.so was not built (the agent is x86-64 only)"
	exit 77
fi
for f in "$fake" "$app"; do
	[ -e "$f" ] || { echo "missing $f"; exit 1; }
done

# A sanitizer build's runtime has to come first in the process.
preload=$agent
asan=$(ldd "$app" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && preload="$asan $agent"
export GPUSNAP_LIBCUDA=$fake
# The interposer is tested on its own: the agent's allocation hooks stay out (they have their own tests).
export GPUSNAP_AGENT_HOOKS=0

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
step() {
	local title=$1
	shift
	if "$@" >"$tmp/out" 2>&1; then
		echo "ok   $title"
	else
		echo "FAIL $title"
		failed=1
	fi
	sed 's/^/     /' "$tmp/out"
}

results_match() {
	"$app" results >"$tmp/plain" || return 1
	LD_PRELOAD=$preload "$app" results >"$tmp/preloaded" || return 1
	diff "$tmp/plain" "$tmp/preloaded" || return 1
	echo "$(wc -l <"$tmp/plain") results identical"
}
step "results are the same with and without the agent" results_match

step "gate and replacements (membarrier)" env LD_PRELOAD="$preload" timeout 120 "$app" gate
step "gate and replacements (seq_cst fallback)" \
	env GPUSNAP_GATE_FENCE=seq_cst LD_PRELOAD="$preload" timeout 120 "$app" gate
step "16 threads while the gate closes 1000 times" env LD_PRELOAD="$preload" timeout 300 "$app" stress 16 1000
step "16 threads while the gate closes 200 times (seq_cst fallback)" \
	env GPUSNAP_GATE_FENCE=seq_cst LD_PRELOAD="$preload" timeout 300 "$app" stress 16 200

exports_intended() {
	local other
	other=$(nm -D --defined-only "$agent" | awk '{print $3}' | grep -v '^cu[A-Z]' | sort | tr '\n' ' ')
	echo "exported besides cu*: $other"
	[ "$other" = "close_range closefrom dlsym dlvsym gpusnap_driver_calls gpusnap_gate_cost_ns gpusnap_interpose_test_hooks syscall " ] || return 1
	local n listed
	n=$(nm -D --defined-only "$agent" | awk '{print $3}' | grep -c '^cu[A-Z]')
	listed=$(grep -c '^cu' "$GPUSNAP_SRC/src/agent/intercept/driver_exports.txt")
	echo "$n driver entry points exported, $listed listed"
	[ "$n" = "$listed" ]
}
step "only the intended symbols are exported" exports_intended

# Timings are informative only (a loaded 2-core CI machine is noisy).
step "per-call cost" env LD_PRELOAD="$preload" "$app" bench 5000000

exit $failed
