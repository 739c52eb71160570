#!/usr/bin/env python3
# mock_app.py - stands in for the CUDA test apps in a dry run of the GPU suite's
# plumbing (dry-run.sh): same line protocol, "VRAM" registered in a state dir that
# the mock nvidia-smi and mock gpusnap read, and "CUDA calls" that block while the
# mock gpusnap holds the process locked or suspended, as the driver's lock does.
import os, signal, sys, threading, time

kind, args = sys.argv[1], sys.argv[2:]
state_dir = os.environ["GPUSNAP_MOCK_STATE"]
ngpus = int(os.environ.get("GPUSNAP_MOCK_GPUS", "1"))
pid = os.getpid()
out_lock = threading.Lock()
errors = 0

def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default

def size(s):
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)

def reply(s):
    with out_lock:
        sys.stdout.write(s + "\n")
        sys.stdout.flush()

def gpu_state():
    try:
        return open(os.path.join(state_dir, "%d.state" % pid)).read().strip() or "running"
    except FileNotFoundError:
        return "running"

def cuda():
    while gpu_state() != "running":
        time.sleep(0.01)

def register(mib_per_gpu):
    with open(os.path.join(state_dir, "%d.mem" % pid), "w") as f:
        for g, mib in mib_per_gpu.items():
            f.write("%d %d\n" % (g, mib))

mem = {}
total = 0
if kind in ("pattern", "pattern_shared", "multigpu"):
    devs = list(range(ngpus)) if kind == "multigpu" or opt("--device") == "all" else [int(opt("--device", "0"))]
    if opt("--count"):
        n = int(opt("--count"))
        total = n * (size(opt("--min", "1")) + size(opt("--max", "1M"))) // 2
        allocs = n
    else:
        total = size(opt("--size", "1G"))
        allocs = -(-total // size(opt("--alloc-size", "1G")))
    for d in devs:
        mem[d] = 520 + total // 2**20
    total *= len(devs)
else:
    hold = size(opt("--hold", "256M")) // 2**20 if kind == "counter" else 16
    mem[int(opt("--device", "0"))] = 520 + hold
if os.environ.get("GPUSNAP_MOCK_AGENT"):  # started by the mock `gpusnap run`: the agent's path
    open(os.path.join(state_dir, "%d.agent" % pid), "w").close()
register(mem)
reply("READY %d" % pid)

iterations = 0
value = int(opt("--start", "0"))  # --start: where the mock `gpusnap restore` lets a counter go on
spinning = False
stop = False

def busy_loop():
    global iterations
    while not stop:
        cuda()
        iterations += 1
        time.sleep(0.001)

def counter_loop():
    global value
    while not stop:
        cuda()
        value += 1
        if opt("--out"):
            with open(opt("--out"), "a") as f:
                f.write("%d\n" % value)
        if "--quiet" not in args:
            reply("TICK %d" % value)
        time.sleep(int(opt("--interval-ms", "100")) / 1000)

def spin(seconds):
    global spinning
    busy = os.path.join(state_dir, "%d.busy" % pid)
    open(busy, "w").close()
    spinning = True
    reply("SPINNING %g" % seconds)
    def end():
        global spinning
        time.sleep(seconds)
        os.unlink(busy)
        spinning = False
        reply("DONE %.3f" % seconds)
    threading.Thread(target=end, daemon=True).start()

if kind == "busy":
    threading.Thread(target=busy_loop, daemon=True).start()
if kind == "counter":
    threading.Thread(target=counter_loop, daemon=True).start()
if kind == "spin" and "--no-start" not in args:
    spin(float(opt("--seconds", "10")))

last_verify = -1
if "--no-stdin" in args:  # no commands: counts until SIGTERM or SIGINT, as the real counter does
    ended = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ended.set())
    signal.signal(signal.SIGINT, lambda *_: ended.set())
    while not ended.wait(0.1):
        pass
for line in ([] if "--no-stdin" in args else sys.stdin):
    cmd = line.strip()
    if cmd == "quit":
        break
    if cmd == "ping":
        reply("PONG")
    elif cmd == "info":
        reply("INFO pid=%d allocations=%d bytes=%d api=%s devices=0 seed=1 errors=0" % (
            pid, allocs, total, opt("--api", "runtime")))
    elif cmd == "verify":
        cuda()
        if kind == "busy":
            t0 = time.time()
            while iterations <= last_verify and time.time() - t0 < 10:
                time.sleep(0.01)
            ok = iterations > last_verify
            last_verify = iterations
            reply("VERIFY OK %d" % iterations if ok else "VERIFY FAIL no progress")
        elif kind == "spin":
            reply("VERIFY FAIL still spinning" if spinning else "VERIFY OK 1")
        else:
            reply("VERIFY OK %d" % (total if kind != "counter" else value))
    elif cmd == "rewrite":
        cuda()
        reply("REWRITE OK seed=2")
    elif cmd == "status":
        if kind == "spin":
            reply("STATUS %s spins=1 errors=0" % ("spinning" if spinning else "idle"))
        elif kind == "counter":
            reply("STATUS value=%d ticks=%d errors=0" % (value, value))
        else:
            reply("STATUS iterations=%d errors=%d" % (iterations, errors))
    elif cmd == "value":
        reply("VALUE %d" % value)
    elif cmd:
        reply("ERROR unknown command '%s'" % cmd)
stop = True
cuda()
os.unlink(os.path.join(state_dir, "%d.mem" % pid))
reply("BYE 0")
sys.exit(0)
