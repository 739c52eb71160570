"""gpusnap: checkpoint and restore CUDA processes from Python.

    import gpusnap
    gpusnap.suspend(pid)             # its GPU memory to host memory, VRAM to 0
    gpusnap.resume(pid)              # back on the GPU
    with gpusnap.suspended(pid):     # the GPU is free inside; resumed on exit, on an exception too
        ...
    gpusnap.switch(a, b)             # a off the GPU, suspended b back on it, as one command
    gpusnap.dump(pid, "/var/lib/img") ; gpusnap.restore("/var/lib/img")

A client of the gpusnap command (found as $GPUSNAP_BIN, else on PATH; or
Gpusnap(binary=...)), reading its --json documents (docs/json in the
repository). Failures raise a GpusnapError subclass per exit code.
"""

from .client import SCHEMA_VERSIONS, Gpusnap, default
from .errors import (AgentError, BinaryNotFound, CriuError, DriverTooOld, Failure, GpuMapError, GpuMismatch,
                     GpusnapError, ImageError, Interrupted, NoDriver, NoProcess, NoSpace, NotCuda, NoVram, Partial,
                     Permission, StateError, Timeout, UnsupportedSchema, UsageError)
from .results import (AgentState, DumpResult, ExportResult, GcResult, GpuMemory, InspectResult, Operation, OperationResult, ProcessOutcome,
                      ProcessState, RestoreResult, ResumeResult, StateList, SuspendResult, SwitchResult, SwitchSide,
                      Unreadable)

__version__ = "0.1.0"


def suspend(pid, **kwargs):
    """Gpusnap.suspend on the default handle."""
    return default().suspend(pid, **kwargs)


def resume(pid, **kwargs):
    """Gpusnap.resume on the default handle."""
    return default().resume(pid, **kwargs)


def switch(out_pid, in_pid, **kwargs):
    """Gpusnap.switch on the default handle."""
    return default().switch(out_pid, in_pid, **kwargs)


def state(pid=None):
    """Gpusnap.state on the default handle."""
    return default().state(pid)


def export(src, dest, **kwargs):
    """Gpusnap.export on the default handle."""
    return default().export(src, dest, **kwargs)


def gc(store, **kwargs):
    """Gpusnap.gc on the default handle."""
    return default().gc(store, **kwargs)


def dump(pid, directory, **kwargs):
    """Gpusnap.dump on the default handle."""
    return default().dump(pid, directory, **kwargs)


def restore(directory, **kwargs):
    """Gpusnap.restore on the default handle."""
    return default().restore(directory, **kwargs)


def inspect(directory, **kwargs):
    """Gpusnap.inspect on the default handle."""
    return default().inspect(directory, **kwargs)


def suspended(pid, **kwargs):
    """Gpusnap.suspended on the default handle: ``with gpusnap.suspended(pid): ...``."""
    return default().suspended(pid, **kwargs)


__all__ = [
    "Gpusnap", "SCHEMA_VERSIONS", "default", "suspend", "resume", "switch", "state", "dump", "restore", "inspect", "export", "gc", "suspended",
    "GpusnapError", "BinaryNotFound", "UnsupportedSchema", "Failure", "UsageError", "NoProcess", "NotCuda",
    "Permission", "StateError", "NoDriver", "DriverTooOld", "Timeout", "GpuMapError", "ImageError", "GpuMismatch",
    "NoSpace", "NoVram", "CriuError", "AgentError", "Partial", "Interrupted",
    "OperationResult", "SuspendResult", "ResumeResult", "ProcessOutcome", "GpuMemory", "ProcessState", "AgentState",
    "Operation", "StateList", "Unreadable", "SwitchResult", "SwitchSide", "DumpResult", "ExportResult", "GcResult", "RestoreResult", "InspectResult",
]
