# shellcheck shell=bash
# container_lib.sh - helpers for the container tests (t61xx-container-*.sh),
# sourced after lib.sh: Podman with runc on storage of the test's own (--root,
# --runroot, --tmpdir under $TEST_TMP, so nothing of the machine's podman is
# touched and everything goes with the test), and an image imported from a
# directory of the host's own binaries (no registry).

# podman_env: skips without podman or runc; sets runc, driver and limits; cleans up on exit.
podman_env() {
  command -v podman >/dev/null || skip "podman is not installed (scripts/install-deps.sh installs it on Debian/Ubuntu)"
  runc=$(command -v runc) || skip "runc is not installed (scripts/install-deps.sh installs it; Debian's crun has no CRIU)"
  driver=${GPUSNAP_PODMAN_STORAGE:-overlay}
  # overlay on overlay (a CI job inside a container) does not mount: copy layers instead
  [ "$(stat -f -c %T "$TEST_TMP")" = overlayfs ] && [ -z "${GPUSNAP_PODMAN_STORAGE:-}" ] && driver=vfs
  # limits at or below the caller's: podman's defaults (1048576 open files) need CAP_SYS_RESOURCE
  limits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
  trap cleanup_containers EXIT
}
pm() {
  podman --root "$TEST_TMP/storage" --runroot "$TEST_TMP/runroot" --tmpdir "$TEST_TMP/libpod" \
    --storage-driver "$driver" --runtime "$runc" --cgroup-manager cgroupfs --events-backend file "$@"
}
# pm_out ARGS...: pm with its output in $TEST_TMP/pm.out, exit status in $RC
pm_out() {
  RC=0
  pm "$@" >"$TEST_TMP/pm.out" 2>&1 || RC=$?
}
# pm_ok: the last pm_out succeeded (else shows podman's last lines)
pm_ok() { [ "$RC" = 0 ] || { echo "    podman exit $RC: $(grep -v 'level=warning' "$TEST_TMP/pm.out" | tail -n 3)"; return 1; }; }
cleanup_containers() {
  [ -n "${CLEANUP_EXTRA:-}" ] && rm -f "$CLEANUP_EXTRA"
  pm rm -af -t 0 >/dev/null 2>&1
  pm rmi -af >/dev/null 2>&1
  # whatever podman left mounted under the test's folder (overlay, shm), deepest first
  awk -v t="$TEST_TMP" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  cleanup_test
}

# make_image NAME FILE...: image NAME of a directory holding /bin/sh (dash), FILE... in /app and
# every library they load at its host path, plus empty /out and /fake; skips where podman cannot
# import it or run a container from it.
make_image() {
  local name=$1 rootfs=$TEST_TMP/rootfs lib
  shift
  rm -rf "$rootfs"
  mkdir -p "$rootfs"/{app,bin,out,fake,proc,sys,dev,etc,run,tmp}
  cp "$@" "$rootfs/app/"
  cp "$(command -v dash || command -v sh)" "$rootfs/bin/sh"
  for lib in $(ldd "$rootfs"/bin/sh "$rootfs"/app/* | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' | sort -u); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  tar -C "$rootfs" -cf "$TEST_TMP/rootfs.tar" .
  pm_out import "$TEST_TMP/rootfs.tar" "$name"
  [ "$RC" = 0 ] || skip "podman cannot import an image here: $(tail -n 1 "$TEST_TMP/pm.out")"
  pm_out run --rm --network none "${limits[@]}" "$name" /bin/sh -c 'exit 0'
  [ "$RC" = 0 ] || skip "podman cannot run a container here: $(grep -v 'level=warning' "$TEST_TMP/pm.out" | tail -n 1)"
}
