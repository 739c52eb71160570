#!/usr/bin/env bash
# tree.sh - a non-CUDA parent process with N CUDA children, for `gpusnap --tree`.
#
# usage: tree.sh DIR N CMD [ARGS...]
# Creates DIR/c<i>.in and DIR/c<i>.out (FIFOs) for i = 1..N, starts N copies of
# CMD ARGS as its own children with stdin/stdout on those FIFOs and stderr in
# DIR/c<i>.err, writes each child's pid to DIR/c<i>.pid, then DIR/started.
# It waits for its children and writes each exit status to DIR/c<i>.rc. SIGTERM
# or SIGINT to this parent is passed on to the children.
set -u
if [ $# -lt 3 ]; then
  echo "usage: tree.sh DIR N CMD [ARGS...]" >&2
  exit 2
fi
dir=$1 n=$2
shift 2
case $n in ''|*[!0-9]*) echo "tree.sh: N must be a number, not '$n'" >&2; exit 2;; esac
mkdir -p "$dir" || exit 1

pids=()
stop_children() {
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
  exit 143
}
trap stop_children TERM INT HUP

for ((i = 1; i <= n; i++)); do
  rm -f "$dir/c$i.in" "$dir/c$i.out" "$dir/c$i.pid" "$dir/c$i.rc"
  mkfifo "$dir/c$i.in" "$dir/c$i.out" || exit 1
done
for ((i = 1; i <= n; i++)); do
  # The child blocks opening its FIFOs until the test attaches; its pid is known at once.
  "$@" <"$dir/c$i.in" >"$dir/c$i.out" 2>"$dir/c$i.err" &
  pids+=($!)
  echo $! >"$dir/c$i.pid.tmp" && mv "$dir/c$i.pid.tmp" "$dir/c$i.pid"
done
echo $$ >"$dir/started"

for ((i = 1; i <= n; i++)); do
  wait "${pids[i - 1]}"
  echo $? >"$dir/c$i.rc"
done
exit 0
