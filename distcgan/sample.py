"""`distcgan sample`: draw N images per class from a trained run into a sample file and a grid.

Every rank generates the images of its own classes; rank 0 gathers them and writes the sample
file (the data-file layout, with the run's class ids: a class the run did not train has no rows)
and a PNG grid with one row per trained class. Leaves out: scoring the samples (a later issue).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from distcgan import checkpoint
from distcgan.data import FORMAT_VERSION, DatasetWriter  # noqa: F401  (layout version)
from distcgan.dist import agree, build_context
from distcgan.errors import ClassFailure, UserError
from distcgan.faults import Fault
from distcgan.images import grid_scale, save_grid, to_uint8
from distcgan.models import Generator
from distcgan.plan import class_seed
from distcgan.rundir import class_dir, read_config, read_json

GRID_COLUMNS = 10
_BATCH = 256


def _load_generator(
    run: Path, class_id: int, steps: int, arch: list[int], device: str
) -> Generator:
    state = checkpoint.load_latest(class_dir(run, class_id), log=lambda m: print(m, flush=True))
    if state is None:
        raise UserError(
            f"class {class_id} has no checkpoint in {class_dir(run, class_id)}: train it first "
            f"(distcgan train --run {run} --resume)"
        )
    if int(state["step"]) < steps:
        raise UserError(
            f"class {class_id} stopped at step {state['step']} of {steps}: finish training with "
            f"distcgan train --run {run} --resume"
        )
    z_dim, channels, resolution = arch
    G = Generator(z_dim, channels, resolution)
    G.load_state_dict(state["G"])
    return G.to(device).eval()


def generate(G: Generator, n: int, z_dim: int, seed: int, device: str) -> np.ndarray:
    """n images from G as uint8 (n, H, W, C); noise from a CPU generator (device-independent)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for lo in range(0, n, _BATCH):
            z = torch.randn(min(_BATCH, n - lo), z_dim, generator=gen).to(device)
            out.append(to_uint8(G(z)))
    return np.concatenate(out)


def sample_run(
    comm: Any,
    run: Path,
    per_class: int,
    out: Path,
    grid: Path | None,
    seed: int,
    devices: str,
    fault: Fault | None = None,
) -> None:
    """Collective: every rank samples its classes; rank 0 writes `out` and the grid."""
    if per_class <= 0:
        raise UserError(f"--per-class must be a positive integer, got {per_class}")

    def read_run() -> tuple[Any, dict[str, Any]]:
        return read_config(run), read_json(run / "dataset.json", "run")

    cfg, data = agree(comm, read_run, root=0)
    class_ids = cfg.classes or tuple(range(len(data["class_names"])))
    ctx = build_context(comm, class_ids, devices, 0)
    torch.set_num_threads(ctx.threads)
    arch = [cfg.z_dim, data["channels"], cfg.resolution]
    gens = agree(
        comm,
        lambda: {k: _load_generator(run, k, cfg.steps, arch, ctx.device_g) for k in ctx.class_ids},
    )
    mine = {}
    for k, G in gens.items():
        try:
            if fault is not None and fault.hits(k, 0):
                fault.fire()  # tests: a rank failing while the others wait to gather
            sample_seed = class_seed(cfg.seed + seed, k, "sample")
            mine[k] = generate(G, per_class, cfg.z_dim, sample_seed, ctx.device_g)
        except Exception as exc:
            raise ClassFailure(k, exc) from exc
    gathered = comm.gather(mine, root=0)

    def write() -> None:
        images = {k: v for part in gathered for k, v in part.items()}
        res, ch = cfg.resolution, data["channels"]
        with DatasetWriter(
            out, data["class_names"], res, ch, source=f"distcgan-sample:{run}", in_memory=True
        ) as w:
            for k in range(len(data["class_names"])):
                w.add_class(k, images.get(k, np.zeros((0, res, res, ch), np.uint8)))
        cols = min(per_class, GRID_COLUMNS)
        rows = np.stack([images[k][:cols] for k in class_ids])
        save_grid(grid or out.with_suffix(".png"), rows, scale=grid_scale(res))
        print(
            f"wrote {out}: {per_class} samples for each of {len(class_ids)} classes; grid "
            f"{grid or out.with_suffix('.png')} (one row per class: "
            f"{', '.join(data['class_names'][k] for k in class_ids)})",
            flush=True,
        )

    agree(comm, write, root=0)
