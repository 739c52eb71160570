#!/usr/bin/env bash
# t5041 - `gpusnap restore --lazy-pages` (GPUSNAP_RESTORE_LAZY): CRIU brings
# the process back with its CPU memory empty and a `criu lazy-pages` daemon
# fills it through userfaultfd while the driver restores the process and the
# agent loads its GPU data. The app of t4004 (tests/agent/agent_app.c
# --signals) on the host-memory fake driver, holding 200 MiB of CPU memory of
# its own beside its GPU data, dumped with the real CRIU 4. Checked here:
#  - --lazy-pages, GPUSNAP_RESTORE_LAZY=on and =auto: every byte of the CPU
#    and GPU data back (the app checks), the process running, --json says
#    lazy_pages and when every page was in; off (the default): whole, and
#    --json says why not lazily;
#  - a damaged pages file of CRIU: refused before CRIU runs (exit 11, one
#    line naming the file), no process, no daemon left, the image unchanged;
#    a damaged GPU chunk: refused while the process is held (exit 11);
#  - the daemon killed once CRIU restored the process (fault point
#    restore-lazy-daemon): exit 15 in one line naming the daemon, no process
#    left, the image unchanged and restoring afterwards;
#  - no userfaultfd (fault point criu-uffd), or a criu whose lazy-pages
#    daemon does not start: --lazy-pages and GPUSNAP_RESTORE_LAZY=on refuse
#    in one line (exit 15) and leave nothing; auto restores whole and says
#    why in --json; a bad value of the setting is a usage error.
# Needs root, CRIU (scripts/get-criu.sh unless GPUSNAP_CRIU is set), python3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fake_agent.sh"

signals_app_env agent_app criu
export AGENT_APP_HOST_MB=200
export AGENT_APP_BIG_MB=64
export GPUSNAP_IO_THREADS=2
export FAKE_CUDA_LOG=$TEST_TMP/fake.log

jtrue() { test "$(jget "$1")" = True; }
# daemons: the `criu lazy-pages` processes of this test's restores that still run (their work folders are
# in its GPUSNAP_RUN_DIR; criu may run through a wrapper that puts a loader first)
daemons() { pgrep -f "criu lazy-pages --images-dir .* --work-dir $GPUSNAP_RUN_DIR/" | wc -l; }
no_daemon() { local i; for ((i = 0; i < 500; i++)); do [ "$(daemons)" = 0 ] && return 0; sleep 0.01; done; return 1; }
flip() { # flip FILE OFFSET: inverts one bit
  python3 -c 'import sys; f=open(sys.argv[1],"r+b"); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^0x20]))' "$1" "$2"
}
# lazy_ok TITLE: the last restore --json was lazy and complete
lazy_ok() {
  check "$1: --json says lazy_pages" jtrue "['lazy_pages']"
  check "$1: every page was in before the restore ended ($(jget "['times']['lazy_pages_done_s']") s of $(jget "['times']['total_s']"))" \
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); t=d["times"]
sys.exit(not (d["lazy_pages_why"] == "" and 0 < t["lazy_pages_done_s"] <= t["total_s"] and 0 < t["ready_s"] <= t["total_s"]
              and t["criu_s"] > 0 and t["verify_cpu_s"] > 0))' "$OUT_TXT"
  check "$1: the restored process runs" alive "$PID"
  check "$1: gpusnap state says running" test "$("$GPUSNAP_BIN" state "$PID" 2>&1)" = running
  verify_ok "$1: every byte of its CPU and GPU data is back"
  check "$1: no daemon left" no_daemon
}
gone_now() { kill -9 "$PID" 2>/dev/null; wait_gone "$PID" 5; }

# ---- the app, dumped ----
start_app
verify_ok "the app's data after allocation (200 MiB of CPU memory, GPU data)"
img=$TEST_TMP/img
run_gpusnap dump --json -D "$img" "$PID"; expect "dump (agent path)" 0
check "the dumped process is gone" wait_gone "$PID" 5
pages=$(find "$img/cpu" -name 'pages-*.img' -size +100M | head -n 1)
check "CRIU's pages file holds the CPU memory ($(stat -c %s "$pages" 2>/dev/null) bytes)" test -n "$pages"
good=$(sums "$img")

# ---- lazy restores ----
run_gpusnap restore --lazy-pages --json -D "$img"; expect "restore --lazy-pages" 0
lazy_ok "--lazy-pages"
lazy_verified=$(jget "['verified_bytes']")
gone_now
# the daemon, seen: criu restore held (fault point criu-run) once the daemon listens
bg_gpusnap "criu-run=hold:2" restore --lazy-pages -D "$img"
check "a lazy restore reaches criu restore" at_fault criu-run 60
check "... its lazy-pages daemon runs then, one, with its socket in the restore's work folder" \
  test "$(daemons)" = 1 -a -n "$(find "$GPUSNAP_RUN_DIR" -name lazy-pages.socket -type s)"
