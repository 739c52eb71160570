#!/usr/bin/env bash
# t5030 - `gpusnap dump --compress lz4|zstd[:LEVEL]` on the agent path without
# a GPU: the app of t4004 (tests/agent/agent_app.c, whose blocks hold
# patterns that compress) under libgpusnap.so on the host-memory fake driver,
# dumped with the real CRIU 4. Checked here:
#  - a bad --compress (unknown codec, level out of range): usage error, exit 2,
#    one line, the process untouched;
#  - dump --compress lz4 and zstd:5: format version 2, compressed chunks,
#    inspect (text and --json) shows codec and ratio, --verify checks both
#    checksums; restore brings every byte back (the app checks);
#  - inspect --json of a compressed image is valid against docs/json/inspect.json;
#  - a dump without --compress still writes format version 1;
#  - a compressed chunk damaged on disk: restore (with and without the
#    checksum pass) and inspect --verify refuse it in one line naming the
#    chunk, exit 11, no process left; the good image restores after that;
#  - an unknown codec in an image: refused in one line, exit 11;
#  - an image of the version 1 writer from before compressed chunks existed
#    (tests/fuzz/regress/image/v1-small, in fuzz_image's layout) still opens
#    and verifies.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app criu
export AGENT_APP_BIG_MB=200
export GPUSNAP_IO_THREADS=2

# the chunk table and its edits: tests/cli/manifest_tool.py
MT=$(dirname "$0")/manifest_tool.py
chunks() { python3 "$MT" chunks "$1"; }
compressed_chunks() { chunks "$1" | awk '$2 == 2' | wc -l; }

start_app
verify_ok "the app's data after allocation"
phys0=$(phys)

# ---- bad --compress: usage errors, nothing done ----
for bad in gzip lz4:0 lz4:13 zstd:23 zstd:x "zstd:"; do
  run_gpusnap dump --compress "$bad" -D "$TEST_TMP/never" "$PID"
  expect "dump --compress '$bad' is a usage error" 2 "--compress"
  check "... in one line" one_line
done
check "the process runs on untouched" test "$(phys)" = "$phys0"
check "nothing was created" test ! -e "$TEST_TMP/never"

# ---- lz4 ----
img=$TEST_TMP/lz4
run_gpusnap dump --compress lz4 --json -D "$img" "$PID"; expect "dump --compress lz4" 0
wait_gone "$PID" 5
run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify of the lz4 image" 0
check "format version 2, codec lz4, compressed chunks, verified" \
  test "$(jget "['image']['format_version']")" = 2 -a "$(jget "['image']['chunks']['codec']")" = lz4 \
  -a "$(jget "['image']['chunks']['compressed']")" -gt 0 -a "$(jget "['verify']['ok']")" = True
if python3 -c 'import jsonschema' 2>/dev/null; then
  schemas=${GPUSNAP_SRC:?GPUSNAP_SRC not set}/docs/json
  . "$(dirname "$0")/json_lib.sh"
  json_lib_init
  valid inspect "inspect --json of a compressed image"
else
  echo "SKIP: python3-jsonschema missing: the inspect document is not checked against its schema here (t7001 does)"
fi
ratio=$(jget "['image']['chunks']['ratio']")
check "the app's patterns compress (ratio $ratio > 2)" python3 -c "import sys; sys.exit(not $ratio > 2)"
check "stored bytes (on disk) are the data over the ratio" python3 -c "import json,sys
c=json.load(open(sys.argv[1]))['image']['chunks']; sys.exit(not (c['stored_bytes'] * 2 < c['data_bytes']))" "$OUT_TXT"
run_gpusnap inspect "$img"; expect "inspect of the lz4 image" 0
check "inspect says codec and ratio" grep -qE "^compression  lz4, [0-9]+ of [0-9]+ stored chunks: .* ratio [0-9.]+$" "$OUT_TXT"
good=$(sums "$img")
run_gpusnap restore -D "$img"; expect "restore of the lz4 image" 0
check "the restored process runs" alive "$PID"
verify_ok "every byte is back after the lz4 restore"
check "nothing stays pinned" test "$(pinned)" = 0

