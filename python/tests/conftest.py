"""Fixtures of the client's tests: the real gpusnap on the fake libcuda (tests/fake/fake_cuda.c).

Run by tests/cli/t7003-python-client.sh (ctest), which sets GPUSNAP_BIN,
GPUSNAP_FAKE_CUDA, GPUSNAP_BUILD and GPUSNAP_SRC; GPUSNAP_CRIU where CRIU can be
used (the dump and restore tests skip without it).
"""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gpusnap  # noqa: E402


def _need(var):
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"{var} is not set: run through ctest (tests/cli/t7003-python-client.sh)")
    return value


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The command on the fake libcuda, its state in tmp_path; returns a helper to start CUDA processes."""
    _need("GPUSNAP_BIN")
    monkeypatch.setenv("GPUSNAP_LIBCUDA", _need("GPUSNAP_FAKE_CUDA"))
    monkeypatch.setenv("FAKE_CUDA_DIR", str(tmp_path / "fake"))
    monkeypatch.setenv("GPUSNAP_RUN_DIR", str(tmp_path / "run"))
    (tmp_path / "fake").mkdir()
    return Fake(tmp_path)


class Fake:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def cuda_process(self, gpus="0"):
        """A sleeping process the fake libcuda knows as a running CUDA process on gpus."""
        p = subprocess.Popen(["sleep", "300"])
        self.procs.append(p)
        (self.tmp / "fake" / str(p.pid)).write_text(f"0 {gpus}\n")
        return p.pid

    def plain_process(self):
        p = subprocess.Popen(["sleep", "300"])
        self.procs.append(p)
        return p.pid

    def driver_state(self, pid):
        """The fake driver's state of pid: 0 running, 1 locked, 2 checkpointed."""
        return int((self.tmp / "fake" / str(pid)).read_text().split()[0])


@pytest.fixture(autouse=True)
def _reap(request):
    yield
    f = request.node.funcargs.get("fake")
    for p in getattr(f, "procs", []):
        p.kill()
        p.wait()


def wait_for(cond, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False
