#!/usr/bin/env bash
# t7001 - every --json document validates against its schema in docs/json
# (JSON Schema 2020-12, checked with python3-jsonschema), on the fake libcuda:
#  - docs/json holds valid schemas, one for each command whose --help offers
#    --json and none besides (a new command without a schema fails here);
#  - suspend, resume, switch, state (with and without PID) and inspect, succeeding
#    and failing (a refusal after the command's work began, and the short
#    form of a failure before it: no such process, not a CUDA process, a
#    usage error), and with CRIU dump (one process, --leave-running, a
#    tree of two), restore (one process with --lazy-pages, a tree whole and
#    its --lazy-pages refused) and inspect --verify, also
#    failing (an image taken in a way gpusnap does not know: its word for
#    it stays out of restore's path);
#  - the check can fail: a document missing a field, with a retyped field,
#    with an unknown field, or with another version is refused.
# The agent's documents: t7002. Skips (77) without python3-jsonschema.
. "$(dirname "$0")/lib.sh"

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
schemas=$src/docs/json
. "$(dirname "$0")/json_lib.sh"
. "$(dirname "$0")/fake_agent.sh" # close_inherited_fds
json_lib_init

# ---- the schemas themselves, and one per command with --json ----
commands=$("$GPUSNAP_BIN" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1}')
check "gpusnap --help lists commands" [ -n "$commands" ]
with_json=()
for c in $commands; do
  "$GPUSNAP_BIN" "$c" --help 2>&1 | grep -q -- '--json' && with_json+=("$c")
done
check "the commands offering --json: ${with_json[*]}" [ "${#with_json[@]}" -ge 6 ]
if "$JSON_PY" "$JSON_CHECK" "$schemas" schemas "${with_json[@]}" >"$TEST_TMP/schemas.log"; then
  pass "docs/json: valid 2020-12 schemas, exactly one per command with --json"
else
  fail "docs/json: valid 2020-12 schemas, exactly one per command with --json" "$(cat "$TEST_TMP/schemas.log")"
fi
# the same check fails for a command without a schema
check "... and says so for a command offering --json without a schema" \
  sh -c "! '$JSON_PY' '$JSON_CHECK' '$schemas' schemas ${with_json[*]} newcommand >/dev/null"

fake_cuda_env

# ---- suspend, resume, state: driver path ----
start_cuda_proc; p=$NEWPID
run_gpusnap state --json "$p"; expect "state --json PID" 0
valid state "... running"
run_gpusnap suspend --json "$p"; expect "suspend --json" 0
valid suspend "... suspended"
cp "$OUT_TXT" "$TEST_TMP/suspend.json"
run_gpusnap state --json "$p"; expect "state --json PID, suspended" 0
valid state "... suspended"
run_gpusnap suspend --json "$p"; expect "suspend --json again: refused" 6
valid suspend "... the refusal, with the processes as they are"
check "... ok false, error state" [ "$(json_get "$OUT_TXT" '["ok"],d["error"],d["exit_code"]')" = "(False, 'state', 6)" ]
run_gpusnap resume --json --map 0=7 "$p"; expect "resume --json --map to a GPU that is not there" 10
valid resume "... gpu-map"
run_gpusnap resume --json "$p"; expect "resume --json" 0
valid resume "... resumed"
run_gpusnap state --json; expect "state --json (all)" 0
valid state "... the list"

# ---- switch ----
start_cuda_proc; q=$NEWPID
run_gpusnap suspend "$q"; expect "a second process suspended" 0
run_gpusnap switch --json "$p" "$q"; expect "switch --json" 0
valid switch "... switched"
run_gpusnap switch --json "$p" "$q"; expect "switch --json with OUT not running: refused" 6
valid switch "... the refusal, with both processes as they are"
GPUSNAP_FAULT=switch-after-both run_gpusnap switch --json --overlap always "$q" "$p"; expect "switch --json failing after both halves" 1
valid switch "... failed and undone"
check "... undone, ok false, order together" [ "$(json_get "$OUT_TXT" '["undone"],d["ok"],d["order"]')" = "(True, False, 'together')" ]
run_gpusnap switch --json "$q" "$q"; expect "switch --json of one process twice" 2
valid switch "... usage, short form"