# ---- zstd:5, --leave-running ----
img2=$TEST_TMP/zstd
run_gpusnap dump --compress zstd:5 --leave-running -D "$img2" "$PID"; expect "dump --compress zstd:5 --leave-running" 0
check "the process runs on" alive "$PID"
verify_ok "its data after the compressed dump"
run_gpusnap inspect --json --verify "$img2"; expect "inspect --verify of the zstd image" 0
check "codec zstd, verified" test "$(jget "['image']['chunks']['codec']")" = zstd -a "$(jget "['verify']['ok']")" = True
kill -9 "$PID"; wait_gone "$PID"
run_gpusnap restore -D "$img2"; expect "restore of the zstd image" 0
verify_ok "every byte is back after the zstd restore"

# ---- without --compress: version 1 ----
img3=$TEST_TMP/plain
run_gpusnap dump --leave-running -D "$img3" "$PID"; expect "dump without --compress" 0
run_gpusnap inspect --json "$img3"; expect "inspect of the uncompressed image" 0
check "format version 1, nothing compressed" \
  test "$(jget "['image']['format_version']")" = 1 -a "$(jget "['image']['chunks']['codec']")" = none
check "its ratio is 1" python3 -c "import sys; sys.exit(not $(jget "['image']['chunks']['ratio']") == 1)"
kill -9 "$PID"; wait_gone "$PID"

# ---- a damaged compressed chunk ----
bad=$TEST_TMP/bad
cp -a "$img" "$bad"
read -r idx _ fi fo stored _ aid off < <(chunks "$bad" | awk '$2 == 2 && $5 > 64' | head -1)
check "the image has a compressed chunk to damage (chunk $idx)" test -n "$idx"
python3 "$MT" flip-byte "$bad/$(printf 'gpu-data-%04d.img' "$fi")" $((fo + stored / 2))
s0=$(sums "$bad")
want="chunk $idx (allocation $aid, offset $off"
run_gpusnap inspect --verify "$bad"; expect "inspect --verify of a damaged compressed chunk" 11 "$want"
check "... naming the stored bytes' checksum" grep -q "checksum of the stored bytes" "$ERR_TXT"
check "... in one line" one_line
run_gpusnap restore -D "$bad"; expect "restore (checksum pass) of a damaged compressed chunk is refused" 11 "$want"
check "... in one line" one_error
run_gpusnap restore --no-verify -D "$bad"; expect "restore --no-verify: the agent finds it" 11 "is corrupt"
check "no process is left" gone_or_zombie "$PID"
check "the damaged image is unchanged" test "$(sums "$bad")" = "$s0"
run_gpusnap restore -D "$img"; expect "restore from the good image after that" 0
verify_ok "the data after the refused restores"
check "the good image is unchanged" test "$(sums "$img")" = "$good"
kill -9 "$PID"; wait_gone "$PID"

# ---- an unknown codec ----
unk=$TEST_TMP/unknown
cp -a "$img" "$unk"
python3 "$MT" set-codec "$unk" "$idx" 9
run_gpusnap inspect "$unk"; expect "an unknown codec is refused" 11 "compressed with unknown codec 9"
check "... in one line" one_line
run_gpusnap restore -D "$unk"; expect "restore of an image with an unknown codec" 11 "unknown codec 9"
check "... in one line" one_error

# ---- an image of the version 1 writer before this format version ----
v1=$TEST_TMP/v1
python3 - "$(dirname "$0")/../fuzz/regress/image/v1-small" "$v1" <<'EOF'
import os, struct, sys
d = open(sys.argv[1], "rb").read()
out = sys.argv[2]
os.mkdir(out, 0o700)
n, p = d[1], 2
def rec():
    global p
    ln, = struct.unpack_from("<I", d, p)
    b = d[p + 4:p + 4 + ln]
    p += 4 + ln
    return b
names = ["manifest.img"] + ["gpu-data-%04d.img" % i for i in range(n)]
for name in names:
    fd = os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, rec())
    os.close(fd)
EOF
run_gpusnap inspect --json --verify "$v1"; expect "an image of the version 1 writer opens and verifies" 0
check "... as version 1, uncompressed, every chunk checked" \
  test "$(jget "['image']['format_version']")" = 1 -a "$(jget "['verify']['ok']")" = True \
  -a "$(jget "['image']['chunks']['compressed']")" = 0

test_done
