"""One training step of a G/D pair, and the batches it is fed.

Batches are pure functions of the step: the rows come from an endless stream of shuffled epochs
and the noise from the task's generator, so resuming needs no loader state. In a data-parallel
group every rank draws the group's whole batch of noise (and, without sharding, of rows) and
takes its own slice: the group together computes what one rank with the whole batch would.
The same step trains a fused pair (train/fused.py): logits then carry a leading class axis
(F, B, 1), each class's loss is the mean over its own batch, and the step minimises their sum,
so every class gets the gradient it gets alone.
Leaves out: logging, checkpoints, G's moving average and the loop (loop.py).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from distcgan.config import parse_policy
from distcgan.train.augment import augment, draw


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))


def to_device(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """A host tensor on `device`. Onto a GPU it goes through pinned memory without the host
    waiting: a copy from pageable memory makes the host wait for the GPU's queued work, so the
    next step's draws could not overlap this step's kernels. (torch's caching host allocator
    keeps the pinned block until the copy has run.) Made contiguous first: a strided slice (a
    group's rank's share of the draws) would be copied again, into pageable memory, by .to()."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.contiguous().pin_memory().to(device, non_blocking=True)


def batch_indices(n: int, batch: int, step: int, seed: int) -> torch.Tensor:
    """Rows used at `step`: the step-th batch of an endless stream of shuffled epochs.

    Epoch e is the permutation seeded by seed + e. The stream is a pure function of the step, so
    resuming needs no data-loader state, no image is dropped at an epoch's end, and a class with
    fewer images than the batch size still gets full batches.
    """
    start = step * batch
    first, last = start // n, (start + batch - 1) // n
    stream = torch.cat([_epoch_order(n, seed, e) for e in range(first, last + 1)])
    offset = start - first * n
    return stream[offset : offset + batch]


def d_stats(logits_real: torch.Tensor, logits_fake: torch.Tensor) -> torch.Tensor:
    """D's side of STAT_KEYS (d_real, d_fake, logit_gap, d_acc, d_real_sign) from its logits on
    one batch, (B,) -> (5,), or per class (F, B) -> (F, 5). D(x) > 0.5 is a logit > 0: a real
    image counts as right above 0, a fake one below 0."""
    right = (logits_real > 0).float().sum(-1) + (logits_fake < 0).float().sum(-1)
    return torch.stack(
        (
            torch.sigmoid(logits_real).mean(-1),
            torch.sigmoid(logits_fake).mean(-1),
            logits_real.mean(-1) - logits_fake.mean(-1),
            right / (logits_real.shape[-1] + logits_fake.shape[-1]),
            torch.sign(logits_real).mean(-1),
        ),
        dim=-1,
    )


def _bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    """Binary cross-entropy of (B, 1) logits against one target, the mean over the batch; of
    fused (F, B, 1) logits, one mean per class (F,)."""
    full = torch.full_like(logits, target, dtype=torch.float32)
    return F.binary_cross_entropy_with_logits(logits.float(), full, reduction="none").mean((-2, -1))


@dataclass
class Batch:
    """One (micro-)batch: real images and labels, noise, and the labels asked of G."""

    real: torch.Tensor
    real_labels: torch.Tensor | None
    z: torch.Tensor
    fake_labels: torch.Tensor | None
    aug: torch.Tensor | None = None  # augmentation draws (augment.SETS, B, augment.DRAWS)


# What a step reports, in this order (a tensor of len(STAT_KEYS) on D's device):
# - loss_d, loss_g: the two losses;
# - d_real, d_fake: mean D(x) and mean D(G(z)), sigmoids of D's logits;
# - logit_gap: mean real logit minus mean fake logit, how far apart D puts the two batches;
# - d_acc: the fraction of real and fake images D classifies right (D(x) > 0.5, D(G(z)) < 0.5);
# - d_real_sign: mean sign of D's logits on real images, ADA's overfitting signal r_t (1: D is
#   sure of every real image; with augmentation, of the augmented ones).
STAT_KEYS = ("loss_d", "loss_g", "d_real", "d_fake", "logit_gap", "d_acc", "d_real_sign")


