"""One task's G/D pair and everything a checkpoint must hold to continue it exactly.

Leaves out: the training step (step.py) and the loop (loop.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from distcgan.config import TrainConfig
from distcgan.errors import UserError
from distcgan.plan import Task, class_seed
from distcgan.run import checkpoint
from distcgan.train.models import Discriminator, Generator, init_weights


@dataclass(frozen=True)
class PairSpec:
    """What a task's G/D pair is: the config, the task, and the data's channels and classes."""

    cfg: TrainConfig
    task: Task
    channels: int
    num_classes: int

    @property
    def label_classes(self) -> int:
        """Classes G and D take as labels: the data's for a conditional task, else 0."""
        return self.num_classes if self.task.conditional else 0

    @property
    def arch(self) -> list[int]:
        """(z_dim, channels, resolution, label classes): what a checkpoint must match."""
        return [self.cfg.z_dim, self.channels, self.cfg.resolution, self.label_classes]


@dataclass
class Pair:
    G: Generator
    D: Discriminator
    opt_g: torch.optim.Adam
    opt_d: torch.optim.Adam
    noise: torch.Generator  # z (and fake labels) for every step; on the CPU: same on any device
    G_ema: Generator | None = None  # moving average of G's weights: what samples come from
    step: int = 0
    train_s: float = 0.0  # training seconds so far, all launches
    # What the training so far cost the machine, launch by launch: each launch's training seconds
    # times the CPU threads of the ranks that train the pair (core_s; 0 on GPUs), or times the
    # GPUs their G and D train on (gpu_s): right for a run resumed on other threads, devices or
    # ranks, which train_s times the last launch's count is not.
    core_s: float = 0.0
    gpu_s: float = 0.0
    retries: int = 0  # rollbacks after a non-finite loss
    augment: torch.Generator | None = None  # draws of D's input augmentation (train/augment.py)
    augment_p: float = 0.0  # the probability each augmentation applies (ADA's p when auto)
    # --schedule async (step.async_step): the fakes D steps on next (one per micro-batch, on D's
    # device; None before the first step), and the frozen copy of D on G's device that G steps
    # through, refreshed from D at the end of every step (so equal to D between steps).
    cache: list[torch.Tensor] | None = None
    cache_labels: list[torch.Tensor] | None = None  # the labels G was asked for them (cgan)
    D_copy: Discriminator | None = None
    # The log interval a checkpoint was written in the middle of (a rank alone stopped between
    # log steps): its STAT_KEYS sums, steps and seconds so far (task.interval_state), so that the
    # resumed run logs that interval, and adapts ADA's p from it, as if it had never stopped.
    # None at a log step, where an interval ends.
    interval: dict[str, Any] | None = None


def build_generator(cfg: TrainConfig, channels: int, num_classes: int) -> Generator:
    return Generator(cfg.z_dim, channels, cfg.resolution, num_classes)


