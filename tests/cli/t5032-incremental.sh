#!/usr/bin/env bash
# t5032 - incremental dumps (`dump --parent PARENT_DIR`, docs/FORMAT.md 4.11)
# on the agent path without a GPU: the app of t4004 under libgpusnap.so on
# the host-memory fake driver, with a block it leaves zero and fills on
# SIGUSR2 (zero-flip), dumped with --leave-running into a series
# img1 (full) <- img2 <- img3 and restored from each. Checked here:
#  - img2 stores about the changed block only; the rest is left in img1
#    (dump --json parent_bytes, inspect's parent), uncopied; img3 likewise on
#    img2, compressed too; restores from img3 (a chain of three, with
#    --verify-gpu) and img2 bring every byte back; inspect --verify checks
#    through the chain;
#  - the series moves as a directory (parents beside DIR are recorded by name);
#  - each broken link refused in one line naming it (exit 11), before any
#    process runs: a damaged parent (its data: the checksum pass names its
#    chunk; its manifest: cannot be read), a missing parent, a parent
#    replaced by another image, a parent of another process, a chain that
#    loops; dump --parent of another process's image, or of DIR itself:
#    refused before anything moves;
#  - the disk fills during an incremental dump: refused (13), the process runs
#    on, the earlier image untouched, nothing published.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

MNT=""
series_setup # S, MT (image edits: pid, parent-of, flip-byte), flip
cleanup_more() {
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
}

# ---- a series: img1 full, img2 and img3 incremental ----
start_app
verify_ok "the app's data after allocation"
run_gpusnap dump --leave-running --json -D "$S/img1" "$PID"; expect "full dump img1" 0
data=$(jget "['gpu_data_bytes']")
run_gpusnap dump --leave-running -D "$TEST_TMP/other" "$PID"; expect "another full dump (to stand in for a replaced parent)" 0
check "the app answers a zero-flip (now filled)" test "$(flip)" = "ZERO 1"
run_gpusnap dump --leave-running --json --parent "$S/img1" -D "$S/img2" "$PID"; expect "incremental dump img2 on img1" 0
pb=$(jget "['parent_bytes']")
check "img2 left $pb of $data bytes in img1 (all but the changed block)" \
  test "$pb" -gt 0 -a "$pb" -ge $((data - (9 << 20)))
run_gpusnap inspect --json "$S/img2"; expect "inspect img2" 0
stored=$(jget "['image']['chunks']['stored_bytes']")
check "img2 stores the changed 8 MiB block and little else ($stored bytes)" test "$stored" -ge $((8 << 20)) -a "$stored" -le $((9 << 20))
check "img2's parent is img1, a chain of one" \
  test "$(jget "['image']['parent']['path']")" = "$S/img1" -a "$(jget "['image']['parent']['chain']")" = 1
check "img2 is of format version 2" test "$(jget "['image']['format_version']")" = 2
check "the app zeroes its block again" test "$(flip)" = "ZERO 0"
run_gpusnap dump --leave-running --compress zstd --parent "$S/img2" -D "$S/img3" "$PID"
expect "incremental and compressed dump img3 on img2" 0
run_gpusnap inspect --verify --json "$S/img3"; expect "inspect --verify img3 (through the chain)" 0
check "img3's chain is two long, and verifies" \
  test "$(jget "['image']['parent']['chain']")" = 2 -a "$(jget "['verify']['ok']")" = True
run_gpusnap inspect "$S/img3"; expect "inspect img3" 0
check "inspect names the parent" grep -q "^parent       $S/img2 (2 images up the chain)" "$OUT_TXT"
kill -9 "$PID"; wait_gone "$PID"
s1=$(sums "$S/img1")
run_gpusnap restore --verify-gpu --json -D "$S/img3"; expect "restore --verify-gpu from img3 (a chain of three)" 0
check "every chunk with a fingerprint was checked on the GPU, those left in the parents too ($(jget "['verify_gpu_chunks']"))" \
  test "$(jget "['verify_gpu_chunks']")" -gt 0
