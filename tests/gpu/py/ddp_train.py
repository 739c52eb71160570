"""ddp_train.py - a one-GPU torch.distributed training job (NCCL, DistributedDataParallel) for
tests/gpu/t72-torch-ddp.sh.

Started either by torchrun (RANK, WORLD_SIZE, MASTER_ADDR and the rest in the environment; the
launcher hosts torch's TCPStore) or alone with --port (the process hosts the store itself, at
tcp://127.0.0.1:PORT). Either way the store's server runs on libuv, PyTorch's default. An MLP
under DDP, AdamW, data from a seeded generator on the GPU, deterministic algorithms: an
uninterrupted twin gives bit-identical parameters and losses.

Commands on stdin, one per line:
  step N   -> N optimizer steps, then "STEP <total steps> <last loss as float hex>"
  digest   -> "DIGEST <sha256 of every parameter and optimizer state byte>"
  fds      -> "FDS <io_uring descriptors of this process> <of its parent>"
  quit     -> "BYE 0", and the job ends
It prints "READY <pid> <parent pid>" once DDP is set up and one step has run.
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def io_urings(pid):
    n = 0
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                n += os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "anon_inode:[io_uring]"
            except OSError:
                pass
    except OSError:
        return -1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0, help="host the store here (without torchrun)")
    ap.add_argument("--seed", type=int, default=72)
    ap.add_argument("--width", type=int, default=4096)
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    if "RANK" in os.environ:
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % a.port, rank=0, world_size=1,
                                device_id=dev)
    torch.manual_seed(a.seed)
    w = a.width
    model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.GELU(), torch.nn.Linear(w, w), torch.nn.GELU(),
                                torch.nn.Linear(w, 16)).to(dev)
    ddp = DDP(model, device_ids=[0])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    steps = 0
    loss_value = 0.0

    def train(n):
        nonlocal steps, loss_value
        for _ in range(n):
            x = torch.randn(256, w, device=dev, generator=gen)
            y = torch.randint(0, 16, (256,), device=dev, generator=gen)
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
        loss_value = loss.item()

    def digest():
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        for st in opt.state.values():
            for k in sorted(st):
                if torch.is_tensor(st[k]):
                    h.update(st[k].detach().cpu().numpy().tobytes())
        return h.hexdigest()

    train(1)
    torch.cuda.synchronize()
    print("READY %d %d" % (os.getpid(), os.getppid()), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "step":
            train(int(words[1]))
            torch.cuda.synchronize()
            print("STEP %d %s" % (steps, float(loss_value).hex()), flush=True)
        elif words[0] == "digest":
            print("DIGEST %s" % digest(), flush=True)
        elif words[0] == "fds":
            print("FDS %d %d" % (io_urings(os.getpid()), io_urings(os.getppid())), flush=True)
        elif words[0] == "quit":
            break
        else:
            print("UNKNOWN %s" % line.strip(), flush=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("BYE 0", flush=True)


if __name__ == "__main__":
    main()
