"""`distcgan generate`: images from an export, as a PNG grid (one row per class) or a sample file.

Class k's noise is `distcgan sample`'s (eval/sampling/generators.noise, seeded with the run seed +
--seed and k), so `generate --seed S --class k --n N` gives the first N images that
`sample --seed S` gives for class k (to one grey level: see README, "Using what you trained").
One process, on the CPU or a GPU. Leaves out: the model (model.py, load.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distcgan.data import PROVENANCE, UNLABELLED, DatasetWriter, check_replaceable
from distcgan.env import provenance
from distcgan.errors import UserError
from distcgan.eval.sampling.generators import noise
from distcgan.export.load import load_generator, read_config
from distcgan.images import grid_scale, save_grid
from distcgan.options import GenerateOptions
from distcgan.plan import class_seed, one_device
from distcgan.run.atomic import check_out_file
from distcgan.train.memory import check_images


def generate(opts: GenerateOptions, log: Any = print) -> Path:
    """Draw opts.n images of each of opts.classes and write opts.out; returns its path."""
    config = read_config(opts.model)
    out = Path(opts.out)
    _check(opts, config, out)
    # Every class's images at once, and one class's twice while its batches are joined.
    size = config["resolution"] ** 2 * config["channels"]
    check_images("--n", opts.n, (len(opts.classes) + 1) * opts.n, size, 1)
    device = one_device(opts.devices, torch.cuda.device_count())
    G = load_generator(opts.model, device)
    images = {k: _draw(G, config, k, opts, device) for k in opts.classes}
    if out.suffix == ".png":
        _write_grid(out, images, config["resolution"])
    else:
        _write_samples(out, images, config, opts)
    log(
        f"wrote {out}: {opts.n} images of each of {len(opts.classes)} class(es) "
        f"({', '.join(config['class_names'][config['class_ids'].index(k)] for k in opts.classes)})"
        f" from {opts.model}"
    )
    return out


def _check(opts: GenerateOptions, config: dict[str, Any], out: Path) -> None:
    if opts.n < 1:
        raise UserError(f"--n must be a positive number of images per class, got {opts.n}")
    twice = sorted({k for k in opts.classes if opts.classes.count(k) > 1})
    if twice:
        # The images are keyed by class: a second 0 drew the same images again and replaced them.
        raise UserError(f"--class {twice[0]} is given twice: name each class once")
    unknown = [k for k in opts.classes if k not in config["class_ids"]]
    if unknown:
        ids = config["class_ids"]
        known = ", ".join(map(str, ids)) if len(ids) <= 20 else f"{ids[0]}..{ids[-1]}"
        raise UserError(f"--class {unknown[0]} is not in {opts.model}: its classes are {known}")
    if out.suffix not in (".png", ".h5"):
        raise UserError(f"--out {out}: write a .png (a grid) or a .h5 (a sample file)")
    check_out_file(out, "--out", "generated.png", overwrite=opts.overwrite)
    if out.suffix == ".h5":
        check_replaceable(out, "--out")


def _draw(
    G: torch.nn.Module, config: dict[str, Any], k: int, opts: GenerateOptions, device: str
) -> np.ndarray:
    """Class k's opts.n images as uint8 (n, H, W, C), from `sample`'s noise of class k."""
    seed = class_seed(config["seed"] + opts.seed, k, "sample")
    out = []
    with torch.no_grad():
        for z in noise(opts.n, config["z_dim"], seed):
            z = z.to(device)
            if config["conditional"]:
                images = G(z, torch.full((z.shape[0],), k, dtype=torch.long, device=device))
            else:
                images = G(z)
            out.append(images.permute(0, 2, 3, 1).cpu().numpy())
    return np.concatenate(out)


def _write_grid(out: Path, images: dict[int, np.ndarray], resolution: int) -> None:
    save_grid(out, np.stack(list(images.values())), scale=grid_scale(resolution))


def _write_samples(
    out: Path, images: dict[int, np.ndarray], config: dict[str, Any], opts: GenerateOptions
) -> None:
    """A sample file in the data layout: every class of the data, those not drawn empty."""
    names = config["data_class_names"]
    res, ch = config["resolution"], config["channels"]
    attrs: dict[str, object] = {PROVENANCE: json.dumps(provenance("generate", opts))}
    if not config["conditional"]:
        attrs[UNLABELLED] = 1
    source = f"distcgan-generate:{opts.model}"
    with DatasetWriter(out, names, res, ch, source, attrs=attrs) as w:
        for k in range(len(names)):
            w.add_class(k, images.get(k, np.zeros((0, res, res, ch), np.uint8)))
