#!/usr/bin/env bash
# t6001-criu-plugin-driver - gpusnap_criu.so in plain criu runs (as a container
# engine runs criu), on the driver path: CPU processes registered as CUDA
# processes in the fake libcuda (FAKE_CUDA_CRIU=1: a CRIU-restored copy looks
# checkpointed, as with the real driver) and the real CRIU 4:
#  - criu dump --libdir (plugin alone there) takes the process off the GPU
#    (lock, checkpoint) before CRIU freezes it and writes gpusnap/<pid>/ (an
#    image of how=driver, docs/FORMAT.md) into CRIU's image directory; the
#    inventory names the plugin; criu restore puts it back on the GPU with its
#    main thread held (the driver's restore thread runs alone), unlocked, and
#    it counts on from where it was dumped;
#  - a tree of two CUDA processes under a shell: both locked before either is
#    checkpointed; both restored;
#  - --leave-running: the process runs on, back on the GPU, the image published;
#  - GPU work longer than criu's --timeout (plugin-pause=hold): CRIU's freezing
#    timer is paused meanwhile, the dump succeeds;
#  - a failed dump (the driver's checkpoint fails; CRIU fails after freezing):
#    the process runs on, back on the GPU, no gpusnap image left;
#  - a tree in which a process holds the GPU's device files without being a
#    CUDA process is refused before anything moves (the process runs on);
#  - refusals: the image restored without the plugin (CRIU: missing required
#    plugin); a damaged gpusnap image (nothing is restored); a failed driver
#    restore kills the task before it ran; GPUSNAP_PLUGIN_MAP remaps GPUs and a
#    map to a missing GPU is refused before anything is restored;
#  - the plugin's configuration file (gpusnap_criu.conf beside it): its map
#    takes effect, a bad map in it is refused naming file and line, the
#    environment wins over it, an unknown key or a bad value refuses the
#    restore or the dump (the process runs on, never locked), a missing
#    GPUSNAP_PLUGIN_CONFIG file is refused;
#  - --leave-running is read from CRIU's own options (what criu swrk, run by
#    runc, sets; its command line does not show it).
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/plugin_lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
app=$build/tests/apps/cpu_counter

fake_cuda_env criu
plugin_env
export FAKE_CUDA_LOG=$TEST_TMP/fake.log

cleanup_all() {
  kill_test_procs cpu_counter
  [ -n "${tree:-}" ] && kill -9 "$tree" 2>/dev/null
  cleanup_test
}
trap cleanup_all EXIT

fake_log_has() { grep -qx -- "$1" "$FAKE_CUDA_LOG" || { echo "    fake log: $(tr '\n' ';' <"$FAKE_CUDA_LOG")"; return 1; }; }

# ---- dump, gone, restore, counts on ----
log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
img=$TEST_TMP/img
criu_dump "$img" "$pid"
check "criu dump with the plugin succeeds" rc_ok
check "CRIU loaded the plugin (12 hooks: CRIU 4.1 and 4.2 load it)" log_has "$img/dump.log" 'Plugin "gpusnap" (version 512 hooks 12)'
check "the process is gone" wait_gone "$pid"
check "the driver locked it" fake_log_has "lock $pid 0"
check "... and checkpointed it" fake_log_has "checkpoint $pid 0"
check "gpusnap/$pid/ holds a gpusnap image" [ -f "$img/gpusnap/$pid/manifest.img" ]
run_gpusnap inspect "$img/gpusnap/$pid"
expect "gpusnap inspect reads it (driver path)" 0 "driver"
check "the inventory names the plugin as required" grep -q gpusnap "$img/inventory.img"
read -r n value < <(settled "$log")
: >"$FAKE_CUDA_LOG"
before=$(cd "$img" && find . -type f ! -name '*.log' -print0 | sort -z | xargs -0 sha256sum)
criu_restore "$img"
check "criu restore with the plugin succeeds" rc_ok
check "it restored $pid" [ "$RPID" = "$pid" ]
check "the plugin checked the image's checksums" log_has "$TEST_TMP/restore.log" "checksums of its GPU image good"
check "the driver restored it while its main thread was held (t)" fake_log_has "restore-main $pid t"
check "... and unlocked it" fake_log_has "unlock $pid 0"
check "its driver state is running" [ "$(fake_state "$pid")" = 0 ]
check "it counts on from where it was dumped" continues "$log" "$n" "$value"
check "the images are unchanged by the restore" \
  [ "$(cd "$img" && find . -type f ! -name '*.log' -print0 | sort -z | xargs -0 sha256sum)" = "$before" ]

