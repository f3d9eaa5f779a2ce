"""The job templates' arithmetic, in one tested function: how many classes a rank trains at once
(its --fuse), and under LSF how many resource sets a node holds and how many ranks to start.

`plan_job` is called by the three templates (jobs/local.sh, jobs/slurm.sbatch,
jobs/lsf_jsrun.lsf) through `python -m distcgan job-plan`, which prints shell assignments for the
template to eval, and by jobs/weak_scaling.py, which asks it how many nodes R ranks fill. A bad
value is a UserError naming the template variable, so each template refuses it in the same
words. No torch and no MPI here: the templates run it on a batch node before the launcher.

It leaves out what only the scheduler knows: the allocation's nodes under LSF, and the tasks,
cores and GPUs of a Slurm allocation. The templates read those and hand them over.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, fields
from typing import Literal

from distcgan.errors import UserError, say

Scheduler = Literal["local", "slurm", "lsf"]
Count = int | str | None  # a number, or a template variable as typed ("" or None: not set)

# The LSF template's machine, Summit: 6 GPUs and 42 cores a node for jobs. A rank takes 2 GPUs (G
# and D on their own) and 7 cores, one rank's torch threads: with 2 GPUs a rank half the node's
# 42 cores idle (the GPUs do the work; more threads only contend for the memory bus).
SUMMIT = {"gpus_per_node": 6, "cores_per_node": 42, "gpus_per_rank": 2, "cores_per_rank": 7}


@dataclass(frozen=True)
class JobAsk:
    """What a job asks for: each field is the template variable of its name in capitals."""

    scheduler: Scheduler = "local"
    """Which template asks: under "lsf" the node and rank shapes default to Summit's."""
    classes_per_rank: Count = None
    """The classes a rank trains at once as one fused pair (--fuse); unset: --fuse auto."""
    classes_per_gpu: Count = None
    """CLASSES_PER_RANK's old name (deprecated)."""
    nodes: Count = None
    """The nodes to lay resource sets out on; unset with RANKS: the nodes those ranks fill."""
    classes: Count = None
    """The classes to train: one rank per CLASSES_PER_RANK of them (default: one a set)."""
    ranks: Count = None
    """The ranks to start (default: one per CLASSES_PER_RANK classes, at most one a set)."""
    ranks_per_node: Count = None
    """Resource sets a node holds (default: as many as the node's cores and GPUs hold)."""
    gpus_per_rank: Count = None
    """GPUs a rank: 2 (G and D on their own), 1, or 0 (CPUs only)."""
    gpus_per_node: Count = None
    cores_per_rank: Count = None
    cores_per_node: Count = None


@dataclass(frozen=True)
class JobPlan:
    """What the template puts on its command line; None where the scheduler decides."""

    classes_per_rank: int | None = None
    ranks: int | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None
    gpus_per_rank: int | None = None
    cores_per_rank: int | None = None

    def shell(self) -> str:
        """The plan as lines of NAME=value for a template to eval (FUSE: the --fuse flag)."""
        fuse = f"--fuse {self.classes_per_rank}" if self.classes_per_rank else ""
        lines = [f"FUSE={shlex.quote(fuse)}"]
        for name in ("ranks", "nodes", "ranks_per_node", "gpus_per_rank", "cores_per_rank"):
            if (value := getattr(self, name)) is not None:
                lines.append(f"{name.upper()}={value}")
        return "\n".join(lines) + "\n"


def count(value: Count, name: str, unit: str, example: str, zero: str = "") -> int | None:
    """A template variable as a whole number: None when not set, else at least 1 (0 too with a
    `zero` meaning), or one UserError line that says what is wrong and gives `example`."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if text.isascii() and text.isdigit() and (int(text) > 0 or (zero and int(text) == 0)):
        return int(text)
    what = f"0 ({zero}) or a positive number" if zero else "a positive number"
    raise UserError(f"{name} must be {what} of {unit}, got '{value}' (e.g. {example})")


def classes_per_rank(ask: JobAsk) -> int | None:
    """CLASSES_PER_RANK, or its deprecated name CLASSES_PER_GPU; None: distcgan's --fuse auto."""
    k = count(ask.classes_per_rank, "CLASSES_PER_RANK", "classes", "CLASSES_PER_RANK=10")
    if ask.classes_per_gpu is None or ask.classes_per_gpu == "":
        return k
    old = count(
        ask.classes_per_gpu, "CLASSES_PER_GPU", "classes", "CLASSES_PER_RANK=10, its new name"
    )
    if k is not None and k != old:
        raise UserError(
            f"CLASSES_PER_RANK={k} and CLASSES_PER_GPU={old} disagree: set CLASSES_PER_RANK "
            "alone (CLASSES_PER_GPU is its deprecated name)"
        )
    return old


