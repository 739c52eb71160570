"""server.py - an inference server for gpusnap's GPU tests (t85-server-dump, t88-soak).

What a real one holds, in small: a listening TCP socket serving HTTP/1.1 with
keep-alive connections, a UDP socket, and a model on the GPU that answers
generate requests with greedy decoding, so the same prompt always gives the
same tokens (in this process, after a restore of it, and in a twin started the
same way: the tests compare the two).

Models: --model hf serves a Hugging Face transformers LlamaForCausalLM loaded
from --hf-dir with from_pretrained (bf16, straight onto the GPU), as real
servers load one; --make-hf-model DIR --hf-size 1b|3b|8b writes such a model
(seeded random weights in the shape of Llama 3.2 1B/3B or 3.1 8B, nothing is
downloaded) and exits. Prompts are byte-level token ids for it too.
--model torch (the default): a small decoder-only transformer with
random weights from --seed (nothing is downloaded): byte-level tokens, learned
positions, --layers blocks of causal self-attention and an MLP, fp32 without
TF32 and with PyTorch's deterministic algorithms. It also keeps a "KV cache"
of --cache-mib MiB of seeded integers on the GPU whose exact sum comes with
every answer, so an answer also says the server's GPU state is intact.
--model python is a pure-Python stand-in (no torch, no GPU) with the same
interface, for testing the HTTP/UDP handling and the clients on a CPU.

HTTP (127.0.0.1:--http-port, 0 = any free port):
  POST /generate {"prompt": str, "max_tokens": int} -> {"tokens": [...], "text": str, "cache_sum": int}
  GET  /health  -> {"ok": true}
  GET  /stats   -> {"pid", "requests", "rss_kib", "fds", "torch_allocated", "torch_reserved"}
  POST /quit    -> stops the server
UDP (127.0.0.1:--udp-port): "ping X" -> "pong X"; "gen PROMPT" -> "gen " + the JSON token list of 4 tokens.

Start-up: writes {"pid", "http", "udp"} to --ports-file (atomically), then
prints "READY <pid>". Commands on stdin, like the C test apps: "stats" ->
"STATS <json>", "quit" -> "BYE 0". End of stdin is not a quit (the server then
runs until /quit or SIGTERM). Logs nothing: CRIU restores a process only if
its regular files kept their size, so run it with stderr on /dev/null.
"""
import argparse
import hashlib
import http.server
import json
import os
import signal
import socket
import sys
import threading

VOCAB = 256 + 16  # byte-level tokens and a few more the model may produce
MAX_CONTEXT = 128
UDP_GEN_TOKENS = 4


def encode(prompt):
    return list(prompt.encode("utf-8", "replace"))[-MAX_CONTEXT:] or [0]


def decode(tokens):
    return "".join(chr(32 + t % 95) for t in tokens)


class PythonModel:
    """A deterministic stand-in: each next token is a hash of the seed and the context so far."""

    def __init__(self, seed, cache_mib):
        self.seed = seed
        self.cache_sum = int.from_bytes(hashlib.sha256(b"cache %d %d" % (seed, cache_mib)).digest()[:6], "little")

    def generate(self, tokens, max_new):
        ctx = list(tokens)
        out = []
        for _ in range(max_new):
            h = hashlib.sha256(b"%d:" % self.seed + bytes(t % 256 for t in ctx[-MAX_CONTEXT:])).digest()
            nxt = int.from_bytes(h[:4], "little") % VOCAB
            ctx.append(nxt)
            out.append(nxt)
        return out

    def memory(self):
        return 0, 0


