#!/usr/bin/env bash
# t5043 - a process tree's images in a chunk store (`dump --tree --store
# STORE`, docs/FORMAT.md 4.12 and 12): the two share_app ranks of t4016 under
# libgpusnap.so on the host-memory fake driver, dumped with the real CRIU 4.
# Checked here:
#  - a live tree dump into a new store writes each rank's chunks as objects
#    (not staged: the images name the store) and both run on with their
#    data; the tree's manifest and each rank's name the store, each rank's
#    image verifies through it; a second dump writes no object and finds
#    both buffers in the store; after the ring exchange changed both, a
#    third writes their new objects;
#  - gc keeps every object a tree's image uses (through its procs/), and
#    frees what only removed images used;
#  - --keep 1: the older tree images of the series go, the store keeps what
#    the newest uses;
#  - export makes the stored tree image one directory that verifies and
#    restores with the store gone;
#  - a tree dumped into the store restores whole, byte for byte; a missing
#    object is refused in one line naming the chunk (exit 11), no process
#    left.
# In a sanitizer build only the dump half runs (CRIU cannot restore the two
# ASan-instrumented processes). Needs root, CRIU (scripts/get-criu.sh unless
# GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/share_lib.sh"

signals_app_env share_app criu
schemas=${GPUSNAP_SRC:?GPUSNAP_SRC not set}/docs/json
. "$(dirname "$0")/json_lib.sh"
if (json_lib_init) >/dev/null; then json_lib_init; else valid() { echo "SKIP: no python3-jsonschema: $2 not validated"; }; fi
S=$TEST_TMP/series
ST=$S/store
mkdir -p "$S"
start_app
CHILD=$(awk '/^READY/ {print $3; exit}' "$log")
verify_ok "both ranks see both buffers after setup"

# ---- a live tree dump into a new store ----
run_gpusnap dump --tree --leave-running --json --store "$ST" -D "$S/t1" "$APP"; expect "dump --tree --store" 0
valid dump "dump --tree --store --json"
n1=$(jget "['store_new_objects']")
check "each rank's chunks became objects ($n1, $(objects "$ST") in the store)" test "$n1" -ge 2 -a "$(objects "$ST")" = "$n1"
check "not staged: the images are written into the store ($(jget "['no_stage']"))" \
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["staged"] is False and "--store" in d["no_stage"]))' "$OUT_TXT"
check "both ranks run on" both_alive
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers after the dump into the store"
check "no rank's image has data of its own" test -z "$(find "$S/t1/procs" -name 'gpu-data-*' -size +4k)"
for p in "$APP" "$CHILD"; do
  run_gpusnap inspect --json --verify "$S/t1/procs/$p"; expect "inspect --verify of rank $p's image" 0
  check "... it names the store, and verifies through it" \
    test "$(jget "['image']['store']['path']")" = "$ST" -a "$(jget "['verify']['ok']")" = True
done
run_gpusnap inspect --json "$S/t1"; expect "inspect of the tree's image" 0
check "the tree's own manifest names the store too" test "$(jget "['image']['store']['path']")" = "$ST"

run_gpusnap dump --tree --leave-running --json --store "$ST" -D "$S/t2" "$APP"; expect "a second tree dump, nothing changed" 0
check "... wrote no object" test "$(jget "['store_new_objects']")" = 0 -a "$(objects "$ST")" = "$n1"
check "... and found both buffers in the store ($(jget "['store_bytes']") bytes)" \
  test "$(jget "['store_bytes']")" -ge $((8 * MiB))

# the ring exchange writes into both buffers: the next dump writes new objects
ring_ok "the ring exchange after the dumps"
run_gpusnap dump --tree --leave-running --json --store "$ST" -D "$S/t3" "$APP"; expect "a third tree dump, both buffers changed" 0
n3=$(jget "['store_new_objects']")
check "... wrote their new objects ($n3)" test "$n3" -ge 2 -a "$(objects "$ST")" = $((n1 + n3))
ring_ok "the ring exchange after the third dump"

# ---- gc keeps what a tree's parts use ----
run_gpusnap gc --json "$ST"; expect "gc with three tree images" 0
check "gc removed nothing ($(jget "['objects_removed']") objects)" \
  test "$(jget "['objects_removed']")" = 0 -a "$(objects "$ST")" = $((n1 + n3))
