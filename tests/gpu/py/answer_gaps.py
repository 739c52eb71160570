"""answer_gaps.py - a steady stream of requests to an inference server (server.py), and the longest gap in its answers.

For bench/live_pause.sh and tests/gpu/t36-live-dump.sh: sends POST /generate
(--max-tokens tokens) one after another on a keep-alive connection to --port,
reconnecting when it was closed, until stdin gives a line (or ends); every
answer's tokens must equal the first's (the same prompt, greedy decoding).
Prints "READY <pid>" once the first answer came, then at the end one JSON
line: {"answered": N, "same": true|false, "max_gap_s": the longest time
between two consecutive answers, "gaps": the five longest with their end
times (Unix), "median_s": the median time between answers}.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prompt", default="gpusnap checkpoints this server while it answers")
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args()
    stop = threading.Event()
    body = json.dumps({"prompt": args.prompt, "max_tokens": args.max_tokens})
    times, first, same, errors = [], None, True, 0
    conn = None

    def one():
        nonlocal conn
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
                conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                if resp.status == 200:
                    return json.loads(data)["tokens"]
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.002)
        return None

    def loop():
        nonlocal first, same
        while not stop.is_set():
            tokens = one()
            if tokens is None:
                return
            times.append(time.time())
            if first is None:
                first = tokens
                print("READY %d" % os.getpid(), flush=True)
            elif tokens != first:
                same = False

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    sys.stdin.readline()
    stop.set()
    t.join(timeout=300)
    gaps = sorted(((b - a, b) for a, b in zip(times, times[1:])), reverse=True)
    print(json.dumps({
        "answered": len(times), "same": same,
        "max_gap_s": round(gaps[0][0], 3) if gaps else None,
        "gaps": [[round(g, 3), round(e, 3)] for g, e in gaps[:5]],
        "median_s": round(statistics.median([g for g, _ in gaps]), 4) if gaps else None,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
