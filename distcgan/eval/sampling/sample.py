"""`distcgan sample`: draw N images per class from a trained run into a sample file and a grid.

Every rank generates the images of its own classes, one class at a time, and sends each to rank 0,
which writes the sample file (the data-file layout, with the run's class ids: a class the run did
not train has no rows) as the classes arrive, and a PNG grid with one row per trained class.
Class k's images come from: its own G (per-class runs), the one conditional G asked for label k
(cgan runs), or the one unconditional G (gan runs: the file is marked unlabelled, and its "class
k" rows are only the k-th share of the draws, with class k's noise seed).
Leaves out: scoring the samples (evaluate.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.data import (  # noqa: F401
    FORMAT_VERSION,
    PROVENANCE,
    UNLABELLED,
    DatasetWriter,
    check_replaceable,
)
from distcgan.errors import AgreedError, ClassFailure, UserError
from distcgan.faults import Fault
from distcgan.images import grid_scale, save_grid, to_uint8
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context
from distcgan.options import SampleOptions
from distcgan.plan import Task, check_devices, class_seed, make_tasks
from distcgan.run import checkpoint
from distcgan.run.atomic import check_out_file
from distcgan.run.rundir import RunDir
from distcgan.train.memory import check_images
from distcgan.train.models import Generator

GRID_COLUMNS = 10
_BATCH = 256
_TAG = 7  # the point-to-point tag of sample transfers


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


def sample_run(comm: Comm, opts: SampleOptions) -> None:
    """Collective: every rank samples its classes; rank 0 writes `opts.out` and the grid (and
    shows a bar of the classes written, see distcgan/progress.py).

    Classes travel to rank 0 one at a time, in class order: a rank generates a class, sends it
    and only then generates the next; rank 0 writes each class as it arrives and keeps only its
    first GRID_COLUMNS images for the grid. No rank holds more than one class's samples.
    """
    run, out = Path(opts.run), Path(opts.out)
    fault = Fault.parse(opts.inject_fault) if opts.inject_fault else None
    if opts.per_class <= 0:  # the command line, the same on every rank: said once
        raise AgreedError(f"--per-class must be a positive integer, got {opts.per_class}")
    try:  # one device a rank: its generators' (a G,D pair would leave D's unused)
        check_devices(opts.devices, pair=False)
    except UserError as exc:
        raise AgreedError(f"sample --{exc}") from None

    def read_run() -> tuple[Any, dict[str, Any]]:
        check_out_file(out, "--out", "samples.h5", overwrite=opts.overwrite)
        check_replaceable(out, "--out")
        if _grid(opts).resolve() == out.resolve():
            raise UserError(
                f"--out {out} is also the grid's file, which would replace the samples: give "
                "--out an .h5 name, or --grid another file"
            )
        if _grid(opts).suffix.lower() != ".png":
            raise UserError(f"--grid {opts.grid}: the grid is a PNG image; give a .png name")
        check_out_file(_grid(opts), "--grid", "samples.png", overwrite=opts.overwrite)
        return RunDir(run).read_config(), RunDir(run).read_dataset()

    cfg, data = agree(comm, read_run, root=0)
    class_ids = cfg.classes or tuple(range(len(data["class_names"])))
    ctx = build_context(comm, class_ids, opts.devices, 0)
    torch.set_num_threads(ctx.threads)
    ch, num_classes = data["channels"], len(data["class_names"])
    # One class's images at once, twice while its batches are joined (train/memory.py).
    held = (2 * opts.per_class, cfg.resolution**2 * ch)
    agree(comm, lambda: check_images("--per-class", opts.per_class, *held, ctx.local_size))
    gens = agree(
        comm,
        lambda: load_generators(run, cfg, ch, num_classes, ctx.owned_class_ids, ctx.device_g),
    )
    sampler = _Sampler(opts, cfg, data, gens, ctx.device_g, fault)
    owner = {k: r for r, ks in enumerate(comm.allgather(ctx.owned_class_ids)) for k in ks}
    if comm.rank != 0:
        # In class order, as rank 0 takes them: messages from one rank arrive in the order sent,
        # and a rank's classes are in --classes' order, which need not be sorted.
        for k in sorted(ctx.owned_class_ids):
            comm.Send(sampler.make(k), dest=0, tag=_TAG)  # blocks until rank 0 takes it
    else:
        _write(comm, sampler, owner, class_ids)
    agree(comm, lambda: None)  # every rank returns after rank 0 has written the file


@dataclass(frozen=True)
class _Sampler:
    """What generating a class's samples needs: its G (on this rank), the noise seed's parts."""

    opts: SampleOptions
    cfg: TrainConfig
    data: dict[str, Any]  # the run's dataset.json
    gens: dict[int, nn.Module]
    device: str
    fault: Fault | None

    def make(self, k: int) -> np.ndarray:
        try:
            if self.fault is not None and self.fault.hits(k, 0):
                self.fault.fire()  # tests: a rank failing while the others wait for it
            noise_seed = class_seed(self.cfg.seed + self.opts.seed, k, "sample")
            return generate(
                self.gens[k], self.opts.per_class, self.cfg.z_dim, noise_seed, self.device
            )
        except Exception as exc:
            raise ClassFailure(k, exc) from exc


def _grid(opts: SampleOptions) -> Path:
    """The grid's file: --grid, else the sample file's name with .png."""
    return Path(opts.grid) if opts.grid else Path(opts.out).with_suffix(".png")


def _write(comm: Comm, sampler: _Sampler, owner: dict[int, int], class_ids: Sequence[int]) -> None:
    """Rank 0: every class in class order (its own made here, the others received) into the
    sample file, then the grid of the classes trained, one row each."""
    from distcgan.progress import bar as progress_bar

    opts, cfg, names = sampler.opts, sampler.cfg, sampler.data["class_names"]
    res, ch, per_class = cfg.resolution, sampler.data["channels"], opts.per_class
    out, grid = Path(opts.out), _grid(opts)
    unlabelled = cfg.mode == "gan"
    from distcgan.env import provenance

    attrs: dict[str, object] = {PROVENANCE: json.dumps(provenance("sample", opts))}
    if unlabelled:
        attrs[UNLABELLED] = 1
    rows = {}
    bar = progress_bar(len(owner), "sampled", "class", opts.progress)
    with DatasetWriter(out, names, res, ch, f"distcgan-sample:{Path(opts.run)}", attrs=attrs) as w:
        for k in range(len(names)):
            if k not in owner:
                w.add_class(k, np.zeros((0, res, res, ch), np.uint8))
                continue
            if owner[k] == 0:
                images = sampler.make(k)
            else:
                images = np.empty((per_class, res, res, ch), np.uint8)
                comm.Recv(images, source=owner[k], tag=_TAG)
            w.add_class(k, images)
            rows[k] = images[: min(per_class, GRID_COLUMNS)].copy()
            del images
            bar.update(1)
    bar.close()
    save_grid(grid, np.stack([rows[k] for k in class_ids]), scale=grid_scale(res))
    print(
        f"wrote {out}: {per_class} samples for each of {len(class_ids)} classes; grid "
        f"{grid} (one row per class: {', '.join(names[k] for k in class_ids)})"
        + (
            "; unlabelled: a gan run's G takes no label, so the rows of class k are only "
            "its k-th share of the draws"
            if unlabelled
            else ""
        ),
        flush=True,
    )