@dataclass
class Feed:
    """Where a rank's batches come from: its real rows (all of its task's, or its shard) and
    the group's layout. `shard` False means every rank holds every row and takes its slice of
    the group's batch, which makes R ranks x batch B equal one rank x batch R*B."""

    real: torch.Tensor  # (n, C, R, R) on D's device
    labels: torch.Tensor  # (n,) class ids, on D's device
    task_classes: torch.Tensor  # (K_task,) class ids G is asked for (cgan), on the CPU
    conditional: bool
    micro: int  # per-rank micro-batch size
    accum: int  # micro-batches per step
    group_rank: int
    group_size: int
    shard: bool
    data_seed: int
    z_dim: int
    device_g: str

    @property
    def per_rank(self) -> int:
        return self.micro * self.accum

    def batches(
        self,
        step: int,
        noise: torch.Generator,
        augment: tuple[torch.Generator, float] | None = None,
    ) -> list[Batch]:
        """The step's micro-batches; with `augment` (the class's stream and p), each carries
        its augmentation draws, drawn for the whole group's batch as the noise is."""
        B, j, g = self.per_rank, self.group_rank, self.group_size
        n = self.real.shape[0]
        if self.shard:  # this rank's own rows, its own stream of them
            rows = batch_indices(n, B, step, self.data_seed + 1_000_003 * j)
        else:  # the group's batch over every row; this rank's slice of it
            rows = batch_indices(n, B * g, step, self.data_seed)[j * B : (j + 1) * B]
        # Noise for the whole group (the same draws on every rank), then this rank's slice:
        # the random stream does not depend on how many ranks share the batch.
        z = torch.randn(B * g, self.z_dim, generator=noise)[j * B : (j + 1) * B]
        fake_labels = None
        if self.conditional:
            pick = torch.randint(len(self.task_classes), (B * g,), generator=noise)
            fake_labels = self.task_classes[pick][j * B : (j + 1) * B]
        aug = None
        if augment is not None:
            aug = to_device(
                draw(augment[0], B * g, augment[1])[:, j * B : (j + 1) * B], self.real.device
            )
        rows = to_device(rows, self.real.device)
        z = to_device(z, self.device_g)
        if fake_labels is not None:
            fake_labels = to_device(fake_labels, self.device_g)
        out = []
        for i in range(self.accum):
            s = slice(i * self.micro, (i + 1) * self.micro)
            out.append(
                Batch(
                    real=self.real[rows[s]],
                    real_labels=self.labels[rows[s]] if self.conditional else None,
                    z=z[s],
                    fake_labels=None if fake_labels is None else fake_labels[s],
                    aug=None if aug is None else aug[:, s].contiguous(),
                )
            )
        return out


@dataclass
class Nets:
    """The modules a step calls: DDP wrappers when a group trains the pair, else the pair's own.
    D is frozen during G's update, so that one goes through the plain D (nothing to sync)."""

    G: nn.Module
    D: nn.Module


@contextlib.contextmanager
def no_sync(module: nn.Module, skip: bool) -> Iterator[None]:
    """Within a gradient-accumulation loop: no all-reduce of gradients while `skip`. A DDP
    module (a group's: mpi/group.wrap) all-reduces its gradients in the backward of its last
    micro-batch, a collective of the group that every rank reaches at the same micro-batch of
    the same step; a pair's own module has nothing to skip."""
    if skip and hasattr(module, "no_sync"):
        # nn.Module.__getattr__ is typed as returning Tensor | Module; hasattr found a method.
        with module.no_sync():  # type: ignore[operator]
            yield
    else:
        yield


