"""The distributed state of one rank, built once at the entry point and passed down.

`RankContext` holds the facts a rank needs (rank, node-local rank, host, its classes and group,
where G and D run, its thread count). Collective helpers here state their contract: every rank
calls them, in the same order. Only mpi/entry.py touches `MPI.COMM_WORLD`; the rest takes `comm`.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from distcgan.env import cpu_kernels, cpu_model
from distcgan.errors import AgreedError, UserError, say
from distcgan.mpi.comm import Comm
from distcgan.plan import (
    Task,
    assign_tasks,
    gpu_sharing,
    make_tasks,
    physical_cores,
    plan_devices,
    threads_for_rank,
)

T = TypeVar("T")
SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass
class TrainGroup:
    """The ranks that train this rank's task(s) together (data-parallel when more than one).

    build_context plans it (ranks, rank); group.connect_group gives it its MPI
    sub-communicator and torch.distributed process group before training.
    Its methods that say "collective" are the group's sync points: every rank of the group
    calls each of them, in the same order, each with its own value (never in a branch that only
    some ranks take), and gets the same answer; a group of one talks to nobody."""

    ranks: tuple[int, ...]
    rank: int  # this rank's index in `ranks`
    comm: Comm | None  # MPI communicator of the group (None or COMM_SELF-like when alone)
    pg: Any = None  # torch.distributed process group; None when the group has one rank

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def lead(self) -> bool:
        """The group's first rank writes its checkpoints, metrics and results."""
        return self.rank == 0

    @property
    def _connected(self) -> Comm:
        """The group's communicator, for a collective over several ranks: such a group always
        has one (group.connect_group gives it before training)."""
        assert self.comm is not None
        return self.comm

    def all_true(self, flag: bool) -> bool:
        """Collective over the group: whether `flag` holds on every rank."""
        return flag if self.size == 1 else bool(self._connected.allreduce(int(flag), op=_mpi_min()))

    def all_finite(self, values: list[float]) -> bool:
        """Collective over the group: whether every rank's `values` (a log interval's mean
        losses) are finite, so that all of its ranks roll back together, or none."""
        return self.all_true(all(math.isfinite(v) for v in values))

    def agree_stop(self, asked: bool, log_step: bool) -> bool:
        """The one stop rule: whether to stop now, `asked` being whether a stop signal reached
        this rank. A rank alone stops at once; a group at its next log step, where every rank
        calls this (a collective there: a signal to any rank stops them all at the same step);
        between log steps a group talks to nobody and goes on."""
        if self.size == 1:
            return asked
        return log_step and self.any_true(asked)

    def wait_for_lead(self) -> None:
        """Collective over the group (a barrier): the ranks wait for the first one, which
        scores, checkpoints and draws grids for them, so that they do not count that time as
        training time."""
        if self.size > 1:
            self.all_true(True)

    def gather(self, obj: Any) -> list[Any] | None:
        """Collective over the group: every rank's `obj`, in group order, on its first rank
        (None on the others; [obj] alone)."""
        return [obj] if self.size == 1 else self._connected.gather(obj, root=0)

    def any_true(self, flag: bool) -> bool:
        """Collective over the group: whether `flag` holds on some rank."""
        return flag if self.size == 1 else bool(self._connected.allreduce(int(flag), op=_mpi_max()))

    def least(self, value: int) -> int:
        """Collective over the group: the smallest of the ranks' `value`s (integers: every rank
        gets the same, where a float sum may round differently on each)."""
        return (
            value if self.size == 1 else int(self._connected.allreduce(int(value), op=_mpi_min()))
        )

    def mean(self, values: list[float]) -> list[float]:
        """Collective over the group: the element-wise mean of `values` over its ranks."""
        if self.size == 1:
            return values
        MPI = _mpi()

        # A buffer and a predefined op: a user-defined op created per call (never freed) ran
        # into MPI's limit on them after some 30 log steps and ended the run.
        total = np.asarray(values, dtype=np.float64)
        self._connected.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        return [float(v) / self.size for v in total]


def _mpi() -> Any:
    """mpi4py's MPI module, for its constants (ops, split types)."""
    from mpi4py import MPI  # lazy: it starts MPI; cli.py and data_prep import this before that

    return MPI


def _mpi_min() -> Any:
    return _mpi().MIN


def _mpi_max() -> Any:
    return _mpi().MAX


@dataclass(frozen=True)
class RankContext:
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    tasks: tuple[Task, ...]  # the G/D pairs this rank trains, in order
    group: TrainGroup  # the ranks that train them with it (data-parallel if more than one)
    device_g: str
    device_d: str
    threads: int
    cores: int = 0  # physical cores in this rank's CPU affinity set (what the launcher bound)
    node_cores: int = 0  # physical cores in the union of this node's ranks' sets

    @property
    def class_ids(self) -> tuple[int, ...]:
        return tuple(k for t in self.tasks for k in t.class_ids)

    @property
    def cost_units(self) -> tuple[int, int]:
        """What a second of this rank's training costs: (its CPU threads, 0) on the CPU, or (0,
        the GPUs its G and D train on) (Pair.core_s, Pair.gpu_s)."""
        gpus = {d for d in (self.device_g, self.device_d) if d.startswith("cuda")}
        return (0, len(gpus)) if gpus else (self.threads, 0)

    @property
    def group_rank(self) -> int:
        return self.group.rank

    @property
    def owned_class_ids(self) -> tuple[int, ...]:
        """The classes this rank answers for alone (sampling, scoring): its group's first rank."""
        return self.class_ids if self.group_rank == 0 else ()

    def row(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "local_rank": self.local_rank,
            "tasks": [t.name for t in self.tasks],
            "classes": list(self.class_ids),
            "group": list(self.group.ranks),
            "device_g": self.device_g,
            "device_d": self.device_d,
            "threads": self.threads,
            "cores": self.cores,
            "node_cores": self.node_cores,
            "cpu": cpu_model(),  # a host's: ranks on other nodes may differ
            "cpu_kernels": cpu_kernels(),
        }


