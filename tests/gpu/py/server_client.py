"""server_client.py - the client side of gpusnap's server tests (t85-server-dump, t88-soak).

Talks to two servers of tests/gpu/py/server.py started the same way: A, the one
gpusnap suspends, dumps and restores, and B, its uninterrupted twin. Every
answer A gives is compared with B's answer to the same prompt: the tokens and
the GPU state's checksum must be equal.

  server_client.py --a PORTS_FILE --b PORTS_FILE [--seed N]

Then, like the C test apps, "READY <pid>" and one command per line on stdin:
  open          keep-alive HTTP connections to A and B, one request on each
                -> "OPEN SAME" | "OPEN DIFF <what>" | "OPEN ERROR <why>"
  keepalive     one request on the connection `open` made to A, without
                reconnecting -> "KEEPALIVE SAME" | "KEEPALIVE CLOSED <why>" | "KEEPALIVE DIFF <what>"
  compare N     N prompts to A and B, reconnecting to A when its connection
                was closed -> "COMPARE SAME n=N reconnects=R" | "COMPARE DIFF <what>" | "COMPARE ERROR <why>"
  udp N         N UDP pings and N UDP generations to A and B
                -> "UDP SAME n=N" | "UDP DIFF <what>" | "UDP ERROR <why>"
  server-stats  A's /stats -> "SERVERSTATS <json>"
  hammer-start  a thread sends prompts without pause, to B then A, compares, and
                retries A (reconnecting) while A is away (suspended, dumped);
                every 8th round also a UDP generation -> "HAMMER started"
  next          waits (up to --wait-s) until the hammer has one more answer than
                now -> "ANSWERED <count> <seconds waited>" | "ANSWERED TIMEOUT <count>" |
                "ANSWERED ERROR <why the stream stopped>"
  stats         -> "STATS answered=N same=N diff=N retries=N udp=N udp_retries=N max_s=X first_diff=<what|->"
  hammer-stop   -> "STOPPED <stats as above>"
  quit          -> "BYE 0"
The module's functions are imported by server_selftest.py.
"""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

REQUEST_TIMEOUT_S = 180  # longer than any suspend or dump the tests make
RETRY_FOR_S = 240        # how long A may be away (between a dump and its restore)


def read_ports(path, wait_s=60):
    """The {"pid", "http", "udp"} a server wrote at start-up."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def prompts(seed):
    """An endless, reproducible stream of varied prompts."""
    rng = random.Random(seed)
    words = ["the", "gpu", "snapshot", "restores", "a", "server", "model", "tokens", "cache", "kernel",
             "memory", "answer", "prompt", "twin", "again", "quickly", "while", "suspended"]
    i = 0
    while True:
        n = rng.randint(1, 24)
        yield "%d %s" % (i, " ".join(rng.choice(words) for _ in range(n)))
        i += 1


class Conn:
    """One keep-alive HTTP connection to a server; reconnects only when asked to."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def close(self):
        if self.c:
            self.c.close()
        self.c = None

    def generate(self, prompt, max_tokens=8, reconnect=True):
        """The answer (dict) to prompt. Raises OSError/HTTPException when the connection is gone and
        reconnect is False, or the server does not answer."""
        if self.c is None:
            if not reconnect:
                raise ConnectionError("no connection")
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens})
        try:
            self.c.request("POST", "/generate", body, {"Content-Type": "application/json"})
            r = self.c.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if r.status != 200:
            raise http.client.HTTPException("HTTP %d: %s" % (r.status, data[:200]))
        return json.loads(data)

    def get(self, path):
        if self.c is None:
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            self.c.request("GET", path)
            r = self.c.getresponse()
            return json.loads(r.read())
        except (OSError, http.client.HTTPException):
            self.close()
            raise


def same_answer(a, b):
    """Equal tokens and GPU state: what an uninterrupted twin gives."""
    return a.get("tokens") == b.get("tokens") and a.get("cache_sum") == b.get("cache_sum")


def show(prompt, a, b):
    return "prompt %r: A %s cache %s, B %s cache %s" % (prompt[:40], a.get("tokens"), a.get("cache_sum"),
                                                        b.get("tokens"), b.get("cache_sum"))


def udp_ask(port, msg, retry_for_s=10.0, timeout_s=2.0, stop=None):
    """One UDP request and its answer; a lost datagram or a refused port (the server away) is retried
    for retry_for_s (raises Stopped once the event stop is set). Returns (answer, retries)."""
    deadline = time.monotonic() + retry_for_s
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout_s)
    try:
        s.connect(("127.0.0.1", port))
        attempt = 0
        while True:
            try:
                s.send(msg.encode())
                return s.recv(65536).decode(), attempt
            except (socket.timeout, ConnectionRefusedError):
                if stop is not None and stop.is_set():
                    raise Stopped()
                if time.monotonic() > deadline:
                    raise TimeoutError("no UDP answer to %r in %.0f s (%d tries)" % (msg[:40], retry_for_s,
                                                                                     attempt + 1))
                attempt += 1
                time.sleep(0.05)
    finally:
        s.close()


