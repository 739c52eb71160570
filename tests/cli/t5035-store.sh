#!/usr/bin/env bash
# t5035 - a chunk store shared by images (`dump --store STORE`, docs/FORMAT.md
# 4.12) on the agent path without a GPU: the app of t4004 under
# libgpusnap.so on the host-memory fake driver (whose module loader runs the
# fingerprint kernel's C twin), with a block it leaves zero and fills on
# SIGUSR2 (zero-flip). Checked here:
#  - the first dump into a new store (created 0700) writes every non-zero
#    chunk as an object; a second dump of the same process copies nothing
#    from the "GPU" (gpu_copied_bytes 0: every chunk found in the store by
#    its GPU fingerprint) and writes no new object; after a zero-flip only
#    the changed block is copied and written; both images restore
#    bit-identical; inspect names the store and counts what is there;
#  - where the fingerprint kernel cannot load (host fallback) the copy is
#    made, and only missing objects are written (none);
#  - export of a stored image is self-contained: it restores with the store
#    gone;
#  - a damaged object and a missing one are refused in one line naming the
#    chunk and the object (exit 11), no process started;
#  - --store on a directory that is not a store, on one others may write,
#    with --parent: refused in one line before anything moves;
#  - the disk fills while objects are written: refused (13), the process runs
#    on, the earlier image and the store's objects untouched and restorable.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

MNT=""
series_setup # S, MT, valid, flip, objects
cleanup_more() {
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
}
ST=$S/store
start_app
verify_ok "the app's data after allocation"

# ---- two dumps into one store ----
run_gpusnap dump --leave-running --json --store "$ST" -D "$S/img1" "$PID"; expect "first dump into a new store" 0
data=$(jget "['gpu_data_bytes']")
n1=$(jget "['store_new_objects']")
check "the store was made 0700" test "$(stat -c %a "$ST")" = 700
check "the first dump wrote its chunks as objects ($n1, $(objects "$ST") in the store)" \
  test "$n1" -gt 0 -a "$(objects "$ST")" = "$n1"
check "... and copied the data from the GPU ($(jget "['gpu_copied_bytes']") of $data bytes)" \
  test "$(jget "['gpu_copied_bytes']")" -ge $((data - (9 << 20)))
check "img1 has no data of its own" test -z "$(find "$S/img1" -maxdepth 1 -name 'gpu-data-*' -size +4k)"
check "... nor the owner record its temporary directory had (only what a dump leaves behind keeps it)" test ! -e "$S/img1/.owner"
run_gpusnap dump --leave-running --json --store "$ST" -D "$S/img2" "$PID"; expect "second dump, nothing changed" 0
check "the second dump copied nothing from the GPU" test "$(jget "['gpu_copied_bytes']")" = 0
check "... wrote no object" test "$(jget "['store_new_objects']")" = 0 -a "$(objects "$ST")" = "$n1"
check "... and found all but the zero block in the store ($(jget "['store_bytes']") bytes)" \
  test "$(jget "['store_bytes']")" -ge $((data - (9 << 20)))
valid dump "dump --json --store"
check "the app fills its block" test "$(flip)" = "ZERO 1"
run_gpusnap dump --leave-running --json --store "$ST" -D "$S/img3" "$PID"; expect "third dump, the block filled" 0
copied=$(jget "['gpu_copied_bytes']")
check "the third dump copied the changed block only ($copied bytes)" test "$copied" -ge $((8 << 20)) -a "$copied" -le $((9 << 20))
check "... and wrote its objects ($(jget "['store_new_objects']"))" test "$(jget "['store_new_objects']")" -gt 0
run_gpusnap inspect --json "$S/img3"; expect "inspect img3" 0
check "inspect --json names the store, every stored byte there" \
  test "$(jget "['image']['store']['path']")" = "$ST" -a "$(jget "['image']['store']['bytes']")" -ge $((data - 9 * 1024 * 1024)) \
  -a "$(jget "['image']['format_version']")" = 2
run_gpusnap inspect "$S/img3"; expect "inspect img3 (text)" 0
check "inspect says where the chunks are" grep -q "^store        $ST: [0-9]* chunks" "$OUT_TXT"
run_gpusnap inspect --verify "$S/img2"; expect "inspect --verify img2 (its objects checked)" 0

# ---- restores, bit-identical ----
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore --verify-gpu -D "$S/img1"; expect "restore img1 from the store" 0
verify_ok "every byte is back from img1 (zero block zero)"
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$S/img3"; expect "restore img3 from the store" 0
verify_ok "every byte is back from img3 (block filled)"

# ---- export: self-contained ----
run_gpusnap export --json "$S/img3" "$TEST_TMP/exported"; expect "export of a stored image" 0
check "the export holds the data itself ($(jget "['stored_bytes']") bytes)" test "$(jget "['stored_bytes']")" -ge $((8 << 20))
kill -9 "$PID"; wait_gone "$PID"
mv "$ST" "$TEST_TMP/store.away"
run_gpusnap restore -D "$S/img1"; expect "restore with the store gone is refused" 11 "no chunk store at '$ST'"
check "... in one line" one_error
run_gpusnap restore -D "$TEST_TMP/exported"; expect "the export restores with the store gone" 0
verify_ok "every byte is back from the export"
kill -9 "$PID"; wait_gone "$PID"
mv "$TEST_TMP/store.away" "$ST"

