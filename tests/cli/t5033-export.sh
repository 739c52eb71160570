#!/usr/bin/env bash
# t5033 - `gpusnap export SRC DEST`: an incremental image (dump --parent) made
# self-contained, on the agent path without a GPU (the app of t5032 on the
# host-memory fake driver, dumped with the real CRIU 4). Checked here:
#  - DEST holds every chunk itself (no parent, format version 1), verifies,
#    and restores every byte with SRC's whole series deleted;
#  - --compress writes DEST compressed (version 2), which verifies too;
#  - refused in one line: SRC's chain broken (11, the link named), DEST a
#    directory that is no image (2), a bad --compress (2), SRC = DEST (2);
#  - --json: what was written (chunks, bytes, codec), and the refusals'
#    documents, valid against docs/json/export.json.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"
. "$(dirname "$0")/json_lib.sh"

signals_app_env agent_app criu
# the documents against docs/json where python3-jsonschema is (json_lib.sh), else said
schemas=$GPUSNAP_SRC/docs/json
if (json_lib_init) >/dev/null; then json_lib_init; else valid() { echo "SKIP: no python3-jsonschema: $2 not validated"; }; fi
export AGENT_APP_BIG_MB=32 AGENT_APP_ZERO_MB=8
export GPUSNAP_IO_THREADS=2

S=$TEST_TMP/series
mkdir -p "$S"
start_app
run_gpusnap dump --leave-running -D "$S/img1" "$PID"; expect "full dump img1" 0
check "the app fills its zero block" test "$(signal_reply USR2 ZERO)" = "ZERO 1"
run_gpusnap dump --leave-running --parent "$S/img1" -D "$S/img2" "$PID"; expect "incremental dump img2" 0
kill -9 "$PID"; wait_gone "$PID"

out=$TEST_TMP/exported
run_gpusnap export "$S/img2" "$out"; expect "export of the incremental image" 0
run_gpusnap inspect --json --verify "$out"; expect "inspect --verify of the export" 0
check "it has no parent, is of version 1, and verifies" \
  test "$(jget "['image']['parent']")" = None -a "$(jget "['image']['format_version']")" = 1 -a "$(jget "['verify']['ok']")" = True
check "every stored chunk kept its fingerprint" \
  test "$(jget "['image']['chunks']['fingerprinted']")" = "$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["image"]["chunks"]; print(c["count"] - c["zero"])' "$OUT_TXT")"
zout=$TEST_TMP/exported-zstd
run_gpusnap export --json --compress zstd "$S/img2" "$zout"; expect "export --compress zstd" 0
valid export "export --json --compress zstd"
check "... it says what it wrote (zstd, chunks compressed, fewer bytes stored than data)" \
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["ok"] and d["compress"] == "zstd" and d["compressed_chunks"] > 0 and 0 < d["stored_bytes"] < d["data_bytes"] and d["dest"] == sys.argv[2]))' "$OUT_TXT" "$zout"
run_gpusnap inspect --json --verify "$zout"; expect "inspect --verify of the compressed export" 0
check "it is compressed (zstd, version 2) and verifies" \
  test "$(jget "['image']['chunks']['codec']")" = zstd -a "$(jget "['image']['format_version']")" = 2 -a "$(jget "['verify']['ok']")" = True

# the refusals
run_gpusnap export --compress gzip "$S/img2" "$TEST_TMP/x"; expect "a bad --compress" 2 "--compress"
run_gpusnap export "$S/img2" "$S/img2"; expect "SRC = DEST" 2 "the same directory"
mkdir -p "$TEST_TMP/notimage" && echo x >"$TEST_TMP/notimage/file"
run_gpusnap export "$S/img2" "$TEST_TMP/notimage"; expect "DEST a directory that is no image" 2
check "... in one line" one_line
broken=$TEST_TMP/broken
cp -a "$S" "$broken" && rm -rf "$broken/img1"
run_gpusnap export "$broken/img2" "$TEST_TMP/y"; expect "export of a broken chain" 11 "its parent '$broken/img1' is missing"
check "... in one line" one_line
run_gpusnap export --json "$broken/img2" "$TEST_TMP/y"; expect "export --json of a broken chain" 11
valid export "... the refusal, short form"
run_gpusnap export --json --compress gzip "$S/img2" "$TEST_TMP/x"; expect "export --json with a bad --compress" 2
valid export "... usage, short form"
check "nothing was made" test ! -e "$TEST_TMP/y"

# the export stands alone
rm -rf "$S"
run_gpusnap restore -D "$out"; expect "restore from the export, the series gone" 0
verify_ok "every byte is back from the export"
kill -9 "$PID"; wait_gone "$PID"
test_done
