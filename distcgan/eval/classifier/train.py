"""`distcgan classifier train`: the small CNN (eval/classifier/__init__.py) trained on the real
data, exported as TorchScript.

The usual scoring network for MNIST-like data, where ImageNet's Inception knows no digits. The
classes of each class are split, by a seeded permutation, into a training part and a held-out
part (`held_out`, 10% by default, at least one image of every class with two or more); the
network trains on the first and its accuracy on the second is reported and stored in the file.
`distcgan.json` inside the file records the class names, resolution, channels and held-out
accuracy, so `distcgan evaluate` refuses samples that do not match. Runs on one process and
holds the data file in memory (on the device). Leaves out: the network (__init__.py), loading the
file and scoring samples with it (eval/metrics/networks.py, eval/evaluate.py).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distcgan.data import load_class, read_info
from distcgan.env import provenance
from distcgan.errors import UserError
from distcgan.eval.classifier import SmallCNN
from distcgan.eval.metrics.networks import METADATA, sha256_file
from distcgan.images import to_float
from distcgan.mpi.context import format_table
from distcgan.options import ClassifierOptions
from distcgan.plan import one_device
from distcgan.progress import bar as progress_bar
from distcgan.run.atomic import atomic_path, check_out_file


def held_out_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out rows): per class, a seeded random `fraction` (rounded, at least
    one row when the class has two or more and fraction > 0) is held out."""
    rng = np.random.default_rng(seed)
    train, held = [], []
    for k in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == k))
        n_held = int(round(fraction * len(rows)))
        if fraction > 0 and len(rows) >= 2:
            n_held = min(max(n_held, 1), len(rows) - 1)
        held.append(rows[:n_held])
        train.append(rows[n_held:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def _shift(x: torch.Tensor, max_shift: int, gen: torch.Generator) -> torch.Tensor:
    """Translate each image by up to `max_shift` px in each direction (edge pixels repeated)."""
    if max_shift == 0:
        return x
    n, _, h, w = x.shape
    padded = F.pad(x, (max_shift,) * 4, mode="replicate")
    dy, dx = (torch.randint(0, 2 * max_shift + 1, (n,), generator=gen) for _ in range(2))
    rows = (dy[:, None] + torch.arange(h))[:, :, None].to(x.device)  # (N, H, 1)
    cols = (dx[:, None] + torch.arange(w))[:, None, :].to(x.device)  # (N, 1, W)
    out = padded.permute(0, 2, 3, 1)[torch.arange(n, device=x.device)[:, None, None], rows, cols]
    return out.permute(0, 3, 1, 2)  # (N, C, H, W)


@torch.no_grad()
def _predict(model: nn.Module, x: torch.Tensor, batch: int = 512) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x[i : i + batch]).argmax(1) for i in range(0, len(x), batch)])