def rank_shape(ask: JobAsk) -> tuple[int, int, int]:
    """(ranks a node holds, GPUs a rank, cores a rank): RANKS_PER_NODE, else as many as the
    node's cores and its GPUs hold (under LSF, Summit's node where the template was not told)."""
    summit = SUMMIT if ask.scheduler == "lsf" else {}

    def given(name: str) -> Count:
        value = getattr(ask, name)
        return summit.get(name) if value is None or value == "" else value

    gpus = count(given("gpus_per_rank"), "GPUS_PER_RANK", "GPUs", "GPUS_PER_RANK=2", "CPUs only")
    cores = count(given("cores_per_rank"), "CORES_PER_RANK", "cores", "CORES_PER_RANK=7") or 1
    node_gpus = count(given("gpus_per_node"), "GPUS_PER_NODE", "GPUs", "GPUS_PER_NODE=6")
    node_cores = count(given("cores_per_node"), "CORES_PER_NODE", "cores", "CORES_PER_NODE=42")
    per_node = count(ask.ranks_per_node, "RANKS_PER_NODE", "ranks", "RANKS_PER_NODE=3")
    gpus = gpus or 0
    if per_node is not None:
        return per_node, gpus, cores
    fits = []  # (ranks a node holds by one resource, the resource, a rank's, a node's)
    if node_cores is not None:
        fits.append((node_cores // cores, "cores", cores, node_cores))
    if gpus and node_gpus is not None:
        fits.append((node_gpus // gpus, "GPUs", gpus, node_gpus))
    if not fits:
        raise UserError(
            f"cannot tell the ranks a node holds (GPUS_PER_RANK={gpus} and no CORES_PER_NODE): "
            "set RANKS_PER_NODE"
        )
    per_node, what, rank, node = min(fits)
    if per_node == 0:
        raise UserError(
            f"a node holds no rank: {what.upper()}_PER_RANK={rank} is more than "
            f"{what.upper()}_PER_NODE={node}; ask for fewer {what} a rank"
        )
    return per_node, gpus, cores


def plan_job(ask: JobAsk) -> JobPlan:
    """The job's plan. Without NODES or RANKS (local, Slurm): the classes a rank alone, the
    launcher's allocation decides the rest. With NODES (the LSF template): NODES x (ranks a node
    holds) resource sets, one rank per CLASSES_PER_RANK classes (rounded up; CLASSES defaults to
    one a set) at most one a set, unless RANKS says; more RANKS than sets is refused now rather
    than by the launcher after the queue wait. With RANKS alone (jobs/weak_scaling.py): the nodes
    those ranks fill."""
    k = classes_per_rank(ask)
    nodes = count(ask.nodes, "NODES", "nodes", "NODES=4")
    ranks = count(ask.ranks, "RANKS", "ranks", "RANKS=12")
    classes = count(ask.classes, "CLASSES", "classes", "CLASSES=1000")
    if nodes is None and ranks is None:
        return JobPlan(classes_per_rank=k)
    per_node, gpus, cores = rank_shape(ask)
    if nodes is None:
        assert ranks is not None  # not both None: returned above
        nodes = -(-ranks // per_node)
    sets = nodes * per_node
    if ranks is None:
        ranks = min(-(-(classes or sets) // (k or 1)), sets)
    if ranks > sets:
        raise UserError(
            f"RANKS={ranks} is more than the {sets} resource sets of {nodes} node(s) x "
            f"{per_node}: ask for more nodes or fewer ranks"
        )
    return JobPlan(k, ranks, nodes, per_node, gpus, cores)


# ---- `distcgan job-plan`: the templates' entry --------------------------------------------------


def command(comm: object, args: argparse.Namespace) -> int:
    """Print the plan of the template's variables, parsed by options.JobPlanOptions's flags (one
    per JobAsk field); `comm` is unused: no MPI here."""
    ask = JobAsk(**{f.name: getattr(args, f.name) for f in fields(JobAsk)})
    plan = plan_job(ask)
    if ask.classes_per_gpu:
        say("distcgan: note: CLASSES_PER_GPU is deprecated, use CLASSES_PER_RANK")
    print(plan.shell(), end="")
    return 0
