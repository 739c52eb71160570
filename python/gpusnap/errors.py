"""Exceptions of the gpusnap client: one class per exit code of the gpusnap command.

README.md's exit-code table is the reference; ``GpusnapError.for_code`` picks the
class. Each carries the exit code, its name (``error``, as the JSON's ``error``),
the one-line message (the error line without ``gpusnap: ``), the JSON document the
command printed (``json``, or None) and its whole stderr.
"""

from typing import Any, Dict, Optional


class GpusnapError(Exception):
    """A gpusnap command failed. Subclasses name the exit code."""

    exit_code: Optional[int] = None
    error_name = "unknown"

    def __init__(self, message: str, exit_code: Optional[int] = None, json: Optional[Dict[str, Any]] = None,
                 stderr: str = "", command: Optional[list] = None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.json = json
        self.stderr = stderr
        self.command = command

    @property
    def error(self) -> str:
        """The exit code's name ("no-process", "state", ...), as the JSON's ``error`` says it."""
        if self.json and isinstance(self.json.get("error"), str):
            return self.json["error"]
        return self.error_name

    def __str__(self) -> str:
        return self.message

    @staticmethod
    def for_code(exit_code: int) -> type:
        """The class for an exit code (128 + N: Interrupted; one not documented: GpusnapError)."""
        if exit_code > 128:
            return Interrupted
        return _BY_CODE.get(exit_code, GpusnapError)


class BinaryNotFound(GpusnapError):
    """No gpusnap binary: neither the constructor's ``binary``, nor $GPUSNAP_BIN, nor gpusnap on PATH."""


class UnsupportedSchema(GpusnapError):
    """The command printed a document of a kind or version this client does not read."""


class Failure(GpusnapError):
    """1: the driver or the system failed; the message says how."""
    exit_code, error_name = 1, "failure"


class UsageError(GpusnapError):
    """2: bad command line (a bad argument given to the client, or an image folder that cannot be used)."""
    exit_code, error_name = 2, "usage"


class NoProcess(GpusnapError):
    """3: no such process."""
    exit_code, error_name = 3, "no-process"


class NotCuda(GpusnapError):
    """4: the process does not use CUDA."""
    exit_code, error_name = 4, "not-cuda"


class Permission(GpusnapError):
    """5: not allowed to act on that process or file."""
    exit_code, error_name = 5, "permission"


class StateError(GpusnapError):
    """6: already suspended, not suspended, busy (another gpusnap), stopped or frozen."""
    exit_code, error_name = 6, "state"


class NoDriver(GpusnapError):
    """7: no NVIDIA driver or no GPU."""
    exit_code, error_name = 7, "no-driver"


class DriverTooOld(GpusnapError):
    """8: the driver lacks the checkpoint API (< 570) or GPU remap (< 580)."""
    exit_code, error_name = 8, "driver-too-old"


class Timeout(GpusnapError):
    """9: GPU work did not finish within the timeout, or a criu run within GPUSNAP_CRIU_TIMEOUT."""
    exit_code, error_name = 9, "timeout"


class GpuMapError(GpusnapError):
    """10: a GPU map is invalid, incomplete or refused; the process stays suspended."""
    exit_code, error_name = 10, "gpu-map"


class ImageError(GpusnapError):
    """11: an image is missing, incomplete, corrupt or of an unknown version."""
    exit_code, error_name = 11, "image"


class GpuMismatch(GpusnapError):
    """12: the target GPU is of another type."""
    exit_code, error_name = 12, "gpu-mismatch"


class NoSpace(GpusnapError):
    """13: disk or host memory full."""
    exit_code, error_name = 13, "no-space"


class NoVram(GpusnapError):
    """14: not enough free GPU memory to restore."""
    exit_code, error_name = 14, "no-vram"


class CriuError(GpusnapError):
    """15: CRIU missing, too old or failed, or the process holds what CRIU cannot dump."""
    exit_code, error_name = 15, "criu"


class AgentError(GpusnapError):
    """16: the preloaded agent refused, failed or did not answer."""
    exit_code, error_name = 16, "agent"


class Partial(GpusnapError):
    """17: with tree=True, some processes were handled and some not (each is named)."""
    exit_code, error_name = 17, "partial"


class Interrupted(GpusnapError):
    """128 + N: gpusnap got signal N before the point of no return and undid what it had begun."""
    error_name = "interrupted"

    @property
    def signal(self) -> Optional[int]:
        return self.exit_code - 128 if self.exit_code and self.exit_code > 128 else None


_BY_CODE = {c.exit_code: c for c in (Failure, UsageError, NoProcess, NotCuda, Permission, StateError, NoDriver,
                                     DriverTooOld, Timeout, GpuMapError, ImageError, GpuMismatch, NoSpace, NoVram,
                                     CriuError, AgentError, Partial)}
