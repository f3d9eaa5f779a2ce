"""One task's pair stepped on its own: the training loop's group of one.

`AlonePair` is the step object (step.PairStep) of a task trained alone or by a data-parallel
group of ranks, whose modules it calls through `wrap` (DDP and group BatchNorm:
task.group_nets).
The pair is its own: nothing to store or load but the wrapped modules after a rollback, and a
rollback restores the random state the checkpoint saved (D's dropout masks continue from it).
Leaves out: the step's arithmetic (step.gan_step) and the loop (loop.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from distcgan.config import TrainConfig
from distcgan.train.pair import Pair, update_ema
from distcgan.train.schedule import async_step
from distcgan.train.step import Batch, Member, Nets, StepOptions, augmenting, gan_step


def plain(pair: Pair) -> Nets:
    """The modules a step calls for a pair with no group: its own."""
    return Nets(pair.G, pair.D)


class AlonePair:
    """Member 0's pair, one step at a time: gan_step (or with --schedule async, async_step),
    then G's moving average."""

    def __init__(
        self, cfg: TrainConfig, member: Member, wrap: Callable[[Pair], Nets] = plain
    ) -> None:
        self.cfg, self.members, self.wrap = cfg, [member], wrap
        self.how = StepOptions.of(cfg)
        self.nets = wrap(member.pair)

    def batches(self) -> list[Batch]:
        pair = self.members[0].pair
        return self.members[0].feed.batches(pair.step, pair.noise, augmenting(pair, self.how))

    def update(self, batches: list[Batch], poison: torch.Tensor | None = None) -> torch.Tensor:
        """One step on these batches; `poison` is (1,) (NaN poisons the loss); stats (1, 6)."""
        pair = self.members[0].pair
        one = None if poison is None else poison[0]
        if self.cfg.schedule == "async":
            bd = self.cfg.batch_size_d // self.cfg.grad_accum  # per micro-batch; 0: all
            stats = async_step(pair, self.nets, batches, self.how, bd, one)
        else:
            stats = gan_step(pair, self.nets, batches, self.how, one)
        if pair.G_ema is not None:
            update_ema(pair.G_ema, pair.G, self.cfg.ema_decay, pair.step)
        pair.step += 1
        return stats.unsqueeze(0)

    def step(self, poison: torch.Tensor | None = None) -> torch.Tensor:
        return self.update(self.batches(), poison)

    def store(self, k: int) -> None:
        """Nothing to do: the pair is what the step updates."""

    def load(self, k: int) -> None:
        self.nets = self.wrap(self.members[0].pair)

    def reloading(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()