class Stopped(Exception):
    """The hammer was told to stop while it waited for the server."""


def generate_retrying(conn, prompt, stats=None, retry_for_s=RETRY_FOR_S, stop=None):
    """conn.generate, reconnecting and retrying while the server is away (connection refused or reset);
    raises Stopped once the event stop is set."""
    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            return conn.generate(prompt)
        except (OSError, http.client.HTTPException):
            if stop is not None and stop.is_set():
                raise Stopped()
            if time.monotonic() > deadline:
                raise
            if stats is not None:
                stats["retries"] += 1
            time.sleep(0.05)


class Hammer:
    """A steady stream of requests to B and A, every answer compared; counters for the tests."""

    def __init__(self, a_ports, b_ports, seed):
        self.a, self.b = Conn(a_ports["http"]), Conn(b_ports["http"])
        self.a_udp, self.b_udp = a_ports["udp"], b_ports["udp"]
        self.prompts = prompts(seed + 1000)
        self.stats = {"answered": 0, "same": 0, "diff": 0, "retries": 0, "udp": 0, "udp_retries": 0, "max_s": 0.0}
        self.first_diff = None
        self.error = None
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        rounds = 0
        try:
            while not self.stop.is_set():
                prompt = next(self.prompts)
                want = self.b.generate(prompt)
                t0 = time.monotonic()
                got = generate_retrying(self.a, prompt, self.stats, stop=self.stop)
                took = time.monotonic() - t0
                rounds += 1
                udp_same = True
                if rounds % 8 == 0:
                    want_udp, _ = udp_ask(self.b_udp, "gen " + prompt)
                    got_udp, retries = udp_ask(self.a_udp, "gen " + prompt, retry_for_s=RETRY_FOR_S, stop=self.stop)
                    udp_same = want_udp == got_udp
                    with self.cond:
                        self.stats["udp"] += 1
                        self.stats["udp_retries"] += retries
                with self.cond:
                    self.stats["answered"] += 1
                    self.stats["max_s"] = max(self.stats["max_s"], took)
                    if same_answer(got, want) and udp_same:
                        self.stats["same"] += 1
                    else:
                        self.stats["diff"] += 1
                        if self.first_diff is None:
                            self.first_diff = show(prompt, got, want) if not same_answer(got, want) else \
                                "UDP gen %r: A %s, B %s" % (prompt[:40], got_udp, want_udp)
                    self.cond.notify_all()
        except Stopped:
            pass
        except Exception as e:  # the test reads it from `stats`; the thread must not die silently
            if self.stop.is_set():
                return  # a request cut short by halt()
            with self.cond:
                self.error = "%s: %s" % (type(e).__name__, e)
                self.cond.notify_all()

    def halt(self, wait_s=30):
        """Stops the stream, also a request blocked on a server that does not answer: its socket is shut."""
        self.stop.set()
        for conn in (self.a, self.b):
            c = conn.c
            if c is not None and c.sock is not None:
                try:
                    c.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.thread.join(wait_s)

    def wait_next(self, wait_s):
        """Waits until one more answer than now has come: (count, seconds), or (None, why) on a timeout
        or when the stream stopped on an error."""
        t0 = time.monotonic()
        with self.cond:
            start = self.stats["answered"]
            while self.stats["answered"] <= start:
                left = wait_s - (time.monotonic() - t0)
                if self.error is not None:
                    return None, "ERROR " + self.error
                if left <= 0:
                    return None, "TIMEOUT %d" % self.stats["answered"]
                self.cond.wait(left)
            return self.stats["answered"], time.monotonic() - t0

    def describe(self):
        with self.cond:
            s = dict(self.stats)
            first = self.first_diff or "-"
            err = self.error
        text = "answered=%d same=%d diff=%d retries=%d udp=%d udp_retries=%d max_s=%.3f first_diff=%s" % (
            s["answered"], s["same"], s["diff"], s["retries"], s["udp"], s["udp_retries"], s["max_s"], first)
        if err:
            text += " error=" + err
        return text


