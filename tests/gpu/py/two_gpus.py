"""two_gpus.py - one PyTorch process on GPU 0 and GPU 1, for tests/gpu/t64-torch-two-gpus.sh.

Keeps tensors on both GPUs (a large one and small ones each, whole numbers in
float32, so every sum below is exact whatever the order) with a copy of each on
the host. Then answers commands on stdin, one per line:
  check  -> "CHECK OK <collective>" when, bit for bit against a recomputation on the host:
            the kept tensors hold their values; peer copies GPU 0 -> GPU 1 and back
            (contiguous: cudaMemcpyPeer; transposed: PyTorch's copy kernel reading the
            peer's memory, since peer access is enabled) give the source; an
            all-reduce of one tensor per GPU gives the sum on both GPUs (--collective
            nccl: torch.cuda.nccl.all_reduce, NCCL inside one process; copy: a peer
            copy, an add and a copy back; none: no all-reduce); --pinned adds a tensor in
            pinned host memory copied to and from both GPUs; --no-peer-copies leaves
            out the copies between the GPUs, so nothing crosses from one to the other
            (t53 asks the driver path what it restores); else "CHECK FAIL <why>"
  quit   -> "BYE <status>" (status 1 if a check ever failed); the loop is check_loop.py's
"""
import argparse
import sys

import torch

import check_loop


def ints(gen, n, device):
    """n whole numbers in [-1000, 1000] as float32 on device (exact sums up to 2^24)."""
    return torch.randint(-1000, 1001, (n,), generator=gen, dtype=torch.int32).to(torch.float32).to(device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=64)
    ap.add_argument("--mib", type=int, default=256, help="MiB of the large tensor on each GPU")
    ap.add_argument("--collective", choices=["nccl", "copy", "none"], default="nccl")
    ap.add_argument("--no-peer-copies", action="store_true", help="no copy between the GPUs in check")
    ap.add_argument("--pinned", action="store_true",
                    help="also a tensor in pinned host memory, copied to and from both GPUs in check")
    args = ap.parse_args()
    if torch.cuda.device_count() < 2:
        print("two_gpus: needs 2 GPUs, has %d" % torch.cuda.device_count(), file=sys.stderr)
        return 2
    if args.collective == "nccl":
        import torch.cuda.nccl as nccl
        probe = [torch.zeros(4, device="cuda:0"), torch.zeros(4, device="cuda:1")]
        if not nccl.is_available(probe):
            print("two_gpus: NCCL is not available to this PyTorch", file=sys.stderr)
            return 3
    gen = torch.Generator().manual_seed(args.seed)
    large = args.mib * (1 << 20) // 4
    kept = []  # (tensor on a GPU, its host copy)
    for dev in ("cuda:0", "cuda:1"):
        for n in (large, 250, 1024, 17500, 262144):  # the small ones: the agent's sub-allocated blocks
            host = ints(gen, n, "cpu")
            kept.append((host.to(dev), host))
    # pinned host memory (cudaHostAlloc, portable to every context): what DataLoaders and async copies use
    pinned = ints(gen, 1 << 20, "cpu").pin_memory() if args.pinned else None
    pinned_ref = pinned.clone() if args.pinned else None
    # the all-reduce's inputs, one per GPU, and their sum
    red_host = [ints(gen, large, "cpu") for _ in range(2)]
    red_sum = red_host[0] + red_host[1]
    torch.cuda.synchronize()
    def check():
        why = []
        for i, (t, host) in enumerate(kept):
            if not torch.equal(t.cpu(), host):
                why.append("kept tensor %d on %s changed" % (i, t.device))
        if pinned is not None:
            for dev in ("cuda:0", "cuda:1"):
                back = torch.empty_like(pinned).pin_memory()
                back.copy_(pinned.to(dev, non_blocking=True), non_blocking=True)
                torch.cuda.synchronize(dev)
                if not torch.equal(back, pinned_ref):
                    why.append("pinned host memory through %s differs" % dev)
        for src_dev, dst_dev in () if args.no_peer_copies else (("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")):
            src = next(t for t, _ in kept if t.device == torch.device(src_dev))
            host = next(h for t, h in kept if t.device == torch.device(src_dev))
            if not torch.equal(src.to(dst_dev).cpu(), host):
                why.append("contiguous peer copy %s -> %s differs" % (src_dev, dst_dev))
            # transposed: not contiguous, so PyTorch's copy kernel reads the peer's memory
            sq = src[: 1024 * 1024].view(1024, 1024)
            dst = torch.empty(1024, 1024, device=dst_dev)
            dst.copy_(sq.t())
            if not torch.equal(dst.cpu(), host[: 1024 * 1024].view(1024, 1024).t()):
                why.append("transposed peer copy %s -> %s differs" % (src_dev, dst_dev))
        if args.collective == "none":
            torch.cuda.synchronize()
            return why
        red = [red_host[0].to("cuda:0"), red_host[1].to("cuda:1")]
        if args.collective == "nccl":
            nccl.all_reduce(red)
        else:
            total = red[0] + red[1].to("cuda:0")
            red = [total, total.to("cuda:1")]
        torch.cuda.synchronize()
        for t in red:
            if not torch.equal(t.cpu(), red_sum):
                why.append("all-reduce result on %s differs" % t.device)
        return why

    return check_loop.serve(check, args.collective)


if __name__ == "__main__":
    sys.exit(main())
