# shellcheck shell=bash
# share_lib.sh - the two share_app ranks (tests/agent/share_app.c, started with
# APP_IO=signals: APP the parent, CHILD the child) as t4015, t4016 and t6003 see
# them. Source after fake_agent.sh.
MiB=$((1 << 20))
# phys_of PID: the physical bytes the fake driver says PID holds ("none" without a record)
phys_of() { cat "$FAKE_CUDA_DIR/$1.phys" 2>/dev/null || echo none; }

# ring_ok TITLE: SIGUSR2 asks the parent for the ring exchange (each rank writes into the other's
# buffer through its import, then both verify); it answers RING on its stdout
ring_ok() {
  local reply
  reply=$(signal_reply USR2 RING)
  case $reply in "RING OK") pass "$1" ;; *) fail "$1" "$reply" "agent log: $(tail -n 5 "$GPUSNAP_AGENT_LOG")" ;; esac
}
both_alive() { alive "$APP" && alive "$CHILD"; }
# both ranks hold their own 4 MiB buffer and the other's, imported
both_hold() { test "$(phys_of "$APP")" = $((8 * MiB)) -a "$(phys_of "$CHILD")" = $((8 * MiB)); }