class TorchModel:
    """The small transformer on the GPU (see the module docstring)."""

    def __init__(self, seed, cache_mib, dim, layers, heads):
        torch = deterministic_torch()
        self.torch = torch
        self.dev = torch.device("cuda")
        self.dim, self.heads = dim, heads
        g = torch.Generator().manual_seed(seed)  # on the CPU: the same weights on any GPU

        def param(*shape, scale=None):
            s = scale if scale is not None else shape[0] ** -0.5
            return (torch.randn(*shape, generator=g) * s).to(self.dev)

        self.embed = param(VOCAB, dim, scale=1.0)
        self.pos = param(MAX_CONTEXT + 64, dim, scale=0.1)
        self.blocks = []
        for _ in range(layers):
            self.blocks.append({
                "ln1": torch.ones(dim, device=self.dev), "ln2": torch.ones(dim, device=self.dev),
                "qkv": param(dim, 3 * dim), "proj": param(dim, dim),
                "up": param(dim, 4 * dim), "down": param(4 * dim, dim),
            })
        self.ln_f = torch.ones(dim, device=self.dev)
        self.head = param(dim, VOCAB)
        n = cache_mib * (1 << 20) // 4
        self.cache = torch.randint(0, 1 << 20, (max(n, 1),), dtype=torch.int32, generator=g).to(self.dev)
        torch.cuda.synchronize()

    def _forward(self, ids):
        t = self.torch
        f = t.nn.functional
        n = ids.shape[0]
        h = self.embed[ids] + self.pos[:n]
        mask = t.full((n, n), float("-inf"), device=self.dev).triu(1)
        hd = self.dim // self.heads
        for b in self.blocks:
            x = f.layer_norm(h, (self.dim,), b["ln1"])
            q, k, v = (x @ b["qkv"]).split(self.dim, dim=-1)
            q = q.view(n, self.heads, hd).transpose(0, 1)
            k = k.view(n, self.heads, hd).transpose(0, 1)
            v = v.view(n, self.heads, hd).transpose(0, 1)
            att = t.softmax(q @ k.transpose(1, 2) * hd ** -0.5 + mask, dim=-1)
            h = h + (att @ v).transpose(0, 1).reshape(n, self.dim) @ b["proj"]
            x = f.layer_norm(h, (self.dim,), b["ln2"])
            h = h + f.gelu(x @ b["up"]) @ b["down"]
        return f.layer_norm(h[-1], (self.dim,), self.ln_f) @ self.head

    def generate(self, tokens, max_new):
        t = self.torch
        ctx = list(tokens)
        out = []
        with t.inference_mode():
            for _ in range(max_new):
                ids = t.tensor(ctx[-MAX_CONTEXT:], dtype=t.long, device=self.dev)
                nxt = int(t.argmax(self._forward(ids)).item())
                ctx.append(nxt)
                out.append(nxt)
        return out

    @property
    def cache_sum(self):
        return int(self.cache.sum(dtype=self.torch.int64).item())

    def memory(self):
        return self.torch.cuda.memory_allocated(), self.torch.cuda.memory_reserved()


# Llama shapes (untied embeddings, so that save_pretrained writes every tensor once).
HF_SIZES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8),
}


def deterministic_torch():
    # Set before CUDA starts: cuBLAS needs it for deterministic algorithms.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    return torch


def make_hf_model(path, size, seed):
    """Writes a LlamaForCausalLM of the given shape with seeded random weights to path (save_pretrained)."""
    torch = deterministic_torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                      tie_word_embeddings=False, attn_implementation="sdpa", **HF_SIZES[size])
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    return 0


class HFModel:
    """A transformers causal LM from a directory, on the GPU in bf16, greedy decoding."""

    def __init__(self, path, seed, cache_mib):
        torch = deterministic_torch()
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda").eval()
        g = torch.Generator().manual_seed(seed)
        n = cache_mib * (1 << 20) // 4
        self.cache = torch.randint(0, 1 << 20, (max(n, 1),), dtype=torch.int32, generator=g).to("cuda")
        torch.cuda.synchronize()

    def generate(self, tokens, max_new):
        t = self.torch
        ids = t.tensor([tokens], dtype=t.long, device="cuda")
        with t.inference_mode():
            out = self.model.generate(ids, attention_mask=t.ones_like(ids), max_new_tokens=max_new,
                                      min_new_tokens=max_new, do_sample=False, pad_token_id=0)
        return [int(x) for x in out[0, ids.shape[1]:]]

    @property
    def cache_sum(self):
        return int(self.cache.sum(dtype=self.torch.int64).item())

    def memory(self):
        return self.torch.cuda.memory_allocated(), self.torch.cuda.memory_reserved()