def new_pair(spec: PairSpec, dev_g: str, dev_d: str) -> Pair:
    """A freshly initialised pair, from the task's own seeds (never the rank's)."""
    cfg, task, channels, k = spec.cfg, spec.task, spec.channels, spec.label_classes
    torch.manual_seed(class_seed(cfg.seed, task.key, "init"))  # init, then D's dropout masks
    fmt = torch.channels_last if cfg.channels_last else torch.contiguous_format
    G = build_generator(cfg, channels, k).apply(init_weights)
    D = Discriminator(channels, cfg.resolution, k, cfg.d_dropout, bn_eps=cfg.d_bn_eps)
    D.apply(init_weights)
    # torch's stubs for Module.to have no overload of a device with memory_format, which
    # Module.to takes (it parses its arguments as Tensor.to does).
    G = G.to(dev_g, memory_format=fmt)  # type: ignore[call-overload]
    D = D.to(dev_d, memory_format=fmt)  # type: ignore[call-overload]

    def adam(net: torch.nn.Module, lr: float, dev: str) -> torch.optim.Adam:
        # One fused kernel per step on the GPU instead of a loop of small ones.
        return torch.optim.Adam(
            net.parameters(),
            lr=lr,
            betas=(cfg.beta1, cfg.beta2),
            fused=True if dev.startswith("cuda") else None,
        )

    G_ema = copy.deepcopy(G).eval().requires_grad_(False) if cfg.ema_decay > 0 else None
    D_copy = None
    if cfg.schedule == "async":
        D_copy = copy.deepcopy(D).to(dev_g).requires_grad_(False)
    return Pair(
        D_copy=D_copy,
        G=G,
        D=D,
        G_ema=G_ema,
        opt_g=adam(G, cfg.lr_g, dev_g),
        opt_d=adam(D, cfg.lr_d, dev_d),
        noise=torch.Generator().manual_seed(class_seed(cfg.seed, task.key, "noise")),
        augment=torch.Generator().manual_seed(class_seed(cfg.seed, task.key, "augment")),
        augment_p=0.0 if cfg.augment_p == "auto" else float(cfg.augment_p),
    )


def pair_state(pair: Pair, spec: PairSpec) -> dict[str, Any]:
    """What a checkpoint holds: weights, Adam, every RNG, the step and the training time."""
    roles = {"G": _device(pair.G), "D": _device(pair.D)}
    cuda = {role: torch.cuda.get_rng_state(d) for role, d in roles.items() if d.startswith("cuda")}
    task = spec.task
    return {
        "task": task.name,
        "class_id": -1 if task.class_id is None else task.class_id,
        "arch": spec.arch,
        "step": pair.step,
        "train_s": pair.train_s,
        "core_s": pair.core_s,
        "gpu_s": pair.gpu_s,
        "retries": pair.retries,
        "G": pair.G.state_dict(),
        "D": pair.D.state_dict(),
        **({"G_ema": pair.G_ema.state_dict()} if pair.G_ema is not None else {}),
        "opt_g": pair.opt_g.state_dict(),
        "opt_d": pair.opt_d.state_dict(),
        "augment_p": pair.augment_p,
        **(cache_state(pair) if pair.cache is not None else {}),
        "rng": {
            "cpu": torch.get_rng_state(),
            "cuda": cuda,
            "noise": pair.noise.get_state(),
            **({"augment": pair.augment.get_state()} if pair.augment is not None else {}),
        },
    }


def cpu_cache(pair: Pair) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """The pair's cached fakes (async) and their labels, on the CPU."""
    assert pair.cache is not None
    labels = None if pair.cache_labels is None else [x.cpu() for x in pair.cache_labels]
    return [x.cpu() for x in pair.cache], labels


def cache_state(pair: Pair) -> dict[str, Any]:
    """A checkpoint's cached fakes of a pair trained alone (a group's: TaskFiles)."""
    cache, labels = cpu_cache(pair)
    return {"async_cache": cache, **({"async_cache_labels": labels} if labels else {})}


