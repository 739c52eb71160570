"""torch_model.py - a PyTorch process for gpusnap's GPU tests and overhead benchmark.

Builds a small transformer-style model with random weights (seeded; nothing is
downloaded), runs it on a fixed input and keeps the output as the reference. A
CUDA graph of the forward pass is captured too. Then it answers commands on
stdin, one per line, like the C test apps (the loop is check_loop.py's):
  check   -> "CHECK OK" if the eager output and the graph replay are bit-identical
             to the references (and a training step runs), else "CHECK FAIL <why>"
  churn   -> allocates and frees tensors of many sizes (exercises the allocator)
With --held-mib N it also keeps N MiB of seeded random data on the GPU (in 1 GiB
tensors, or --held-tensor-mib, real non-zero data for the time-slicing tests)
that check compares bit for bit, tensor by tensor, with the same data generated
again.
  touch   -> with --touch-mib M: new random data, in place, in the first held
             tensors holding M MiB (what changed between two checkpoints of a
             job: bench/incremental.sh) -> "TOUCH OK <MiB>"; check compares them
             with their new data
  quit    -> "BYE 0"
With --bench N it instead times N training steps and N inference steps and prints
"BENCH train_ms=<median> infer_ms=<median> gpu_train_ms=<median> gpu_infer_ms=<median>"
(wall time per step, and the GPU's own time per step from CUDA events, which
host noise does not reach; used by bench/overhead.sh); under the
gpusnap agent also "CALLS train=<driver calls per step> infer=<...> gate_ns=<the
gate's cost per call>", from the agent's own exports.
The allocator backend follows PYTORCH_CUDA_ALLOC_CONF as PyTorch reads it.
"""
import argparse
import os
import statistics
import sys
import time

import torch

import check_loop


def agent_probe():
    """The gpusnap agent's self-measurement exports when it is preloaded (src/agent/intercept/agent_probe.h), else None."""
    import ctypes
    lib = ctypes.CDLL(None)
    try:
        calls, gate_ns = lib.gpusnap_driver_calls, lib.gpusnap_gate_cost_ns
    except AttributeError:
        return None
    calls.restype = ctypes.c_uint64
    gate_ns.restype = ctypes.c_double
    gate_ns.argtypes = [ctypes.c_ulong]
    return calls, gate_ns


def build(seed, dim, layers, batch=8, seq=128):
    torch.manual_seed(seed)
    blocks = []
    for _ in range(layers):
        blocks.append(torch.nn.TransformerEncoderLayer(dim, nhead=8, dim_feedforward=4 * dim, batch_first=True))
    model = torch.nn.Sequential(*blocks).cuda().eval()
    x = torch.randn(batch, seq, dim, device="cuda", generator=torch.Generator("cuda").manual_seed(seed + 1))
    return model, x


def held_sizes(mib, part=1024):
    """--held-mib split in tensors of at most part MiB (MiB each)."""
    return [min(part, mib - i) for i in range(0, mib, part)]


def held_part(seed, i, mib, out=None):
    """Tensor i of the held data: mib MiB of random bytes from a generator seeded by (seed, i) (into out, in place)."""
    g = torch.Generator("cuda").manual_seed(seed * 100003 + i)
    if out is not None:
        return torch.randint(0, 256, (mib << 20,), dtype=torch.uint8, device="cuda", generator=g, out=out)
    return torch.randint(0, 256, (mib << 20,), dtype=torch.uint8, device="cuda", generator=g)


def forward(model, x):
    with torch.no_grad():
        return model(x)


def train_step(model, opt, x):
    model.train()
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    model.eval()
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--held-mib", type=int, default=0, help="MiB of seeded random data kept on the GPU")
    ap.add_argument("--held-tensor-mib", type=int, default=1024, help="MiB of each held tensor")
    ap.add_argument("--touch-mib", type=int, default=0, help="MiB that the touch command gives new data")
    args = ap.parse_args()
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model, x = build(args.seed, args.dim, args.layers, args.batch, args.seq)

    if args.bench:
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        for _ in range(5):
            train_step(model, opt, x)
            forward(model, x)
        torch.cuda.synchronize()
        tr, inf, gtr, ginf = [], [], [], []
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        for _ in range(args.bench):
            t0 = time.perf_counter()
            ev[0].record()
            train_step(model, opt, x)
            ev[1].record()
            torch.cuda.synchronize()
            tr.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            ev[2].record()
            forward(model, x)
            ev[3].record()
            torch.cuda.synchronize()
            inf.append((time.perf_counter() - t0) * 1e3)
            gtr.append(ev[0].elapsed_time(ev[1]))
            ginf.append(ev[2].elapsed_time(ev[3]))
        print("BENCH train_ms=%.4f infer_ms=%.4f gpu_train_ms=%.4f gpu_infer_ms=%.4f" % (
            statistics.median(tr), statistics.median(inf), statistics.median(gtr), statistics.median(ginf)), flush=True)
        probe = agent_probe()
        if probe:
            calls, gate_ns = probe
            c0 = calls()
            for _ in range(20):
                train_step(model, opt, x)
                torch.cuda.synchronize()
            c1 = calls()
            for _ in range(20):
                forward(model, x)
                torch.cuda.synchronize()
            c2 = calls()
            print("CALLS train=%.1f infer=%.1f gate_ns=%.2f" % ((c1 - c0) / 20, (c2 - c1) / 20, gate_ns(2000000)),
                  flush=True)
        return 0

    ref = forward(model, x).clone()
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        forward(model, static_x)  # warm-up on the side stream, as graph capture needs
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        static_out = forward(model, static_x)
    graph.replay()
    torch.cuda.synchronize()
    graph_ref = static_out.clone()
    # a copy of the model to train, so the reference model's weights never change
    trainee, _ = build(args.seed, args.dim, args.layers)
    opt = torch.optim.SGD(trainee.parameters(), lr=1e-6)
    held = [held_part(args.seed, i, n) for i, n in enumerate(held_sizes(args.held_mib, args.held_tensor_mib))]
    rounds = [0] * len(held)  # times each held tensor was touched: its data is seed + 7919 * rounds

    def check():
        out = forward(model, x)
        graph.replay()
        torch.cuda.synchronize()
        why = []
        if not torch.equal(out, ref):
            why.append("eager output differs (max diff %g)" % (out - ref).abs().max().item())
        if not torch.equal(static_out, graph_ref):
            why.append("graph replay differs")
        for i, t in enumerate(held):
            # generated again one tensor at a time: never a second copy of all of it on the GPU
            if not torch.equal(t, held_part(args.seed + 7919 * rounds[i], i, t.numel() >> 20)):
                why.append("held data tensor %d differs" % i)
        loss = train_step(trainee, opt, x)
        if loss != loss:
            why.append("training step gave NaN")
        return why

    def touch():
        done = 0
        for i, t in enumerate(held):
            if done >= args.touch_mib:
                break
            rounds[i] += 1
            held_part(args.seed + 7919 * rounds[i], i, t.numel() >> 20, out=t)  # in place: same addresses
            done += t.numel() >> 20
        torch.cuda.synchronize()
        print("TOUCH OK %d" % done, flush=True)

    def churn():
        keep = []
        for i in range(2000):
            t = torch.empty((i * 37) % 65536 + 1, dtype=torch.uint8, device="cuda")
            if i % 3 == 0:
                keep.append(t)
        del keep
        torch.cuda.synchronize()
        print("CHURN OK", flush=True)

    return check_loop.serve(check, os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"), {"churn": churn, "touch": touch})


if __name__ == "__main__":
    sys.exit(main())
