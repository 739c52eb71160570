"""server_selftest.py - checks server.py and server_client.py on a CPU, without torch or a GPU.

Runs servers with the pure-Python stand-in model (--model python) and drives the
client as t85-server-dump and t88-soak do: keep-alive connections, answers
compared with a twin, UDP, the hammer through a stop (SIGSTOP/SIGCONT, as a
suspend looks from outside) and through a restart on the same ports (as a dump
and restore look: connections closed, the port back). Also checks that the
comparison fails where it must (a twin of another seed).

  python3 tests/gpu/py/server_selftest.py        # prints one line per check, "N passed, N failed" last
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PASSED, FAILED = [], []


def check(what, ok, detail=""):
    (PASSED if ok else FAILED).append(what)
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, (" (%s)" % detail) if detail else ""), flush=True)


def start_server(work, name, seed, http_port=0, udp_port=0):
    ports = os.path.join(work, name + ".json")
    if os.path.exists(ports):
        os.unlink(ports)
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--model", "python", "--seed", str(seed),
                          "--ports-file", ports, "--http-port", str(http_port), "--udp-port", str(udp_port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check("%s starts (%s)" % (name, line), line == "READY %d" % p.pid)
    return p, ports


class App:
    """A line-protocol app on pipes, as tests/gpu/lib.sh's app_cmd drives one."""

    def __init__(self, args):
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self.p.stdout.readline().strip()

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()


def client(a_ports, b_ports):
    c = App([sys.executable, os.path.join(HERE, "server_client.py"), "--a", a_ports, "--b", b_ports,
             "--wait-s", "20"])
    check("client starts", c.ready.startswith("READY "), c.ready)
    return c


def stop(p):
    p.stdin.write("quit\n")
    p.stdin.flush()
    out = p.stdout.readline().strip()
    return out, p.wait(10)


def main():
    work = tempfile.mkdtemp(prefix="gpusnap-server-selftest-")
    a, a_ports = start_server(work, "a", 85)
    b, b_ports = start_server(work, "b", 85)
    other, other_ports = start_server(work, "other", 86)

    c = client(a_ports, b_ports)
    check("open: A answers as its twin", c.cmd("open") == "OPEN SAME")
    check("keepalive on the open connection", c.cmd("keepalive") == "KEEPALIVE SAME")
    r = c.cmd("compare 20")
    check("compare 20 prompts", r == "COMPARE SAME n=20 reconnects=0", r)
    r = c.cmd("udp 3")
    check("udp ping and generation", r == "UDP SAME n=3", r)
    r = c.cmd("server-stats")
    check("server stats", r.startswith("SERVERSTATS {") and '"requests"' in r, r)

    check("hammer starts", c.cmd("hammer-start") == "HAMMER started")
    r = c.cmd("next")
    check("hammer answers", r.startswith("ANSWERED ") and "TIMEOUT" not in r, r)
    os.kill(a.pid, signal.SIGSTOP)  # what a suspend looks like from outside: no answer for a while
    time.sleep(1.0)
    os.kill(a.pid, signal.SIGCONT)
    r = c.cmd("next")
    check("hammer answers after a stop", r.startswith("ANSWERED ") and "TIMEOUT" not in r, r)

    # what a dump and a restore look like from outside: the process gone, then back on the same ports
    with open(a_ports) as f:
        import json
        ports = json.load(f)
    out, rc = stop(a)
    check("A quits with BYE 0", out == "BYE 0" and rc == 0, "%s, exit %s" % (out, rc))
    time.sleep(1.0)
    a, a_ports2 = start_server(work, "a", 85, ports["http"], ports["udp"])
    r = c.cmd("next")
    check("hammer answers after A is back", r.startswith("ANSWERED ") and "TIMEOUT" not in r, r)
    r = c.cmd("keepalive")
    check("the keep-alive connection to the old A is closed", r.startswith("KEEPALIVE CLOSED"), r)
    r = c.cmd("compare 10")
    check("compare reconnects to the new A", r.startswith("COMPARE SAME n=10 reconnects="), r)
    r = c.cmd("udp 2")
    check("udp after A is back", r == "UDP SAME n=2", r)
    r = c.cmd("hammer-stop")
    fields = dict(kv.split("=", 1) for kv in r.split()[1:] if "=" in kv)
    check("hammer: every answer equal to the twin's", r.startswith("STOPPED ") and fields.get("diff") == "0"
          and int(fields.get("answered", 0)) > 2 and int(fields.get("retries", 0)) > 0 and "error=" not in r, r)
    out, rc = stop(c.p)
    check("client quits with BYE 0", out == "BYE 0" and rc == 0)

    # the comparison can fail: a twin of another seed answers otherwise
    d = client(a_ports2, other_ports)
    r = d.cmd("open")
    check("open sees a different twin", r.startswith("OPEN DIFF"), r)
    r = d.cmd("compare 5")
    check("compare sees a different twin", r.startswith("COMPARE DIFF"), r)
    r = d.cmd("udp 1")
    check("udp sees a different twin", r.startswith("UDP DIFF"), r)
    d.cmd("hammer-start")
    d.cmd("next")
    r = d.cmd("hammer-stop")
    check("hammer counts differences", "diff=0" not in r and "first_diff=-" not in r, r)
    stop(d.p)

    # the stream stops at once even while A does not answer (a suspend or dump that never ends)
    e = client(a_ports2, b_ports)
    e.cmd("hammer-start")
    e.cmd("next")
    os.kill(a.pid, signal.SIGSTOP)
    time.sleep(0.5)
    t0 = time.monotonic()
    r = e.cmd("hammer-stop")
    took = time.monotonic() - t0
    os.kill(a.pid, signal.SIGCONT)
    check("hammer-stop returns while A does not answer", r.startswith("STOPPED ") and took < 10,
          "%.1f s: %s" % (took, r))
    stop(e.p)

    # first_answer.py (bench/warm_start.sh): timed from --since, the request asked twice, then the server ends
    t0 = time.time()
    f, f_ports = start_server(work, "first", 85)
    fa = subprocess.run([sys.executable, os.path.join(HERE, "first_answer.py"), "--ports-file", f_ports,
                         "--since", repr(t0), "--then-quit", "--timeout", "60"], capture_output=True, text=True)
    try:
        import json
        got = json.loads(fa.stdout)
    except ValueError:
        got = {}
    check("first_answer: one JSON line with the time since --since and the second request's",
          fa.returncode == 0 and 0 < got.get("s", -1) < time.time() - t0 + 1
          and got.get("next_s", -1) >= 0 and len(got.get("tokens", [])) == 16, (fa.stdout + fa.stderr).strip())
    try:
        f.wait(timeout=10)
    except subprocess.TimeoutExpired:
        f.kill()
    check("first_answer --then-quit ends the server", f.returncode == 0, "exit %s" % f.returncode)
    import socket
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        free_port = free.getsockname()[1]
    fa = subprocess.run([sys.executable, os.path.join(HERE, "first_answer.py"), "--port", str(free_port),
                         "--since", repr(time.time()), "--timeout", "1"], capture_output=True, text=True)
    check("first_answer fails where nothing answers", fa.returncode == 1 and "no answer" in fa.stderr,
          fa.stderr.strip())

    for p in (a, b, other):
        stop(p)
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
