#!/usr/bin/env bash
# t5010 - an image's trust and the safety of its directory, end to end on the
# driver path (real CRIU 4, the fake libcuda as in t5002):
#  - CRIU's files are listed and checksummed (cpu-files.img): a flipped bit in
#    one is named by inspect --verify and by restore's checksum pass (the
#    process never runs); an extra or missing one is named by every command;
#    an image without the list still restores, and inspect says so;
#  - a symlink (to another user's world-writable file), a hard link, or a FIFO
#    (as the manifest, a data file, in cpu/) is refused at once by inspect,
#    inspect --verify and restore (exit 5 or 11, the file named; a FIFO used
#    to hang them);
#  - an image below a directory others can write (not sticky) is refused,
#    the directory named (exit 5); below a sticky one it restores;
#  - two dumps to one DIR: the second fails at once (exit 6) naming the
#    first, which completes; a dump over another process's image is refused
#    (exit 2) unless --replace; periodic dumps of one process replace each other;
#  - a dump that cannot publish (process gone) keeps its image under
#    DIR.kept-PID-TIME and says so; a dump killed before publishing leaves one
#    that the next dump keeps under such a name; both restore; later dumps
#    never delete them;
#  - a full disk (exit 13) or an I/O error (exit 1) while writing leaves DIR
#    as it was and the process running.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}

fake_cuda_env criu
# a refused image must keep its files, their modes and their types (a FIFO stays one)
SUMS_ENTRIES='%p %m %y\n'

cleanup_counters() {
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_counters EXIT

# restore_ok ARGS...: run_gpusnap restore, once more if a short-lived process of
# this script held the PID the image needs meanwhile (gpusnap says "try again")
restore_ok() {
  run_gpusnap restore "$@"
  [ "$RC" = 15 ] && grep -q "was in use during the restore and is free now" "$ERR_TXT" && run_gpusnap restore "$@"
}
dump_gone() { # dump_gone PID DIR [ARGS]: dumps PID into DIR, which must work; PID is gone after
  local p=$1 d=$2
  shift 2
  run_gpusnap dump "$@" -D "$d" "$p"; expect "dump of $p to $(basename "$d") $*" 0
  wait_gone "$p"
}

# ---- an image with its CRIU files listed ----
log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
img=$TEST_TMP/img
dump_gone "$pid" "$img"
check "the image lists CRIU's files (cpu-files.img, 0600)" test "$(stat -c %a "$img/cpu-files.img" 2>/dev/null)" = 600
run_gpusnap inspect "$img"; expect "inspect: CRIU's files are checksummed" 0 "files, "
check "inspect says checksummed" grep -q "^cpu state    present (cpu/): [0-9]* files, .*, checksummed$" "$OUT_TXT"
run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify" 0
check "JSON: CRIU's files checksummed, counted, verified" [ "$(json_get "$OUT_TXT" '["image"]["cpu_files"]["checksummed"],d["image"]["cpu_files"]["count"]>5,d["verify"]["ok"]')" = "(True, True, True)" ]
run_gpusnap inspect --verify "$img"; expect "inspect --verify counts CRIU's files" 0 "verify       ok: 0 stored chunks and "
lines=$(wc -l <"$log")

bad=$TEST_TMP/bad
fresh_copy() { rm -rf "$bad"; cp -a "${1:-$img}" "$bad"; }
# refuses TITLE CODE TEXT COMMAND...: each of inspect, inspect --verify, restore
# named exits CODE within 20 s with TEXT in one line; the image unchanged, no process
refuses() {
  local title=$1 code=$2 text=$3 c s0
  shift 3
  for c in "$@"; do
    s0=$(sums "$bad")
    RC=0
    # shellcheck disable=SC2086
    timeout 20 "$GPUSNAP_BIN" $c "$bad" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
    OUT_TXT=$TEST_TMP/out ERR_TXT=$TEST_TMP/err
    expect "$title: $c" "$code" "$text"
    check "$title: $c: one line" one_error
    check "$title: $c: image unchanged" [ "$(sums "$bad")" = "$s0" ]
    if [ "$c" = restore ]; then
      check "$title: restore left no process" wait_gone "$pid" 5
      check "$title: the process never ran" [ "$(wc -l <"$log")" = "$lines" ]
    fi
  done
}
flip() { python3 -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^0x10]))' "$1" "$2"; }

# ---- CRIU's files are checksummed ----
fresh_copy; flip "$bad/cpu/pages-1.img" 100
run_gpusnap inspect "$bad"; expect "a flipped bit in CRIU's pages: inspect (no reads) still opens it" 0
refuses "a flipped bit in CRIU's pages" 11 "cpu/pages-1.img' is corrupt" "inspect --verify" restore
fresh_copy; echo x >"$bad/cpu/extra.img"; chmod 600 "$bad/cpu/extra.img"
refuses "an extra file in cpu/" 11 "cpu/extra.img' is not one of the image's files" inspect restore
fresh_copy; rm "$bad/cpu/inventory.img"
refuses "a missing file in cpu/" 11 "cpu/inventory.img' is missing" inspect restore
fresh_copy; flip "$bad/cpu-files.img" 70
refuses "a flipped bit in the list of CRIU's files" 11 "cpu-files.img" inspect restore

