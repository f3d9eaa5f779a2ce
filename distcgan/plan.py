"""Pure planning functions: which classes a rank owns, where G and D run, threads, seeds, and the
training budget of the variants that `distcgan compare` trains.

No MPI, no torch state: every function here maps plain values to plain values so that each edge
case is unit-tested. `mpi/context.py` gathers the facts (ranks, GPUs, CPUs) and calls these.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from distcgan.errors import UserError

ALL_CLASSES_KEY = 2**31 - 1  # seed key of the one model of gan/cgan mode (class ids are below)

# What torch.device takes of these: no leading zero, ASCII digits, no trailing newline (which
# `$` would let through).
_DEVICE_RE = re.compile(r"cpu|cuda(:(0|[1-9][0-9]*))?")


@dataclass(frozen=True)
class Task:
    """One G/D pair to train: its run sub-directory, the classes of its data, and whether the
    networks take labels."""

    name: str
    class_ids: tuple[int, ...]
    conditional: bool = False

    @property
    def class_id(self) -> int | None:
        """The class of a per-class task (class_XXX/); None for the one model of gan/cgan mode,
        even when that model was trained on a single class."""
        return self.class_ids[0] if self.name.startswith("class_") else None

    @property
    def key(self) -> int:
        """What seeds derive from with the run seed: the class id, or one key for all classes."""
        return ALL_CLASSES_KEY if self.class_id is None else self.class_id

    @property
    def label(self) -> str:
        """How messages name the task: "class 3", or "task all" (the one model of gan/cgan)."""
        return f"task {self.name}" if self.class_id is None else f"class {self.class_id}"


def make_tasks(mode: str, class_ids: tuple[int, ...]) -> list[Task]:
    """per-class: one unconditional pair per class (class_XXX/); gan: one unconditional pair on
    all the classes' images (all/); cgan: one pair conditioned on the label (all/).

    The one pair's classes are in id order, whatever the order of --classes: its images are
    drawn by index into their concatenation and a cgan's labels by index into its classes, so
    `--classes 1 0` trained other weights than `--classes 0 1`."""
    if mode == "per-class":
        return [Task(f"class_{k:03d}", (k,)) for k in class_ids]
    if mode in ("gan", "cgan"):
        return [Task("all", tuple(sorted(class_ids)), conditional=mode == "cgan")]
    raise ValueError(f"unknown mode {mode!r}")


@dataclass(frozen=True)
class RankPlan:
    """What one rank trains: `tasks` (indices into the run's task list) together with the
    ranks of `group` (data-parallel when the group has more than one rank)."""

    tasks: tuple[int, ...]
    group: tuple[int, ...]


def assign_tasks(n_tasks: int, size: int) -> list[RankPlan]:
    """Spread `n_tasks` tasks (one per class in per-class mode) over `size` ranks; entry r is
    rank r's plan.

    R <= T: balanced contiguous blocks, each rank alone (10 classes on 3 ranks: 4, 3, 3).
    R > T: every task gets a group of R // T contiguous ranks that train it data-parallel, and
    the first R % T tasks one rank more (10 classes on 25 ranks: 3,3,3,3,3,2,2,2,2,2).
    """
    if size < 1:
        raise ValueError("size must be >= 1")
    if n_tasks == 0:
        raise UserError("no classes to train: the class selection is empty")
    plans: list[RankPlan] = []
    if size <= n_tasks:
        base, extra = divmod(n_tasks, size)
        start = 0
        for r in range(size):
            n = base + (1 if r < extra else 0)
            plans.append(RankPlan(tuple(range(start, start + n)), (r,)))
            start += n
        return plans
    base, extra = divmod(size, n_tasks)
    start = 0
    for t in range(n_tasks):
        group = tuple(range(start, start + base + (1 if t < extra else 0)))
        plans.extend(RankPlan((t,), group) for _ in group)
        start += len(group)
    return plans


def fused_groups(n_tasks: int, fuse: int) -> list[range]:
    """A rank's tasks (0..n_tasks-1, in order) in the groups it trains at once as one fused
    pair: as few groups of at most `fuse` as there can be, balanced (10 tasks at fuse 4: 4, 3, 3,
    so no group waits on a longer one), contiguous. fuse 1: each task alone."""
    if fuse < 1:
        raise ValueError("fuse must be >= 1")
    n_groups = -(-n_tasks // fuse)
    base, extra = divmod(n_tasks, max(n_groups, 1))
    groups, start = [], 0
    for g in range(n_groups):
        n = base + (1 if g < extra else 0)
        groups.append(range(start, start + n))
        start += n
    return groups


def plan_devices(
    local_rank: int,
    local_size: int,
    n_visible: int,
    shared: bool,
    override: str = "auto",
) -> tuple[str, str]:
    """Return (G's device, D's device) for one rank.

    `n_visible` is how many GPUs this rank sees; `shared` says whether every rank on the node
    sees the same GPUs (mpirun/srun without binding) rather than its own (jsrun resource sets,
    srun --gpus-per-task). Rules, in order:
      override "cpu" / "cuda:N" / "cuda:N,cuda:M": as given, checked against n_visible;
      no GPU: both on the CPU;
      shared and >= 2 GPUs per rank: G on cuda:2l, D on cuda:2l+1;
      shared and >= 1 GPU per rank: both on cuda:l;
      shared and fewer GPUs than ranks: both on cuda:(l mod n) (ranks share a GPU);
      own GPUs: G on cuda:0 and D on cuda:1, or both on cuda:0 when the rank has one.
    """
    if override != "auto":
        check_devices(override)
        parts = override.split(",")
        for dev in parts:
            if dev.startswith("cuda"):
                index = int(dev.split(":")[1]) if ":" in dev else 0
                if index >= n_visible:
                    raise UserError(
                        f"devices {override!r} asks for {dev} but rank sees {n_visible} GPU(s): "
                        "check CUDA_VISIBLE_DEVICES and the launcher's GPUs per task, or use "
                        "--devices auto"
                    )
        g = parts[0] if parts[0] != "cuda" else "cuda:0"
        d = parts[-1] if parts[-1] != "cuda" else "cuda:0"
        return g, d
    if n_visible == 0:
        return "cpu", "cpu"
    if not shared:
        return ("cuda:0", "cuda:1") if n_visible >= 2 else ("cuda:0", "cuda:0")
    if n_visible >= 2 * local_size:
        return f"cuda:{2 * local_rank}", f"cuda:{2 * local_rank + 1}"
    gpu = f"cuda:{local_rank % n_visible}"
    return gpu, gpu


def check_devices(spec: str, pair: bool = True) -> None:
    """Refuse a --devices value that is not auto, cpu, cuda or cuda:N (or, where `pair`, a G,D
    pair of these) before torch is handed it: torch's own error lists twenty device types."""
    parts = spec.split(",")
    if spec != "auto" and (
        len(parts) > (2 if pair else 1) or not all(_DEVICE_RE.fullmatch(p) for p in parts)
    ):
        pair_choices = "auto, cpu, cuda:N or a G,D pair such as cuda:0,cuda:1"
        choices = pair_choices if pair else "auto, cpu or cuda:N"
        raise UserError(f"devices {spec!r} is not understood: use {choices}")


def one_device(spec: str, n_visible: int) -> str:
    """The device of a one-process command (generate, classifier train) from its --devices:
    auto is cuda:0 when a GPU is visible, else the CPU; cuda:N is checked against the GPUs."""
    check_devices(spec, pair=False)
    return plan_devices(0, 1, n_visible, shared=False, override=spec)[0]


def physical_cores(
    cpus: Iterable[int], topology: Mapping[int, tuple[int, int]]
) -> set[tuple[int, int]]:
    """The physical cores that a set of logical CPUs (an affinity mask) covers, as (package, core)
    pairs; `topology` maps a logical CPU to its pair (Linux: physical_package_id and core_id under
    /sys/devices/system/cpu/cpuN/topology). An affinity mask counts hardware threads: on Summit
    (SMT4) `jsrun --bind packed:7` gives 28 of them on 7 cores, and 28 torch threads would make
    four share each core's floating-point units. A CPU missing from `topology` counts as a core
    of its own (a kernel without the topology files: the mask is all we know)."""
    return {topology.get(c, (-1, c)) for c in cpus}


def gpu_sharing(node_gpus: Sequence[Sequence[str | None]], local_rank: int) -> tuple[bool, str]:
    """Whether the ranks of a node all see the same GPUs (True) or each its own (False), from
    the physical identities (UUID or PCI id) that each rank sees, in its own index order; and a
    problem to report under --devices auto ("" if none).

    Indices say nothing across ranks: under jsrun resource sets or srun --gpus-per-task every
    rank numbers its own GPUs from 0, so only physical identities can tell shared from own. An
    identity that could not be read (None) is not guessed at: with more than one rank on the
    node that is a problem to report, since either guess can idle half the GPUs or pile ranks
    onto a few."""
    mine = list(node_gpus[local_rank])
    if not mine:
        return True, ""
    if len(node_gpus) > 1 and any(None in g for g in node_gpus):
        return False, (
            "cannot tell whether the ranks on this node share their GPUs (torch reports neither "
            "a UUID nor a PCI id): set --devices, e.g. cuda:0,cuda:1 where each rank sees its "
            "own GPUs"
        )
    if all(list(g) == mine for g in node_gpus):
        return True, ""
    if any(set(g) & set(mine) for i, g in enumerate(node_gpus) if i != local_rank):
        return False, (
            "ranks on this node see overlapping but different GPU sets; give every rank all GPUs "
            "or its own (CUDA_VISIBLE_DEVICES, jsrun -g, srun --gpus-per-task), or set --devices"
        )
    return False, ""


def threads_for_rank(
    own_cpus: int, node_cpus: int, local_size: int, override: int = 0
) -> tuple[int, str | None]:
    """Torch threads for one rank, so that the ranks of a node never oversubscribe its cores.

    `own_cpus` is the number of physical cores in this rank's CPU affinity set; `node_cpus` the
    number in the union of the affinity sets of all ranks on the node (`physical_cores`). Bound
    ranks (jsrun -c 7, srun --cpu-bind) get their own cores; unbound ranks share the node's cores
    evenly. An override that would put
    more threads than cores on the node is lowered, with a warning (the second value).
    """
    fair = max(1, min(own_cpus, node_cpus // max(1, local_size)))
    if override <= 0:
        return fair, None
    if override * local_size > node_cpus and override > fair:
        return fair, (
            f"--threads {override} x {local_size} ranks on this node exceeds its {node_cpus} "
            f"cores: using {fair} threads per rank instead (oversubscribed cores slow every rank)"
        )
    return override, None


# Independent random streams of one class, each seeded from (run seed, class id, stream).
STREAMS = {
    "init": 0,
    "noise": 1,
    "data": 2,
    "fixed": 3,
    "sample": 4,
    "augment": 5,
    "score": 6,
    "pr-real": 7,  # evaluate's subset of a class's real images for precision and recall
}


def class_seed(run_seed: int, class_id: int, stream: str, retry: int = 0) -> int:
    """A 63-bit seed for one random stream of one class: a function of the run seed and the class
    id only, never of the rank, so a class trains the same on 1 rank or on 1,000. `retry` > 0
    gives the stream used after that many rollbacks of a diverged class."""
    key = (class_id, STREAMS[stream]) + ((retry,) if retry else ())
    seq = np.random.SeedSequence(entropy=run_seed, spawn_key=key)
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@dataclass(frozen=True)
class Budget:
    """What one variant of `distcgan compare` trains: `pairs` G/D pairs of `steps` steps each,
    every step on `batch` real images (the effective batch of the pair's group); the
    shared-per-class variant first a shared phase of `shared_steps` steps at the same batch."""

    mode: str
    pairs: int
    steps: int  # each pair's steps (under the time rule, at most)
    batch: int
    images: int  # real images in the classes trained
    pair_s: float = 0.0  # the time rule: each pair's training seconds (0: no time limit)
    shared_steps: int = 0  # shared-per-class: the shared phase's steps (at most, timed)
    shared_s: float = 0.0  # shared-per-class under the time rule: the shared phase's seconds

    @property
    def images_seen(self) -> int:
        """Real images drawn over the whole training, all pairs (and the shared phase)."""
        return (self.pairs * self.steps + self.shared_steps) * self.batch

    @property
    def epochs_per_image(self) -> float:
        """How often an image is seen, on average over the images."""
        return self.images_seen / self.images


BUDGET_RULES = ("images", "steps", "time")
SHARED_VARIANT = "shared-per-class"  # per-class pairs fine-tuned from one shared DC-GAN


def plan_budgets(  # noqa: PLR0913 - the rule and the five numbers it is applied to
    rule: str,
    counts: Sequence[int],
    steps: int,
    batch: int,
    seconds: float,
    ranks: int,
    shared_fraction: float = 0.0,
) -> dict[str, Budget]:
    """The three variants under one of `compare --budget`'s rules, and with `shared_fraction`
    F > 0 the fourth, shared-per-class (`shared_budget`):

    - images: `equal_budget` (the same batch and the same real images seen);
    - steps: every pair trains `steps` steps at batch B, so per-class trains K pairs as many
      steps as gan's and cgan's one: K times their compute;
    - time: every variant trains `seconds` of training time on the `ranks` ranks, each pair at
      most its images-rule steps. A rank trains its pairs one after another (or fused, sharing
      the time), so each pair gets `seconds` divided by the most pairs any rank holds: the
      slowest rank spends `seconds`, as gan's and cgan's one pair does on every rank.
    """
    budgets = equal_budget(counts, steps, batch)
    if shared_fraction:
        budgets[SHARED_VARIANT] = shared_budget(rule, counts, steps, batch, shared_fraction)
    if rule == "steps":
        return {
            m: b if m == SHARED_VARIANT else dataclasses.replace(b, steps=steps)
            for m, b in budgets.items()
        }
    if rule == "time":
        if not seconds > 0:
            raise ValueError(f"the time rule needs seconds > 0, got {seconds}")
        out = {}
        for m, b in budgets.items():
            most = max(len(p.tasks) for p in assign_tasks(b.pairs, ranks))
            if m == SHARED_VARIANT:  # F of the seconds to the shared phase, the rest as above
                out[m] = dataclasses.replace(
                    b,
                    shared_s=shared_fraction * seconds,
                    pair_s=(1 - shared_fraction) * seconds / most,
                )
            else:
                out[m] = dataclasses.replace(b, pair_s=seconds / most)
        return out
    if rule != "images":
        raise ValueError(f"unknown budget rule {rule!r}")
    return budgets


def shared_budget(
    rule: str, counts: Sequence[int], steps: int, batch: int, fraction: float
) -> Budget:
    """shared-per-class: a shared phase (one DC-GAN on all K classes, batch B), then each class
    fine-tuned. With s = F x S rounded to a whole step (halves up), each class trains S - s
    steps after the shared phase, which trains K x s steps under the images and time rules (the
    variant then draws K x S x B real images, as the others do: F x K x S rounded to a multiple
    of K) and s under the steps rule (every class's G has had S steps). The time rule's steps
    are its caps (plan_budgets gives the seconds)."""
    if not 0 < fraction < 1:
        raise ValueError(f"the shared fraction must be in (0, 1), got {fraction}")
    shared = math.floor(fraction * steps + 0.5)
    if not 0 < shared < steps:
        raise UserError(
            f"--shared-fraction {fraction:g} of --steps {steps} leaves "
            f"{'no step to the shared phase' if shared < 1 else 'no step to each class'}: "
            "give more --steps, or a --shared-fraction nearer 0.5"
        )
    phase = shared if rule == "steps" else len(counts) * shared
    return Budget(SHARED_VARIANT, len(counts), steps - shared, batch, int(sum(counts)), 0.0, phase)


def equal_budget(counts: Sequence[int], steps: int, batch: int) -> dict[str, Budget]:
    """The three variants under one budget: the same batch and the same real images seen.

    per-class trains each of the K classes (counts[i] images each) for `steps` steps. gan and
    cgan train one pair on all of them, for the sum over the classes of their per-class steps,
    K * steps: then every variant draws exactly K * steps * batch real images, and an image is
    seen steps * batch * K / N times on average (N the images of all K classes). Unequal classes
    do not change the sum: in per-class mode class i's images are seen steps * batch / counts[i]
    times each, in gan and cgan every image about as often as any other.
    """
    if not counts or any(n <= 0 for n in counts):
        raise ValueError(f"every class needs images, got counts {list(counts)}")
    if steps <= 0 or batch <= 0:
        raise ValueError(f"steps and batch must be positive, got {steps} and {batch}")
    total = int(sum(counts))
    per_class_steps = [steps] * len(counts)  # every class trains the same steps
    return {
        "per-class": Budget("per-class", len(counts), steps, batch, total),
        "gan": Budget("gan", 1, sum(per_class_steps), batch, total),
        "cgan": Budget("cgan", 1, sum(per_class_steps), batch, total),
    }
