"""The client: runs the gpusnap command with --json and turns its document into a result or an exception.

Where the binary is: the ``binary`` argument, else $GPUSNAP_BIN, else ``gpusnap``
on PATH. The command's environment is this process's, with ``env`` added
(GPUSNAP_CRIU, GPUSNAP_LOG, ...). Every call is one run of gpusnap; a Gpusnap
object holds no state besides where the binary is and that environment.
"""

import contextlib
import json
import os
import shutil
import subprocess
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import BinaryNotFound, GpusnapError, Interrupted, UnsupportedSchema
from .results import (DumpResult, ExportResult, GcResult, InspectResult, ProcessState, RestoreResult, ResumeResult, StateList, SwitchResult,
                      SuspendResult)

# The versions of docs/json/<command>.json this client reads (README.md, "JSON output": a new
# version removed or retyped a field, so a document of another version is refused, not misread).
SCHEMA_VERSIONS = {"suspend": 1, "resume": 1, "switch": 1, "state": 1, "dump": 1, "restore": 1, "inspect": 1,
                   "export": 1, "gc": 1}

GpuMap = Union[Mapping[Any, Any], Iterable[Union[str, Tuple[Any, Any]]], None]


def _pid(pid: Any) -> str:
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"a process ID is an int, not {type(pid).__name__}")
    return str(pid)


def _map_args(gpu_map: GpuMap) -> List[str]:
    """{0: 1} or ["0=1"] or [(0, 1)] -> ["--map", "0=1"]; GPUs are nvidia-smi indexes or UUIDs."""
    if not gpu_map:
        return []
    pairs = gpu_map.items() if isinstance(gpu_map, Mapping) else gpu_map
    args: List[str] = []
    for pair in pairs:
        args += ["--map", pair if isinstance(pair, str) else f"{pair[0]}={pair[1]}"]
    return args


def _seconds(value: Optional[float]) -> List[str]:
    return [] if value is None else ["--timeout", repr(float(value))]