class Client:
    """The commands of the module docstring, each returning its one-line answer."""

    def __init__(self, a_ports, b_ports, seed, wait_s):
        self.a_ports, self.b_ports = a_ports, b_ports
        self.a, self.b = Conn(a_ports["http"]), Conn(b_ports["http"])
        self.prompts = prompts(seed)
        self.hammer = None
        self.wait_s = wait_s

    def cmd_open(self):
        self.a.close()
        self.b.close()
        prompt = next(self.prompts)
        try:
            want, got = self.b.generate(prompt), self.a.generate(prompt)
        except (OSError, http.client.HTTPException) as e:
            return "OPEN ERROR %s: %s" % (type(e).__name__, e)
        return "OPEN SAME" if same_answer(got, want) else "OPEN DIFF " + show(prompt, got, want)

    def cmd_keepalive(self):
        prompt = next(self.prompts)
        want = self.b.generate(prompt)
        try:
            got = self.a.generate(prompt, reconnect=False)
        except (OSError, http.client.HTTPException) as e:
            return "KEEPALIVE CLOSED %s: %s" % (type(e).__name__, e)
        return "KEEPALIVE SAME" if same_answer(got, want) else "KEEPALIVE DIFF " + show(prompt, got, want)

    def cmd_compare(self, n):
        stats = {"retries": 0}
        for _ in range(n):
            prompt = next(self.prompts)
            try:
                want = self.b.generate(prompt)
                got = generate_retrying(self.a, prompt, stats, retry_for_s=30)
            except (OSError, http.client.HTTPException) as e:
                return "COMPARE ERROR %s: %s" % (type(e).__name__, e)
            if not same_answer(got, want):
                return "COMPARE DIFF " + show(prompt, got, want)
        return "COMPARE SAME n=%d reconnects=%d" % (n, stats["retries"])

    def cmd_udp(self, n):
        try:
            for i in range(n):
                ping = "ping %d-%d" % (os.getpid(), i)
                got, _ = udp_ask(self.a_ports["udp"], ping)
                if got != "pong " + ping[5:]:
                    return "UDP DIFF %r answered %r" % (ping, got)
                prompt = next(self.prompts)
                want, _ = udp_ask(self.b_ports["udp"], "gen " + prompt)
                got, _ = udp_ask(self.a_ports["udp"], "gen " + prompt)
                if got != want:
                    return "UDP DIFF gen %r: A %s, B %s" % (prompt[:40], got, want)
        except (OSError, TimeoutError) as e:
            return "UDP ERROR %s: %s" % (type(e).__name__, e)
        return "UDP SAME n=%d" % n

    def cmd_server_stats(self):
        try:
            return "SERVERSTATS " + json.dumps(Conn(self.a_ports["http"]).get("/stats"), sort_keys=True)
        except (OSError, http.client.HTTPException) as e:
            return "SERVERSTATS ERROR %s: %s" % (type(e).__name__, e)

    def cmd_hammer_start(self):
        if self.hammer is None:
            self.hammer = Hammer(self.a_ports, self.b_ports, 0)
            self.hammer.thread.start()
        return "HAMMER started"

    def cmd_next(self):
        if self.hammer is None:
            return "ANSWERED TIMEOUT no hammer"
        count, took = self.hammer.wait_next(self.wait_s)
        if count is None:
            return "ANSWERED " + took
        return "ANSWERED %d %.4f" % (count, took)

    def cmd_stats(self):
        return "STATS " + (self.hammer.describe() if self.hammer else "answered=0 no hammer")

    def cmd_hammer_stop(self):
        if self.hammer is None:
            return "STOPPED answered=0 no hammer"
        self.hammer.halt()
        return "STOPPED " + self.hammer.describe()

    def handle(self, line):
        words = line.split()
        if not words:
            return None
        cmd, args = words[0], words[1:]
        if cmd == "open":
            return self.cmd_open()
        if cmd == "keepalive":
            return self.cmd_keepalive()
        if cmd == "compare":
            return self.cmd_compare(int(args[0]) if args else 10)
        if cmd == "udp":
            return self.cmd_udp(int(args[0]) if args else 5)
        if cmd == "server-stats":
            return self.cmd_server_stats()
        if cmd == "hammer-start":
            return self.cmd_hammer_start()
        if cmd == "next":
            return self.cmd_next()
        if cmd == "stats":
            return self.cmd_stats()
        if cmd == "hammer-stop":
            return self.cmd_hammer_stop()
        return "ERROR unknown command %r" % line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="ports file of the server under test")
    ap.add_argument("--b", required=True, help="ports file of its uninterrupted twin")
    ap.add_argument("--seed", type=int, default=85)
    ap.add_argument("--wait-s", type=float, default=120)
    args = ap.parse_args(argv)
    client = Client(read_ports(args.a), read_ports(args.b), args.seed, args.wait_s)
    print("READY %d" % os.getpid(), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        try:
            answer = client.handle(line)
        except Exception as e:  # one bad command must not end the client the test talks to
            answer = "ERROR %s: %s" % (type(e).__name__, e)
        if answer:
            print(answer, flush=True)
    if client.hammer:
        client.cmd_hammer_stop()
    print("BYE 0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