def restore_pair(
    pair: Pair,
    state: dict[str, Any],
    group: tuple[int, int] = (0, 1),
    cost: tuple[float, float] = (1.0, 0.0),
) -> None:
    """`pair` as the checkpoint `state` holds it; `group` is (this rank's index in its
    data-parallel group, the group's size), which picks the rank's own cached fakes (async);
    `cost` is this launch's (TrainJob.cost), by which the time of a checkpoint from before the
    cost was kept (5fabb84) is counted, as if every launch were this one."""
    pair.G.load_state_dict(state["G"])
    pair.D.load_state_dict(state["D"])
    if pair.G_ema is not None:
        pair.G_ema.load_state_dict(state.get("G_ema", state["G"]))
    pair.opt_g.load_state_dict(state["opt_g"])
    pair.opt_d.load_state_dict(state["opt_d"])
    torch.set_rng_state(state["rng"]["cpu"])
    for dev, rng in cuda_rng_targets(state["rng"]["cuda"], _device(pair.G), _device(pair.D)):
        torch.cuda.set_rng_state(rng, dev)
    pair.noise.set_state(state["rng"]["noise"])
    if pair.augment is not None and "augment" in state["rng"]:  # checkpoints before augment: none
        pair.augment.set_state(state["rng"]["augment"])
    pair.augment_p = float(state.get("augment_p", pair.augment_p))
    if pair.D_copy is not None:  # async: D's copy is D between steps; the cached fakes are kept
        pair.D_copy.load_state_dict(state["D"])
        dev_d = next(pair.D.parameters()).device
        cache, labels = async_cache(state, *group)
        pair.cache = None if cache is None else [x.to(dev_d) for x in cache]
        pair.cache_labels = None if labels is None else [x.to(dev_d) for x in labels]
    pair.interval = state.get("interval")  # checkpoints before 2026-12: none (a fresh interval)
    pair.step, pair.train_s = int(state["step"]), float(state["train_s"])
    pair.core_s = float(state.get("core_s", pair.train_s * cost[0]))
    pair.gpu_s = float(state.get("gpu_s", pair.train_s * cost[1]))
    pair.retries = int(state.get("retries", 0))


def _device(net: torch.nn.Module) -> str:
    return str(next(net.parameters()).device)


def cuda_rng_targets(saved: dict[str, Any], dev_g: str, dev_d: str) -> list[tuple[str, Any]]:
    """Where a checkpoint's CUDA RNG states go now: G's onto G's device, then D's onto D's (D's
    dropout masks draw from it; last, so it wins where the two now share a GPU). They are kept
    by role, not by device: a resume on another GPU index (another rank's share of a node, a
    data-parallel rank after the first) continues the same stream. A checkpoint from before
    2026-12 keeps them by device ("cuda:0"), restored only onto that device, as then."""
    targets = []
    for role, dev in (("G", dev_g), ("D", dev_d)):
        rng = saved.get(role, saved.get(dev))
        if dev.startswith("cuda") and rng is not None:
            targets.append((dev, rng))
    return targets


def async_cache(state: dict[str, Any], rank: int, size: int) -> tuple[Any, Any]:
    """This group rank's cached fakes and their labels in a checkpoint (None, None before the
    first step). A group's ranks each cache their own slice of the batch: the checkpoint holds
    every rank's (async_cache_ranks, gathered by TaskFiles.save_checkpoint), so it continues
    on a group of the same size only."""
    per_rank = state.get("async_cache_ranks")
    saved = 1 if per_rank is None else len(per_rank)
    if "async_cache" in state or per_rank is not None:
        if saved != size:
            raise UserError(
                f"this --schedule async checkpoint holds the cached fakes of a group of {saved} "
                f"rank(s), and its pair now trains on {size}: resume on the same number of ranks"
            )
    if per_rank is not None:
        return per_rank[rank]
    return state.get("async_cache"), state.get("async_cache_labels")


def load_pair(
    spec: PairSpec,
    cdir: Path,
    devices: tuple[str, str],
    log: Callable[[str], object],
    group: tuple[int, int] = (0, 1),
    cost: tuple[float, float] = (1.0, 0.0),
) -> Pair:
    """The pair as of its newest intact checkpoint (damaged ones are skipped and logged), or new;
    `group` and `cost` as restore_pair's."""
    task = spec.task
    pair = new_pair(spec, *devices)
    state = checkpoint.load_latest(cdir, log=log)
    if state is not None:
        arch = spec.arch
        found = list(state["arch"]) + [0] * (4 - len(state["arch"]))
        if state.get("task", task.name) != task.name or found != arch:
            raise UserError(
                f"checkpoint in {cdir} is for {state.get('task')} with (z_dim, channels, "
                f"resolution, classes) {found}, not {task.name} with {arch}"
            )
        restore_pair(pair, state, group, cost)
    return pair