# ---- restored without the plugin: refused ----
kill -9 "$pid"; wait_gone "$pid"
mkdir -p "$TEST_TMP/noplugins"
RC=0; "$GPUSNAP_CRIU" restore --images-dir "$img" --work-dir "$TEST_TMP" --libdir "$TEST_TMP/noplugins" -d \
  --log-file noplugin.log -v4 >"$TEST_TMP/criu.out" 2>&1 || RC=$?
check "criu restore without the plugin fails" rc_failed
check "... CRIU says the plugin is required" log_has "$TEST_TMP/noplugin.log" "Missing required plugin: gpusnap"
check "... nothing runs at $pid" wait_gone "$pid"

# ---- a driver restore that fails kills the task before it ran ----
lines=$(wc -l <"$log")
GPUSNAP_FAULT=plugin-restore criu_restore "$img"
check "the task whose driver restore failed is gone" wait_gone "$pid"
check "... CRIU's log says why" log_has "$TEST_TMP/restore.log" "killed before it ran"
check "... it never ran" [ "$(wc -l <"$log")" = "$lines" ]

# ---- GPU map ----
FAKE_CUDA_GPUS=2 GPUSNAP_PLUGIN_MAP=0=1 criu_restore "$img"
check "restore with GPUSNAP_PLUGIN_MAP=0=1 succeeds" rc_ok
check "the process is on GPU 1 now" [ "$(cut -d' ' -f2 "$FAKE_CUDA_DIR/$pid")" = 1 ]
kill -9 "$pid"; wait_gone "$pid"
GPUSNAP_PLUGIN_MAP=0=3 criu_restore "$img"
check "a map to a GPU this machine lacks is refused" rc_failed
check "... the plugin names it" log_has "$TEST_TMP/restore.log" "GPUSNAP_PLUGIN_MAP"
check "... nothing was restored" [ -z "$RPID" ]
check "... nothing runs at $pid" wait_gone "$pid"

# ---- settings from the plugin's configuration file (gpusnap_criu.conf beside it: no environment needed) ----
conf=$PLUGIN_DIR/gpusnap_criu.conf
# the fake driver's record of the process as dumped, on GPU 0 (the restore above moved it to GPU 1); a start
# time of 1: a copy CRIU restored, seen as checkpointed
on_gpu0() { echo "0 0 1" >"$FAKE_CUDA_DIR/$pid"; }
on_gpu0
echo "map = 0=1" >"$conf"
FAKE_CUDA_GPUS=2 criu_restore "$img"
check "map = 0=1 in gpusnap_criu.conf: the restore succeeds" rc_ok
check "... the plugin says which file it read" log_has "$TEST_TMP/restore.log" "settings from '$conf'"
check "... the process is on GPU 1 now" [ "$(cut -d' ' -f2 "$FAKE_CUDA_DIR/$pid")" = 1 ]
kill -9 "$pid"; wait_gone "$pid"
printf '# a GPU this machine lacks\nmap = 0=3\n' >"$conf"
criu_restore "$img"
check "map = 0=3 in the file is refused" rc_failed
check "... the plugin names the file and line" log_has "$TEST_TMP/restore.log" "map in '$conf' line 2"
check "... nothing runs at $pid" wait_gone "$pid"
on_gpu0
FAKE_CUDA_GPUS=2 GPUSNAP_PLUGIN_MAP=0=1 criu_restore "$img"
check "GPUSNAP_PLUGIN_MAP=0=1 wins over the file's map = 0=3" rc_ok
check "... the process is on GPU 1" [ "$(cut -d' ' -f2 "$FAKE_CUDA_DIR/$pid")" = 1 ]
kill -9 "$pid"; wait_gone "$pid"
printf 'map = 0=1\ncolour = blue\n' >"$conf"
FAKE_CUDA_GPUS=2 criu_restore "$img"
check "a file with an unknown key refuses the restore" rc_failed
check "... CRIU's log names the file, line and key" \
  log_has "$TEST_TMP/restore.log" "refusing the restore: '$conf' line 2: unknown key 'colour'"
check "... nothing was restored" [ -z "$RPID" ]
check "... nothing runs at $pid" wait_gone "$pid"
GPUSNAP_PLUGIN_CONFIG=$TEST_TMP/none.conf criu_restore "$img"
check "GPUSNAP_PLUGIN_CONFIG naming a missing file refuses the restore" rc_failed
check "... saying so" log_has "$TEST_TMP/restore.log" "GPUSNAP_PLUGIN_CONFIG: cannot open the plugin's configuration '$TEST_TMP/none.conf'"
rm -f "$conf"

