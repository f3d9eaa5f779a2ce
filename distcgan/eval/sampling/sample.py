"""`distcgan sample`: draw N images per class from a trained run into a sample file and a grid.

Every rank generates the images of its own classes, one class at a time, and sends each to rank 0,
which writes the sample file (the data-file layout, with the run's class ids: a class the run did
not train has no rows) as the classes arrive, and a PNG grid with one row per trained class.
A gan run's one unconditional G draws every class's rows: the file is marked unlabelled, and
its "class k" rows are only the k-th share of the draws, with class k's noise seed. Leaves out:
loading the generators and drawing from them (generators.py), scoring the samples
(eval/evaluate.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.data import PROVENANCE, UNLABELLED, DatasetWriter, check_replaceable
from distcgan.env import provenance
from distcgan.errors import AgreedError, ClassFailure, UserError
from distcgan.eval.sampling.generators import generate, load_generators
from distcgan.faults import Fault
from distcgan.images import grid_scale, save_grid
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context
from distcgan.options import SampleOptions
from distcgan.plan import check_devices, class_seed
from distcgan.progress import bar as progress_bar
from distcgan.run.atomic import check_out_file
from distcgan.run.rundir import RunDir
from distcgan.train.memory import check_images

GRID_COLUMNS = 10
_TAG = 7  # the point-to-point tag of sample transfers


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
    opts, cfg, names = sampler.opts, sampler.cfg, sampler.data["class_names"]
    res, ch, per_class = cfg.resolution, sampler.data["channels"], opts.per_class
    out, grid = Path(opts.out), _grid(opts)
    unlabelled = cfg.mode == "gan"
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