# ---- failures before the command's own document: the opening part alone ----
for cmd in suspend resume switch state; do
  missing=(2147483600)
  [ "$cmd" = switch ] && missing=("$q" 2147483600)
  run_gpusnap "$cmd" --json "${missing[@]}"; expect "$cmd --json of a missing process" 3
  valid "$cmd" "... the short form"
  check "... says no-process and the error line" \
    [ "$(json_get "$OUT_TXT" '["error"],d["message"]==open(sys.argv[1].replace("out","err")).read().strip()[len("gpusnap: "):]')" = "('no-process', True)" ]
done
sleep 300 & plain=$!; TEST_PIDS+=("$plain")
run_gpusnap suspend --json "$plain"; expect "suspend --json of a process without CUDA" 4
valid suspend "... not-cuda, short form"
run_gpusnap resume "$p" 5 --json; expect "resume --json with an extra argument" 2
valid resume "... usage, short form"
run_gpusnap suspend "$plain"; expect "without --json a failure prints no document" 4
check "... stdout empty" [ ! -s "$OUT_TXT" ]
run_gpusnap inspect --json "$TEST_TMP/none"; expect "inspect --json of no image" 11
valid inspect "... image, short form"

# ---- the check can fail ----
mutate() { # TITLE PYTHON-EXPR-ON-d: the suspend document changed so is refused
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); exec(sys.argv[2]); print(json.dumps(d))' \
    "$TEST_TMP/suspend.json" "$2" >"$TEST_TMP/mutated.json"
  check "a suspend document $1 is refused" \
    sh -c "! '$JSON_PY' '$JSON_CHECK' '$schemas' doc suspend '$TEST_TMP/mutated.json' >/dev/null"
}
check "the document as printed passes" "$JSON_PY" "$JSON_CHECK" "$schemas" doc suspend "$TEST_TMP/suspend.json"
mutate "without total_s" 'del d["total_s"]'
mutate "with a process's pid as a string" 'd["processes"][0]["pid"] = str(d["processes"][0]["pid"])'
mutate "with a field no schema names" 'd["processes"][0]["new_field"] = 1'
mutate "with a state no schema names" 'd["processes"][0]["state_after"] = "asleep"'
mutate "of version 2" 'd["schema"] = "gpusnap/suspend/2"'
mutate "saying ok false without an error" 'd["ok"] = False'
mutate "without its schema" 'del d["schema"]'

# ---- dump, restore, inspect (CRIU) ----
if have_criu; then
  export FAKE_CUDA_CRIU=1
  chmod 700 "$TEST_TMP"
  cleanup_counters() {
    kill_test_procs cpu_counter
    [ -n "${shell_pid:-}" ] && kill -9 "$shell_pid" 2>/dev/null
    cleanup_test
  }
  trap cleanup_counters EXIT
  log=$TEST_TMP/counter.log
  start_counter "$log"; pid=$NEWPID
  img=$TEST_TMP/img
  run_gpusnap dump --json -D "$img" "$pid"; expect "dump --json" 0
  valid dump "... one process"
  check "... published" [ "$(json_get "$OUT_TXT" '["published"]')" = True ]
  run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify" 0
  valid inspect "... verify ok"
  run_gpusnap inspect --json "$img"; expect "inspect --json" 0
  valid inspect "... without --verify"
  run_gpusnap restore --json --lazy-pages -D "$img"; expect "restore --json --lazy-pages" 0
  valid restore "... restored"
  check "... lazily, every page in" [ "$(json_get "$OUT_TXT" '["lazy_pages"],d["times"]["lazy_pages_done_s"] > 0')" = "(True, True)" ]
  run_gpusnap dump --json --leave-running -D "$TEST_TMP/img2" "$pid"; expect "dump --json --leave-running" 0
  valid dump "... leave-running, paused_s"
  run_gpusnap restore --json -D "$img"; expect "restore --json while the process runs: its PID is taken" 15
  valid restore "... refused"
  run_gpusnap restore --json -D "$TEST_TMP/none"; expect "restore --json of no image" 11
  valid restore "... no image"
  run_gpusnap dump --json -D "$TEST_TMP/nodir/img" "$pid"; expect "dump --json into a missing folder" 2
  valid dump "... refused"
  # an image whose manifest says it was taken in a way this gpusnap does not know (the manifest's
  # and cpu-files.img's checksums made to match): refused, and what it says stays out of "path"
  cp -a "$img" "$TEST_TMP/img-odd"
  python3 - "$TEST_TMP/img-odd" <<'PY'
