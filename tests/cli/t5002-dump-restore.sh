#!/usr/bin/env bash
# t5002 - `gpusnap dump`, `restore` and `inspect` end to end on the driver path:
# a CPU-only process registered as a CUDA process in the fake libcuda
# (FAKE_CUDA_CRIU=1: a CRIU-restored copy looks checkpointed, as with the real
# driver) is dumped with the real CRIU 4, is gone, is restored and counts on
# from where it was; two restores from one image; --leave-running; inspect;
# every refusal of restore (exit code, one-line message, image unchanged, no
# process left; a bad chunk found while the process was held stopped: it never
# ran; --verify-first: nothing started); a restore interrupted (SIGTERM)
# while the process is held: the process goes too, having never run; the driver's restore with the app's
# main thread held stopped (the fake's restore thread alone runs); dumps failing mid-way (process keeps running, an existing
# image at DIR is intact).
# Needs root; gets CRIU with scripts/get-criu.sh unless GPUSNAP_CRIU is set.
. "$(dirname "$0")/lib.sh"

src=${GPUSNAP_SRC:?GPUSNAP_SRC not set}
build=${GPUSNAP_BUILD:?GPUSNAP_BUILD not set}
app=$build/tests/apps/cpu_counter

fake_cuda_env criu
export FAKE_CUDA_LOG=$TEST_TMP/fake.log
# restores must leave the image's files and their modes as they were
SUMS_ENTRIES='%p %m\n'

# only our counters are killed at the end: restores reuse PIDs
cleanup_counters() {
  kill_test_procs cpu_counter
  cleanup_test
}
trap cleanup_counters EXIT


# ---- usage ----
run_gpusnap dump 1; expect "dump without -D" 2 "-D DIR is required"
run_gpusnap restore; expect "restore without DIR" 2 "gpusnap restore: -D DIR is required"
run_gpusnap inspect; expect "inspect without DIR" 2 "usage: gpusnap inspect"
run_gpusnap dump -D "$TEST_TMP/x" 2147483600; expect "dump of a missing process" 3 "no such process"
sleep 300 & plain=$!; TEST_PIDS+=("$plain")
run_gpusnap dump -D "$TEST_TMP/x" "$plain"; expect "dump of a non-CUDA process" 4 "is not a CUDA process"
check "nothing written for a refused dump" [ ! -e "$TEST_TMP/x" ]

# ---- dump, gone, restore, counts on ----
log=$TEST_TMP/counter.log
start_counter "$log"; pid=$NEWPID
img=$TEST_TMP/img
run_gpusnap dump -D "$img" "$pid"; expect "dump (driver path)" 0 "dumped $pid (cpu_counter) to $img: driver path"
check "the dumped process is gone" wait_gone "$pid"
check "no temporary directories left" [ -z "$(tmp_dirs "$img")" ]
check "image is owner-only (0700 dirs, 0600 files)" [ -z "$(find "$img" \( -type d ! -perm 700 \) -o \( -type f -perm /077 \))" ]
read -r n value < <(settled "$log")
check "counter stopped at the dump" [ "${value:-0}" -ge 10 ]
run_gpusnap inspect "$img"; expect "inspect" 0 "by driver"
check "inspect names process and CPU state" grep -q "process      $pid (cpu_counter)" "$OUT_TXT"
check "inspect shows the GPU" grep -q "Fake GPU, compute 9.0" "$OUT_TXT"
run_gpusnap inspect --json --verify "$img"; expect "inspect --json --verify" 0
check "inspect JSON: how, pid, cpu state, verify" [ "$(json_get "$OUT_TXT" '["image"]["how"],d["image"]["process"]["pid"],d["image"]["cpu_state"],d["verify"]["ok"]')" = "('driver', $pid, True, True)" ]
before=$(sums "$img")

