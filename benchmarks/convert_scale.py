"""Conversion memory and speed on synthetic sources larger than one class (or one batch file).

    python benchmarks/convert_scale.py folder --work /tmp/prep --classes 16 48 --per-class 100 \\
        --ranks 1 2
    python benchmarks/convert_scale.py npz --work /tmp/prep --classes 100 --per-class 1000 \\
        --batches 4 --memory-mb 1024 128

`folder`: an ImageNet-like training folder (wnid sub-folders of 500x375 JPEGs, about the
ILSVRC2012 average; smooth pictures with noise, quality 90), converted at 64 px by
`python -m data_prep imagenet` on each `--ranks` (mpiexec). `npz`: downsampled-ImageNet 64 px
batches (`--batches` files, classes interleaved as in the real ones), converted with each
`--memory-mb`. Sources are made once under --work and reused. For each run it prints the
images, the seconds, images/s and the peak RSS (largest rank), from data_prep's own summary
line; the point is that peak RSS follows one class (folder) or the budget (npz), not the
dataset. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"wrote .*: (\d+) images, .*; ([\d.]+) s, (\d+) images/s, peak RSS (\d+) MB")


def make_folder(root: Path, classes: int, per_class: int) -> Path:
    rng = np.random.default_rng(0)
    for k in range(classes):
        folder = root / f"n{k:08d}"
        if folder.is_dir() and len(list(folder.iterdir())) == per_class:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            img = np.asarray(Image.fromarray(small).resize((500, 375), Image.Resampling.BICUBIC))
            noisy = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
            Image.fromarray(noisy).save(folder / f"n{k:08d}_{i}.JPEG", quality=90)
    return root


def make_npz(root: Path, classes: int, per_class: int, batches: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.repeat(np.arange(1, classes + 1), per_class))
    for b, part in enumerate(np.array_split(labels, batches), 1):
        path = root / f"train_data_batch_{b}.npz"
        if path.is_file():
            continue
        data = rng.integers(0, 256, (part.size, 3 * 64 * 64), dtype=np.uint8)
        np.savez(path, data=data, labels=part.tolist(), mean=data.mean(axis=0))
    return root


def du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def convert(args: list[str], ranks: int) -> str:
    cmd = [sys.executable, "-m", "data_prep", *args]
    if ranks > 1:
        mpiexec = str(Path(sys.executable).parent / "mpiexec")
        cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", *cmd[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if result.returncode != 0:
        raise SystemExit(result.stderr)
    return result.stdout


def report(label: str, stdout: str, source_mb: float) -> None:
    m = SUMMARY.search(stdout)
    assert m, stdout
    n, s, ips, rss = m.groups()
    print(
        f"{label}: source {source_mb:.0f} MB, {n} images in {s} s = {ips} images/s, "
        f"peak RSS {rss} MB",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=("folder", "npz"))
    p.add_argument("--work", default="/tmp/distcgan_prep_bench")
    p.add_argument("--classes", type=int, nargs="+", default=[16])
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--ranks", type=int, nargs="+", default=[1])
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--memory-mb", type=int, nargs="+", default=[1024])
    args = p.parse_args()
    work = Path(args.work)
    for classes in args.classes:
        if args.kind == "folder":
            src = make_folder(work / f"train{classes}x{args.per_class}", classes, args.per_class)
            for ranks in args.ranks:
                out = work / f"in64_{classes}_{ranks}.h5"
                stdout = convert(
                    ["imagenet", "--src", str(src), "--out", str(out), "--overwrite"], ranks
                )
                report(f"imagenet folder, {classes} classes, {ranks} rank(s)", stdout, du_mb(src))
        else:
            src = make_npz(
                work / f"npz{classes}x{args.per_class}", classes, args.per_class, args.batches
            )
            for budget in args.memory_mb:
                out = work / f"npz64_{classes}.h5"
                cmd = ["imagenet-npz", "--src", str(src), "--out", str(out), "--overwrite"]
                stdout = convert([*cmd, "--memory-mb", str(budget)], 1)
                passes = re.search(r"(\d+) passes", stdout)
                n_passes = passes[1] if passes else 1
                report(
                    f"npz, {classes} classes, --memory-mb {budget}, {n_passes} pass(es)",
                    stdout,
                    du_mb(src),
                )


if __name__ == "__main__":
    main()
