"""torch_stack.py - the PyTorch ecosystem's own GPU code for gpusnap's GPU tests (t69).

Where torch_model.py is our own small model, this process runs what users
run on top of PyTorch, each part with seeded random weights (nothing is
downloaded):
  llama    Hugging Face transformers: a LlamaForCausalLM built from a config
           (grouped-query attention through SDPA, RoPE, a KV cache), bf16;
           greedy generate() of 48 tokens and the logits of one forward pass
  compile  torch.compile: Inductor's Triton kernels, JIT-compiled in this
           process and loaded as modules; once in the default mode and once
           in mode="reduce-overhead" (CUDA graph trees with their own pool)
  vision   torchvision's resnet18 through cuDNN convolutions, channels_last
           under bf16 autocast, and a training step on a copy fed by a
           DataLoader's two persistent worker processes (forked from this
           CUDA process) through pinned memory
Besides, 1 GiB of seeded data is kept on the GPU, and NVML (pynvml, where
installed) is initialized once and queried on every check, as monitoring
code in servers does. The first results are kept
as references; then it answers commands on stdin, one per line (check_loop.py):
  check  -> "CHECK OK <parts that run>" when every part computed again is
            bit-identical to its reference, the kept data is unchanged and
            the training steps give finite losses; else "CHECK FAIL <why>"
  quit   -> "BYE <status>"
A part whose package is missing is left out (the CHECK OK line names the
parts that ran).
"""
import argparse
import importlib.util
import sys

import torch

import check_loop

DEV = "cuda"


def llama_part(seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).to(DEV, dtype=torch.bfloat16).eval()
    prompt = torch.randint(0, cfg.vocab_size, (4, 64), device=DEV, generator=torch.Generator(DEV).manual_seed(seed))
    mask = torch.ones_like(prompt)

    def compute():
        with torch.no_grad():
            tokens = model.generate(prompt, attention_mask=mask, max_new_tokens=48, do_sample=False,
                                    min_new_tokens=48, pad_token_id=0)
            logits = model(prompt).logits
        return [tokens, logits]

    return ["generate() tokens", "forward logits"], compute, None


def compile_part(seed):
    torch.manual_seed(seed)

    class Block(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm = torch.nn.LayerNorm(dim)
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.out = torch.nn.Linear(dim, dim)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
            x = x + self.out(att @ v)
            return x + self.mlp(self.norm(x)) * torch.sigmoid(x)

    model = torch.nn.Sequential(*[Block(256) for _ in range(3)]).to(DEV).eval()
    x = torch.randn(8, 128, 256, device=DEV)
    fused = torch.compile(model)
    graphed = torch.compile(model, mode="reduce-overhead")

    def compute():
        with torch.no_grad():
            a = fused(x).clone()
            # cudagraph trees record on the first calls and replay after: run it thrice
            for _ in range(3):
                b = graphed(x).clone()
        return [a, b]

    return ["torch.compile (Triton kernels)", "torch.compile reduce-overhead (CUDA graph replay)"], compute, None


def vision_part(seed):
    import torchvision

    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet18(weights=None, num_classes=100).to(DEV, memory_format=torch.channels_last).eval()
    trainee = torchvision.models.resnet18(weights=None, num_classes=100).to(DEV, memory_format=torch.channels_last)
    trainee.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(trainee.parameters(), lr=1e-3, momentum=0.9)
    images = torch.randn(16, 3, 160, 160, device=DEV).to(memory_format=torch.channels_last)
    # the training batches come from a DataLoader's worker processes, forked from this CUDA process
    cpu_gen = torch.Generator().manual_seed(seed)
    data = torch.utils.data.TensorDataset(torch.randn(128, 3, 160, 160, generator=cpu_gen),
                                          torch.randint(0, 100, (128,), generator=cpu_gen))
    loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=2, persistent_workers=True, pin_memory=True)
    batches = iter(loader)

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    def compute():
        with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16):
            return [model(images).float()]

    def train():
        batch, labels = next_batch()
        batch = batch.to(DEV, non_blocking=True).to(memory_format=torch.channels_last)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(trainee(batch), labels.to(DEV, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return ["resnet18 (cuDNN, bf16 autocast)"], compute, train


PARTS = {"llama": ("transformers", llama_part), "compile": ("triton", compile_part), "vision": ("torchvision", vision_part)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parts", default="llama,compile,vision")
    ap.add_argument("--held-mib", type=int, default=1024, help="MiB of seeded data kept on the GPU")
    args = ap.parse_args()
    names, computes, trains, refs = [], [], [], []
    running = []
    for part in args.parts.split(","):
        package, build = PARTS[part]
        if importlib.util.find_spec(package) is None:
            continue
        running.append(part)
        part_names, compute, train = build(args.seed)
        names.append(part_names)
        computes.append(compute)
        trains.append(train)
        # warm-up first: the first calls compile, record graphs and may run fallback kernels while
        # Inductor's workers compile, so the reference is taken once the results settle
        for _ in range(2):
            compute()
        refs.append([t.detach().clone() for t in compute()])
    # NVML kept open, as monitoring code does (its descriptors are the driver's too): queried on every check
    nvml = None
    if importlib.util.find_spec("pynvml") is not None:
        import pynvml
        pynvml.nvmlInit()
        nvml = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        nvml_total = pynvml.nvmlDeviceGetMemoryInfo(nvml).total
        running.append("nvml")
    gen = torch.Generator(DEV).manual_seed(args.seed)
    held = torch.randint(-2 ** 31, 2 ** 31 - 1, (args.held_mib * 262144,), dtype=torch.int32, device=DEV, generator=gen)
    held_ref = int(held.to(torch.int64).mul_(2654435761).remainder_(4294967291).sum())
    torch.cuda.synchronize()

    def check():
        why = []
        for part_names, compute, train, part_refs in zip(names, computes, trains, refs):
            for name, got, want in zip(part_names, compute(), part_refs):
                if not torch.equal(got, want):
                    why.append("%s differs" % name)
            if train is not None:
                loss = train()
                if loss != loss or loss in (float("inf"), float("-inf")):
                    why.append("training step gave %s" % loss)
        if nvml is not None:
            try:
                if pynvml.nvmlDeviceGetMemoryInfo(nvml).total != nvml_total:
                    why.append("NVML reports another memory size")
                pynvml.nvmlDeviceGetUtilizationRates(nvml)
            except pynvml.NVMLError as e:
                why.append("NVML failed: %s" % e)
        if int(held.to(torch.int64).mul_(2654435761).remainder_(4294967291).sum()) != held_ref:
            why.append("the kept data changed")
        torch.cuda.synchronize()
        return why

    why = check()
    if why:
        print("CHECK FAIL at start: " + "; ".join(why), flush=True)
        return 1
    return check_loop.serve(check, " ".join(running))


if __name__ == "__main__":
    sys.exit(main())
