"""One task's pair stepped on its own: the training loop's group of one.

`AlonePair` is the step object (step.PairStep) of a task trained alone or by a data-parallel
group of ranks, whose modules it calls through `wrap` (DDP and group BatchNorm:
task.group_nets). One step of it, as the loop calls it (`step`): the member's batches at the
pair's step (step.Feed.batches), the D and G updates (step.gan_step, or with --schedule async
schedule.async_step), G's moving average (`update_ema`), and the step count.

The pair's state (train/pair.py's Pair, loaded from the task's last checkpoint or made new): G
and D, an Adam for each, G's moving average G_ema, the noise generator that draws every step's z
(and fake labels), the step, its training seconds and rollbacks; with async, D's copy and the
cached fakes. Nothing else carries from step to step but the global random state D's dropout
draws from.
In a data-parallel group every rank runs the same step on its slice of the group's batch, and
the step's collectives are inside the wrapped modules: DDP all-reduces D's and G's gradients
in the backward of the last micro-batch (step.no_sync), and with --sync-bn, BatchNorm over the
group (groupbn.py) all-reduces its statistics in every forward; every rank reaches them in the
same order, because every rank runs the same step.
The pair is its own: nothing to store or load but the wrapped modules after a rollback, and a
rollback restores the random state the checkpoint saved (D's dropout masks continue from it).
Leaves out: the step's arithmetic (step.py) and the loop (loop.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.train.pair import Pair
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

    def update(self, batches: list[Batch]) -> torch.Tensor:
        """One step on these batches: the STAT_KEYS, (1, S)."""
        pair = self.members[0].pair
        if self.cfg.schedule == "async":
            bd = self.cfg.batch_size_d // self.cfg.grad_accum  # per micro-batch; 0: all
            stats = async_step(pair, self.nets, batches, self.how, bd)
        else:
            stats = gan_step(pair, self.nets, batches, self.how)
        if pair.G_ema is not None:
            update_ema(pair.G_ema, pair.G, self.cfg.ema_decay, pair.step)
        pair.step += 1
        return stats.unsqueeze(0)

    def step(self) -> torch.Tensor:
        return self.update(self.batches())

    def store(self, k: int) -> None:
        """Nothing to do: the pair is what the step updates."""

    def load(self, k: int) -> None:
        self.nets = self.wrap(self.members[0].pair)

    def reloading(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


@torch.no_grad()
def update_ema(G_ema: nn.Module, G: nn.Module, decay: float, step: int) -> None:
    """G_ema <- decay * G_ema + (1 - decay) * G, with the decay warmed up over the first steps
    (min(decay, (1+t)/(10+t))) so that short runs are not averaged over their noisy start."""
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(G_ema.parameters()), list(G.parameters()), 1.0 - d)
    for b_ema, b in zip(G_ema.buffers(), G.buffers()):  # BatchNorm statistics: G's own
        b_ema.copy_(b)
