"""nccl_allreduce.py - a two-rank torch.distributed (NCCL) job for tests/gpu/t67-nccl-allreduce.sh.

Rank 0 is this process; it starts rank 1 (the same script, --rank 1) with a
pipe to its stdin, so rank 1 waits for commands on the host, never inside a
collective. Rank r works on GPU r. Each rank holds a state tensor of int64
(--numel elements); one step all-reduces a copy of it (sum over the ranks)
and mixes the sum back in with integer arithmetic, so the results are
exact and an uninterrupted twin gives the same ones.

Rank 0 answers commands on stdin, one per line:
  step N   -> N steps on both ranks, then "STEP <total steps>"
  digest   -> "DIGEST <rank 0's digest> <rank 1's digest>" (a weighted sum of
              each rank's state, exchanged through one more all-reduce)
  quit     -> both exit, "BYE 0"
It prints "READY <pid> <rank 1 pid>" once the communicator is up.
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist

MOD = 1000003


def step(state, rank, i):
    t = state.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    state.copy_((t * 3 + state * 7 + (rank + 1) * (i + 1)) % MOD)


def digest(state):
    w = torch.arange(1, state.numel() + 1, device=state.device, dtype=torch.int64) % 9973
    return int(((state * w) % MOD).sum().item() % (1 << 61))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--seed", type=int, default=67)
    a = ap.parse_args()
    child = None
    if a.rank == 0:
        child = subprocess.Popen([sys.executable, __file__, "--rank", "1", "--port", str(a.port), "--numel",
                                  str(a.numel), "--seed", str(a.seed)], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True)
    torch.cuda.set_device(a.rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank, world_size=2,
                            device_id=torch.device("cuda", a.rank))
    g = torch.Generator(device="cuda").manual_seed(a.seed + a.rank)
    state = torch.randint(0, MOD, (a.numel,), device="cuda", dtype=torch.int64, generator=g)
    warm = torch.ones(1, device="cuda")
    dist.all_reduce(warm)  # the communicator and its buffers exist before READY
    torch.cuda.synchronize()
    steps = 0
    inp = sys.stdin
    if a.rank == 0:
        print("READY %d %d" % (os.getpid(), child.pid), flush=True)
    for line in inp:
        words = line.split()
        if not words:
            continue
        if a.rank == 0 and words[0] in ("step", "digest", "quit"):
            child.stdin.write(line)
            child.stdin.flush()
        if words[0] == "step":
            for _ in range(int(words[1])):
                step(state, a.rank, steps)
                steps += 1
            torch.cuda.synchronize()
            if a.rank == 0:
                print("STEP %d" % steps, flush=True)
        elif words[0] == "digest":
            d = torch.zeros(2, device="cuda", dtype=torch.int64)
            d[a.rank] = digest(state)
            dist.all_reduce(d)
            if a.rank == 0:
                print("DIGEST %d %d" % (d[0].item(), d[1].item()), flush=True)
        elif words[0] == "quit":
            break
        elif a.rank == 0:
            print("UNKNOWN %s" % line.strip(), flush=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if a.rank == 0:
        child.stdin.close()
        rc = child.wait()
        print("BYE %d" % rc, flush=True)
        sys.exit(rc)


if __name__ == "__main__":
    main()
