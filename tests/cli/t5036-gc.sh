#!/usr/bin/env bash
# t5036 - `gpusnap gc STORE` (docs/FORMAT.md 9.1) on the agent path without a
# GPU: the app of t4004 under libgpusnap.so on the host-memory fake driver,
# with a block it leaves zero and fills on SIGUSR2 (zero-flip), dumped into
# one store. Checked here:
#  - two images, one removed (rm -r): gc --dry-run says what would go and
#    removes nothing; gc removes exactly the removed image's unique objects
#    and its ref; the other image restores;
#  - gc while a dump is writing into the store (the dump held at its fault
#    point dump-after-agent, its objects written, its image not published):
#    none of that dump's objects is removed, and its image restores after;
#  - a dump killed (-9) after its agent wrote into the store: its ref and its
#    unfinished objects are removed by the next gc, the images' objects kept;
#  - a dump killed as it published (its complete image left at its temporary
#    name, later kept under img6.kept-*): gc keeps that image's objects while
#    it is there, it restores, and its objects go once it is removed;
#  - dump --keep 2: the newest two images of the process in the store beside
#    DIR stay, the older are removed and the store's gc frees what only they
#    used; an image of another store beside them is not touched;
#  - --json validates against docs/json/gc.json (success and refusal);
#  - refusals in one line: not a store (11), a store others may write (5),
#    the store's lock held by another gc beyond --wait (6), an image a ref
#    names that cannot be read (11, nothing removed).
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

LOCKER=""
series_setup # S, MT, valid, flip, objects
cleanup_more() {
  [ -n "$LOCKER" ] && kill "$LOCKER" 2>/dev/null
}
ST=$S/store
start_app
verify_ok "the app's data after allocation"

# ---- one of two images removed: only its unique objects go ----
run_gpusnap dump --leave-running --store "$ST" -D "$S/img1" "$PID"; expect "dump img1 (block zero)" 0
n1=$(objects "$ST")
check "the app fills its block" test "$(flip)" = "ZERO 1"
run_gpusnap dump --leave-running --store "$ST" -D "$S/img2" "$PID"; expect "dump img2 (block filled)" 0
n2=$(objects "$ST")
check "img2 added the filled block's objects ($n1 -> $n2)" test "$n2" -gt "$n1"
rm -r "$S/img2"
before=$(sums "$ST")
run_gpusnap gc --dry-run "$ST"; expect "gc --dry-run" 0
check "it says what would go: img2's objects and its ref" \
  bash -c "[ \$(grep -c '^would remove object ' '$OUT_TXT') = $((n2 - n1)) ] && grep -q '^would remove ref .* $S/img2\$' '$OUT_TXT'"
check "... and removes nothing" test "$(sums "$ST")" = "$before"
run_gpusnap gc --json "$ST"; expect "gc --json" 0
valid gc "gc --json"
check "gc removed img2's objects alone ($(jget "['objects_removed']") of $(jget "['objects']")), and its ref" \
  test "$(jget "['objects_removed']")" = $((n2 - n1)) -a "$(objects "$ST")" = "$n1" -a "$(jget "['refs_removed']")" = 1 \
  -a "$(jget "['images']")" = 1
run_gpusnap inspect --verify "$S/img1"; expect "img1 verifies after the gc" 0
run_gpusnap gc "$ST"; expect "gc again: nothing left to remove" 0
check "... says so" grep -q ": 0 of $n1 objects" "$OUT_TXT"

# ---- gc while a dump writes into the store ----
bg_gpusnap dump-after-agent=hold:20 dump --leave-running --store "$ST" -D "$S/img3" "$PID"
if at_fault dump-after-agent; then
  pass "a dump of the filled block is held after its agent wrote into the store"
  n3=$(objects "$ST")
  check "... its objects are there ($n1 -> $n3), its image is not published" test "$n3" -gt "$n1" -a ! -e "$S/img3"
  run_gpusnap gc --json "$ST"; expect "gc during the dump" 0
  check "gc removed none of the running dump's objects" test "$(jget "['objects_removed']")" = 0 -a "$(objects "$ST")" = "$n3"
