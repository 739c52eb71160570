"""The client against the real gpusnap on the fake libcuda: results, exceptions, the context manager."""
import os
import re
import stat
import subprocess

import pytest

import gpusnap
from conftest import wait_for


def test_suspend_resume_state(fake):
    pid = fake.cuda_process()
    st = gpusnap.state(pid)
    assert isinstance(st, gpusnap.ProcessState)
    assert (st.pid, st.state, st.path, st.suspended) == (pid, "running", "driver", False)

    r = gpusnap.suspend(pid)
    assert isinstance(r, gpusnap.SuspendResult)
    assert r.pids == [pid]
    p = r.processes[0]
    assert (p.state_before, p.state_after, p.path) == ("running", "suspended", "driver")
    assert set(p.times) == {"lock_s", "checkpoint_s"} and r.total_s >= 0
    assert r.gpus[0].name == "Fake GPU"
    assert fake.driver_state(pid) == 2
    assert gpusnap.state(pid).suspended

    r = gpusnap.resume(pid)
    assert isinstance(r, gpusnap.ResumeResult)
    assert r.processes[0].state_after == "running"
    assert set(r.processes[0].times) == {"restore_s", "unlock_s"}
    assert fake.driver_state(pid) == 0


def test_switch(fake):
    a, b = fake.cuda_process(), fake.cuda_process()
    gpusnap.suspend(b)
    r = gpusnap.switch(a, b, overlap="never")
    assert isinstance(r, gpusnap.SwitchResult)
    assert r.order == "out-first" and r.total_s >= 0 and r.retries == 0
    assert (r.out.pid, r.out.state_before, r.out.state_after, r.out.path) == (a, "running", "suspended", "driver")
    assert (r.into.pid, r.into.state_before, r.into.state_after) == (b, "suspended", "running")
    assert (fake.driver_state(a), fake.driver_state(b)) == (2, 0)
    r = gpusnap.switch(b, a)
    assert (fake.driver_state(a), fake.driver_state(b)) == (0, 2)
    # refused before anything moves: the running process is not suspended, each stays as it was
    with pytest.raises(gpusnap.StateError) as e:
        gpusnap.switch(b, a)
    assert e.value.exit_code == 6 and "suspended" in str(e.value)
    assert (fake.driver_state(a), fake.driver_state(b)) == (0, 2)
    with pytest.raises(ValueError):
        gpusnap.switch(a, b, overlap="sometimes")
    # --spill needs the agent: refused for these driver-path processes before anything moves
    spill = fake.tmp / "spill"
    spill.mkdir(mode=0o700)
    with pytest.raises(gpusnap.AgentError):
        gpusnap.switch(a, b, spill=spill, spill_only=True)
    assert (fake.driver_state(a), fake.driver_state(b)) == (0, 2)


def test_state_list(fake):
    lst = gpusnap.state()
    assert isinstance(lst, gpusnap.StateList)
    assert lst.not_looked_at >= 0
    assert all(isinstance(p, gpusnap.ProcessState) for p in lst)
    assert lst.host is not None and lst.host["spill"] == []


def test_suspend_spill_options_reach_the_command(fake, tmp_path):
    # the driver path has no agent to spill: refused before anything is touched, as the command says
    pid = fake.cuda_process()
    spill = tmp_path / "spill"
    spill.mkdir(mode=0o700)
    with pytest.raises(gpusnap.GpusnapError) as e:
        gpusnap.suspend(pid, spill=spill, spill_only=True)
    assert "--spill needs the gpusnap agent" in str(e.value)
    assert fake.driver_state(pid) == 0
    with pytest.raises(gpusnap.UsageError):
        gpusnap.suspend(pid, spill=tmp_path / "none")


def test_suspended_context_manager(fake):
    pid = fake.cuda_process()
    with gpusnap.suspended(pid) as r:
        assert r.processes[0].state_after == "suspended"
        assert fake.driver_state(pid) == 2
    assert fake.driver_state(pid) == 0


def test_suspended_resumes_on_exception(fake):
    pid = fake.cuda_process()
    with pytest.raises(KeyError):
        with gpusnap.suspended(pid):
            assert fake.driver_state(pid) == 2
            raise KeyError("the work failed")
    assert fake.driver_state(pid) == 0
    assert gpusnap.state(pid).state == "running"


def test_suspended_does_not_resume_what_it_did_not_suspend(fake):
    pid = fake.cuda_process()
    gpusnap.suspend(pid)
    with pytest.raises(gpusnap.StateError):
        with gpusnap.suspended(pid):
            pytest.fail("the body ran although the suspend failed")
    assert fake.driver_state(pid) == 2  # left as it was: suspended by someone else


def test_state_error_carries_code_message_json(fake):
    pid = fake.cuda_process()
    gpusnap.suspend(pid)
    with pytest.raises(gpusnap.StateError) as e:
        gpusnap.suspend(pid)
    err = e.value
    assert isinstance(err, gpusnap.GpusnapError)
    assert err.exit_code == 6 and err.error == "state"
    assert err.message == f"process {pid} is already suspended"
    assert str(err) == err.message
    assert err.json["ok"] is False and err.json["schema"] == "gpusnap/suspend/1"
    assert err.json["processes"][0]["pid"] == pid  # the outcome's document, not only the short form
    assert f"gpusnap: {err.message}" in err.stderr