rm -rf "$S/t1"
run_gpusnap gc --json "$ST"; expect "gc with t1 removed" 0
check "... still nothing: t2 uses what t1 did" test "$(jget "['objects_removed']")" = 0 -a "$(objects "$ST")" = $((n1 + n3))
rm -rf "$S/t2"
run_gpusnap gc --json "$ST"; expect "gc with t2 removed too" 0
check "... what only t1 and t2 used went ($(jget "['objects_removed']"))" \
  test "$(jget "['objects_removed']")" = "$n1" -a "$(objects "$ST")" = "$n3"
run_gpusnap inspect --verify "$S/t3/procs/$CHILD"; expect "t3 verifies after the gc" 0

# ---- --keep 1: the older images of the series go ----
run_gpusnap dump --tree --leave-running --json --store "$ST" --keep 1 -D "$S/t4" "$APP"; expect "dump --tree --keep 1" 0
valid dump "dump --tree --store --keep --json"
check "--keep removed t3 ($(jget "['keep_removed']"))" test "$(jget "['keep_removed']")" = 1 -a ! -e "$S/t3"
check "... the store keeps what t4 uses ($(objects "$ST"))" test "$(objects "$ST")" = "$n3"
run_gpusnap inspect --verify "$S/t4/procs/$APP"; expect "t4 verifies" 0

# ---- export: the tree's image in one directory, without the store ----
run_gpusnap export --json "$S/t4" "$TEST_TMP/exported"; expect "export of the stored tree image" 0
check "it wrote both ranks' data ($(jget "['data_bytes']") bytes)" test "$(jget "['data_bytes']")" -ge $((8 * MiB))
check "each rank's part holds its own data" \
  test -n "$(find "$TEST_TMP/exported/procs/$APP" -name 'gpu-data-*' -size +1M)" -a \
  -n "$(find "$TEST_TMP/exported/procs/$CHILD" -name 'gpu-data-*' -size +1M)"
mv "$ST" "$TEST_TMP/store-away"
run_gpusnap inspect --json --verify "$TEST_TMP/exported"; expect "inspect --verify of the export, the store gone" 0
check "... it verifies, names no store, and is a tree's ($(jget "['image']['how']"))" \
  test "$(jget "['verify']['ok']")" = True -a "$(jget "['image']['how']")" = tree -a "$(jget "['image'].get('store')")" = None
mv "$TEST_TMP/store-away" "$ST"

if ldd "$app" | grep -q libasan; then
  echo "# the restore of the tree is not checked in a sanitizer build (CRIU cannot restore it there)"
  rm -rf "$S/t4"
  run_gpusnap gc --json "$ST"; expect "gc with no image left" 0
  check "every object went ($(objects "$ST") left)" test "$(objects "$ST")" = 0
  test_done
  exit
fi

# ---- a tree dumped into the store restores whole ----
run_gpusnap dump --tree --json --store "$ST" -D "$S/t5" "$APP"; expect "dump --tree --store, the tree gone after" 0
check "both processes are gone" wait_gone "$APP" 5
check "the child is gone too" wait_gone "$CHILD" 5
# its export restores without the store
run_gpusnap export "$S/t5" "$TEST_TMP/exported5"; expect "export of the dumped tree's image" 0
mv "$ST" "$TEST_TMP/store-away"
run_gpusnap restore -D "$TEST_TMP/exported5"; expect "restore of the export, the store gone" 0
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers are back byte for byte from the export"
ring_ok "the ring exchange goes on after it"
kill -9 "$CHILD" "$APP"; wait_gone "$APP" 5; wait_gone "$CHILD" 5
mv "$TEST_TMP/store-away" "$ST"
# a missing object: refused before any process runs, naming the chunk
obj=$(find "$ST/objects" -type f | head -n 1)
mv "$obj" "$TEST_TMP/held-object"
run_gpusnap restore -D "$S/t5"; expect "restore with an object missing from the store" 11 "chunk"
check "... in one line" one_error
check "no restored process is left" wait_gone "$APP" 5
mv "$TEST_TMP/held-object" "$obj"
run_gpusnap restore --json -D "$S/t5"; expect "restore of the tree from the store" 0
check "both ranks run again" both_alive
check "both ranks hold their memory ($(phys_of "$APP"), $(phys_of "$CHILD"))" both_hold
verify_ok "both buffers are back byte for byte after the restore"
ring_ok "the ring exchange goes on after the restore"

# ---- gc frees what no image uses once they are gone ----
rm -rf "$S/t4" "$S/t5"
run_gpusnap gc --json "$ST"; expect "gc with no image left" 0
check "every object went ($(jget "['objects_removed']") removed, $(objects "$ST") left)" test "$(objects "$ST")" = 0
test_done