# ---- a damaged gpusnap image: refused before any process exists ----
cp -a "$img" "$TEST_TMP/bad"
printf 'X' | dd of="$TEST_TMP/bad/gpusnap/$pid/manifest.img" bs=1 seek=100 conv=notrunc 2>/dev/null
criu_restore "$TEST_TMP/bad"
check "a damaged gpusnap image is refused" rc_failed
check "... the plugin says so" log_has "$TEST_TMP/restore.log" "refusing the restore"
check "... nothing was restored" [ -z "$RPID" ]
check "... nothing runs at $pid" wait_gone "$pid"

# ---- a bad configuration refuses the dump before anything happens ----
start_counter "$log"; pid=$NEWPID
: >"$FAKE_CUDA_LOG"
echo "timeout = soon" >"$conf"
criu_dump "$TEST_TMP/badconf" "$pid"
check "criu dump with a bad value in gpusnap_criu.conf fails" rc_failed
check "... CRIU's log names the file, line and value" \
  log_has "$TEST_TMP/badconf/dump.log" "refusing the dump: '$conf' line 1: timeout 'soon' is not a number of seconds"
check "... the process runs on" grows "$log"
check "... the driver never locked it" bash -c "! grep -q '^lock' '$FAKE_CUDA_LOG'"
rm -f "$conf"

# ---- --leave-running ----
: >"$FAKE_CUDA_LOG"
criu_dump "$TEST_TMP/lr" "$pid" --leave-running
check "criu dump --leave-running succeeds" rc_ok
check "... the plugin read it from CRIU's options (as for criu swrk, runc's way)" \
  log_has "$TEST_TMP/lr/dump.log" "the tasks run on after the dump (CRIU's options)"
check "the process runs on" grows "$log"
check "it is back on the GPU (running, restored while CRIU held it)" [ "$(fake_state "$pid")" = 0 ]
check "... restored on its restore thread alone" fake_log_has "restore-main $pid t"
check "its image is published" [ -f "$TEST_TMP/lr/gpusnap/$pid/manifest.img" ]

# ---- GPU work slower than CRIU's --timeout (its freezing timer; CRIU aborts 5 s after it fires) ----
GPUSNAP_FAULT=plugin-pause=hold:3 criu_dump "$TEST_TMP/slow" "$pid" --leave-running --timeout 1
check "a dump whose GPU part outlasts criu --timeout 1 succeeds" rc_ok
check "... CRIU's freezing timer did not fire meanwhile" bash -c "! grep -q 'Timeout reached' '$TEST_TMP/slow/dump.log'"
check "the process runs on" grows "$log"

# ---- a dump that fails after CRIU froze the tree: rolled back ----
: >"$FAKE_CUDA_LOG"
GPUSNAP_FAULT=plugin-checkpoint criu_dump "$TEST_TMP/fail1" "$pid"
check "criu dump fails (injected at CHECKPOINT_DEVICES)" rc_failed
check "the process runs on" grows "$log"
check "it is back on the GPU" [ "$(fake_state "$pid")" = 0 ]
check "no gpusnap image is left" bash -c "[ -z \"\$(ls -A '$TEST_TMP/fail1/gpusnap' 2>/dev/null)\" ]"
# ---- a dump whose driver checkpoint fails ----
FAKE_CUDA_FAIL_CHECKPOINT=$pid criu_dump "$TEST_TMP/fail2" "$pid"
check "criu dump fails when the driver's checkpoint fails" rc_failed
check "... the plugin says why" log_has "$TEST_TMP/fail2/dump.log" "dump of the CUDA processes of tree $pid failed"
check "the process runs on" grows "$log"
check "it is running on the GPU" [ "$(fake_state "$pid")" = 0 ]
check "no gpusnap image is left" bash -c "[ -z \"\$(ls -A '$TEST_TMP/fail2/gpusnap' 2>/dev/null)\" ]"

# ---- a process of the tree holding the GPU's device files without being a CUDA process (a fork child
# of one, an NVML monitor): refused before anything moves; here the counter, no CUDA process for the
# fake while its entry is away, maps its own binary, which stands for the device files ----
mv "$FAKE_CUDA_DIR/$pid" "$TEST_TMP/entry"
GPUSNAP_DEVICE_PATH_PREFIX=$(readlink -f "$app") criu_dump "$TEST_TMP/devmap" "$pid"
check "criu dump of a tree holding the device files outside CUDA fails" rc_failed
check "... the plugin says which process and why" \
  log_has "$TEST_TMP/devmap/dump.log" "process $pid (cpu_counter) in the tree of $pid holds the GPU's device files but is no CUDA process"