def _d_logits(
    D: nn.Module,
    real: torch.Tensor,
    fake: torch.Tensor,
    joint: bool,
    real_labels: torch.Tensor | None,
    fake_labels: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """D's logits for a real and a fake batch (split on the batch axis, -2: fused logits are
    (F, B, 1)).

    "joint" runs them as one batch, so D's BatchNorm layers normalise real and fake with shared
    statistics; as two batches, each is normalised on its own, which at 16 px (1x1 maps before
    D's last layer) leaves every batch with the same mean logit.
    """
    if real_labels is None:  # unconditional D
        if joint:
            logits = D(torch.cat([real, fake]))
            return logits[..., : real.shape[0], :], logits[..., real.shape[0] :, :]
        return D(real), D(fake)
    assert fake_labels is not None  # a conditional batch has both (Feed.batches)
    fake_labels = fake_labels.to(real_labels.device)
    if joint:
        logits = D(torch.cat([real, fake]), torch.cat([real_labels, fake_labels]))
        return logits[: real.shape[0]], logits[real.shape[0] :]
    return D(real, real_labels), D(fake, fake_labels)


class Trainable(Protocol):
    """What a step updates: a Pair, or a fused pair (train/fused.py) with the same fields.
    Read-only here, so that a Pair's Generator and a fused one's count as the nn.Module G."""

    @property
    def G(self) -> nn.Module: ...

    @property
    def D(self) -> nn.Module: ...

    @property
    def opt_g(self) -> Any: ...

    @property
    def opt_d(self) -> Any: ...


@dataclass(frozen=True)
class StepOptions:
    """How a step computes: D on real and fake as one batch ("joint", cfg.d_batch), bf16
    autocast (cfg.amp), and whether it is being captured as a CUDA graph (graphs.py), which
    turns off autocast's cache of cast weights, a cache a graph cannot keep."""

    joint: bool = True
    amp: bool = False
    graph_safe: bool = False
    augment: tuple[str, ...] = ()  # D's input augmentation policy (train/augment.py)

    @staticmethod
    def of(cfg: Any, graph_safe: bool = False) -> StepOptions:
        """The options a TrainConfig asks for."""
        policy = parse_policy(cfg.augment)
        return StepOptions(cfg.d_batch == "joint", cfg.amp == "bf16", graph_safe, policy)

    def seen(self, x: torch.Tensor, b: Batch, which: int) -> torch.Tensor:
        """What D sees of images x: x augmented with draw set `which` (0 the reals, 1 the fakes
        of D's step, 2 the fakes of G's), or x itself without augmentation."""
        if not self.augment or b.aug is None:
            return x
        return augment(x, b.aug[which].reshape(-1, b.aug.shape[-1]), self.augment)

    def cast(self, device: torch.device) -> torch.autocast:
        return torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=self.amp, cache_enabled=not self.graph_safe
        )


def gan_step(pair: Trainable, nets: Nets, micro: list[Batch], how: StepOptions) -> torch.Tensor:
    """One training step of a pair: G's fakes, a D update on them, then a G update through the
    updated D (G's moving average is the caller's).

    With several micro-batches the gradients accumulate (and a group all-reduces them once,
    after the last). Returns the STAT_KEYS as one tensor on D's device, (S,), or (F, S) for a
    fused pair, without waiting for the device.
    """
    fakes = _fakes(pair, nets, micro, how)
    labels = [b.fake_labels for b in micro]
    stats = d_update(pair, nets.D, micro, [f.detach() for f in fakes], labels, how)
    # D's weights are frozen for G's update so that its backward computes only what G needs;
    # then those D trains are let go again (not the blocks --freeze-d keeps frozen throughout).
    trained = [p for p in pair.D.parameters() if p.requires_grad]
    pair.D.requires_grad_(False)
    _g_update(pair, nets, micro, fakes, how, stats)
    for p in trained:
        p.requires_grad_(True)
    return stats


def _fakes(pair: Trainable, nets: Nets, micro: list[Batch], how: StepOptions) -> list[torch.Tensor]:
    """G's fakes of the step's noise, on D's device: with one micro-batch in G's graph, kept for
    G's update (G runs on its device; the fakes cross to D's inside one autograd graph); when
    accumulating, without it (G's update runs G again, with its graph)."""
    dev_d = micro[0].real.device
    with how.cast(dev_d):
        if len(micro) == 1:
            return [nets.G(micro[0].z, micro[0].fake_labels).to(dev_d)]
        with torch.no_grad():
            return [pair.G(b.z, b.fake_labels).to(dev_d) for b in micro]


