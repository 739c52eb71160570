"""train_live.py - a deterministic PyTorch training process for tests/gpu/t36-live-dump.sh.

A seeded MLP with Adam on the GPU, trained on seeded random batches with
deterministic algorithms: two processes started the same way end with the
same weights, bit for bit. Commands (check_loop.py's loop):
  train   -> runs --steps steps (a few seconds of GPU work, during which a
             test dumps it with --leave-running) -> "TRAINED <total steps>"
  digest  -> "DIGEST <steps> <sha256 of every parameter and optimizer state, in order>"
  check   -> "CHECK OK train" (the weights are finite)
  quit    -> "BYE 0"
"""
import argparse
import hashlib
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

import check_loop  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--width", type=int, default=4096)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, args.width), torch.nn.GELU(),
                                torch.nn.Linear(args.width, args.width), torch.nn.GELU(),
                                torch.nn.Linear(args.width, 1024)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    done = [0]

    def train():
        for _ in range(args.steps):
            x = torch.randn(256, 1024, device=dev, generator=gen)
            loss = (model(x) - x.flip(1)).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done[0] += 1
        torch.cuda.synchronize()
        print("TRAINED %d" % done[0], flush=True)

    def digest():
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        for st in opt.state.values():
            for k in sorted(st):
                v = st[k]
                h.update(v.detach().cpu().numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
        print("DIGEST %d %s" % (done[0], h.hexdigest()), flush=True)

    def check():
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
        return ["%s not finite" % n for n in bad]

    return check_loop.serve(check, "train", {"train": train, "digest": digest})


if __name__ == "__main__":
    sys.exit(main())
