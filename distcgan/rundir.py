"""The run directory: creating it safely, and the JSON files every run writes.

RUN/
  config.json       resolved TrainConfig (+ format_version)
  dataset.json      what the data file held (class names, counts, resolution, channels, source)
  env.json          this launch's environment (see env.py); launches.jsonl keeps every launch
  class_XXX/        checkpoint.pt (+ checkpoint.prev.pt), metrics.jsonl, samples_*.png, result.json
  summary.json      per class: rank, host, steps, train_s, imgs_per_s; written at the end
A run directory is never overwritten without --overwrite, and --overwrite deletes only a folder
that holds a distcgan config.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from distcgan.atomic import atomic_write_json
from distcgan.config import TrainConfig
from distcgan.errors import UserError

FORMAT_VERSION = 1


def class_dir(run: Path, class_id: int) -> Path:
    return run / f"class_{class_id:03d}"


def prepare(run: Path, resume: bool, overwrite: bool) -> None:
    """Check and create `run` for a new or resumed run (called on rank 0 only)."""
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other: pass one of them")
    exists = run.exists() and (not run.is_dir() or any(run.iterdir()))
    if resume:
        if not (run / "config.json").is_file():
            raise UserError(
                f"nothing to resume: {run} has no config.json (start it without --resume)"
            )
        return
    if exists:
        if not overwrite:
            raise UserError(
                f"run directory {run} already exists: pass --resume to continue it, --overwrite "
                "to replace it, or choose another --run"
            )
        if not (run / "config.json").is_file():
            raise UserError(
                f"{run} exists but is not a distcgan run directory (no config.json): refusing to "
                "delete it with --overwrite; choose another --run"
            )
        shutil.rmtree(run)
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create run directory {run}: {exc.strerror}") from exc


def read_json(path: Path, what: str) -> dict[str, Any]:
    """Read one of the run directory's JSON files, checking its format version."""
    if not path.is_file():
        raise UserError(f"{path} is missing: is {path.parent} a distcgan run directory?")
    try:
        obj = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is damaged ({exc}); restore it or start a new run") from exc
    version = obj.get("format_version")
    if version != FORMAT_VERSION:
        raise UserError(
            f"{path} has format_version {version}, but this distcgan reads {FORMAT_VERSION}: "
            f"the {what} was written by an incompatible version; use that version or start a "
            "new run"
        )
    return obj


def write_json(path: Path, obj: dict[str, Any]) -> None:
    atomic_write_json(path, {"format_version": FORMAT_VERSION, **obj})


def read_config(run: Path) -> TrainConfig:
    from distcgan.config import apply_overrides

    obj = read_json(run / "config.json", "run")
    obj.pop("format_version")
    return apply_overrides(TrainConfig(), obj, where=str(run / "config.json"))