run_gpusnap restore -D "$img"; expect "restore" 0 "restored $pid (cpu_counter) from $img"
check "restored process counts on from the dump" continues "$log" "$n" "$value"
check "driver state is running after restore" [ "$(fake_state "$pid")" = 0 ]
# the driver restored on its restore thread alone, the app's main thread held stopped
check "the app's main thread was stopped during the driver's restore" grep -q "^restore-main $pid T$" "$FAKE_CUDA_LOG"
check "the driver's restore succeeded" grep -q "^restore $pid 0$" "$FAKE_CUDA_LOG"
run_gpusnap restore -D "$img"; expect "second restore while the first runs" 15 "pid $pid, which the image needs, is in use by 'cpu_counter'"
check "refusal is one line" one_error
kill -9 "$pid"; wait_gone "$pid"
m=$(wc -l <"$log")
run_gpusnap restore --json "$img"; expect "restore again from the same image" 0
check "restore JSON: pid and separate CRIU/GPU times" [ "$(json_get "$OUT_TXT" '["pid"],"criu_s" in d["times"],"gpu_s" in d["times"]')" = "($pid, True, True)" ]
check "restore JSON: the driver restored the process held, the checksums alongside" [ "$(json_get "$OUT_TXT" '["driver_restore_held"],d["verified_first"],"verify_wait_s" in d["times"]')" = "(True, False, True)" ]
check "second restore counts on from the same point" continues "$log" "$m" "$value"
check "restores leave the image unchanged" [ "$(sums "$img")" = "$before" ]

# ---- an interrupted restore: the held process goes with gpusnap ----
kill -9 "$pid"; wait_gone "$pid"
lines=$(wc -l <"$log")
: >"$FAKE_CUDA_LOG"
GPUSNAP_FAULT=restore-before-cont=hold:3 "$GPUSNAP_BIN" restore -D "$img" >"$TEST_TMP/out" 2>"$TEST_TMP/err" &
gp=$!
# held: CRIU is done and the driver has restored it (the fake logs that), and it is stopped
for _ in $(seq 3000); do grep -q "^restore $pid 0$" "$FAKE_CUDA_LOG" && break; sleep 0.01; done
check "the driver restored the process" grep -q "^restore $pid 0$" "$FAKE_CUDA_LOG"
check "the restore holds the process stopped" test "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = T
kill -TERM "$gp"; rc=0; wait "$gp" || rc=$?
check "gpusnap restore ended by SIGTERM (rc $rc)" test "$rc" = 143
check "it says so in one line" grep -q "interrupted by SIGTERM: the restored process $pid was killed before it ran; the image is unchanged" "$TEST_TMP/err"
check "the held process went with it" wait_gone "$pid" 5
check "the interrupted process never ran" [ "$(wc -l <"$log")" = "$lines" ]
check "the image is unchanged after the interrupted restore" [ "$(sums "$img")" = "$before" ]
run_gpusnap restore -D "$img"; expect "restore after the interrupted one" 0
check "it counts on from the dump" continues "$log" "$lines" "$value"

# ---- --leave-running ----
img2=$TEST_TMP/img2
run_gpusnap dump --leave-running --json -D "$img2" "$pid"; expect "dump --leave-running" 0
check "dump JSON says driver path, published" [ "$(json_get "$OUT_TXT" '["path"],d["published"],d["leave_running"]')" = "('driver', True, True)" ]
check "process keeps running after --leave-running" grows "$log"
check "its driver state is running" [ "$(fake_state "$pid")" = 0 ]
kill -9 "$pid"; wait_gone "$pid"
m=$(wc -l <"$log")
run_gpusnap restore -D "$img2"; expect "restore of the --leave-running image" 0
check "it runs" grows "$log"
kill -9 "$pid"; wait_gone "$pid"

# ---- refusals: exit code, one line, image unchanged, no process ----
refused() { # refused TITLE CODE TEXT DIR [env...]: restore from DIR is refused
  local title=$1 code=$2 text=$3 dir=$4
  shift 4
  local s0; s0=$(sums "$dir")
  RC=0; env "$@" "$GPUSNAP_BIN" restore -D "$dir" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
  OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err
  expect "$title" "$code" "$text"
  check "$title: one-line message" one_error
  check "$title: image unchanged" [ "$(sums "$dir")" = "$s0" ]
  check "$title: no process left" bash -c "! kill -0 $pid 2>/dev/null"
}
bad=$TEST_TMP/bad
fresh_copy() { rm -rf "$bad"; cp -a "$img" "$bad"; }

