"""The asynchronous schedule of G's and D's updates (--schedule async, after ParaGAN).

The paper's step (step.gan_step) is sequential: G generates, D steps on the fakes, then G steps
through the updated D, so with G on one GPU and D on another one of the two always waits.
Asynchronous, step t is two halves that share nothing:

    D half, on D's device:  D_{t-1} -> D_t, on this step's real images and the fakes G made at
                            step t-1 (the cache; at step 0, G_0's fakes of step 0's noise);
    G half, on G's device:  G_{t-1} -> G_t, through D_copy = D_{t-1} (frozen), on this step's
                            noise; its fakes, detached, are the cache of step t+1;

then D_copy <- D_t, once a step (D's weights and BatchNorm statistics: `copy_bytes`). D sees
fakes one step old, G a D one step old: ParaGAN's delayed updates. With --batch-size-d Bd, D
sees the first Bd real images and cached fakes of each micro-batch, while G generates and steps
on the whole batch (ParaGAN's "G-128 D-64").

`async_reference` writes the schedule down plainly: a copy of D taken before D's update, the
halves one after the other. `async_step` is what trains: the same arithmetic with the halves
queued on their devices without a host synchronisation between them (G's on its own CUDA stream
when G and D share one GPU; the real images G's half puts beside its fakes are moved to G's
device before D's half is queued, the fakes to D's device after), and D_copy kept across steps
instead of copied from D before each update. The one synchronisation of the two devices is at
the end of a step (the fakes' and D's copies). Written for GPUs, not yet run on one.
The tests hold the two bit for bit equal on the CPU. The D half is queued first and the
G half second in both, so they draw D's dropout masks from the global random state in the same
order.
Leaves out: the loop (loop.py) and the step object (alone.py), which calls `async_step`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from distcgan.train.step import Batch, Nets, StepOptions, _bce, _d_logits, d_update, no_sync


def copy_bytes(D: nn.Module) -> int:
    """Bytes copied from D to D_copy each step: D's weights and buffers."""
    return sum(t.numel() * t.element_size() for t in D.state_dict().values())


def d_batches(micro: list[Batch], bd: int, fuse: int = 1) -> list[Batch]:
    """What D's half sees of each micro-batch: its first bd images (0: all of them); of a fused
    batch (`fuse` classes), each class's first bd, whose augmentation draws sit member-major."""
    if not bd:
        return micro

    def first(aug: torch.Tensor) -> torch.Tensor:  # (SETS, F*B, DRAWS) -> (SETS, F*bd, DRAWS)
        return aug.unflatten(1, (fuse, -1))[:, :, :bd].flatten(1, 2)

    return [
        replace(
            b,
            real=b.real[:bd],
            real_labels=None if b.real_labels is None else b.real_labels[:bd],
            aug=None if b.aug is None else first(b.aug),
        )
        for b in micro
    ]


def fused(pair: Any) -> int:
    """Classes a step object holds side by side: a FusedPairs' F, a Pair's 1."""
    return int(getattr(pair, "fuse", 1))


def cache_labels(micro: list[Batch], dev_d: torch.device) -> list[torch.Tensor] | None:
    """The labels G was asked for this step's fakes (cgan), on D's device; None without."""
    labels = [b.fake_labels for b in micro]
    return [x.to(dev_d) for x in labels if x is not None] if labels[0] is not None else None


def first_cache(pair: Any, micro: list[Batch], how: StepOptions) -> None:
    """Step 0 has no fakes from a step before it: G_0's fakes of step 0's own noise."""
    dev_d = micro[0].real.device
    with torch.no_grad(), how.cast(micro[0].z.device):
        pair.cache = [pair.G(b.z, b.fake_labels).to(dev_d) for b in micro]
    pair.cache_labels = cache_labels(micro, dev_d)


def d_half(pair: Any, D: nn.Module, micro: list[Batch], how: StepOptions) -> torch.Tensor:
    """D's update (step.d_update) on the real images and the cached fakes (the first as many as
    there are real images, with --batch-size-d): the step's statistics (G's loss 0), (S,), or
    (F, S) for a fused pair."""
    n = [b.real.shape[0] for b in micro]
    fakes = [x[:m] for x, m in zip(pair.cache, n)]
    labels: list[torch.Tensor | None] = [None] * len(micro)
    if pair.cache_labels is not None:  # cgan: the labels G was asked for
        labels = [x[:m] for x, m in zip(pair.cache_labels, n)]
    return d_update(pair, D, micro, fakes, labels, how)


def g_reals(
    d_micro: list[Batch], how: StepOptions, dev_g: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor | None]] | None:
    """With d_batch "joint", the real images (as D's half sees them) and labels that G's half
    puts beside its fakes in one batch for D_copy, as the sync step puts reals beside G's
    fakes (with --batch-size-d, Bd reals beside G's B fakes): on G's device, taken before D's
    half is queued (None with "separate")."""
    if not how.joint:
        return None
    return [
        (
            how.seen(b.real, b, 0).to(dev_g),
            None if b.real_labels is None else b.real_labels.to(dev_g),
        )
        for b in d_micro
    ]


def g_draws(micro: list[Batch], dev_g: torch.device) -> list[Batch]:
    """The micro-batches with their augmentation draws on G's device: the feed puts them on
    D's (beside the reals), and with G on another GPU, a copy made inside G's half would be
    queued after D's half and hold G up. Taken before D's half is queued, as g_reals."""
    return [b if b.aug is None else replace(b, aug=b.aug.to(dev_g)) for b in micro]


