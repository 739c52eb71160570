"""first_answer.py - how long until an inference server (server.py) first answers, for bench/warm_start.sh.

Waits for the server's ports file (--ports-file, written once it listens) or
takes --port, then sends one POST /generate, retrying while nothing listens
yet, and prints one JSON line: {"s": seconds from --since (a Unix time with
fractions, as bash's $EPOCHREALTIME) to the answer, "next_s": how long the
same request then takes (it must give the same tokens), "tokens": [...],
"cache_sum": N, "port": P}; --then-quit then ends the server. Exits 1 with a line on stderr if no answer came
within --timeout seconds.
"""
import argparse
import http.client
import json
import sys
import time


def port_from(path, deadline):
    while time.time() < deadline:
        try:
            with open(path) as f:
                return int(json.load(f)["http"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.005)
    return None


def ask(port, prompt, max_tokens, deadline):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens})
    why = "no attempt"
    while time.time() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=max(1.0, deadline - time.time()))
        try:
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status == 200:
                return json.loads(data), None
            why = "HTTP %d: %s" % (resp.status, data[:200])
        except (OSError, http.client.HTTPException) as e:
            why = str(e)  # not listening yet, or gone
            time.sleep(0.005)
        finally:
            conn.close()
    return None, why


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--ports-file")
    where.add_argument("--port", type=int)
    ap.add_argument("--since", type=float, required=True)
    ap.add_argument("--prompt", default="gpusnap restores this server")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--then-quit", action="store_true", help="then POST /quit: the server ends")
    args = ap.parse_args()
    deadline = time.time() + args.timeout
    port = args.port if args.port else port_from(args.ports_file, deadline)
    if not port:
        print("first_answer: no ports file at %s within %.0f s" % (args.ports_file, args.timeout), file=sys.stderr)
        return 1
    answer, why = ask(port, args.prompt, args.max_tokens, deadline)
    now = time.time()
    if answer is None:
        print("first_answer: no answer on port %d within %.0f s: %s" % (port, args.timeout, why), file=sys.stderr)
        return 1
    # the same request again: what a request costs once the server is going, against which the first is seen
    again, why = ask(port, args.prompt, args.max_tokens, time.time() + args.timeout)
    if again is None or again["tokens"] != answer["tokens"]:
        print("first_answer: the second answer on port %d differs or is missing: %s" % (port, why or again),
              file=sys.stderr)
        return 1
    print(json.dumps({"s": round(now - args.since, 3), "next_s": round(time.time() - now, 3),
                      "tokens": answer["tokens"], "cache_sum": answer["cache_sum"], "port": port}), flush=True)
    if args.then_quit:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/quit", b"")
            conn.getresponse().read()
        except (OSError, http.client.HTTPException) as e:
            print("first_answer: POST /quit: %s" % e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
