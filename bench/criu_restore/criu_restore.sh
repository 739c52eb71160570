#!/usr/bin/env bash
# criu_restore.sh - what CRIU's restore of a CPU process with MiB of memory
# costs, and what changes it: images in the page cache or evicted, on tmpfs,
# --lazy-pages (docs/benchmarks.md, "CRIU restore"). Root; no GPU.
#   bench/criu_restore/criu_restore.sh [MIB] [RUNS]   (default 1430 MiB, 3 runs)
# CRIU: $GPUSNAP_CRIU or criu on PATH. Prints one line per restore.
set -eu
criu=${GPUSNAP_CRIU:-criu}
mib=${1:-1430}
runs=${2:-3}
work=$(mktemp -d /var/tmp/criu-restore.XXXXXX)
shm=$(mktemp -d /dev/shm/criu-restore.XXXXXX)
trap 'gone 2>/dev/null; rm -rf "$work" "$shm"' EXIT

cat >"$work/mem.py" <<'PY'
import os, sys, time
b = bytearray(os.urandom(1 << 20)) * int(sys.argv[1])  # every page touched, none zero
open(sys.argv[2], "w").write("ready\n")
while True:
    time.sleep(1)
PY
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
victim() { pgrep -f "$work/mem.py" | head -1; }
gone() { local p; p=$(victim) || return 0; kill -9 "$p"; while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; }

# the process (a session of its own, nothing inherited), dumped into $work/img
(setsid python3 "$work/mem.py" "$mib" "$work/ready" </dev/null >/dev/null 2>&1 &)
while [ ! -s "$work/ready" ]; do sleep 0.2; done
mkdir "$work/img"
v=$(victim)
t=$(now); "$criu" dump -t "$v" -D "$work/img" -o dump.log; echo "dump: $(since "$t") s, $(du -sb "$work/img" | cut -f1) bytes"
while kill -0 "$v" 2>/dev/null; do sleep 0.05; done
cp -a "$work/img" "$shm/img"

evict() { python3 -c 'import os,sys
for f in os.listdir(sys.argv[1]):
    if not f.endswith(".img"): continue
    fd = os.open(os.path.join(sys.argv[1], f), os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$1"; }
restore() { # restore LABEL DIR [criu options]
  local label=$1 dir=$2 t
  shift 2
  t=$(now); "$criu" restore -D "$dir" -d -o restore.log "$@" || { tail -3 "$dir/restore.log"; exit 1; }; echo "$label: restore $(since "$t") s"; gone
}
for _ in $(seq "$runs"); do
  cat "$work/img"/pages-*.img >/dev/null; restore "page cache" "$work/img"
  evict "$work/img"; restore "evicted (cold)" "$work/img"
  restore "tmpfs" "$shm/img"
  cat "$work/img"/pages-*.img >/dev/null
  "$criu" lazy-pages -D "$work/img" -o lazy.log & lp=$!
  sleep 0.5
  t=$(now); "$criu" restore -D "$work/img" -d --lazy-pages -o restore-lazy.log
  r=$(since "$t"); wait "$lp" || true
  echo "--lazy-pages: restore returned $r s, every page in after $(since "$t") s"; gone
done