class Server:
    """The model behind a lock (one generation at a time, as a batch of one), its sockets and counters."""

    def __init__(self, model, http_port, udp_port):
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0
        self.stopping = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive
            timeout = None                 # an idle keep-alive connection stays open

            def log_message(self, *args):
                pass

            def _reply(self, code, obj):
                body = json.dumps(obj, sort_keys=True).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/health":
                    self._reply(200, {"ok": True})
                elif self.path == "/stats":
                    self._reply(200, server.stats())
                else:
                    self._reply(404, {"error": "no such path"})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if self.path == "/quit":
                    self._reply(200, {"ok": True})
                    server.stop()
                    return
                if self.path != "/generate":
                    self._reply(404, {"error": "no such path"})
                    return
                try:
                    req = json.loads(raw or b"{}")
                    prompt = str(req.get("prompt", ""))
                    max_tokens = max(1, min(64, int(req.get("max_tokens", 8))))
                except (ValueError, TypeError, AttributeError) as e:
                    self._reply(400, {"error": "bad request: %s" % e})
                    return
                self._reply(200, server.generate(prompt, max_tokens))

        class HTTP(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # a client that went away mid-answer (after a dump, say) is not the server's error

        self.http = HTTP(("127.0.0.1", http_port), Handler)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", udp_port))
        self.http_port = self.http.server_address[1]
        self.udp_port = self.udp.getsockname()[1]

    def generate(self, prompt, max_tokens):
        with self.lock:
            tokens = self.model.generate(encode(prompt), max_tokens)
            cache_sum = self.model.cache_sum
            self.requests += 1
        return {"tokens": tokens, "text": decode(tokens), "cache_sum": cache_sum}

    def answer_udp(self, data):
        msg = data.decode("utf-8", "replace")
        if msg.startswith("ping "):
            return ("pong " + msg[5:]).encode()
        if msg.startswith("gen "):
            return ("gen " + json.dumps(self.generate(msg[4:], UDP_GEN_TOKENS)["tokens"])).encode()
        return b"error unknown request"

    def serve_udp(self):
        while not self.stopping.is_set():
            try:
                data, peer = self.udp.recvfrom(65536)
            except OSError:
                if self.stopping.is_set():
                    return
                continue
            try:
                self.udp.sendto(self.answer_udp(data), peer)
            except OSError:
                pass  # the asker is gone; nothing to tell

    def stats(self):
        alloc, reserved = self.model.memory()
        rss = 0
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return {"pid": os.getpid(), "requests": self.requests, "rss_kib": rss, "fds": len(os.listdir("/proc/self/fd")),
                "torch_allocated": alloc, "torch_reserved": reserved}

    def start(self):
        for target in (self.http.serve_forever, self.serve_udp):
            threading.Thread(target=target, daemon=True).start()

    def stop(self):
        if self.stopping.is_set():
            return
        self.stopping.set()
        # shutdown() waits for serve_forever, which may be the caller's own loop: from a thread of its own
        threading.Thread(target=self.http.shutdown, daemon=True).start()
        try:
            self.udp.close()
        except OSError:
            pass


def write_ports(path, server):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "http": server.http_port, "udp": server.udp_port}, f)
    os.rename(tmp, path)


def make_model(args):
    if args.model == "python":
        return PythonModel(args.seed, args.cache_mib)
    if args.model == "hf":
        return HFModel(args.hf_dir, args.seed, args.cache_mib)
    return TorchModel(args.seed, args.cache_mib, args.dim, args.layers, args.heads)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("torch", "python", "hf"), default="torch")
    ap.add_argument("--hf-dir", help="--model hf: the model's directory (from_pretrained)")
    ap.add_argument("--make-hf-model", metavar="DIR", help="write a model of --hf-size to DIR and exit")
    ap.add_argument("--hf-size", choices=sorted(HF_SIZES), default="1b")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--cache-mib", type=int, default=64)
    ap.add_argument("--http-port", type=int, default=0)
    ap.add_argument("--udp-port", type=int, default=0)
    ap.add_argument("--ports-file")
    args = ap.parse_args(argv)
    if args.make_hf_model:
        return make_hf_model(args.make_hf_model, args.hf_size, args.seed)
    if args.model == "hf" and not args.hf_dir:
        ap.error("--model hf needs --hf-dir")
    server = Server(make_model(args), args.http_port, args.udp_port)
    # First CUDA kernels and cuBLAS handles before READY, and the longest context there is: the caching
    # allocator reaches its high-water mark now, so the soak's memory figures compare like with like.
    server.generate("w" * MAX_CONTEXT, 8)
    server.requests = 0
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    if args.ports_file:
        write_ports(args.ports_file, server)
    print("READY %d" % os.getpid(), flush=True)

    def commands():
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "quit":
                break
            if cmd == "stats":
                print("STATS " + json.dumps(server.stats(), sort_keys=True), flush=True)
            elif cmd:
                print("ERROR unknown command %r" % cmd, flush=True)
        else:
            return  # end of input: run on until /quit or SIGTERM
        server.stop()

    threading.Thread(target=commands, daemon=True).start()
    while not server.stopping.wait(1.0):
        pass
    print("BYE 0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