bg_wait
check "... the restore succeeds (rc $BG_RC)" test "$BG_RC" = 0
check "... no daemon left, nor its socket" test "$(daemons)" = 0 -a -z "$(find "$GPUSNAP_RUN_DIR" -name 'lazy-pages*')"
verify_ok "... every byte back"
gone_now
RC=0; GPUSNAP_RESTORE_LAZY=on "$GPUSNAP_BIN" restore --json -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "restore with GPUSNAP_RESTORE_LAZY=on" 0
lazy_ok "GPUSNAP_RESTORE_LAZY=on"
gone_now
RC=0; GPUSNAP_RESTORE_LAZY=auto "$GPUSNAP_BIN" restore -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "restore with GPUSNAP_RESTORE_LAZY=auto (userfaultfd usable here)" 0 "CPU pages in (lazily) after"
verify_ok "auto: every byte back"
gone_now
RC=0; GPUSNAP_RESTORE_LAZY=off "$GPUSNAP_BIN" restore --json -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "restore with GPUSNAP_RESTORE_LAZY=off" 0
check "off: --json says not lazily, and why" test "$(jget "['lazy_pages'],d['lazy_pages_why']")" = "(False, 'not asked for (GPUSNAP_RESTORE_LAZY=off)')"
check "off: the same bytes verified as lazily ($lazy_verified)" test "$(jget "['verified_bytes']")" = "$lazy_verified"
check "off: no lazy times" test "$(jget "['times']['lazy_pages_done_s'] == d['times']['verify_cpu_s'] == 0")" = True
verify_ok "off: every byte back"
gone_now
check "the restores left the image unchanged" test "$(sums "$img")" = "$good"

# ---- refusals: exit code, one line, no process, no daemon, image unchanged ----
refused() { # refused TITLE CODE TEXT DIR [env...]: restore --lazy-pages from DIR is refused
  local title=$1 code=$2 text=$3 dir=$4 s0
  shift 4
  s0=$(sums "$dir")
  OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err
  RC=0; env "$@" "$GPUSNAP_BIN" restore --lazy-pages -D "$dir" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
  expect "$title" "$code" "$text"
  check "$title: one-line message" one_error
  check "$title: no process left" gone_or_zombie "$PID"
  check "$title: no daemon left" no_daemon
  check "$title: image unchanged" test "$(sums "$dir")" = "$s0"
}
bad=$TEST_TMP/bad
rm -rf "$bad"; cp -a "$img" "$bad"
flip "$bad/cpu/$(basename "$pages")" $((150 << 20))
: >"$FAKE_CUDA_LOG"
refused "a damaged pages file" 11 "$(basename "$pages")' is corrupt" "$bad"
check "... found before CRIU ran: the driver restored nothing" bash -c "! grep -q '^restore ' '$FAKE_CUDA_LOG'"
rm -rf "$bad"; cp -a "$img" "$bad"
flip "$bad/gpu-data-0000.img" $((4096 + 4096))
refused "a damaged GPU chunk" 11 "gpu-data-0000.img" "$bad"
rm -rf "$bad"

refused "the lazy-pages daemon killed mid-restore" 15 "the lazy-pages daemon (criu lazy-pages, pid" "$img" \
  GPUSNAP_FAULT=restore-lazy-daemon
check "... it says how it ended, and that the process was killed" \
  grep -q "was killed by signal 9 before every CPU page of process $PID was in (log: .*lazy-pages-$PID-.*): the restored process $PID was killed; the image is unchanged" "$ERR_TXT"
run_gpusnap restore --lazy-pages -D "$img"; expect "the image restores after that" 0
verify_ok "... every byte back"
gone_now

refused "--lazy-pages without userfaultfd" 15 "cannot restore '$img' with lazy pages (--lazy-pages): this kernel has no userfaultfd" \
  "$img" GPUSNAP_FAULT=criu-uffd
RC=0; GPUSNAP_FAULT=criu-uffd GPUSNAP_RESTORE_LAZY=on "$GPUSNAP_BIN" restore -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "GPUSNAP_RESTORE_LAZY=on without userfaultfd" 15 "with lazy pages (GPUSNAP_RESTORE_LAZY=on)"
check "... no process left" gone_or_zombie "$PID"
RC=0; GPUSNAP_FAULT=criu-uffd GPUSNAP_RESTORE_LAZY=auto "$GPUSNAP_BIN" restore --json -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "GPUSNAP_RESTORE_LAZY=auto without userfaultfd restores whole" 0
check "auto: --json says not lazily, and why" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not (d["lazy_pages"] is False and "no userfaultfd" in d["lazy_pages_why"]))' "$OUT_TXT"
verify_ok "auto without userfaultfd: every byte back"
gone_now
# a criu whose lazy-pages daemon does not start: on refuses, auto restores whole and says why
fake_criu criu-nolazy "[ \"\$1\" = lazy-pages ] && { echo 'Error (criu/uffd.c:1): lazy-pages: not here' >&2; exit 1; }
exec '$GPUSNAP_CRIU' \"\$@\""
refused "--lazy-pages with a daemon that does not start" 15 "criu lazy-pages failed to start: ended with exit status 1: lazy-pages: not here" \
  "$img" GPUSNAP_CRIU="$TEST_TMP/criu-nolazy"
check "... its cause ends the line (it kept no log to name)" grep -q "lazy-pages: not here$" "$ERR_TXT"
RC=0; GPUSNAP_CRIU="$TEST_TMP/criu-nolazy" GPUSNAP_RESTORE_LAZY=auto "$GPUSNAP_BIN" restore --json -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "GPUSNAP_RESTORE_LAZY=auto with a daemon that does not start restores whole" 0
check "auto: --json says not lazily, and why" python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); sys.exit(not (d["lazy_pages"] is False and "lazy-pages failed to start" in d["lazy_pages_why"]))' "$OUT_TXT"
check "auto: the GPU data was verified all the same ($(jget "['verified_bytes']") bytes)" test "$(jget "['verified_bytes']")" = "$lazy_verified"
verify_ok "auto with a daemon that does not start: every byte back"
gone_now
RC=0; GPUSNAP_RESTORE_LAZY=maybe "$GPUSNAP_BIN" restore -D "$img" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
expect "a bad GPUSNAP_RESTORE_LAZY is a usage error" 2 "GPUSNAP_RESTORE_LAZY='maybe'"
check "the image is unchanged after all" test "$(sums "$img")" = "$good"

test_done