fresh_copy
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(100); b=f.read(1); f.seek(100); f.write(bytes([b[0]^1]))' "$bad/manifest.img"
refused "flipped bit in the manifest" 11 "checksum" "$bad"
fresh_copy
python3 -c 'import sys,struct; f=open(sys.argv[1],"r+b"); f.seek(8); f.write(struct.pack("<I",99))' "$bad/manifest.img"
refused "manifest of an unknown version" 11 "" "$bad"
fresh_copy; truncate -s 200 "$bad/manifest.img"
refused "truncated manifest" 11 "" "$bad"
fresh_copy; rm "$bad/manifest.img"
refused "no manifest" 11 "not a gpusnap image" "$bad"
fresh_copy; chmod 660 "$bad/manifest.img"
refused "group-writable manifest" 5 "manifest.img" "$bad"
fresh_copy; chmod 620 "$bad/cpu/inventory.img"
refused "group-writable CRIU file" 5 "inventory.img" "$bad"
fresh_copy; chmod 770 "$bad"
refused "group-writable image directory" 5 "$bad" "$bad"
fresh_copy
refused "other GPU type" 12 "different GPU types" "$bad" FAKE_CUDA_GPU0_NAME="Other GPU"
refused "CRIU missing" 15 "criu" "$bad" GPUSNAP_CRIU=/nonexistent
# data files: the driver path stores none, so a copy gets a grafted allocation with stored chunks
graft=$TEST_TMP/graft
fresh_graft() { rm -rf "$bad" "$graft"; "$build/tests/apps/image_graft" "$img" "$graft" && cp -a "$graft" "$bad"; }
check "grafted copy of the image has data files" fresh_graft
check "grafted copy verifies" "$GPUSNAP_BIN" inspect --verify "$bad"
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(4096+70000); b=f.read(1); f.seek(4096+70000); f.write(bytes([b[0]^0x10]))' "$bad/gpu-data-0000.img"
lines=$(wc -l <"$log")
refused "flipped bit in a chunk" 11 "gpu-data-0000.img" "$bad"
check "the bad chunk is named" grep -q "offset 65536" "$ERR_TXT"
# CRIU brought it back alongside the checksum pass, held stopped: it never ran
check "the refused process never ran (its counter log did not grow)" [ "$(wc -l <"$log")" = "$lines" ]
fresh_graft
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(4096+70000); b=f.read(1); f.seek(4096+70000); f.write(bytes([b[0]^0x10]))' "$bad/gpu-data-0000.img"
: >"$FAKE_CUDA_LOG"
RC=0; "$GPUSNAP_BIN" restore --verify-first -D "$bad" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err; expect "--verify-first: a flipped bit in a chunk" 11 "gpu-data-0000.img"
check "--verify-first: CRIU and the driver were never started" [ ! -s "$FAKE_CUDA_LOG" ]
check "--verify-first: no process left" bash -c "! kill -0 $pid 2>/dev/null"
fresh_graft; truncate -s 8192 "$bad/gpu-data-0000.img"
refused "truncated data file" 11 "gpu-data-0000.img" "$bad"
fresh_graft; rm "$bad/gpu-data-0000.img"
refused "missing data file" 11 "gpu-data-0000.img" "$bad"
fresh_graft
RC=0; "$GPUSNAP_BIN" restore --map 0=7 -D "$bad" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || RC=$?
OUT_TXT=$TEST_TMP/out; ERR_TXT=$TEST_TMP/err; expect "--map onto a missing GPU" 10 "not on this machine"

# ---- restore onto the other GPU with --map ----
export FAKE_CUDA_GPUS=2
start_counter "$log"; pid=$NEWPID
run_gpusnap dump --replace -D "$img2" "$pid"; expect "dump on a 2-GPU machine (over another process's image)" 0
wait_gone "$pid"
run_gpusnap restore -D "$img2"; expect "restore on the same GPUs" 0
kill -9 "$pid"; wait_gone "$pid"
run_gpusnap restore --map 0=1 --map 1=0 -D "$img2"; expect "restore with GPUs swapped" 0
check "the driver got the map (process on GPU 1)" grep -q "^0 1 " "$FAKE_CUDA_DIR/$pid"
kill -9 "$pid"; wait_gone "$pid"
unset FAKE_CUDA_GPUS

