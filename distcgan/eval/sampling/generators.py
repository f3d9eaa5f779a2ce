"""A trained run's generators, loaded from its checkpoints, and the images they draw.

Class k's images come from: its own G (per-class runs), the one conditional G asked for label k
(cgan runs, FixedLabel), or the one unconditional G (gan runs). Each G is the moving average of
its weights when the run kept one, in eval mode, and only from a finished task. The noise of n
samples comes from a CPU generator seeded with one seed, so a draw is the same on any device:
what `sample`, `evaluate --run`, scoring during training and `generate` (export/generate.py)
draw. Leaves out: writing the draws (sample.py) and scoring them (eval/metrics/).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.errors import UserError
from distcgan.images import to_uint8
from distcgan.plan import Task, make_tasks
from distcgan.run import checkpoint
from distcgan.run.rundir import RunDir
from distcgan.train.models import Generator

_BATCH = 256  # noise rows drawn (and images generated) at once


class FixedLabel(nn.Module):
    """A conditional G asked for one class: z (B, z_dim) -> images of class `label`."""

    def __init__(self, G: Generator, label: int) -> None:
        super().__init__()
        self.G, self.label = G, label

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.G(z, torch.full((z.shape[0],), self.label, dtype=torch.long, device=z.device))


def load_generators(
    run: Path,
    cfg: TrainConfig,
    channels: int,
    num_classes: int,
    class_ids: Sequence[int],
    device: str,
) -> dict[int, nn.Module]:
    """Class id -> a module mapping z to that class's images, for the classes in `class_ids`:
    per-class runs load class_XXX/'s G; gan and cgan runs load all/'s one G once (cgan wrapped
    in FixedLabel). The moving average of G's weights when the run kept one."""
    tasks = make_tasks(cfg.mode, tuple(cfg.classes or range(num_classes)))
    loaded: dict[str, Generator] = {}
    out: dict[int, nn.Module] = {}
    for task in tasks:
        wanted = [k for k in task.class_ids if k in class_ids]
        if not wanted:
            continue
        if task.name not in loaded:
            k = num_classes if task.conditional else 0
            loaded[task.name] = load_task_generator(run, task, cfg, channels, k, device)
        for k in wanted:
            G = loaded[task.name]
            out[k] = FixedLabel(G, k).eval() if task.conditional else G
    return out


def load_task_generator(
    run: Path, task: Task, cfg: TrainConfig, channels: int, num_classes: int, device: str
) -> Generator:
    """A finished task's G (its moving average when the run kept one), in eval mode; a one-line
    error when the task has no checkpoint or stopped before cfg.steps (or its time limit)."""
    tdir = RunDir(run).task(task.name).path
    # How errors name the task: "class 3", or "the model of all classes" (gan/cgan).
    what = "the model of all classes" if task.class_id is None else f"class {task.class_id}"
    skipped: list[str] = []  # the damaged checkpoints passed over, said in an error below

    def log(message: str) -> None:
        skipped.append(message.removeprefix("skipping damaged checkpoint "))
        print(message, flush=True)

    state = checkpoint.load_latest(tdir, log=log)
    damaged = f" (checkpoint {'; '.join(skipped)})" if skipped else ""
    if state is None:
        raise UserError(
            f"{what} has no {'intact ' if skipped else ''}checkpoint in {tdir}{damaged}: train it "
            f"first (distcgan train --run {run} --resume)"
        )
    if not cfg.pair_done(int(state["step"]), float(state.get("train_s", 0.0))):
        raise UserError(
            f"{what} stopped at step {state['step']} of {cfg.steps}{damaged}: finish training "
            f"with distcgan train --run {run} --resume"
        )
    G = Generator(cfg.z_dim, channels, cfg.resolution, num_classes)
    G.load_state_dict(state.get("G_ema", state["G"]))  # the moving average, when trained with one
    return G.to(device).eval()


def noise(n: int, z_dim: int, seed: int) -> Iterator[torch.Tensor]:
    """The noise of n samples in batches of at most _BATCH rows, from a CPU generator seeded
    with `seed` (the same on any device): what `sample` and `generate` draw."""
    gen = torch.Generator().manual_seed(seed)
    for lo in range(0, n, _BATCH):
        yield torch.randn(min(_BATCH, n - lo), z_dim, generator=gen)


def generate(G: nn.Module, n: int, z_dim: int, seed: int, device: str) -> np.ndarray:
    """n images from G as uint8 (n, H, W, C); noise from `noise` (device-independent)."""
    out = []
    with torch.no_grad():
        for z in noise(n, z_dim, seed):
            out.append(to_uint8(G(z.to(device))))
    return np.concatenate(out)
