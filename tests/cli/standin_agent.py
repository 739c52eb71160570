# standin_agent.py - a stand-in agent for the CLI tests that need an agent to
# say what no real one would (t4013, t4020, t4021): a Python server speaking
# the control protocol (src/core/protocol.h) on $GPUSNAP_RUN_DIR/agent-PID.sock,
# in a process that maps $LIBCUDA_FILE (a file named libcuda.so.1, so that
# `gpusnap state` lists it) and is registered with the fake driver in
# $FAKE_CUDA_DIR as a running CUDA process. A test's own script imports it,
# says what to answer with serve(), and is started by standin_start
# (standin_agent.sh), which waits for the READY line serve() prints.
import mmap
import os
import socket
import struct
import time

MAGIC, VERSION = 0x504E5347, 1
HELLO, INFO, STATUS, RESULT = 1, 2, 5, 7


def field(tag, ftype, value):
    return struct.pack("<HBBI", tag, ftype, 0, len(value)) + value


def u64(tag, v):
    return field(tag, 1, struct.pack("<Q", v))


def named(tag, ftype, n, packed):
    return field(tag, ftype, n.encode() + b"\0" + packed)


def frame(mtype, payload):
    return struct.pack("<IHHII", MAGIC, VERSION, mtype, len(payload), 0) + payload


def recv_all(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b


def serve(mode, reply):
    """Listens and answers until killed. mode "answer": each request's frame is
    read whole and answered with reply(message type), a whole frame; "silent":
    accepts and never answers (the connections held open); "deaf": never
    accepts."""
    lib = open(os.environ["LIBCUDA_FILE"], "rb")
    mapped = mmap.mmap(lib.fileno(), 4096, prot=mmap.PROT_READ)  # noqa: F841 (kept mapped)
    path = os.path.join(os.environ["GPUSNAP_RUN_DIR"], "agent-%d.sock" % os.getpid())
    with open(os.path.join(os.environ["FAKE_CUDA_DIR"], str(os.getpid())), "w") as f:
        f.write("0 0\n")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    os.chmod(path, 0o600)
    s.listen(8)
    print("READY", os.getpid(), flush=True)
    held = []
    while True:
        if mode == "deaf":
            time.sleep(60)
            continue
        c, _ = s.accept()
        if mode == "silent":
            held.append(c)
            continue
        try:
            _, _, mtype, plen, _ = struct.unpack("<IHHII", recv_all(c, 16))
            recv_all(c, plen)
        except EOFError:
            c.close()
            continue
        c.sendall(reply(mtype))
        c.close()