# ---- a damaged object, a missing one ----
copy() { rm -rf "$TEST_TMP/$1"; cp -a "$S" "$TEST_TMP/$1"; echo "$TEST_TMP/$1"; }
big_objects() { find "$1/store/objects" -type f -size +1M; }
C=$(copy damaged)
for o in $(big_objects "$C"); do python3 "$MT" flip-byte "$o" 4096; done
run_gpusnap restore -D "$C/img1"; expect "restore with damaged objects" 11 "store object '$C/store/objects/"
check "... the object is corrupt, its chunk named, in one line" bash -c "grep -q \"image '$C/img1': chunk [0-9]* (allocation [0-9]*, offset [0-9]*): store object '.*' is corrupt\" '$ERR_TXT' && [ \$(wc -l <'$ERR_TXT') = 1 ]"
check "no process was left" gone_or_zombie "$PID"
for o in $(big_objects "$C"); do python3 "$MT" flip-byte "$o" 20; done
run_gpusnap restore -D "$C/img1"; expect "restore with objects whose header is damaged" 11 "is damaged"
check "... in one line" one_error
C=$(copy missing)
rm -f $(big_objects "$C")
run_gpusnap restore -D "$C/img2"; expect "restore with missing objects" 11 "is missing"
check "... the object and its chunk named, in one line" bash -c "grep -q \"image '$C/img2': chunk [0-9]* (allocation [0-9]*, offset [0-9]*): store object '$C/store/objects/.*' is missing\" '$ERR_TXT' && [ \$(wc -l <'$ERR_TXT') = 1 ]"
check "no process was left" gone_or_zombie "$PID"
run_gpusnap inspect "$C/img2"; expect "inspect names the missing object too" 11 "is missing"

# ---- refusals before anything moves ----
run_gpusnap restore -D "$S/img1"; expect "restore img1 for the refusals" 0
mkdir -p "$TEST_TMP/notstore" && echo x >"$TEST_TMP/notstore/file"
run_gpusnap dump --store "$TEST_TMP/notstore" -D "$TEST_TMP/never" "$PID"; expect "--store on a directory that is not a store" 2 "is not a gpusnap chunk store"
check "... in one line, nothing created" bash -c "one_line_ok() { [ \$(wc -l <'$ERR_TXT') = 1 ]; }; one_line_ok && [ ! -e '$TEST_TMP/never' ]"
cp -a "$ST" "$TEST_TMP/open-store" && chmod 0777 "$TEST_TMP/open-store"
run_gpusnap dump --store "$TEST_TMP/open-store" -D "$TEST_TMP/never" "$PID"; expect "--store on a store others may write" 5 "$TEST_TMP/open-store"
run_gpusnap dump --store "$ST" --parent "$S/img1" -D "$TEST_TMP/never" "$PID"; expect "--store with --parent" 2 "--store takes neither --parent"
GPUSNAP_STORE=$TEST_TMP/notstore run_gpusnap dump -D "$TEST_TMP/never" "$PID"; expect "GPUSNAP_STORE stands for --store" 2 "is not a gpusnap chunk store"
check "the process runs on, untouched" alive "$PID"
verify_ok "its data after the refusals"
check "no ref was left by the refusals (one for each of img1-3)" test "$(find "$ST/refs" -type f | wc -l)" = 3

# ---- the disk fills while objects are written: earlier images untouched ----
MNT=$TEST_TMP/small
mkdir -p "$MNT"
if mount -t tmpfs -o size=256m,mode=0700 tmpfs "$MNT" 2>/dev/null; then
  run_gpusnap dump --leave-running --store "$MNT/store" -D "$MNT/img1" "$PID"; expect "a dump into a store on a small file system" 0
  # room for 3 MiB more: the filled block's 8 MiB of new objects do not fit
  mount -o remount,size=$(( $(du -sk "$MNT" | cut -f1) + 3 * 1024 ))k "$MNT"
  s1=$(sums "$MNT/img1") o1=$(sums "$MNT/store/objects")
  check "the app fills its block (8 MiB of objects the store lacks)" test "$(flip)" = "ZERO 1"
  run_gpusnap dump --store "$MNT/store" -D "$MNT/img2" "$PID"; expect "a dump into a store on a full disk is refused" 13 "no space left"
  check "the process runs on" alive "$PID"
  verify_ok "its data after the refused dump"
  check "the earlier image is untouched" test "$(sums "$MNT/img1")" = "$s1"
  check "the store's objects are untouched, none half-written" test "$(sums "$MNT/store/objects")" = "$o1" -a -z "$(find "$MNT/store/tmp" -type f)"
  check "nothing published, no temporary directory left" test ! -e "$MNT/img2" -a -z "$(tmp_dirs "$MNT/img2")"
  check "the refused dump's ref is gone" test "$(find "$MNT/store/refs" -type f | wc -l)" = 1
  kill -9 "$PID"; wait_gone "$PID"
  run_gpusnap restore -D "$MNT/img1"; expect "the earlier image restores from the store on the full disk" 0
  verify_ok "every byte is back"
  kill -9 "$PID"; wait_gone "$PID"
  umount "$MNT" && MNT=""
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk case is not tested"
fi
# ---- host fallback: no GPU fingerprints, the copy is made, objects not written twice ----
FAKE_CUDA_NO_FP_MODULE=1 start_app
run_gpusnap dump --leave-running --json --store "$ST" -D "$S/host" "$PID"; expect "a dump where the fingerprint kernel cannot load" 0
check "it copied the data ($(jget "['gpu_copied_bytes']") bytes) but wrote no object" \
  test "$(jget "['gpu_copied_bytes']")" -gt 0 -a "$(jget "['store_new_objects']")" = 0
kill -9 "$PID"; wait_gone "$PID"

test_done