class Gpusnap:
    """A handle on the gpusnap command. ``gpusnap.suspend(...)`` etc. use a default one."""

    def __init__(self, binary: Optional[str] = None, env: Optional[Mapping[str, str]] = None):
        self._binary = binary
        self.env = dict(env or {})

    @property
    def binary(self) -> str:
        """The gpusnap binary's path (BinaryNotFound where there is none)."""
        name = self._binary or os.environ.get("GPUSNAP_BIN") or "gpusnap"
        found = shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) else None)
        if not found:
            raise BinaryNotFound(f"gpusnap binary '{name}' not found (pass binary=, set GPUSNAP_BIN, or put gpusnap "
                                 "on PATH)")
        return found

    def version(self) -> str:
        """`gpusnap --version`'s version ("0.1.0")."""
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, env=self._environ())
        return out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else ""

    # ---- the commands ----

    def suspend(self, pid: int, *, timeout: Optional[float] = None, tree: bool = False, keep_context: bool = False,
                driver: bool = False, spill: Optional[Union[str, "os.PathLike[str]"]] = None,
                spill_only: bool = False) -> SuspendResult:
        """Takes the process's GPU state off the GPU (its VRAM to zero); it waits on its next CUDA call.
        spill: a spill directory for data host memory would not hold (spill_only: always there)."""
        args = (_seconds(timeout) + ["--tree"] * tree + ["--keep-context"] * keep_context + ["--driver"] * driver +
                (["--spill", os.fspath(spill)] if spill else []) + ["--spill-only"] * spill_only)
        return SuspendResult.from_json(self._run("suspend", args + [_pid(pid)]))

    def resume(self, pid: int, *, gpu_map: GpuMap = None, tree: bool = False, image: Optional[str] = None
               ) -> ResumeResult:
        """Puts a suspended process's GPU state back; gpu_map={0: 1} restores GPU 0's state onto GPU 1."""
        args = _map_args(gpu_map) + ["--tree"] * tree + (["--image", os.fspath(image)] if image else [])
        return ResumeResult.from_json(self._run("resume", args + [_pid(pid)]))

    def switch(self, out_pid: int, in_pid: int, *, timeout: Optional[float] = None, keep_context: bool = False,
               driver: bool = False, overlap: str = "auto", spill: Optional[Union[str, "os.PathLike[str]"]] = None,
               spill_only: bool = False) -> SwitchResult:
        """Suspends out_pid and resumes the suspended in_pid as one command (two jobs taking turns on a GPU);
        on a failure both are put back (out_pid runs, in_pid stays suspended) and the exception says so.
        spill, spill_only: where out_pid's data goes when host memory would not hold it, as suspend()."""
        if overlap not in ("auto", "always", "never"):
            raise ValueError(f"overlap is auto, always or never, not {overlap!r}")
        args = (_seconds(timeout) + ["--keep-context"] * keep_context + ["--driver"] * driver +
                ["--overlap", overlap] + (["--spill", os.fspath(spill)] if spill else []) +
                ["--spill-only"] * spill_only)
        return SwitchResult.from_json(self._run("switch", args + [_pid(out_pid), _pid(in_pid)]))

    def state(self, pid: Optional[int] = None) -> Union[ProcessState, StateList]:
        """The process's state (a ProcessState); without pid every CUDA process (a StateList)."""
        if pid is None:
            return StateList.from_json(self._run("state", []))
        return ProcessState.from_json(self._run("state", [_pid(pid)]))

    def dump(self, pid: int, directory: Union[str, "os.PathLike[str]"], *, leave_running: bool = False,
             tree: bool = False, timeout: Optional[float] = None, driver: bool = False, replace: bool = False,
             tcp_close: bool = False, tcp_established: bool = False, compress: Optional[str] = None,
             parent: Optional[Union[str, "os.PathLike[str]"]] = None,
             store: Optional[Union[str, "os.PathLike[str]"]] = None, keep: Optional[int] = None) -> DumpResult:
        """Writes the process's GPU and CPU state into an image directory (CRIU); it is gone unless leave_running.
        compress: "lz4", "zstd" or "zstd:LEVEL" (the agent path's chunks); parent: an earlier image of the
        process, so that only the chunks that changed since are written (an incremental image); store: a chunk
        store (created if missing) the image keeps its chunks in, shared with the other images there; keep: with
        store, the newest images of this process in the store beside directory kept, the older removed (and gc)."""
        args = (["-D", os.fspath(directory)] + ["--leave-running"] * leave_running + ["--tree"] * tree +
                _seconds(timeout) + ["--driver"] * driver + ["--replace"] * replace + ["--tcp-close"] * tcp_close +
                ["--tcp-established"] * tcp_established + (["--compress", compress] if compress else []) +
                (["--parent", os.fspath(parent)] if parent else []) + (["--store", os.fspath(store)] if store else []) + (["--keep", str(int(keep))] if keep is not None else []))
        return DumpResult.from_json(self._run("dump", args + [_pid(pid)]))

    def restore(self, directory: Union[str, "os.PathLike[str]"], *, gpu_map: GpuMap = None, no_verify: bool = False,
                verify_first: bool = False, verify_gpu: bool = False, lazy_pages: bool = False) -> RestoreResult:
        """Brings a dumped process back from its image, with its PID; verify_gpu: the chunks' fingerprints
        are checked on the GPU once loaded; lazy_pages: the process goes on while CRIU's lazy-pages daemon
        fills its CPU memory (restore --lazy-pages; RestoreResult.lazy_pages says whether it did)."""
        args = ["-D", os.fspath(directory)] + _map_args(gpu_map) + ["--no-verify"] * no_verify + \
            ["--verify-first"] * verify_first + ["--verify-gpu"] * verify_gpu + ["--lazy-pages"] * lazy_pages
        return RestoreResult.from_json(self._run("restore", args))

    def export(self, src: Union[str, "os.PathLike[str]"], dest: Union[str, "os.PathLike[str]"], *,
               compress: Optional[str] = None, replace: bool = False) -> ExportResult:
        """Writes image src (an incremental one included) into dest as one self-contained image."""
        args = (["--compress", compress] if compress else []) + ["--replace"] * replace
        return ExportResult.from_json(self._run("export", args + [os.fspath(src), os.fspath(dest)]))

    def gc(self, store: Union[str, "os.PathLike[str]"], *, dry_run: bool = False,
           wait: Optional[float] = None) -> GcResult:
        """Removes the chunk store's objects no image refers to (a running dump's are kept); dry_run: only counts
        them. wait: seconds to wait for the store's lock (another gc) before StateError."""
        args = ["--dry-run"] * dry_run + (["--wait", repr(float(wait))] if wait is not None else [])
        return GcResult.from_json(self._run("gc", args + [os.fspath(store)]))

    def inspect(self, directory: Union[str, "os.PathLike[str]"], *, verify: bool = False) -> InspectResult:
        """What an image holds; verify=True reads every chunk and CRIU file and checks its checksum."""
        return InspectResult.from_json(self._run("inspect", ["--verify"] * verify + [os.fspath(directory)]))

    @contextlib.contextmanager
    def suspended(self, pid: int, *, timeout: Optional[float] = None, tree: bool = False, keep_context: bool = False,
                  driver: bool = False, gpu_map: GpuMap = None) -> Iterator[SuspendResult]:
        """``with g.suspended(pid):`` the process holds no GPU memory inside; it is resumed on the way out,
        on an exception too (a resume that fails then raises, chained to that exception)."""
        result = self.suspend(pid, timeout=timeout, tree=tree, keep_context=keep_context, driver=driver)
        try:
            yield result
        finally:
            self.resume(pid, tree=tree, gpu_map=gpu_map)

    # ---- running the command ----

    def _environ(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        return env

    def _run(self, command: str, args: Sequence[str]) -> Dict[str, Any]:
        argv = [self.binary, command, "--json", *args]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=self._environ())
        doc = _document(proc.stdout)
        if proc.returncode != 0:
            raise _error(proc, doc, argv)
        if doc is None:
            raise GpusnapError(f"gpusnap {command} printed no JSON document", exit_code=0, stderr=proc.stderr,
                               command=argv)
        want = f"gpusnap/{command}/{SCHEMA_VERSIONS[command]}"
        if doc.get("schema") != want:
            raise UnsupportedSchema(f"gpusnap {command} printed a document of schema '{doc.get('schema')}'; this "
                                    f"client reads '{want}' (a client as new as the gpusnap binary reads it)",
                                    exit_code=0, json=doc, stderr=proc.stderr, command=argv)
        return doc


def _document(stdout: str) -> Optional[Dict[str, Any]]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _error(proc: "subprocess.CompletedProcess[str]", doc: Optional[Dict[str, Any]], argv: List[str]) -> GpusnapError:
    # ended by a signal it did not catch: a shell would see 128 + N
    code = proc.returncode if proc.returncode > 0 else 128 - proc.returncode
    lines = [l for l in proc.stderr.splitlines() if l.startswith("gpusnap") and ": note: " not in l]
    if doc and isinstance(doc.get("message"), str) and doc["message"]:
        message = doc["message"]
    elif lines:
        message = lines[-1].split(": ", 1)[-1]
    elif proc.returncode < 0:
        message = f"gpusnap ended by signal {-proc.returncode}"
    else:
        message = f"gpusnap exited with {code}"
    cls = GpusnapError.for_code(code)
    return cls(message, exit_code=code, json=doc, stderr=proc.stderr, command=argv)


_default: Optional[Gpusnap] = None


def default() -> Gpusnap:
    """The handle the module-level functions use (the binary from $GPUSNAP_BIN or PATH, looked up at each call)."""
    global _default
    if _default is None:
        _default = Gpusnap()
    return _default