# ---- dumps failing mid-way: process runs on, the old image stays ----
start_counter "$log"; pid=$NEWPID
s0=$(sums "$img")
GPUSNAP_FAULT=image-write=fail:ENOSPC run_gpusnap dump --replace -D "$img" "$pid"
expect "dump with the disk full" 13 "no space left"
check "disk full: one-line message" one_error
check "disk full: process keeps running" grows "$log"
check "disk full: driver state running again" [ "$(fake_state "$pid")" = 0 ]
check "disk full: old image intact" [ "$(sums "$img")" = "$s0" ]
check "disk full: no temporary directory left" [ -z "$(tmp_dirs "$img")" ]

fake_criu failing-criu 'echo "Error (criu/cr-dump.c:1): injected failure" >&2
exit 1'
failing=$TEST_TMP/failing-criu
GPUSNAP_CRIU=$failing run_gpusnap dump --replace -D "$img" "$pid"
expect "dump with CRIU failing" 15 "criu dump of $pid failed"
check "CRIU failing: process keeps running" grows "$log"
check "CRIU failing: driver state running again" [ "$(fake_state "$pid")" = 0 ]
check "CRIU failing: old image intact" [ "$(sums "$img")" = "$s0" ]
check "CRIU failing: no temporary directory left" [ -z "$(tmp_dirs "$img")" ]
mkdir -p "$TEST_TMP/notimg"; echo x >"$TEST_TMP/notimg/file"
run_gpusnap dump -D "$TEST_TMP/notimg" "$pid"; expect "dump over a directory that is not an image" 2 "is not a gpusnap image"
check "refused dump: process keeps running" grows "$log"

# a dump over another process's image: refused unless --replace, which replaces it
run_gpusnap dump -D "$img" "$pid"; expect "dump over another process's image" 2 "holds the image of another process"
check "refused dump: one-line message" one_error
check "refused dump: the other image stays" [ "$(sums "$img")" = "$s0" ]
check "refused dump: process keeps running" grows "$log"
run_gpusnap dump --replace -D "$img" "$pid"; expect "dump --replace over another process's image" 0
check "the new image is another one" [ "$(sums "$img")" != "$s0" ]
wait_gone "$pid"

# a shell job (the test shell's session and group, as an app started from a terminal) held stopped
# after CRIU: restored into a process group of criu's own, it would be orphaned and stopped once criu
# exits, and the kernel's SIGHUP would kill it before it ever continued
# The job's shell is a session leader of its own, started here: the test's own session may be led
# from outside this PID namespace (CI in a container), which CRIU cannot dump at all.
jlog=$TEST_TMP/job.log
setsid bash -c '"$1" "$2" & echo $! >"$3"; wait' job "$app" "$jlog" "$TEST_TMP/job.pid" & jsh=$!
TEST_PIDS+=("$jsh")
wait_lines "$jlog" 10
jpid=$(cat "$TEST_TMP/job.pid")
TEST_PIDS+=("$jpid")
check "the job runs in its shell's session and group, not leading either" \
  [ "$(ps -o sid=,pgid= -p "$jpid" | awk '{print $1, $2}')" = "$jsh $jsh" ]
echo "0 0" >"$FAKE_CUDA_DIR/$jpid"
jimg=$TEST_TMP/img-job
run_gpusnap dump -D "$jimg" "$jpid"; expect "dump of a shell job" 0 "dumped $jpid"
check "the shell job was dumped as one" grep -qx -- --shell-job "$jimg/cpu/gpusnap-criu-dump.args"
# bounded: a failed dump leaves the job and its shell running, and the test goes on to fail
wait_gone "$jpid" && wait "$jsh" 2>/dev/null
read -r n v <<<"$(settled "$jlog")"
GPUSNAP_FAULT=restore-before-cont=hold:1 run_gpusnap restore -D "$jimg"
expect "restore of a shell job held stopped for a second after CRIU" 0 "restored $jpid"
check "the restored shell job counts on from the dump" continues "$jlog" "$n" "$v"
kill -9 "$jpid" 2>/dev/null; wait_gone "$jpid"

test_done
