#!/usr/bin/env bash
# t4006 - `gpusnap dump` and `restore` of an app that manages its GPU memory
# with the VMM API itself (tests/agent/app_vmm.c --signals: handles mapped
# twice, mapped again elsewhere, released while mapped, one exported), under
# libgpusnap.so on the host-memory fake driver, dumped with the real CRIU 4:
#  - the dump streams the app's own handles into the image
#    (kind app-vmm) and leaves the exported one to the driver path;
#  - after the dumped process is gone, restore re-creates every handle at its
#    addresses with its access (one mapping is read-only) and the data is
#    back bit for bit; inspect lists the app_vmm allocations;
#  - a second restore from the same image works too.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env app_vmm criu
MiB=$((1 << 20))

start_app
verify_ok "the app's data after setup"
phys0=$(phys)
run_gpusnap state --json "$PID"; expect "state" 0
check "the exported handle is the one allocation left to the driver" test "$(jget "['agent']['unmanaged_allocations']")" = 1

img=$TEST_TMP/img
run_gpusnap dump --json -D "$img" "$PID"; expect "dump" 0
check "the agent streamed the data" test "$(jget "['streamed']")" = True
# h1 4 MiB, h2 6 MiB, h3 4 MiB, h5a+h5b 8 MiB; h4 (2 MiB, exported) stays with the driver
data=$(jget "['gpu_data_bytes']")
check "the agent wrote the app's releasable handles ($data bytes)" test "$data" = $((22 * MiB))
check "the dumped process is gone" wait_gone "$PID" 5

run_gpusnap inspect --json --verify "$img"; expect "inspect --verify" 0
kinds=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(sorted(set(a["kind"] for a in d["image"]["allocations"]["list"]))))' "$OUT_TXT" 2>/dev/null)
check "the image holds app-vmm allocations ($kinds)" grep -qw app-vmm <<<"$kinds"

run_gpusnap restore --json -D "$img"; expect "restore" 0
check "the restored process runs" alive "$PID"
verify_ok "every handle's data, mappings and access are back after restore"
check "restore re-created the physical memory ($(phys) of $phys0 bytes)" test "$(phys)" = "$phys0"

kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$img"; expect "a second restore from the same image" 0
verify_ok "the data after the second restore"
test_done