check "the process runs on" grows "$log"
mv "$TEST_TMP/entry" "$FAKE_CUDA_DIR/$pid"
check "it is running on the GPU" [ "$(fake_state "$pid")" = 0 ]

# ---- beside CRIU's cuda_plugin.so: refused, the process runs on ----
inc=""
for d in "$(dirname "$(readlink -f "$GPUSNAP_CRIU")")/../usr/include/criu" "$GPUSNAP_SRC/.cache/criu/usr/include/criu" \
  /usr/include/criu; do
  [ -f "$d/criu-plugin.h" ] && { inc=$d; break; }
done
if [ -n "$inc" ] && command -v "${CC:-cc}" >/dev/null; then
  both=$TEST_TMP/both
  mkdir -p "$both"
  cp "$PLUGIN_DIR/gpusnap_criu.so" "$both/"
  # a stand-in named like CRIU's CUDA plugin (tests/apps/criu_marker_plugin.c)
  "${CC:-cc}" -shared -fPIC -isystem "$inc" -o "$both/cuda_plugin.so" "$GPUSNAP_SRC/tests/apps/criu_marker_plugin.c"
  PLUGIN_DIR=$both criu_dump "$TEST_TMP/both-img" "$pid"
  check "criu dump with cuda_plugin.so in the same folder fails" rc_failed
  check "... the plugin says why and what to do" log_has "$TEST_TMP/both-img/dump.log" "remove it from CRIU's plugin folder"
  check "the process runs on" grows "$log"
  check "it is running on the GPU" [ "$(fake_state "$pid")" = 0 ]
else
  echo "# no criu-plugin.h or C compiler: the cuda_plugin.so case is not run"
fi
kill -9 "$pid"; wait_gone "$pid"

# ---- a tree of two CUDA processes ----
# The tree's shell is dumped too: it keeps no descriptor it inherited (one opened in another mount namespace, as a
# CI runner's may be, is one CRIU cannot dump)
setsid bash -c "for f in /proc/\$\$/fd/*; do n=\${f##*/}; [ \"\$n\" -gt 2 ] && eval \"exec \$n>&-\"; done
  exec >/dev/null 2>&1 </dev/null; '$app' '$TEST_TMP/a.log' & '$app' '$TEST_TMP/b.log' & wait" &
tree=$!
disown "$tree"
touch "$TEST_TMP/a.log" "$TEST_TMP/b.log"
wait_lines "$TEST_TMP/a.log" 5; wait_lines "$TEST_TMP/b.log" 5
read -r a b < <(pgrep -P "$tree" -x cpu_counter | tr '\n' ' ')
echo "0 0" >"$FAKE_CUDA_DIR/$a"; echo "0 0" >"$FAKE_CUDA_DIR/$b"
: >"$FAKE_CUDA_LOG"
criu_dump "$TEST_TMP/tree" "$tree"
check "criu dump of a tree with two CUDA processes succeeds" rc_ok
rc_ok || grep -h "Error\|gpusnap: " "$TEST_TMP/tree/dump.log" | tail -n 8 | sed 's/^/    /'
first_checkpoint=$(grep -n "^checkpoint" "$FAKE_CUDA_LOG" | head -n 1 | cut -d: -f1)
last_lock=$(grep -n "^lock" "$FAKE_CUDA_LOG" | tail -n 1 | cut -d: -f1)
locked_first() { [ "$(grep -c '^lock .* 0$' "$FAKE_CUDA_LOG")" = 2 ] && [ "$last_lock" -lt "$first_checkpoint" ]; }
check "both were locked before either was checkpointed" locked_first
both_images() { [ -f "$TEST_TMP/tree/gpusnap/$a/manifest.img" ] && [ -f "$TEST_TMP/tree/gpusnap/$b/manifest.img" ]; }
check "each has its gpusnap image" both_images
wait_gone "$tree"; tree=
wait_gone "$a"; wait_gone "$b"
read -r na va < <(settled "$TEST_TMP/a.log"); read -r nb vb < <(settled "$TEST_TMP/b.log")
criu_restore "$TEST_TMP/tree"
check "criu restore of the tree succeeds" rc_ok
tree=$RPID
both_running() { [ "$(fake_state "$a")" = 0 ] && [ "$(fake_state "$b")" = 0 ]; }
check "both are back on the GPU" both_running
check "the first counts on" continues "$TEST_TMP/a.log" "$na" "$va"
check "the second counts on" continues "$TEST_TMP/b.log" "$nb" "$vb"
kill -9 "$a" "$b" "$tree" 2>/dev/null; tree=

test_done
