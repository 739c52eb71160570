"""Typed results of the gpusnap client, built from the command's --json documents.

Each dataclass names the fields of docs/json/<command>.json that a caller
usually needs; ``raw`` keeps the whole document (or object), so fields this
client does not name yet stay reachable. Sizes are bytes, times seconds.
"""

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional


def _known(cls, d: Dict[str, Any]) -> Dict[str, Any]:
    """d's keys that cls has: a newer gpusnap may add keys (the schema's version stays), never remove them."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class ProcessOutcome:
    """One process of a suspend or resume (several with tree=True)."""
    pid: int
    comm: str
    path: str                 # "agent" or "driver": who moved the GPU data
    state_before: str
    state_after: str          # "suspended" after a suspend, "running" after a resume
    times: Dict[str, float]   # suspend: lock_s, checkpoint_s; resume: restore_s, unlock_s
    agent: Optional[Dict[str, float]] = None  # the agent's timings (..._s) and counters (bytes, zero_bytes, ...)
    vram_before_bytes: Optional[int] = None   # where NVML answers
    vram_after_bytes: Optional[int] = None
    # a suspend on the agent path: where the data went, {"where": "host-memory", "spill" or "split" (part
    # in each), "held_bytes", "memory_bytes", "spilled_bytes", "zero_bytes", "dir" (spill, split)}
    data: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ProcessOutcome":
        return cls(pid=d["pid"], comm=d["comm"], path=d["path"], state_before=d["state_before"],
                   state_after=d["state_after"], times=dict(d["times"]), agent=d.get("agent"),
                   vram_before_bytes=d.get("vram_before_bytes"), vram_after_bytes=d.get("vram_after_bytes"),
                   data=d.get("data"), raw=d)


@dataclass
class GpuMemory:
    """A GPU's used memory before and after the operation (None where NVML does not answer)."""
    index: int
    uuid: str
    name: str
    used_before_bytes: Optional[int] = None
    used_after_bytes: Optional[int] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "GpuMemory":
        return cls(index=d["index"], uuid=d["uuid"], name=d["name"], used_before_bytes=d.get("used_before_bytes"),
                   used_after_bytes=d.get("used_after_bytes"))


@dataclass
class OperationResult:
    """What `gpusnap suspend --json` or `gpusnap resume --json` reported."""
    total_s: float
    processes: List[ProcessOutcome]
    gpus: List[GpuMemory]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]):
        return cls(total_s=d["total_s"], processes=[ProcessOutcome.from_json(p) for p in d["processes"]],
                   gpus=[GpuMemory.from_json(g) for g in d["gpus"]], raw=d)

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self.processes]


class SuspendResult(OperationResult):
    """The outcome of suspend(): each process's state_after is "suspended"."""


class ResumeResult(OperationResult):
    """The outcome of resume(): each process's state_after is "running"."""


@dataclass
class SwitchSide:
    """One process of a switch: out (suspended) or in (resumed)."""
    pid: int
    comm: str
    path: str                 # "agent" or "driver"
    state_before: str
    state_after: str          # read back at the end, after any undo
    time_s: float
    data_bytes: Optional[int] = None          # agent path: the bytes its agent moved
    vram_before_bytes: Optional[int] = None
    vram_after_bytes: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SwitchSide":
        return cls(raw=d, **_known(cls, {k: v for k, v in d.items() if k != "raw"}))


@dataclass
class SwitchResult:
    """What `gpusnap switch --json OUT IN` reported: the order of the halves and each side."""
    total_s: float
    order: str                # "together" (IN's resume ran while OUT's suspend ran) or "out-first"
    order_why: str
    overlap_s: float
    retries: int              # IN's resume tried again for room on the GPU
    out: SwitchSide
    into: SwitchSide          # the document's "in" (a Python keyword)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SwitchResult":
        return cls(total_s=d["total_s"], order=d["order"], order_why=d.get("order_why", ""),
                   overlap_s=d.get("overlap_s", 0.0), retries=d.get("retries", 0),
                   out=SwitchSide.from_json(d["out"]), into=SwitchSide.from_json(d["in"]), raw=d)


@dataclass
class AgentState:
    """What the gpusnap agent in a process holds (state(pid) of a process started with `gpusnap run`)."""
    state: str                # running, suspended, data-released, busy, gated
    allocations: int
    bytes: int
    unmanaged_allocations: int
    unmanaged_bytes: int


@dataclass
class Operation:
    """A gpusnap at work on the process (at_work), or what one that was killed left."""
    action: str
    gpusnap_pid: int
    at_work: bool
    step: str
    message: str
    image: Optional[str] = None


@dataclass
class ProcessState:
    """`gpusnap state --json PID`: running, locked, suspended, failed, gated, stopped or frozen."""
    pid: int
    comm: str
    state: str
    gpus: List[int]
    path: Optional[str] = None          # "agent" or "driver"; None where it cannot be known
    driver_state: Optional[str] = None  # None for a stopped process
    agent: Optional[AgentState] = None
    vram_bytes: Optional[int] = None
    stopped: Optional[str] = None       # why neither driver nor agent can answer for it now
    fault: Optional[str] = None         # why the agent keeps it suspended
    operation: Optional[Operation] = None
    # suspended with the agent: where its data is, {"where": "host-memory", "spill", "split" or "image", "bytes",
    # "memory_bytes", "spilled_bytes", "dir"}
    data: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def suspended(self) -> bool:
        return self.state == "suspended"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ProcessState":
        ag, op = d.get("agent"), d.get("operation")
        return cls(pid=d["pid"], comm=d["comm"], state=d["state"], gpus=list(d["gpus"]), path=d.get("path"),
                   driver_state=d.get("driver_state"), agent=AgentState(**_known(AgentState, ag)) if ag else None,
                   vram_bytes=d.get("vram_bytes"), stopped=d.get("stopped"), fault=d.get("fault"),
                   operation=Operation(**_known(Operation, op)) if op else None, data=d.get("data"), raw=d)


