#!/usr/bin/env bash
# t5013 - dump --tree checksums CRIU's files as soon as CRIU wrote them: a
# tree dump killed after that (image-publish=kill, before the rename) keeps an
# image that verifies whole, and `state` names a plain `restore -D` of it,
# which brings the tree back. With the fake driver and the real CRIU.
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

fake_cuda_env criu

# a parent and its child, both CUDA processes to the fake driver, in a session of their own and with
# none of the test's descriptors (CRIU would have to dump ctest's log with them)
start_sleep_tree
parent=$TREE_PARENT child=$TREE_CHILD
echo "0 0" >"$FAKE_CUDA_DIR/$parent"
echo "0 0" >"$FAKE_CUDA_DIR/$child"

img=$TEST_TMP/img
GPUSNAP_FAULT=image-publish=kill run_gpusnap dump --tree -D "$img" "$parent"
check "kill -9 before the publish's rename (rc $RC)" [ "$RC" = 137 ]
check "CRIU took the tree" wait_gone "$parent"
kept=$(tmp_dirs "$img")
check "the image is kept at its temporary name ($kept)" test -n "$kept" -a -f "$kept/manifest.img" -a ! -e "$img"
run_gpusnap state "$parent"
expect "state names the kept image" 3 "the image is complete at '$kept'; gpusnap restore -D '$kept' brings the tree back"
check "no --allow-unverified-cpu is needed" [ -z "$(grep -- --allow-unverified-cpu "$ERR_TXT")" ]
run_gpusnap inspect --verify --json "$kept"; expect "the kept image verifies whole" 0
check "CRIU's files were checked" [ "$(json_get "$OUT_TXT" '["verify"]["ok"],d["verify"]["cpu_files_checked"]')" = "(True, True)" ]
run_gpusnap restore -D "$kept"; expect "the kept image restores the tree" 0 "restored $parent"
check "the child is back" alive "$child"
kill -9 "$child" "$parent" 2>/dev/null

test_done
