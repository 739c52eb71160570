#!/usr/bin/env bash
# t6102 - `gpusnap container-spec` prints what puts the agent into containers:
#  - a CDI spec (default, --cdi): valid JSON, kind gpusnap.io/agent, device
#    "agent" whose edits bind-mount the real path of libgpusnap.so read-only
#    and set LD_PRELOAD to where the container sees it; --agent,
#    GPUSNAP_AGENT and --container-path change those paths;
#  - --run-args: the same as podman/docker run arguments;
#  - refused with one line and its exit code: both formats, a container path
#    that is relative or that LD_PRELOAD or -v cannot carry, an agent that
#    does not exist, a host path that run arguments cannot carry;
#  - with podman and runc (scripts/install-deps.sh): Podman reads the spec
#    from /var/run/cdi (a file of the test's, removed after) and a container
#    started with --device gpusnap.io/agent=agent runs the agent (the library
#    is mapped, its control socket is there); with CRIU too, that container
#    is checkpointed to a tar and restored from it with the agent still in.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/container_lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
agent=$(readlink -f "$build/libgpusnap.so")
[ -f "$agent" ] || skip "libgpusnap.so was not built (the agent is x86-64 only)"
command -v python3 >/dev/null || skip "python3 is needed to read the JSON"
unset GPUSNAP_AGENT

# spec_is FILE HOST INSIDE: FILE is a CDI spec that mounts HOST at INSIDE and preloads INSIDE
spec_is() {
  python3 - "$@" <<'EOF'
import json, sys
f, host, inside = sys.argv[1:]
d = json.load(open(f))
want = {"cdiVersion": "0.5.0", "kind": "gpusnap.io/agent"}
bad = [f"{k}={d.get(k)!r}" for k, v in want.items() if d.get(k) != v]
devs = d.get("devices", [])
if len(devs) != 1 or devs[0].get("name") != "agent":
    bad.append(f"devices={devs!r}")
else:
    e = devs[0].get("containerEdits", {})
    if e.get("env") != ["LD_PRELOAD=" + inside]:
        bad.append(f"env={e.get('env')!r}")
    m = e.get("mounts", [])
    if len(m) != 1 or m[0].get("hostPath") != host or m[0].get("containerPath") != inside or "ro" not in m[0].get("options", []):
        bad.append(f"mounts={m!r}")
if bad:
    print("    " + "; ".join(bad))
    sys.exit(1)
EOF
}

run_gpusnap container-spec; expect "container-spec" 0
check "the default is a CDI spec of the agent beside gpusnap at /usr/lib/gpusnap" \
  spec_is "$OUT_TXT" "$agent" /usr/lib/gpusnap/libgpusnap.so
cp "$OUT_TXT" "$TEST_TMP/spec.json"
run_gpusnap container-spec --cdi; expect "--cdi" 0
check "--cdi prints the same" cmp -s "$OUT_TXT" "$TEST_TMP/spec.json"

mkdir -p "$TEST_TMP/lib"
cp "$agent" "$TEST_TMP/lib/libgpusnap.so.1"
ln -s libgpusnap.so.1 "$TEST_TMP/lib/libgpusnap.so"
run_gpusnap container-spec --agent "$TEST_TMP/lib/libgpusnap.so" --container-path /opt/gs/libgpusnap.so
expect "--agent and --container-path" 0
check "the spec names the agent's real path (no link) and the container path" \
  spec_is "$OUT_TXT" "$TEST_TMP/lib/libgpusnap.so.1" /opt/gs/libgpusnap.so
GPUSNAP_AGENT=$TEST_TMP/lib/libgpusnap.so.1 run_gpusnap container-spec; expect "GPUSNAP_AGENT" 0
check "GPUSNAP_AGENT names the agent" spec_is "$OUT_TXT" "$TEST_TMP/lib/libgpusnap.so.1" /usr/lib/gpusnap/libgpusnap.so

run_gpusnap container-spec --run-args; expect "--run-args" 0
check "--run-args: a read-only volume and LD_PRELOAD" test "$(cat "$OUT_TXT")" = \
  "--volume=$agent:/usr/lib/gpusnap/libgpusnap.so:ro
--env=LD_PRELOAD=/usr/lib/gpusnap/libgpusnap.so"

run_gpusnap container-spec --cdi --run-args; expect "--cdi with --run-args is refused" 2 "exclude each other"
check "... in one line" one_line
run_gpusnap container-spec --container-path lib/libgpusnap.so; expect "a relative container path is refused" 2 "must be absolute"
run_gpusnap container-spec --container-path "/a b/libgpusnap.so"; expect "a container path with a space is refused" 2 "must be absolute"
run_gpusnap container-spec --container-path "/a:b/libgpusnap.so"; expect "a container path with a colon is refused" 2 "--container-path"
run_gpusnap container-spec --agent "$TEST_TMP/none.so"; expect "a missing agent is refused" 16 "cannot be found"
check "... in one line, with nothing on stdout" sh -c "[ ! -s '$OUT_TXT' ] && [ \$(wc -l <'$ERR_TXT') = 1 ]"
run_gpusnap container-spec extra; expect "an argument is refused" 2 "unexpected argument 'extra'"
mkdir -p "$TEST_TMP/a:b"
cp "$agent" "$TEST_TMP/a:b/libgpusnap.so"
run_gpusnap container-spec --run-args --agent "$TEST_TMP/a:b/libgpusnap.so"
expect "--run-args with a host path -v cannot carry is refused" 2 "use --cdi"
run_gpusnap container-spec --agent "$TEST_TMP/a:b/libgpusnap.so"; expect "... which a CDI spec carries" 0
check "... as it is" spec_is "$OUT_TXT" "$TEST_TMP/a:b/libgpusnap.so" /usr/lib/gpusnap/libgpusnap.so