# ---- links and FIFOs ----
evil=$TEST_TMP/evil-pages.img
cp "$img/cpu/pages-1.img" "$evil"; chown 65534:65534 "$evil"; chmod 666 "$evil"
fresh_copy; rm "$bad/cpu/pages-1.img"; ln -s "$evil" "$bad/cpu/pages-1.img"
refuses "CRIU's pages a symlink to another user's world-writable file" 5 "cpu/pages-1.img': a symbolic link" inspect "inspect --verify" restore
fresh_copy; ln "$bad/cpu/inventory.img" "$TEST_TMP/second-name"
refuses "a hard-linked file in cpu/" 5 "cpu/inventory.img': it has 2 hard links" inspect restore
rm -f "$TEST_TMP/second-name"
fresh_copy; rm "$bad/cpu/inventory.img"; mkfifo -m 600 "$bad/cpu/inventory.img"
refuses "a FIFO in cpu/" 11 "cpu/inventory.img' is a FIFO" inspect "inspect --verify" restore
fresh_copy; rm "$bad/manifest.img"; mkfifo -m 600 "$bad/manifest.img"
refuses "a FIFO as the manifest" 11 "manifest.img' is a FIFO" inspect "inspect --verify" restore
graft=$TEST_TMP/graft
check "a copy of the image with data files (grafted)" "$build/tests/apps/image_graft" "$img" "$graft"
fresh_copy "$graft"; rm "$bad/gpu-data-0000.img"; mkfifo -m 600 "$bad/gpu-data-0000.img"
refuses "a FIFO as a data file" 11 "gpu-data-0000.img' is a FIFO" inspect "inspect --verify" restore

# ---- an image written before the list ----
fresh_copy; rm "$bad/cpu-files.img"
run_gpusnap inspect "$bad"; expect "an image without the list: inspect says so" 0 "not checksummed"
# verified means every file a restore uses was checked: without the list, only when asked
refuses "an image without the list of CRIU's files" 11 "has no checksums of CRIU's files" "inspect --verify" restore
check "the refusals name the way out" grep -q -- "--allow-unverified-cpu" "$TEST_TMP/err"
run_gpusnap inspect --verify --json "$bad"; expect "inspect --verify --json without the list" 11
check "JSON: not ok, CRIU's files unchecked, the cause" [ "$(json_get "$OUT_TXT" '["verify"]["ok"],d["verify"]["cpu_files_checked"],d["verify"]["cpu_files_unverified_allowed"],"checksums of CRIU" in d["verify"]["message"]')" = "(False, False, False, True)" ]
run_gpusnap inspect --verify --allow-unverified-cpu --json "$bad"; expect "inspect --verify --allow-unverified-cpu" 0
check "JSON: ok, CRIU's files unchecked and allowed" [ "$(json_get "$OUT_TXT" '["verify"]["ok"],d["verify"]["cpu_files_checked"],d["verify"]["cpu_files_unverified_allowed"]')" = "(True, False, True)" ]
run_gpusnap inspect --verify --allow-unverified-cpu "$bad"; expect "inspect --verify --allow-unverified-cpu says what it did not check" 0 "CRIU's files unverified"
# a restore killed while its copy is held: the command named to finish it carries the flag it needs
GPUSNAP_FAULT=restore-before-cont=kill run_gpusnap restore --allow-unverified-cpu "$bad"
check "a restore --allow-unverified-cpu killed with its copy held (rc $RC)" [ "$RC" = 137 ]
run_gpusnap state "$pid"
check "state names the restore again, with --allow-unverified-cpu" \
  grep -qF "gpusnap restore --allow-unverified-cpu -D '$bad' removes it and restores again" "$OUT_TXT" "$ERR_TXT"
restore_ok --allow-unverified-cpu "$bad"; expect "restore --allow-unverified-cpu of an image without the list" 0 "has no list of CRIU's files"
check "it runs" grows "$log"
kill -9 "$pid"; wait_gone "$pid"

# ---- the directories above the image ----
open=$TEST_TMP/open
mkdir -m 777 "$open"; cp -a "$img" "$open/img"
lines=$(wc -l <"$log")
bad=$open/img
refuses "an image below a directory anyone can write" 5 "the directory '$open' above it is writable by others (mode 0777, not sticky)" inspect restore
chmod 1777 "$open"
restore_ok "$open/img"; expect "below a sticky directory (as /tmp) it restores" 0
check "it runs" grows "$log"
kill -9 "$pid"; wait_gone "$pid"
chmod 700 "$open"