def train_classifier(opts: ClassifierOptions, log: Any = print) -> dict[str, Any]:
    """Train, report and export the classifier; returns what `distcgan.json` records."""
    epochs, batch_size, held_out, seed = opts.epochs, opts.batch_size, opts.held_out, opts.seed
    out = Path(opts.out)
    if epochs < 1 or batch_size < 1:
        raise UserError(f"--epochs and --batch-size must be >= 1, got {epochs} and {batch_size}")
    if not 0 <= held_out < 1:
        raise UserError(f"--held-out must be a fraction in [0, 1), got {held_out}")
    if out.suffix != ".pt":
        raise UserError(f"--out {out} must end in .pt (a TorchScript file)")
    check_out_file(out, "--out", "classifier.pt", overwrite=opts.overwrite)
    info = read_info(opts.data)
    if info.resolution % 4:
        raise UserError(f"the classifier needs a resolution divisible by 4, got {info.resolution}")
    device = one_device(opts.devices, torch.cuda.device_count())
    classes = [k for k, n in enumerate(info.counts) if n > 0]
    images = np.concatenate([load_class(opts.data, k) for k in classes])
    labels = np.concatenate([np.full(info.counts[k], k) for k in classes])
    train_rows, held_rows = held_out_split(labels, held_out, seed)
    torch.manual_seed(seed)
    x = to_float(images, device)  # the whole data set on the device, read once
    y = torch.from_numpy(labels).to(device)
    model = SmallCNN(info.channels, info.num_classes).to(device)
    log(
        f"training a {info.num_classes}-class CNN on {len(train_rows)} images of {opts.data} "
        f"({len(held_rows)} held out), {epochs} epochs on {device}"
    )
    t0 = time.perf_counter()
    _fit(model, (x, y), torch.from_numpy(train_rows), opts, log)
    train_s = time.perf_counter() - t0
    accuracy, per_class = _held_out_accuracy(model, (x, y), held_rows, labels)
    meta = {
        "kind": "distcgan-classifier",
        "class_names": list(info.class_names),
        "resolution": info.resolution,
        "channels": info.channels,
        "data": str(opts.data),
        "data_sha256": sha256_file(opts.data),
        "train_images": int(len(train_rows)),
        "held_out_images": int(len(held_rows)),
        "held_out_accuracy": accuracy,
        "held_out_per_class": per_class,
        "epochs": epochs,
        "seed": seed,
        "train_s": round(train_s, 3),
        "provenance": provenance("classifier train", opts),
    }
    with warnings.catch_warnings():
        # TorchScript is deprecated in favour of torch.export, but it is still the one format
        # that any PyTorch loads without the defining code; the issue asks for it.
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.script(model.cpu().eval())
        with atomic_path(out) as tmp:
            torch.jit.save(scripted, str(tmp), _extra_files={METADATA: json.dumps(meta)})
    return meta


def _fit(
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    train_idx: torch.Tensor,
    opts: ClassifierOptions,
    log: Any,
) -> None:
    """Adam with a cosine schedule over `opts.epochs` passes of the training rows, each batch
    shifted by a few pixels; the batch order from the seed."""
    x, y = data
    resolution, batch_size, epochs = x.shape[-1], opts.batch_size, opts.epochs
    gen = torch.Generator().manual_seed(opts.seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    bar = progress_bar(epochs * len(train_idx), "classifier", "img", opts.progress)
    for epoch in range(epochs):
        model.train()
        order = train_idx[torch.randperm(len(train_idx), generator=gen)].to(x.device)
        total = 0.0
        for i in range(0, len(order), batch_size):
            rows = order[i : i + batch_size]
            # small translations: generated images are not centred as exactly as real digits
            xb = _shift(x[rows], max(1, resolution // 8), gen)
            loss = F.cross_entropy(model(xb), y[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(rows)
            bar.update(len(rows))
        sched.step()
        log(f"epoch {epoch + 1}/{epochs}: loss {total / len(order):.4f}")
    bar.close()


def _held_out_accuracy(
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    held_rows: np.ndarray,
    labels: np.ndarray,
) -> tuple[float | None, dict[str, float]]:
    """The accuracy on the held-out rows, overall (None without any) and per class."""
    x, y = data
    per_class: dict[str, float] = {}
    if not len(held_rows):
        return None, per_class
    held = torch.from_numpy(held_rows).to(x.device)
    correct = (_predict(model, x[held]) == y[held]).cpu().numpy()
    for k in np.unique(labels):
        mask = labels[held_rows] == k
        if mask.any():
            per_class[str(int(k))] = float(correct[mask].mean())
    return float(correct.mean()), per_class


def results_text(meta: dict[str, Any], out: str) -> str:
    """What `classifier train` prints when done: each class's held-out accuracy, the whole's,
    and how to use the network."""
    rows = [
        {"class_id": k, "name": meta["class_names"][int(k)], "held_out_accuracy": f"{a:.3f}"}
        for k, a in meta["held_out_per_class"].items()
    ]
    lines = [format_table(rows, ["class_id", "name", "held_out_accuracy"])] if rows else []
    acc = meta["held_out_accuracy"]
    lines.append(
        f"held-out accuracy {acc:.4f} on {meta['held_out_images']} images"
        if acc is not None
        else "no held-out images (--held-out 0)"
    )
    lines.append(f"wrote {out} (TorchScript; use it with distcgan evaluate --network {out})")
    return "\n".join(lines)