def agree(comm: Comm, fn: Callable[[], T], root: int | None = None) -> T:
    """Run `fn` on every rank (or only on `root`) and share any UserError it raises.

    Collective: every rank calls it, in the same order. If `fn` raised a UserError on any rank,
    every rank raises the same AgreedError (reported once, by the lowest failing rank), so no rank
    is left waiting in a later collective. With `root`, the root's result is broadcast.
    """
    result: Any = None
    error: str | None = None
    if root is None or comm.rank == root:
        try:
            result = fn()
        except UserError as exc:
            error = str(exc)
    errors = comm.allgather(error)
    for rank, message in enumerate(errors):
        if message is not None:
            raise AgreedError(message, reporter=rank)
    if root is not None:
        result = comm.bcast(result, root=root)
    return result


def gpu_identity(props: Any) -> str | None:
    """A GPU's physical identity from torch's device properties: its UUID, else its PCI address
    (domain:bus:device, unique on a node), else None. NVML would add nothing: finding the device
    that torch calls cuda:i there takes this same PCI address."""
    uuid = getattr(props, "uuid", None)
    if uuid:
        return str(uuid)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
    return f"pci:{domain:04x}:{bus:02x}:{device:02x}"


def _visible_gpus() -> list[str | None]:
    """The physical identities of the GPUs this process sees (None where torch gives none), in
    this process's index order."""
    import torch  # lazy: cli.py and data_prep import this and start without torch

    if not torch.cuda.is_available():
        return []
    return [
        gpu_identity(torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count())
    ]


def cpu_topology(cpus: Sequence[int], root: Path = SYS_CPU) -> dict[int, tuple[int, int]]:
    """(package, core) of each logical CPU, read from sysfs; CPUs without the files are left out."""
    topology = {}
    for c in cpus:
        base = root / f"cpu{c}" / "topology"
        try:
            topology[c] = (
                int((base / "physical_package_id").read_text()),
                int((base / "core_id").read_text()),
            )
        except (OSError, ValueError):
            continue
    return topology


def build_context(
    comm: Comm, class_ids: Sequence[int], devices: str, threads: int, mode: str = "per-class"
) -> RankContext:
    """Collective: map this rank onto its tasks (classes), its group, devices and CPU threads.

    The node-local communicator (`Split_type(COMM_TYPE_SHARED)`) gives the node-local rank the
    same way under jsrun, srun and mpirun; comparing the ranks' visible GPUs and CPU affinity
    sets tells whether the launcher bound each rank to its own or lets them share.
    """
    MPI = _mpi()
    tasks = make_tasks(mode, tuple(class_ids))
    plans = agree(comm, lambda: assign_tasks(len(tasks), comm.size))
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        gpus = _visible_gpus()
        cpus = sorted(os.sched_getaffinity(0))  # hardware threads: counted as physical cores
        cores = physical_cores(cpus, cpu_topology(cpus))
        node_gpus = node.allgather(gpus)
        node_cores = node.allgather(cores)
        local_rank, local_size = node.rank, node.size
    finally:
        node.Free()
    shared, shared_msg = gpu_sharing(node_gpus, local_rank)

    union = set().union(*node_cores)

    def plan() -> tuple[str, str, tuple[int, str | None]]:
        if shared_msg and devices == "auto":
            raise UserError(shared_msg)
        g, d = plan_devices(local_rank, local_size, len(gpus), shared, devices)
        return g, d, threads_for_rank(len(cores), len(union), local_size, threads)

    device_g, device_d, (n_threads, warning) = agree(comm, plan)
    mine = plans[comm.rank].group
    warnings = comm.gather(warning, root=0)
    if comm.rank == 0:
        assert warnings is not None  # gathered on rank 0
        for message in sorted({w for w in warnings if w}):
            say(f"distcgan: warning: {message}")
    return RankContext(
        rank=comm.rank,
        size=comm.size,
        local_rank=local_rank,
        local_size=local_size,
        host=socket.gethostname(),
        tasks=tuple(tasks[t] for t in plans[comm.rank].tasks),
        group=TrainGroup(mine, mine.index(comm.rank), comm=None),
        device_g=device_g,
        device_d=device_d,
        threads=n_threads,
        cores=len(cores),
        node_cores=len(union),
    )


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain fixed-width text table (for dry runs and end-of-run summaries)."""
    cells = [[str(c) for c in columns]] + [[_cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def _cell(value: Any) -> str:
    if value is None:  # not measured (a task that did not train in this launch)
        return ""
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return (
            ",".join(str(v) for v in value)
            if len(value) <= 8
            else f"{value[0]}..{value[-1]} ({len(value)})"
        )
    return str(value)