def test_no_process(fake):
    with pytest.raises(gpusnap.NoProcess) as e:
        gpusnap.suspend(2147483600)
    assert e.value.exit_code == 3
    assert e.value.json == {"schema": "gpusnap/suspend/1", "action": "suspend", "ok": False, "exit_code": 3,
                            "error": "no-process", "message": e.value.message}
    with pytest.raises(gpusnap.NoProcess):
        gpusnap.state(2147483600)


def test_not_cuda(fake):
    with pytest.raises(gpusnap.NotCuda) as e:
        gpusnap.suspend(fake.plain_process())
    assert e.value.exit_code == 4 and "not a CUDA process" in e.value.message


def test_gpu_map(fake):
    pid = fake.cuda_process()
    gpusnap.suspend(pid)
    with pytest.raises(gpusnap.GpuMapError) as e:
        gpusnap.resume(pid, gpu_map={0: 7})
    assert e.value.exit_code == 10 and "GPU index 7 does not exist" in e.value.message
    assert fake.driver_state(pid) == 2  # stays suspended: resume again
    r = gpusnap.resume(pid, gpu_map=["0=0"])
    assert r.processes[0].state_after == "running"


def test_image_error(fake, tmp_path):
    with pytest.raises(gpusnap.ImageError) as e:
        gpusnap.inspect(tmp_path / "none")
    assert e.value.exit_code == 11
    with pytest.raises(gpusnap.ImageError):
        gpusnap.restore(tmp_path / "none")


def test_gc_refusals(fake, tmp_path):
    os.chmod(tmp_path, 0o700)
    with pytest.raises(gpusnap.ImageError) as e:
        gpusnap.gc(tmp_path)  # not a chunk store
    assert "is not a gpusnap chunk store" in str(e.value)
    with pytest.raises(gpusnap.ImageError):
        gpusnap.gc(tmp_path / "no-such-store")


def test_bad_pid_type(fake):
    with pytest.raises(TypeError):
        gpusnap.suspend("123")
    with pytest.raises(TypeError):
        gpusnap.suspend(True)


def test_binary_lookup(fake, tmp_path, monkeypatch):
    real = os.environ["GPUSNAP_BIN"]
    assert gpusnap.Gpusnap(binary=real).version() == gpusnap.__version__
    monkeypatch.setenv("GPUSNAP_BIN", str(tmp_path / "missing"))
    with pytest.raises(gpusnap.BinaryNotFound):
        gpusnap.state()
    monkeypatch.delenv("GPUSNAP_BIN")
    monkeypatch.setenv("PATH", os.path.dirname(real))
    assert gpusnap.Gpusnap().binary == real  # found on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gpusnap.BinaryNotFound):
        gpusnap.Gpusnap().binary


def _fake_binary(tmp_path, stdout, code=0, signal=None):
    """A stand-in for gpusnap that prints stdout and exits with code (or ends by signal)."""
    script = tmp_path / "gpusnap"
    end = f"kill -{signal} $$" if signal else f"exit {code}"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\necho 'gpusnap: note: a note' >&2\n"
                      f"echo 'gpusnap: the error line' >&2\n{end}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return gpusnap.Gpusnap(binary=str(script))


def test_other_schema_version_is_refused(tmp_path):
    g = _fake_binary(tmp_path, '{"schema":"gpusnap/state/2","action":"state","ok":true,"pid":1}')
    with pytest.raises(gpusnap.UnsupportedSchema) as e:
        g.state(1)
    assert "gpusnap/state/2" in e.value.message


def test_added_fields_are_read(tmp_path):
    """A newer gpusnap may add keys without a new version: they are kept in raw, not refused."""
    doc = ('{"schema":"gpusnap/state/1","action":"state","ok":true,"pid":7,"comm":"app","state":"suspended",'
           '"path":"agent","gpus":[0],"new_key":1,"agent":{"state":"data-released","allocations":2,"bytes":3,'
           '"unmanaged_allocations":0,"unmanaged_bytes":0,"new_counter":4},"operation":{"action":"suspend",'
           '"gpusnap_pid":9,"at_work":true,"step":"copy","message":"m","new_detail":"x"}}')
    st = _fake_binary(tmp_path, doc).state(7)
    assert (st.pid, st.state, st.agent.state, st.operation.step) == (7, "suspended", "data-released", "copy")
    assert st.raw["new_key"] == 1 and st.raw["agent"]["new_counter"] == 4


def test_interrupted(tmp_path):
    g = _fake_binary(tmp_path, "", signal="TERM")
    with pytest.raises(gpusnap.Interrupted) as e:
        g.suspend(1)
    assert (e.value.exit_code, e.value.signal, e.value.error) == (143, 15, "interrupted")
    assert e.value.message == "the error line"  # the error line, not a note