# ---- one writer per DIR; whose image it is ----
start_counter "$TEST_TMP/a.log"; pa=$NEWPID
start_counter "$TEST_TMP/b.log"; pb=$NEWPID
img2=$TEST_TMP/img2
# the first dump holds its lock for 10 s more before it publishes
GPUSNAP_FAULT=image-publish=hold:10 "$GPUSNAP_BIN" dump --leave-running -D "$img2" "$pa" >"$TEST_TMP/first.out" 2>"$TEST_TMP/first.err" &
first=$!
for _ in $(seq 3000); do [ -n "$(tmp_dirs "$img2")" ] && break; sleep 0.01; done
t0=$(date +%s%N)
run_gpusnap dump --leave-running -D "$img2" "$pb"; expect "a second dump to the same DIR fails" 6 "another gpusnap (pid $first"
check "at once (under 5 s, not after the 10 s hold)" [ $(($(date +%s%N) - t0)) -lt 5000000000 ]
check "in one line" one_error
check "the second process was not touched: it runs" grows "$TEST_TMP/b.log"
rc=0; wait "$first" || rc=$?
check "the first dump completes (rc $rc)" [ "$rc" = 0 ]
run_gpusnap inspect --json "$img2"; expect "inspect the first dump's image" 0
check "DIR holds the first process's image" [ "$(json_get "$OUT_TXT" '["image"]["process"]["pid"]')" = "$pa" ]
s2=$(sums "$img2")
run_gpusnap dump --leave-running -D "$img2" "$pb"; expect "a dump over another process's image is refused" 2 "holds the image of another process, $pa (cpu_counter); not replacing it with one of $pb (cpu_counter)"
check "in one line" one_error
check "the other process's image stays" [ "$(sums "$img2")" = "$s2" ]
check "the refused process runs on" grows "$TEST_TMP/b.log"
run_gpusnap dump --leave-running -D "$img2" "$pa"; expect "a periodic dump of the same process replaces its image" 0
run_gpusnap dump --leave-running -D "$img2" "$pa"; expect "and again" 0
run_gpusnap dump --leave-running --replace -D "$img2" "$pb"; expect "--replace replaces another process's image" 0
run_gpusnap inspect --json "$img2"; expect "inspect after --replace" 0
check "DIR holds the second process's image now" [ "$(json_get "$OUT_TXT" '["image"]["process"]["pid"]')" = "$pb" ]

# ---- images that are not published are kept, never deleted ----
img4=$TEST_TMP/img4
GPUSNAP_FAULT=image-publish=fail:EIO run_gpusnap dump -D "$img4" "$pa"
expect "a dump whose publish fails after CRIU took the process" 1 "process $pa was dumped, but its image was not published; it is kept at '$img4.kept-$pa-"
check "in one line" one_error
check "the process is gone (CRIU took it)" wait_gone "$pa"
kept=$(compgen -G "$img4.kept-$pa-*")
check "the kept image is there ($kept), named in the message" grep -qF "'$kept'" "$ERR_TXT"
check "nothing at DIR, no temporary directory" [ ! -e "$img4" -a -z "$(tmp_dirs "$img4")" ]
dump_gone "$pb" "$img4"
check "a later dump to the same DIR leaves the kept image alone" [ -f "$kept/manifest.img" ]
restore_ok "$kept"; expect "the kept image restores" 0
check "it runs" grows "$TEST_TMP/a.log"

# gpusnap killed after CRIU, before the publish: the next dump keeps what it left
img5=$TEST_TMP/img5
RC=0; GPUSNAP_FAULT=image-publish=kill "$GPUSNAP_BIN" dump -D "$img5" "$pa" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
check "gpusnap killed before the publish (rc $RC)" [ "$RC" = 137 ]
check "the process is gone (CRIU took it)" wait_gone "$pa"
check "its image is left at a temporary name" [ -n "$(tmp_dirs "$img5")" ]
start_counter "$TEST_TMP/c.log"; pc=$NEWPID
dump_gone "$pc" "$img5"
check "the next dump keeps it and says so" grep -q "held an image a dump did not publish (of process $pa; maybe its only copy): kept as '$img5.kept-$pa-" "$ERR_TXT"
kept5=$(compgen -G "$img5.kept-$pa-*")
check "no temporary directory left" [ -z "$(tmp_dirs "$img5")" ]
restore_ok "$kept5"; expect "the image the killed dump left restores" 0
check "it runs" grows "$TEST_TMP/a.log"

# ---- failed writes leave DIR as it was ----
s2=$(sums "$img2")
GPUSNAP_FAULT=image-write=fail:ENOSPC run_gpusnap dump --leave-running --replace -D "$img2" "$pa"
expect "disk full writing the manifest" 13 "no space left"
check "in one line" one_error
GPUSNAP_FAULT=image-write@2=fail:ENOSPC run_gpusnap dump --leave-running --replace -D "$img2" "$pa"
expect "disk full writing the list of CRIU's files" 13 "no space left"
GPUSNAP_FAULT=image-write=fail:EIO run_gpusnap dump --leave-running --replace -D "$img2" "$pa"
expect "an I/O error writing the manifest" 1 "Input/output error"
check "in one line" one_error
check "DIR is as it was" [ "$(sums "$img2")" = "$s2" ]
check "no temporary directory left" [ -z "$(tmp_dirs "$img2")" ]
check "the process runs on" grows "$TEST_TMP/a.log"

test_done