verify_ok "every byte is back from img3 (zero block zero)"
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$S/img2"; expect "restore from img2" 0
verify_ok "every byte is back from img2 (zero block filled)"
kill -9 "$PID"; wait_gone "$PID"
check "img1 is unchanged by its children" test "$(sums "$S/img1")" = "$s1"

# ---- the series moves as one directory ----
M=$TEST_TMP/moved
mv "$S" "$M"
run_gpusnap inspect --verify "$M/img3"; expect "the moved series verifies (parents recorded by name)" 0

# ---- broken links ----
copy() { rm -rf "$TEST_TMP/$1"; cp -a "$M" "$TEST_TMP/$1"; echo "$TEST_TMP/$1"; }
C=$(copy damaged-data)
python3 "$MT" flip-byte "$C/img1/gpu-data-0000.img" $((4096 + 100))
run_gpusnap restore -D "$C/img3"; expect "restore through a parent with a damaged chunk" 11 "image '$C/img1': chunk"
check "... in one line" one_error
check "no process was left" gone_or_zombie "$PID"
C=$(copy damaged-manifest)
python3 "$MT" flip-byte "$C/img1/manifest.img" 300
run_gpusnap restore -D "$C/img2"; expect "restore with a damaged parent manifest" 11 "image '$C/img2': its parent '$C/img1' cannot be read"
check "... in one line" one_error
C=$(copy missing)
rm -rf "$C/img1"
run_gpusnap restore -D "$C/img3"; expect "restore with a missing grandparent" 11 "image '$C/img2': its parent '$C/img1' is missing"
check "... in one line" one_error
run_gpusnap inspect "$C/img3"; expect "inspect names the broken link too" 11 "its parent '$C/img1' is missing"
C=$(copy replaced)
rm -rf "$C/img1" && cp -a "$TEST_TMP/other" "$C/img1"
run_gpusnap restore -D "$C/img2"; expect "restore with a parent replaced by another image" 11 "its parent '$C/img1' is not the image it was taken against"
C=$(copy other-process)
python3 "$MT" pid "$C/img1" 4242
run_gpusnap restore -D "$C/img2"; expect "restore with a parent of another process" 11 "its parent '$C/img1' is an image of process 4242"
C=$(copy loop)
python3 "$MT" parent-of "$C/img2" "$C/img3"
run_gpusnap restore -D "$C/img3"; expect "restore of a chain that loops" 11 "the chain of parents loops back to image"
check "... in one line" one_error
run_gpusnap dump --parent "$M/img1" -D "$TEST_TMP/never" $$; expect "dump --parent of another process's image" 11 "not an agent image of process $$"
check "nothing was created" test ! -e "$TEST_TMP/never"

# ---- the disk fills during an incremental dump: the earlier image untouched ----
run_gpusnap restore -D "$M/img1"; expect "restore img1 for the disk-full case" 0
run_gpusnap dump --parent "$M/img1" -D "$M/img1" "$PID"; expect "dump --parent of DIR itself" 2 "is DIR itself"
MNT=$TEST_TMP/small
mkdir -p "$MNT"
size_kib=$(( $(du -sk "$M/img1" | cut -f1) + 3 * 1024 ))
if mount -t tmpfs -o size=${size_kib}k,mode=0700 tmpfs "$MNT" 2>/dev/null; then
  cp -a "$M/img1" "$MNT/img1"
  s1=$(sums "$MNT/img1")
  check "the app fills its block (8 MiB to store, 3 MiB free)" test "$(flip)" = "ZERO 1"
  run_gpusnap dump --parent "$MNT/img1" -D "$MNT/img2" "$PID"; expect "an incremental dump onto a full disk is refused" 13 "no space left"
  check "the process runs on" alive "$PID"
  verify_ok "its data after the refused dump"
  check "the parent image is untouched" test "$(sums "$MNT/img1")" = "$s1"
  check "nothing published, no temporary directory left" test ! -e "$MNT/img2" -a -z "$(tmp_dirs "$MNT/img2")"
  umount "$MNT" && MNT=""
else
  echo "SKIP: cannot mount a small tmpfs here: the full-disk case is not tested"
fi
test_done