def test_code_without_document(tmp_path):
    g = _fake_binary(tmp_path, "", code=9)
    with pytest.raises(gpusnap.Timeout) as e:
        g.suspend(1, timeout=2.5)
    assert e.value.json is None and e.value.message == "the error line"


def test_exceptions_match_readme_exit_codes():
    """Every code of README.md's exit-code table has its class, with the JSON's name for it."""
    readme = open(os.path.join(os.environ.get("GPUSNAP_SRC", os.path.join(os.path.dirname(__file__), "..", "..")),
                               "README.md")).read()
    table = readme[readme.index("### Exit codes"):]
    rows = re.findall(r"^\| (\d+) \| ([a-z-]+) \|", table, re.M)
    assert len(rows) >= 17
    for code, name in rows:
        cls = gpusnap.GpusnapError.for_code(int(code)) if int(code) else None
        if cls is None:
            assert name == "ok"
            continue
        assert cls is not gpusnap.GpusnapError, f"exit code {code} ({name}) has no exception class"
        assert (cls.exit_code, cls.error_name) == (int(code), name)
    assert gpusnap.GpusnapError.for_code(130) is gpusnap.Interrupted


# ---- dump and restore (CRIU) ----

def _criu():
    if os.geteuid() != 0 or not os.environ.get("GPUSNAP_CRIU"):
        pytest.skip("dump and restore need root and CRIU (GPUSNAP_CRIU)")


def test_dump_inspect_restore(fake, tmp_path, monkeypatch):
    _criu()
    monkeypatch.setenv("FAKE_CUDA_CRIU", "1")
    os.chmod(tmp_path, 0o700)
    log = tmp_path / "counter.log"
    counter = os.path.join(os.environ["GPUSNAP_BUILD"], "tests", "apps", "cpu_counter")
    pid = int(subprocess.run([counter, "--daemon", str(log)], capture_output=True, text=True, check=True).stdout)
    try:
        (tmp_path / "fake" / str(pid)).write_text("0 0\n")
        assert wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 10)
        img = tmp_path / "img"
        d = gpusnap.dump(pid, img)
        assert isinstance(d, gpusnap.DumpResult)
        assert (d.pid, d.published, d.path, d.tree, d.dir) == (pid, True, "driver", False, str(img))
        assert "criu_s" in d.times and "gpu_s" in d.times
        i = gpusnap.inspect(img, verify=True)
        assert (i.pid, i.how, i.verify["ok"]) == (pid, "driver", True)
        e = gpusnap.export(img, tmp_path / "exported")
        assert isinstance(e, gpusnap.ExportResult)
        assert (e.pid, e.dest, e.compress) == (pid, str(tmp_path / "exported"), "none")
        assert gpusnap.inspect(tmp_path / "exported", verify=True).verify["ok"]
        r = gpusnap.restore(img)
        assert isinstance(r, gpusnap.RestoreResult)
        assert (r.pid, r.path, r.gpu_map) == (pid, "driver", {0: 0})
        n = len(log.read_text().splitlines())
        assert wait_for(lambda: len(log.read_text().splitlines()) > n + 5)  # counts on
        assert (r.lazy_pages, r.lazy_pages_why) == (False, "not asked for (GPUSNAP_RESTORE_LAZY=off)")
        with pytest.raises(gpusnap.CriuError):
            gpusnap.restore(img)  # its PID is taken: the process runs
        subprocess.run(["kill", "-9", str(pid)], stderr=subprocess.DEVNULL)
        assert wait_for(lambda: not os.path.exists(f"/proc/{pid}"))
        n = len(log.read_text().splitlines())
        r = gpusnap.restore(img, lazy_pages=True)  # CRIU's lazy-pages daemon fills the CPU memory
        assert (r.pid, r.lazy_pages, r.lazy_pages_why) == (pid, True, "")
        assert 0 < r.times["lazy_pages_done_s"] <= r.times["total_s"]
        assert wait_for(lambda: len(log.read_text().splitlines()) > n + 5)  # counts on
        # an unknown codec is the command line's error, before anything of the process is touched
        with pytest.raises(gpusnap.UsageError):
            gpusnap.dump(pid, tmp_path / "img2", compress="gzip")
        assert not (tmp_path / "img2").exists()
        with pytest.raises(gpusnap.ImageError):
            gpusnap.dump(pid, tmp_path / "img3", leave_running=True, parent=tmp_path / "no-such-parent")
        assert not (tmp_path / "img3").exists()
        # a chunk store needs the agent's dump: refused, the store it named made (empty) all the same
        with pytest.raises(gpusnap.UsageError):
            gpusnap.dump(pid, tmp_path / "img4", leave_running=True, store=tmp_path / "store")
        g = gpusnap.gc(tmp_path / "store", dry_run=True)
        assert isinstance(g, gpusnap.GcResult)
        assert (g.store, g.dry_run, g.objects, g.refs, g.objects_removed) == (str(tmp_path / "store"), True, 0, 0, 0)
        assert wait_for(lambda: len(log.read_text().splitlines()) > n + 10)  # and it still counts
    finally:
        subprocess.run(["kill", "-9", str(pid)], stderr=subprocess.DEVNULL)
