"""Loading an export (writer.py) back as a module: `distcgan.load_generator(DIR)`.

The module is built from model.safetensors and config.json (not from generator.pt2, which torch
loads alone), so it moves to any device and can be fine-tuned or inspected: G(z, y) gives uint8
images (N, C, H, W) as the exported program does, `G.synthesize(z, y)` the floats in [-1, 1];
a gan export takes z alone. `G.config` is the export's config.json.
Leaves out: writing an export (writer.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn

from distcgan.errors import UserError
from distcgan.export.checksum import CONFIG_KEY, FORMAT, FORMAT_VERSION, WEIGHTS_KEY, weights_sha256
from distcgan.export.model import ClassConditional, LabelledG, UnlabelledG
from distcgan.train.models import Generator


def read_config(path: str | Path) -> dict[str, Any]:
    """An export's config.json, checked to be one this distcgan reads."""
    file = Path(path) / "config.json"
    if Path(path).is_file():
        raise UserError(f"{path} is a file, not a distcgan export (a folder): make one with "
                        "distcgan export --run RUN --out DIR")  # fmt: skip
    try:
        text = file.read_bytes()
        config = json.loads(text)
    except FileNotFoundError:
        raise UserError(f"{path} is not a distcgan export (no config.json): make one with "
                        "distcgan export --run RUN --out DIR") from None  # fmt: skip
    except (ValueError, OSError) as exc:
        raise UserError(f"{file} is damaged ({exc}): export the run again") from exc
    if "format" not in config and "preset" in config:  # a run's config.json (rundir.py)
        raise UserError(
            f"{path} is a run directory, not an export: export it first with python -m "
            f"distcgan export --run {path} --out DIR, then give DIR"
        )
    if config.get("format") != FORMAT or config.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{file} is not a {FORMAT} version {FORMAT_VERSION} (format "
            f"{config.get('format')!r}, version {config.get('format_version')!r}): export the run "
            "again with this distcgan"
        )
    stored = _metadata(Path(path)).get(CONFIG_KEY)
    if stored is not None and stored != hashlib.sha256(text).hexdigest():
        raise UserError(
            f"{file} is damaged (its checksum differs from the one in model.safetensors): "
            "export the run again"
        )
    return config


def _metadata(path: Path) -> dict[str, str]:
    """model.safetensors' metadata (its header, read alone), checked to parse."""
    file = path / "model.safetensors"
    try:
        with safe_open(str(file), "pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{file} is damaged or missing ({exc}): export the run again") from exc


def _weights(path: Path) -> dict[str, torch.Tensor]:
    """model.safetensors' tensors, checked against the checksum in its metadata."""
    file = path / "model.safetensors"
    try:
        weights = load_file(str(file))
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{file} is damaged or missing ({exc}): export the run again") from exc
    stored = _metadata(path).get(WEIGHTS_KEY)
    if stored is not None and stored != weights_sha256(weights):
        raise UserError(f"{file} is damaged (its weights' checksum differs): export the run again")
    return weights


def load_generator(path: str | Path, device: str | torch.device = "cpu") -> nn.Module:
    """The export in folder `path` as a module G(z, y) (gan: G(z)) on `device`, in eval mode."""
    config = read_config(path)
    weights = _weights(Path(path))
    labels = config["num_classes"] if config["kind"] == "cgan" else 0
    arch = Generator(config["z_dim"], config["channels"], config["resolution"], labels)
    G: nn.Module
    try:  # an export without checksums (older) may still not match its config
        if config["kind"] == "per-class":
            ids = config["class_ids"]
            states = [{name: w[i] for name, w in weights.items()} for i in range(len(ids))]
            G = ClassConditional(arch, ids, states)
        else:
            arch.load_state_dict(weights)
            G = LabelledG(arch) if config["kind"] == "cgan" else UnlabelledG(arch)
    except (KeyError, IndexError, RuntimeError) as exc:
        raise UserError(
            f"{path}/model.safetensors does not hold the weights config.json describes "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}): export the run again"
        ) from exc
    G.config = config  # type: ignore[assignment]  # nn.Module.__setattr__ takes any value
    return G.to(device).eval()