@dataclass
class Unreadable:
    """A CUDA process `gpusnap state` found but could not look at (error says why)."""
    pid: int
    comm: str
    error: str


@dataclass
class StateList:
    """`gpusnap state --json`: every CUDA process this user can see."""
    processes: List[ProcessState]
    unreadable: List[Unreadable]
    not_looked_at: int                  # processes whose memory maps this user may not read
    # what the suspended processes keep, for the host: {"memory_bytes", "memory_processes", "spill": [{"dir",
    # "bytes", "processes"}]}
    host: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "StateList":
        procs = [ProcessState.from_json(p) for p in d["processes"] if "error" not in p]
        bad = [Unreadable(pid=p["pid"], comm=p["comm"], error=p["error"]) for p in d["processes"] if "error" in p]
        return cls(processes=procs, unreadable=bad, not_looked_at=d["not_looked_at"], host=d.get("host"), raw=d)

    def __iter__(self):
        return iter(self.processes)

    def __len__(self) -> int:
        return len(self.processes)

    def get(self, pid: int) -> Optional[ProcessState]:
        return next((p for p in self.processes if p.pid == pid), None)


@dataclass
class DumpResult:
    """`gpusnap dump --json`: the image at ``dir`` (published), the CRIU and GPU parts' times."""
    pid: int
    dir: str
    published: bool
    leave_running: bool
    gpu_data_bytes: int
    times: Dict[str, float]    # total_s, criu_s, gpu_s (one process), paused_s with leave_running, ...
    tree: bool = False
    path: Optional[str] = None  # one process: "agent" or "driver"
    comm: Optional[str] = None
    cpu_bytes: Optional[int] = None
    processes: List[Dict[str, Any]] = field(default_factory=list)  # tree: each CUDA process's pid and path
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "DumpResult":
        return cls(pid=d["pid"], dir=d["dir"], published=d["published"], leave_running=d["leave_running"],
                   gpu_data_bytes=d["gpu_data_bytes"], times=dict(d["times"]), tree=d.get("tree", False),
                   path=d.get("path"), comm=d.get("comm"), cpu_bytes=d.get("cpu_bytes"),
                   processes=list(d.get("processes", [])), raw=d)


@dataclass
class ExportResult:
    """`gpusnap export --json`: the self-contained image written at ``dest`` and what it holds."""
    src: str
    dest: str
    pid: int
    compress: str             # "none", "lz4" or "zstd"
    chunks: int
    zero_chunks: int
    data_bytes: int           # uncompressed bytes of the stored chunks
    stored_bytes: int         # bytes written for them
    compressed_chunks: int
    total_s: float
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExportResult":
        return cls(raw=d, **_known(cls, {k: v for k, v in d.items() if k != "raw"}))


@dataclass
class GcResult:
    """`gpusnap gc --json`: what the chunk store held and what was removed (with dry_run: would be)."""
    store: str
    dry_run: bool
    objects: int
    objects_removed: int
    bytes_removed: int
    refs: int
    refs_removed: int
    temp_removed: int         # unfinished objects of dumps that died
    images: int               # images that keep objects
    total_s: float
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "GcResult":
        return cls(raw=d, **_known(cls, {k: v for k, v in d.items() if k != "raw"}))


@dataclass
class RestoreResult:
    """`gpusnap restore --json`: the restored process and where its GPUs went."""
    pid: int
    dir: str
    path: Optional[str]          # how the image was taken: agent, driver or tree
    gpu_map: Dict[int, int]      # image GPU -> GPU of this machine
    verified_bytes: int
    times: Dict[str, float]      # total_s, criu_s, gpu_s, verify_s, ready_s, lazy_pages_done_s, ...
    lazy_pages: bool = False     # the CPU memory came back lazily (lazy_pages_why says why not)
    lazy_pages_why: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "RestoreResult":
        return cls(pid=d["pid"], dir=d["dir"], path=d.get("path"),
                   gpu_map={g["image_gpu"]: g["gpu"] for g in d["gpus"]}, verified_bytes=d["verified_bytes"],
                   times=dict(d["times"]), lazy_pages=d.get("lazy_pages", False),
                   lazy_pages_why=d.get("lazy_pages_why", ""), raw=d)


@dataclass
class InspectResult:
    """`gpusnap inspect --json`: what an image holds; ``verify`` is None without verify=True."""
    image: Dict[str, Any]
    verify: Optional[Dict[str, Any]]
    processes: List[Dict[str, Any]] = field(default_factory=list)  # a tree image's CUDA processes
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def pid(self) -> int:
        return self.image["process"]["pid"]

    @property
    def how(self) -> str:
        return self.image["how"]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "InspectResult":
        return cls(image=d["image"], verify=d["verify"], processes=list(d.get("processes", [])), raw=d)
