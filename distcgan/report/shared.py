"""The shared phase of a two-phase run (`train --mode per-class --shared-steps S`): which task it
is, what it trained and cost, and where its steps sit on the run's axis. The report draws the
shared phase's curves first and every fine-tune's after them (a class's step k at S + k); the
export's model card says where the classes started.

A two-phase run's summary.json has one row per class and the shared phase's row (task "all",
class_id None); a gan or cgan run's one row of all the classes is no shared phase. Leaves out:
drawing (page.py) and writing the card (export/card.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distcgan.run.rundir import TaskRow, images_seen, slowest_rank_s

TASK = "all"  # the shared phase's task folder: a gan run's one pair (plan.make_tasks)


@dataclass(frozen=True)
class SharedPhase:
    """What the shared phase trained (`steps`: those it reached, the fine-tunes' offset on the
    run's axis of steps, of the `planned` --shared-steps) and what it cost: its images and the
    training seconds it took on every rank, against the run's (every task's images, the
    slowest rank's seconds)."""

    steps: int
    planned: int
    classes: int
    ranks: tuple[int, ...]  # every rank it trained on (none known before the summary)
    images: int | None
    run_images: int | None
    train_s: float | None
    run_train_s: float | None

    def describe(self) -> str:
        """As the report and the model card say it: "a shared phase of S steps (one DC-GAN on
        all K classes, data-parallel on R rank(s))"; "of S' of its S steps" where it stopped
        sooner (a time limit, a stop signal)."""
        on = f", data-parallel on {len(self.ranks)} rank(s)" if self.ranks else ""
        of = f" of its {self.planned:,}" if self.steps != self.planned else ""
        return (
            f"a shared phase of {self.steps:,}{of} steps (one DC-GAN on all {self.classes} "
            f"classes{on})"
        )

    def cost(self) -> str:
        """Its share of the run's images and training seconds ("" before the run's summary)."""
        if self.images is None or not self.run_images or self.run_train_s is None:
            return ""
        seconds = self.train_s or 0.0
        s_share = f" ({seconds / self.run_train_s:.0%})" if self.run_train_s > 0 else ""
        return (
            f"{self.images:,} of the run's {self.run_images:,} images "
            f"({self.images / self.run_images:.0%}) and {seconds:.1f} of its "
            f"{self.run_train_s:.1f} training seconds on the slowest rank{s_share}"
        )


def two_phase(config: dict[str, Any]) -> bool:
    """Whether the run of config.json `config` has a shared phase."""
    return config.get("mode") == "per-class" and bool(config.get("shared_steps"))


def shared_phase(config: dict[str, Any], rows: list[TaskRow], classes: int) -> SharedPhase | None:
    """The shared phase of a run of `classes` classes with config.json `config` and summary
    rows `rows` (none yet while it trains), or None for a run without one."""
    if not two_phase(config):
        return None
    planned = int(config["shared_steps"])
    row = next((r for r in rows if r.task == TASK), None)
    if row is None:  # no summary yet: the steps it was given
        return SharedPhase(planned, planned, classes, (), *[None] * 4)
    return SharedPhase(
        steps=int(row.steps if row.steps is not None else planned),
        planned=planned,
        classes=classes,
        ranks=tuple(row.ranks or [row.rank]),
        images=images_seen(row),
        run_images=sum(images_seen(r) for r in rows),
        train_s=row.train_s,
        run_train_s=slowest_rank_s(rows),
    )


def class_rows(config: dict[str, Any], rows: list[TaskRow]) -> list[TaskRow]:
    """`rows` less the shared phase's: the rows of the run's pairs, which it exports."""
    return [r for r in rows if r.task != TASK] if two_phase(config) else rows


def on_run_axis(lines: list[dict[str, Any]], offset: int) -> list[int]:
    """The steps of a task's metrics lines on the run's axis: a fine-tune's step k at
    `offset` + k (the shared phase's steps), the shared phase's own at k (offset 0)."""
    return [offset + int(x["step"]) for x in lines]
