"""--time-limit-s for one pair: when its time is looked at, whether it is spent, and what the
ranks of a group agree on before they say so. The one place the rule is written.

A pair's training seconds (Pair.train_s) grow at each of the loop's decision points. The time is
looked at on log steps (where a group's ranks meet anyway), on a stop step (a group stops on log
steps only), and on the step foreseen to spend it (`look_at`: the same on every rank of a
group), so that no checkpoint past the limit is left unfinished. Looks are then at most a step
late, rather than up to a log interval (a bias of a stop on log steps alone); a look that comes
early looks again. A pair whose time is up ends on a log step: its last interval is checked and
written, and a checkpoint and a grid are due (train/files.py).
Leaves out: the loop that steps the pair and times it (loop.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from distcgan.mpi.context import TrainGroup


@dataclass
class TimeLimit:
    """One pair's --time-limit-s (TaskState.limit), and when its time is next looked at."""

    limit_s: float = 0.0  # 0: no limit
    steps: int = 0  # cfg.steps: a pair at its last step is done, not out of time
    # The next step at which the time is looked at besides log and stop steps, foreseen from
    # the pace since the last look (step, train_s); -1: none.
    look_at: int = -1
    look_from: tuple[int, float] = (0, 0.0)

    @staticmethod
    def of(cfg: Any) -> TimeLimit:
        """The limit a TrainConfig sets."""
        return TimeLimit(cfg.time_limit_s, cfg.steps)

    def spent(self, train_s: float) -> bool:
        """Whether a pair that trained `train_s` seconds is out of time (never without a limit)."""
        return self.limit_s > 0 and train_s >= self.limit_s

    def finished(self, pair: Any) -> bool:
        """Whether a pair has finished: its steps trained, or its time spent."""
        return pair.step >= self.steps or self.spent(pair.train_s)

    def ended(self, pair: Any) -> bool | None:
        """What a pair's summary row says (TaskRow.time_up): whether its time, not its steps,
        ended it; None without a limit."""
        if not self.limit_s:
            return None
        return pair.step < self.steps and self.spent(pair.train_s)

    def restart(self, pair: Any) -> None:
        """From the pair's step now (a start, a rollback): the time is next looked at after one
        step, whose pace foretells the rest."""
        if self.limit_s:
            self.look_at, self.look_from = pair.step + 1, (pair.step, pair.train_s)

    def due(self, step: int) -> bool:
        """Whether the time is looked at after `step` besides log and stop steps (the loop then
        waits for the device, to count the time)."""
        return step == self.look_at

    def up(self, group: TrainGroup, pair: Any, looked: bool) -> bool:
        """Whether the pair's time is up after this step. Where the time is `looked` at (a log
        step, a stop step or `due`: alike on every rank of a group), and the pair is short of
        its last step, collective over the group (every rank of it calls this at every
        decision, in the same order): the ranks agree on the pair's seconds (their mean), so
        that they stop at the same step and every rank's checkpoint and row say the same, then
        decide together (a mean may round differently on two ranks). A time not yet up foresees
        the next look."""
        if not (self.limit_s and looked):
            return False
        if pair.step < self.steps:
            pair.train_s, pair.core_s, pair.gpu_s = group.mean(
                [pair.train_s, pair.core_s, pair.gpu_s]
            )
            if group.any_true(self.spent(pair.train_s)):
                return True
        self._look_ahead(group, pair)
        return False

    def _look_ahead(self, group: TrainGroup, pair: Any) -> None:
        """The step at which the time will be up at the pace since the last look (collective
        over the group: the ranks take the nearest of their steps)."""
        step, spent = pair.step, pair.train_s
        (step0, spent0), left = self.look_from, self.limit_s - spent
        pace = (spent - spent0) / max(step - step0, 1)
        ahead = max(1, math.ceil(left / pace)) if pace > 0 else 1
        self.look_at = step + group.least(ahead)  # the same step on every rank
        self.look_from = (step, spent)