# ---- Podman applies the spec ----
if [ "$(id -u)" != 0 ] || ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  echo "SKIP: Podman part (needs root, podman and runc; scripts/install-deps.sh installs them)"
  test_done
  exit
fi
podman_env
app=$build/tests/agent/agent_app
image=localhost/gpusnap-t6102:1
# the app of t4002 on the host-memory fake driver; the agent's own libraries (a sanitizer
# build's runtime) must be in the image, the agent is not
make_image "$image" "$app" "$build/tests/agent/libfakevmm.so"
for lib in $(ldd "$agent" | awk '/=>/ && $3 ~ /^\// {print $3}'); do
  [ -e "$TEST_TMP/rootfs$lib" ] && continue
  echo "SKIP: Podman part (the agent needs $lib, which the test image lacks)"
  test_done
  exit
done
made_cdi_dir=0
[ -d /var/run/cdi ] || { mkdir -p /var/run/cdi && made_cdi_dir=1; }
spec=/var/run/cdi/gpusnap-t6102-$$.json
cleanup_cdi() {
  rm -f "$spec"
  [ "$made_cdi_dir" = 1 ] && rmdir /var/run/cdi 2>/dev/null
  cleanup_containers
}
trap cleanup_cdi EXIT
cp "$TEST_TMP/spec.json" "$spec"
app_env=(-e GPUSNAP_LIBCUDA=/app/libfakevmm.so -e FAKE_CUDA_DIR=/fake)
asan_env=()
ldd "$app" | grep -q libasan && asan_env=(-e ASAN_OPTIONS=verify_asan_link_order=0)

# agent_in NAME: NAME's process maps the agent at /usr/lib/gpusnap, has LD_PRELOAD, and the agent
# listens on its control socket
agent_in() {
  local pid
  pid=$(pm inspect -f '{{.State.Pid}}' "$1") && [ "$pid" -gt 0 ] || { echo "    no process"; return 1; }
  for _ in $(seq 300); do [ -S "/proc/$pid/root/run/gpusnap/agent-1.sock" ] && break; sleep 0.1; done
  tr '\0' '\n' <"/proc/$pid/environ" | grep -qx LD_PRELOAD=/usr/lib/gpusnap/libgpusnap.so || { echo "    no LD_PRELOAD"; return 1; }
  grep -q ' /usr/lib/gpusnap/libgpusnap.so$' "/proc/$pid/maps" || { echo "    the agent is not mapped"; return 1; }
  cmp -s "/proc/$pid/root/usr/lib/gpusnap/libgpusnap.so" "$agent" || { echo "    another file at the container path"; return 1; }
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' \
    "/proc/$pid/root/run/gpusnap/agent-1.sock" 2>/dev/null || { echo "    the agent does not listen"; return 1; }
}

pm_out run -d --name cdi --device gpusnap.io/agent=agent --network none "${limits[@]}" "${asan_env[@]}" "${app_env[@]}" "$image" /app/agent_app --signals
check "podman run --device gpusnap.io/agent=agent (the spec in /var/run/cdi)" pm_ok
check "the CDI device put the agent into the container" agent_in cdi
pm_out rm -f -t 0 cdi
# shellcheck disable=SC2046 # one argument per line
pm_out run -d --name args $("$GPUSNAP_BIN" container-spec --run-args) --network none "${limits[@]}" "${asan_env[@]}" "${app_env[@]}" "$image" /app/agent_app --signals
check "podman run with the --run-args" pm_ok
check "the run arguments put the agent into the container" agent_in args
pm_out rm -f -t 0 args

# ---- and a checkpoint carries the container with its agent mount ----
rc=0
if [ -z "${GPUSNAP_CRIU:-}" ]; then
  "${GPUSNAP_SRC:?}/scripts/get-criu.sh" >"$TEST_TMP/get-criu.log" 2>&1 || rc=$?
  GPUSNAP_CRIU=$GPUSNAP_SRC/.cache/criu/bin/criu
fi
if [ "$rc" != 0 ] || ! "$GPUSNAP_CRIU" check >/dev/null 2>&1; then
  echo "SKIP: checkpoint of the CDI container (no usable CRIU)"
  test_done
  exit
fi
mkdir -p "$TEST_TMP/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "'$GPUSNAP_CRIU'" >"$TEST_TMP/bin/criu"
chmod 755 "$TEST_TMP/bin/criu"
export PATH=$TEST_TMP/bin:$PATH
pm_out run -d --name ck --device gpusnap.io/agent=agent --network none "${limits[@]}" "${asan_env[@]}" "${app_env[@]}" "$image" /app/agent_app --signals
check "podman run of a container to checkpoint" pm_ok
agent_in ck >/dev/null
pm_out container checkpoint --export="$TEST_TMP/ck.tar" ck
check "podman container checkpoint --export of the CDI container" pm_ok
pm_out rm ck
pm_out container restore --import="$TEST_TMP/ck.tar"
check "podman container restore --import" pm_ok
check "the restored container has the agent, mapped from the same mount" agent_in ck
test_done