else
  fail "a dump of the filled block is held after its agent wrote into the store" "$(cat "$TEST_TMP/bg.err")"
fi
bg_wait
check "the dump went on and published img3 (exit $BG_RC)" test "$BG_RC" = 0 -a -e "$S/img3/manifest.img"
run_gpusnap gc "$ST"; expect "gc after the dump" 0
check "img3 keeps its objects" test "$(objects "$ST")" = "$n3"
run_gpusnap inspect --verify "$S/img3"; expect "img3 verifies" 0

# ---- a dump killed after its agent wrote into the store ----
check "the app zeroes its block" test "$(flip)" = "ZERO 0"
check "... and fills it again" test "$(flip)" = "ZERO 1"
run_gpusnap dump --leave-running --store "$ST" -D "$S/img4" "$PID"; expect "dump img4" 0
rm -r "$S/img3" "$S/img4" # the filled block's objects now only the dead dump below lists
GPUSNAP_FAULT=dump-after-agent=kill run_gpusnap dump --store "$ST" -D "$S/img5" "$PID"
check "the dump was killed after its agent wrote into the store" test "$RC" = 137
kill -9 "$PID"; wait_gone "$PID"
dead=$(grep -l "^image $S/img5\$" "$ST"/refs/*.ref)
check "its ref stayed, unlocked" test -n "$dead"
: >"$ST/tmp/$(basename "$dead" .ref).3" # an object it was writing when it died
run_gpusnap gc --json "$ST"; expect "gc after the killed dump" 0
check "its ref and its unfinished object are removed" \
  test ! -e "$dead" -a ! -e "$ST/tmp/$(basename "$dead" .ref).3" -a "$(jget "['temp_removed']")" = 1
check "... the objects only it used too, img1's kept ($(objects "$ST"))" test "$(objects "$ST")" = "$n1"
run_gpusnap restore -D "$S/img1"; expect "img1 restores" 0
verify_ok "every byte is back from img1"

# ---- a dump killed as it published: its complete image, left at the temporary name, keeps its objects ----
check "the app fills its block" test "$(flip)" = "ZERO 1"
GPUSNAP_FAULT=image-publish=kill run_gpusnap dump --leave-running --store "$ST" -D "$S/img6" "$PID"
check "the dump was killed as it published img6" test "$RC" = 137 -a ! -e "$S/img6"
left=$(find "$S" -maxdepth 1 -name '.img6.tmp-*' | head -n 1)
check "its complete image is left at its temporary name" test -n "$left" -a -e "$left/manifest.img"
check "... with the owner record gc reads to see its process runs" test -s "$left/.owner"
n6=$(objects "$ST")
check "... with the filled block's objects, which no published image uses ($n1 -> $n6)" test "$n6" -gt "$n1"
run_gpusnap gc --json "$ST"; expect "gc after the dump killed as it published" 0
check "gc kept every object of the image left behind" test "$(jget "['objects_removed']")" = 0 -a "$(objects "$ST")" = "$n6"
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$left"; expect "the image left behind restores" 0
verify_ok "every byte is back from the image left behind"
check "the app zeroes its block" test "$(flip)" = "ZERO 0"
run_gpusnap dump --leave-running --store "$ST" -D "$S/img6" "$PID"; expect "dump img6 (block zero) again" 0
kept=$(find "$S" -maxdepth 1 -name 'img6.kept-*' | head -n 1)
check "that dump kept the image left behind as $(basename "${kept:-none}")" test -n "$kept" -a ! -e "$left"
run_gpusnap gc --json "$ST"; expect "gc with the kept image" 0
check "gc kept its objects still" test "$(jget "['objects_removed']")" = 0 -a "$(objects "$ST")" = "$n6"
rm -r "$kept"
run_gpusnap gc --json "$ST"; expect "gc after the kept image was removed" 0
check "gc removed the objects only it used ($((n6 - n1)))" \
  test "$(jget "['objects_removed']")" = $((n6 - n1)) -a "$(objects "$ST")" = "$n1"
run_gpusnap inspect --verify "$S/img6"; expect "img6 verifies after the gc" 0

# ---- dump --keep K: the newest K of the series stay, the older go with what only they used ----
K=$TEST_TMP/keep
mkdir -p "$K"
cp -a "$S/img1" "$K/other" # an image of this process in another store: never touched
run_gpusnap dump --leave-running --json --store "$K/store" --keep 2 -D "$K/a" "$PID"; expect "dump --keep 2: a" 0
check "... nothing to remove yet" test "$(jget "['keep_removed']")" = 0
valid dump "dump --json --keep"
check "the app fills its block" test "$(flip)" = "ZERO 1"
run_gpusnap dump --leave-running --json --store "$K/store" --keep 2 -D "$K/b" "$PID"; expect "dump --keep 2: b (block filled)" 0
filled=$(jget "['store_new_objects']")
check "the app zeroes its block" test "$(flip)" = "ZERO 0"
run_gpusnap dump --leave-running --json --store "$K/store" --keep 2 -D "$K/c" "$PID"; expect "dump --keep 2: c" 0
check "a, the oldest, was removed; its objects c uses" \
  test ! -e "$K/a" -a -e "$K/b" -a "$(jget "['keep_removed']")" = 1 -a "$(jget "['keep_gc_objects']")" = 0
run_gpusnap dump --leave-running --json --store "$K/store" --keep 2 -D "$K/d" "$PID"; expect "dump --keep 2: d" 0
check "b was removed, and the filled block's $filled objects only it used" \
  test ! -e "$K/b" -a "$(jget "['keep_removed']")" = 1 -a "$(jget "['keep_gc_objects']")" = "$filled" -a "$filled" -gt 0
check "c and d stay, and the image of another store beside them" test -e "$K/c/manifest.img" -a -e "$K/d/manifest.img" -a -e "$K/other/manifest.img"
check "the store holds what c and d use ($(objects "$K/store") objects, as img1's $n1)" test "$(objects "$K/store")" = "$n1"
run_gpusnap inspect --verify "$K/c"; expect "c verifies" 0
run_gpusnap dump --keep 2 -D "$K/e" "$PID"; expect "--keep without --store" 2 "--keep K takes"
kill -9 "$PID"; wait_gone "$PID"

# ---- refusals ----
run_gpusnap gc --json "$TEST_TMP"; expect "gc of a directory that is not a store" 11 "is not a gpusnap chunk store"
valid gc "... the refusal, short form"
run_gpusnap gc "$TEST_TMP/nothing"; expect "gc of a missing store" 11 "no chunk store at"
check "... in one line" one_line
run_gpusnap gc; expect "gc without STORE" 2
cp -a "$ST" "$TEST_TMP/open" && chmod 0777 "$TEST_TMP/open"
run_gpusnap gc "$TEST_TMP/open"; expect "gc of a store others may write" 5 "$TEST_TMP/open"
python3 -c 'import fcntl, sys, time
f = open(sys.argv[1])
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").write("locked")
time.sleep(120)' "$ST/lock" "$TEST_TMP/locked" &
LOCKER=$!
for _ in $(seq 3000); do [ -s "$TEST_TMP/locked" ] && break; sleep 0.01; done
run_gpusnap gc --wait 0.2 "$ST"; expect "gc while another holds the store's lock" 6 "is locked by"
check "... in one line (its wait said before)" bash -c "[ \$(grep -vc 'waiting up to' '$ERR_TXT') = 1 ]"
kill "$LOCKER"; wait "$LOCKER" 2>/dev/null; LOCKER=""
python3 "$MT" flip-byte "$S/img1/manifest.img" 300
before=$(sums "$ST")
run_gpusnap gc "$ST"; expect "gc with an image it cannot read" 11 "nothing removed"
check "... in one line, nothing removed" bash -c "[ \$(wc -l <'$ERR_TXT') = 1 ] && [ \"\$(cd '$ST' && find . -type f -print0 | sort -z | xargs -0 sha256sum)\" = \"$before\" ]"
test_done