import sys
def crc32c(data, table=[]):
    if not table:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def seal(b):  # the trailer's CRC-32C of everything before it (docs/FORMAT.md, 4.10 and 11)
    b[-4:] = crc32c(bytes(b[:-4])).to_bytes(4, "little")
d = sys.argv[1]
m = bytearray(open(d + "/manifest.img", "rb").read())
assert m.count(b"driver\0") == 1
i = m.index(b"driver\0"); m[i:i + 6] = b"drivex"
seal(m)
open(d + "/manifest.img", "wb").write(m)
c = bytearray(open(d + "/cpu-files.img", "rb").read())
c[40:44] = m[-4:]
seal(c)
open(d + "/cpu-files.img", "wb").write(c)
PY
  run_gpusnap restore --json -D "$TEST_TMP/img-odd"; expect "restore --json of an image taken in an unknown way" 11 "does not restore ('drivex')"
  valid restore "... refused"
  check "... no path in the document" [ "$(json_get "$OUT_TXT" '.get("path")')" = None ]
  # a chunk of CRIU's files changed: verify fails, ok false at the top too
  f=$(find "$img/cpu" -type f -name 'pages-*.img' | head -n 1)
  printf 'X' | dd of="$f" bs=1 seek=0 conv=notrunc status=none
  run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify of a damaged image" 11
  valid inspect "... verify failed"
  check "... ok false at the top and in verify" [ "$(json_get "$OUT_TXT" '["ok"],d["verify"]["ok"]')" = "(False, False)" ]
  # a tree: a shell (no CUDA) running two CUDA processes; setsid -f, so that it is reaped once dumped
  # shellcheck disable=SC2016 # the inner shell expands them
  (close_inherited_fds && exec setsid -f bash -c 'echo $$ >"$3"; "$0" "$1" & "$0" "$2" & wait' \
    "$build/tests/apps/cpu_counter" "$TEST_TMP/c1.log" "$TEST_TMP/c2.log" "$TEST_TMP/shell.pid" </dev/null >/dev/null 2>&1)
  for _ in $(seq 100); do
    shell_pid=$(cat "$TEST_TMP/shell.pid" 2>/dev/null)
    [ -n "$shell_pid" ] && [ "$(pgrep -P "$shell_pid" | wc -l)" = 2 ] && break
    sleep 0.05
  done
  for c in $(pgrep -P "$shell_pid"); do echo "0 0" >"$FAKE_CUDA_DIR/$c"; done
  wait_lines "$TEST_TMP/c1.log" 10 && wait_lines "$TEST_TMP/c2.log" 10
  run_gpusnap dump --json --tree -D "$TEST_TMP/tree" "$shell_pid"; expect "dump --json --tree" 0
  valid dump "... a tree of two"
  check "... two processes" [ "$(json_get "$OUT_TXT" '["tree"],len(d["processes"])')" = "(True, 2)" ]
  check "... the shell is gone" wait_gone "$shell_pid" 5
  run_gpusnap inspect --json "$TEST_TMP/tree"; expect "inspect --json of a tree image" 0
  valid inspect "... with its processes"
  run_gpusnap restore --json --lazy-pages -D "$TEST_TMP/tree"; expect "restore --json --lazy-pages of a tree" 2 "process tree"
  valid restore "... refused"
  RC=0; GPUSNAP_RESTORE_LAZY=auto "$GPUSNAP_BIN" restore --json -D "$TEST_TMP/tree" >"$OUT_TXT" 2>"$ERR_TXT" || RC=$?
  expect "restore --json of a tree (GPUSNAP_RESTORE_LAZY=auto)" 0
  valid restore "... a tree"
  check "... whole, and why" [ "$(json_get "$OUT_TXT" '["lazy_pages"],"process tree" in d["lazy_pages_why"]')" = "(False, True)" ]
  check "... path tree" [ "$(json_get "$OUT_TXT" '["path"]')" = tree ]
else
  echo "SKIP: no usable CRIU here: dump, restore and inspect of an image are not checked"
fi

test_done