def g_half(
    pair: Any, G: nn.Module, D_old: nn.Module, micro: list[Batch],
    reals: list[tuple[torch.Tensor, torch.Tensor | None]] | None, how: StepOptions,
) -> tuple[torch.Tensor, list[torch.Tensor]]:  # fmt: skip
    """G's update through D_old (D before this step's update, frozen, on G's device), beside
    `reals` (g_reals) with d_batch joint: G's loss and its fakes, detached, still on G's device
    (the next step's cache, moved to D's device once both halves are queued). The loss is (),
    or (F,) for a fused pair."""
    k, dev_g = len(micro), micro[0].z.device
    loss = torch.zeros((), device=dev_g)
    fakes = []
    pair.opt_g.zero_grad(set_to_none=True)
    for i, b in enumerate(micro):
        with no_sync(G, i < k - 1):
            with how.cast(dev_g):
                fake = G(b.z, b.fake_labels)
                fakes.append(fake.detach())
                seen = how.seen(fake, b, 2)  # G's gradient flows through its augmentation
                if reals is not None:
                    real, labels = reals[i]
                    logits_g = _d_logits(D_old, real, seen, True, labels, b.fake_labels)[1]
                elif b.fake_labels is not None:
                    logits_g = D_old(seen, b.fake_labels)
                else:
                    logits_g = D_old(seen)
            loss_g = _bce(logits_g, 1.0)
            (loss_g.sum() / k).backward()
        loss = loss + loss_g.detach() / k
    pair.opt_g.step()
    return loss, fakes


@contextlib.contextmanager
def _g_stream(dev_g: torch.device, dev_d: torch.device) -> Iterator[Any]:
    """Where G's half is queued. On one GPU with D: a side stream that waits for what was
    queued before D's half (an event recorded now), not for D's half, and that the main stream
    waits for at the end (yields (main, side) after D's half is queued: see async_step). On
    its own GPU or on the CPU: where it is (yields None); two GPUs work at once by themselves,
    until the copies at the end of the step."""
    if not (dev_g.type == "cuda" and dev_g == dev_d):
        yield None
        return
    main = torch.cuda.current_stream(dev_g)
    ready = torch.cuda.Event()
    ready.record(main)
    side = torch.cuda.Stream(dev_g)
    side.wait_event(ready)
    try:
        yield main, side
    finally:  # also on an error: nothing on the main stream may run ahead of G's half
        main.wait_stream(side)


def async_step(
    pair: Any, nets: Nets, micro: list[Batch], how: StepOptions, bd: int = 0
) -> torch.Tensor:
    """One asynchronous step (module docstring) of a pair, or of a fused pair's F classes
    (FusedPairs, whose cache and D_copy are fused tensors): the STAT_KEYS on D's device, (S,)
    or (F, S); loss_d is D's on the cached fakes, loss_g G's through D_copy. Neither half waits
    for the other: the one synchronisation is at the end, where the fakes cross to D's device
    and D_copy is refreshed from D."""
    if pair.cache is None:
        first_cache(pair, micro, how)
    dev_g, dev_d = micro[0].z.device, micro[0].real.device
    d_micro = d_batches(micro, bd, fused(pair))
    reals = g_reals(d_micro, how, dev_g)  # before D's half, which then does not hold it up
    g_micro = g_draws(micro, dev_g)  # so do G's augmentation draws
    with _g_stream(dev_g, dev_d) as streams:
        stats = d_half(pair, nets.D, d_micro, how)
        if streams is None:
            loss_g, fakes = g_half(pair, nets.G, pair.D_copy, g_micro, reals, how)
        else:
            main, side = streams
            with torch.cuda.stream(side):
                loss_g, fakes = g_half(pair, nets.G, pair.D_copy, g_micro, reals, how)
            for x in fakes:  # made on the side stream, read on the main one next step
                x.record_stream(main)
            if reals is not None:
                for real, _ in reals:
                    real.record_stream(side)
    pair.cache = [x.to(dev_d) for x in fakes]
    pair.cache_labels = cache_labels(micro, dev_d)
    with torch.no_grad():  # D_copy <- D_t: the one copy a step
        for c, d in zip(pair.D_copy.state_dict().values(), pair.D.state_dict().values()):
            c.copy_(d, non_blocking=True)
    stats[..., 1] = loss_g.to(dev_d)
    return stats


def async_reference(pair: Any, micro: list[Batch], how: StepOptions, bd: int = 0) -> torch.Tensor:
    """The schedule written down plainly (what `async_step` must equal, bit for bit on the
    CPU): D's copy taken now, D's half, then G's half through that copy."""
    if pair.cache is None:
        first_cache(pair, micro, how)
    dev_g, dev_d = micro[0].z.device, micro[0].real.device
    D_old = copy.deepcopy(pair.D).to(dev_g).requires_grad_(False)
    d_micro = d_batches(micro, bd, fused(pair))
    stats = d_half(pair, pair.D, d_micro, how)
    loss_g, fakes = g_half(pair, pair.G, D_old, micro, g_reals(d_micro, how, dev_g), how)
    pair.cache = [x.to(dev_d) for x in fakes]
    pair.cache_labels = cache_labels(micro, dev_d)
    stats[..., 1] = loss_g.to(dev_d)
    return stats
