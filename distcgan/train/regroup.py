"""What a resume may change of how a started task trains.

Two things of a launch's layout change the weights a task ends with: its data-parallel group's
size (each rank's share of the batch and the shard of the class it draws from) and the torch
threads per rank on the CPU (the order the kernels sum in). A 2-class run resumed on 3 ranks
made class 0 a group of 2, and its final weights differed from the uninterrupted run's by up to
7e-3; a resume on a rank count that changed the threads per rank, by up to 3.5e-4. So a resume
that would change either for a task already started (it has a checkpoint and steps to go) is
refused, naming the task, unless --allow-regroup; a task not yet started may be regrouped
freely, and a rank count that keeps every started task's group and threads is accepted.

Rank 0 decides, from the rank rows of the last launch (env.json's ranks_detail) and this one's;
job.py shares the decision with every rank (agree) before training. Leaves out: the data file
and the config's fields (config.check_resume_changes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distcgan.errors import UserError
from distcgan.plan import make_tasks
from distcgan.run.checkpoint import CURRENT, PREVIOUS
from distcgan.run.rundir import RunDir

SHARED_TASK = make_tasks("gan", (0,))[0].name  # all/: a two-phase run's shared phase


@dataclass(frozen=True)
class Layout:
    """How one task trains in one launch: its group's ranks, and its threads per rank on the
    CPU (None where G and D both run on GPUs: the threads then do not touch the weights)."""

    ranks: int
    threads: int | None


def layouts(rows: Iterable[dict[str, Any]]) -> dict[str, Layout]:
    """Each task's layout (by task name) from a launch's rank rows (mpi.context.RankContext.row),
    as the group's first rank has it."""
    found: dict[str, Layout] = {}
    for row in rows:
        group = list(row["group"])
        if row["rank"] != group[0]:
            continue
        on_gpu = all(str(row[d]).startswith("cuda") for d in ("device_g", "device_d"))
        for task in row["tasks"]:
            found[task] = Layout(len(group), None if on_gpu else int(row["threads"]))
    return found


def changes(
    before: Sequence[dict[str, Any]], now: Sequence[dict[str, Any]], started: Iterable[str]
) -> list[tuple[str, str]]:
    """What would change for each started task between two launches' rank rows: (the task's
    label, what changes), for each task that changes, in task order."""
    old, new = layouts(before), layouts(now)
    said = []
    for task in sorted(started):
        if task not in old or task not in new:
            continue  # not in both launches' rows: nothing to compare
        a, b = old[task], new[task]
        parts = []
        if a.ranks != b.ranks:
            parts.append(f"group {a.ranks} -> {b.ranks} ranks (each rank's batch and data shard)")
        if a.threads is not None and b.threads is not None and a.threads != b.threads:
            parts.append(f"threads {a.threads} -> {b.threads} per rank")
        if parts:
            said.append((_label(task), ", ".join(parts)))
    return said


def _label(task: str) -> str:
    return f"class {int(task[6:])}" if task.startswith("class_") else f"task {task}"


@dataclass(frozen=True)
class Targets:
    """The steps a run's tasks train to: `steps`, and a two-phase run's shared task (all/)
    `shared_steps`."""

    steps: int
    shared_steps: int = 0

    def of(self, task: str) -> int:
        return self.shared_steps if self.shared_steps and task == SHARED_TASK else self.steps


def started_tasks(rd: RunDir, targets: Targets) -> list[str]:
    """The tasks of the run that have a checkpoint and steps to go (a task done at its target
    steps or more trains no further, so its layout does not matter)."""
    started = []
    for task in sorted(p.name for p in rd.path.iterdir() if p.is_dir()):
        folder = rd.task(task)
        if not any((folder.path / name).is_file() for name in (CURRENT, PREVIOUS)):
            continue
        try:
            result = json.loads(folder.result.read_text())
            reached = int(result.get("steps") or 0)
            finished = result.get("status") == "done" and reached >= targets.of(task)
        except (OSError, ValueError, TypeError, AttributeError):
            finished = False  # no result.json (or a damaged one): not known to be done
        if not finished:
            started.append(task)
    return started


def check_regroup(
    rd: RunDir, rows: Sequence[dict[str, Any]], targets: Targets, allow: bool
) -> list[str]:
    """Rank 0, on --resume: the changes to started tasks' layouts that this launch (its rank
    `rows`, a two-phase run's shared phase's among them) would make, one phrase each; a
    UserError naming the first and --allow-regroup unless `allow`."""
    if not rd.has_env():
        return []  # no launch recorded its layout
    env = rd.read_env()
    ranks = env.get("ranks_detail") or []
    before = ranks + (env.get("shared_detail") or [])
    started = started_tasks(rd, targets)
    said = changes(before, rows, started)
    if said and not allow:
        (label, what), more = said[0], len(said) - 1
        others = f" (and {more} more started task(s))" if more else ""
        raise UserError(
            f"--resume would change how started {label} trains{others}: {what}, so it would "
            f"end with other weights than the run would have: resume on {_ranks(len(ranks))} "
            f"as the last launch did{_keep_threads(before, rows, started)}, or pass "
            "--allow-regroup to train on with the change"
        )
    return [f"{label}: {what}" for label, what in said]


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _keep_threads(
    before: Sequence[dict[str, Any]], now: Sequence[dict[str, Any]], started: Iterable[str]
) -> str:
    """ ", or pass --threads N" where that alone keeps every started task as it was: only their
    threads change, each from one N to more (a --threads below the fair share is never
    lowered, plan.threads_for_rank)."""
    old, new = layouts(before), layouts(now)
    kept = {t: (old[t], new[t]) for t in started if t in old and t in new}
    wanted = {a.threads for a, b in kept.values() if a != b}
    fits = all(
        a.ranks == b.ranks and (a.threads == b.threads or (b.threads or 0) > (a.threads or 0))
        for a, b in kept.values()
    )
    if len(wanted) != 1 or None in wanted or not fits:
        return ""
    return f", or pass --threads {wanted.pop()}"
