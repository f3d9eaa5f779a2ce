"""`distcgan export`: a trained run as one self-contained conditional generator.

DIR/
  model.safetensors  the generator's weights: per-class runs every class's G (its moving
                     average when the run kept one) stacked by class, (K, ...) per tensor, in
                     the order of config.json's class_ids; gan and cgan runs their one G
  config.json        what the weights are: kind (per-class, cgan, gan), architecture,
                     resolution, channels, z_dim, class ids and names, inputs and output, the
                     run's config, seed and commit
  generator.pt2      a torch.export program: (z float32 (N, z_dim), y int64 (N,)) -> uint8
                     (N, C, H, W); a gan run's takes z alone. Any mix of classes in one batch;
                     loads with torch alone (torch.export.load(path).module())
  README.md          the model card: data, classes, training budget, scores when `evaluate` ran
The folder is written beside its target and renamed into place when complete; an existing DIR
is replaced only with --overwrite, and only if it holds an export.
Leaves out: the model itself (model.py) and loading it (load.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from distcgan.errors import UserError
from distcgan.eval.sampling.generators import load_task_generator
from distcgan.export.card import model_card
from distcgan.export.checksum import FORMAT, FORMAT_VERSION, sums
from distcgan.export.model import ClassConditional, LabelledG, UnlabelledG
from distcgan.options import ExportOptions
from distcgan.plan import make_tasks
from distcgan.run.atomic import fsync_dir, refuse_existing, storage_errors, sync_folder
from distcgan.run.rundir import RunDir
from distcgan.train.models import Generator

FILES = ("model.safetensors", "config.json", "generator.pt2", "README.md")


def export_run(opts: ExportOptions, log: Any = print) -> Path:
    """Write the export of run `opts.run` into `opts.out`; returns its path."""
    t0 = time.perf_counter()
    rd, out = RunDir(Path(opts.run)), Path(opts.out)
    cfg, dataset = rd.read_config(), rd.read_dataset()
    _check_out(out, opts.overwrite)
    names = list(dataset["class_names"])
    class_ids = list(cfg.classes or range(len(names)))
    channels = int(dataset["channels"])
    tasks = make_tasks(cfg.mode, tuple(class_ids))
    labels, conditional = (len(names) if cfg.mode == "cgan" else 0), cfg.mode != "gan"
    gens = [load_task_generator(rd.path, t, cfg, channels, labels, "cpu") for t in tasks]
    model, weights = _model(cfg.mode, gens, class_ids)
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": cfg.mode,
        "conditional": conditional,
        "architecture": "distcgan DC-GAN generator (distcgan/train/models.py Generator)",
        "resolution": cfg.resolution,
        "channels": channels,
        "z_dim": cfg.z_dim,
        "num_classes": len(names),
        "class_ids": class_ids,
        "class_names": [names[k] for k in class_ids],
        "data_class_names": names,  # every class of the data file, trained or not
        "inputs": ["z", "y"] if cfg.mode != "gan" else ["z"],  # z float32 (N, z_dim), y int64 (N,)
        "output": "uint8 (N, C, H, W): round((G(z, y) + 1) * 127.5), as distcgan sample writes",
        "weights": "G's moving average" if cfg.ema_decay > 0 else "G",
        "run": {"path": str(rd.path), "config": cfg.to_dict(), "commit": _commit(rd)},
        "seed": cfg.seed,
    }
    with _staging(out) as tmp:
        text = (json.dumps(config, indent=1) + "\n").encode()
        meta = {"format": FORMAT, **sums(text, weights)}  # a flipped byte is noticed on load
        save_file(weights, str(tmp / "model.safetensors"), metadata=meta)
        (tmp / "config.json").write_bytes(text)
        program = _export(model, cfg.z_dim, class_ids, conditional)
        torch.export.save(program, str(tmp / "generator.pt2"))
        (tmp / "README.md").write_text(model_card(rd, config))
        for f in FILES:  # safetensors writes 0600; the export is as shareable as the run
            (tmp / f).chmod(0o666 & ~_umask())
    size = sum((out / f).stat().st_size for f in FILES)
    log(
        f"wrote {out}: {len(class_ids)} classes ({cfg.mode}), {size / 1e6:.1f} MB, "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return out


def _model(
    mode: str, gens: list[Generator], class_ids: list[int]
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The exported module and its weights as model.safetensors holds them."""
    if mode == "per-class":
        states = [g.state_dict() for g in gens]
        model = ClassConditional(gens[0], class_ids, states)
        weights = {
            name: torch.stack([s[name] for s in states]).contiguous()
            for name in states[0]
            if not name.endswith("num_batches_tracked")
        }
        return model.eval(), weights
    G = gens[0]
    weights = {k: v.contiguous() for k, v in G.state_dict().items()}
    return (LabelledG(G) if mode == "cgan" else UnlabelledG(G)), weights


def _export(
    model: nn.Module, z_dim: int, class_ids: list[int], conditional: bool
) -> torch.export.ExportedProgram:
    """`model` as a torch.export program with a dynamic batch size."""
    n = torch.export.Dim("N", min=1, max=1 << 20)
    z = torch.zeros(2, z_dim)
    if not conditional:
        return torch.export.export(model, (z,), dynamic_shapes={"z": {0: n}})
    y = torch.tensor([class_ids[0], class_ids[-1]])
    return torch.export.export(model, (z, y), dynamic_shapes={"z": {0: n}, "y": {0: n}})


def _commit(rd: RunDir) -> str | None:
    return rd.read_env().get("git_commit") if rd.has_env() else None


def _check_out(out: Path, overwrite: bool) -> None:
    refuse_existing(out, "--out", overwrite)
    if not out.exists():
        return
    if not _is_export(out):
        raise UserError(
            f"{out} exists but is not a distcgan export (no config.json of {FORMAT}): refusing "
            "to replace it with --overwrite; choose another --out"
        )


def _is_export(path: Path) -> bool:
    try:
        return json.loads((path / "config.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A temporary folder beside `out`, renamed to `out` when the block ends without an error
    (an export already there is moved aside first, then removed); removed on an error."""
    with storage_errors(out.parent):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would outlive the rename
    try:
        with storage_errors(tmp):
            yield tmp
            sync_folder(tmp)  # on disk before the rename makes it the export
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with storage_errors(out):
        old = out.with_name(f".{out.name}.old")
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
        tmp.rename(out)
        fsync_dir(out.parent)  # the renames
        shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