def d_update(
    pair: Trainable,
    D: nn.Module,
    micro: list[Batch],
    fakes: list[torch.Tensor],
    fake_labels: list[torch.Tensor | None],
    how: StepOptions,
) -> torch.Tensor:
    """D's step, real -> 1 and fake -> 0, on each micro-batch's real images and `fakes` (one per
    micro-batch, detached, on D's device; `fake_labels`: what G was asked for, or None): the
    step's statistics, G's loss still 0, (S,) or (F, S). The one D update: gan_step gives it
    this step's fakes, schedule.async_step the cached fakes of the step before. D is called as
    given (DDP in a group: its gradients are all-reduced once, after the last micro-batch)."""
    k, dev_d = len(micro), micro[0].real.device
    stats: torch.Tensor | None = None
    pair.opt_d.zero_grad(set_to_none=True)
    for i, b in enumerate(micro):
        with no_sync(D, i < k - 1), how.cast(dev_d):
            real_seen, fake_seen = how.seen(b.real, b, 0), how.seen(fakes[i], b, 1)
            logits_real, logits_fake = _d_logits(
                D, real_seen, fake_seen, how.joint, b.real_labels, fake_labels[i]
            )
        loss_d = 0.5 * (_bce(logits_real, 1.0) + _bce(logits_fake, 0.0))  # () or (F,)
        with no_sync(D, i < k - 1):
            (loss_d.sum() / k).backward()
        if stats is None:
            stats = torch.zeros(*loss_d.shape, len(STAT_KEYS), device=dev_d)
        with torch.no_grad():
            stats[..., 0] += loss_d.detach() / k
            real_f, fake_f = logits_real.float().squeeze(-1), logits_fake.float().squeeze(-1)
            stats[..., 2:] += d_stats(real_f, fake_f) / k
    pair.opt_d.step()
    assert stats is not None
    return stats


def _g_update(
    pair: Trainable,
    nets: Nets,
    micro: list[Batch],
    fakes: list[torch.Tensor],
    how: StepOptions,
    stats: torch.Tensor,
) -> None:
    """G's step, the non-saturating loss -log D(G(z)), through the updated (frozen) D; its
    loss goes into `stats`."""
    k, D = len(micro), pair.D
    dev_d = micro[0].real.device
    cast, joint = how.cast(dev_d), how.joint
    pair.opt_g.zero_grad(set_to_none=True)
    for i, b in enumerate(micro):
        with no_sync(nets.G, i < k - 1):
            with cast:
                fake = fakes[i] if k == 1 else nets.G(b.z, b.fake_labels).to(dev_d)
                fake = how.seen(fake, b, 2)  # G's gradient flows through its augmentation
                if joint:
                    real = how.seen(b.real, b, 0)  # BatchNorm's statistics as in D's step
                    logits_g = _d_logits(D, real, fake, True, b.real_labels, b.fake_labels)[1]
                elif b.fake_labels is not None:
                    logits_g = D(fake, b.fake_labels.to(dev_d))
                else:
                    logits_g = D(fake)
            loss_g = _bce(logits_g, 1.0)
            (loss_g.sum() / k).backward()
        stats[..., 1] += loss_g.detach() / k
    pair.opt_g.step()


def augmenting(pair: Any, how: StepOptions) -> tuple[torch.Generator, float] | None:
    """What a pair's batches draw their augmentation from: its stream and p (None without)."""
    return (pair.augment, pair.augment_p) if how.augment else None


# ---- what the training loop steps ---------------------------------------------------------------


class Member(Protocol):
    """A pair in training and the feed its batches come from (task.TaskState; bench's own)."""

    pair: Any  # train.pair.Pair
    feed: Feed


class PairStep(Protocol):
    """One step of every member, the one place "a step of a pair" is written: `AlonePair`
    (alone.py: one task, alone or with its data-parallel group) or `FusedPairs` (fused.py: F of
    a rank's classes as one fused pair). The training loop, `bench`, the CUDA graph and the
    tests step a pair through one of these.

    `step` draws each member's batches at its own step and updates every member: D, G, G's
    moving average, and each member's step count; it returns the STAT_KEYS per member, (F, S),
    without waiting for the device. `store(k)` brings member k's own Pair up to date (before
    its checkpoint, its grid or leaving); `load(k)` takes member k's Pair in again (after a
    rollback replaced it); a rollback reloads a member inside `reloading()`, which keeps the
    random state that the other members still draw from.
    """

    members: list[Any]

    def batches(self) -> list[Batch]: ...

    def update(self, batches: list[Batch]) -> torch.Tensor: ...

    def step(self) -> torch.Tensor: ...

    def store(self, k: int) -> None: ...

    def load(self, k: int) -> None: ...

    def reloading(self) -> contextlib.AbstractContextManager[Any]: ...
