"""python -m data_prep SOURCE --out FILE.h5 [options]: write a class-partitioned HDF5 data file."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from distcgan.data import read_info, write_dataset
from distcgan.errors import UserError

SOURCES = {"digits": "scikit-learn's 8x8 handwritten digits (embedded, no download)"}


def _select(images, labels, names, classes, max_per_class):
    """Keep the chosen classes (renumbered 0..K-1 in the given order) and cap images per class."""
    if classes:
        bad = [c for c in classes if not 0 <= c < len(names)]
        if bad:
            raise UserError(
                f"--classes {bad[0]} is out of range: the source has classes 0..{len(names) - 1}"
            )
    keep = list(classes) if classes else list(range(len(names)))
    parts_i, parts_l = [], []
    for new, old in enumerate(keep):
        idx = np.flatnonzero(labels == old)
        if max_per_class:
            idx = idx[:max_per_class]
        parts_i.append(images[idx])
        parts_l.append(np.full(idx.size, new, dtype=np.int64))
    return np.concatenate(parts_i), np.concatenate(parts_l), [names[k] for k in keep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep",
        description="Convert a dataset into distcgan's class-partitioned HDF5 layout.",
        epilog="sources: " + "; ".join(f"{k}: {v}" for k, v in SOURCES.items()),
    )
    parser.add_argument("source", choices=sorted(SOURCES), help="dataset to convert")
    parser.add_argument("--out", required=True, help="output HDF5 file")
    parser.add_argument("--resolution", type=int, default=16, help="output side in px (16, 32, 64)")
    parser.add_argument("--rgb", action="store_true", help="replicate grayscale to 3 channels")
    parser.add_argument("--classes", type=int, nargs="+", default=None, help="keep only these")
    parser.add_argument("--max-per-class", type=int, default=0, help="cap images per class")
    args = parser.parse_args(argv)
    try:
        if args.resolution not in (16, 32, 64):
            raise UserError(f"--resolution {args.resolution} is not supported: use 16, 32 or 64")
        from data_prep.digits import load_digits_images

        images, labels, names = load_digits_images(args.resolution)
        images, labels, names = _select(images, labels, names, args.classes, args.max_per_class)
        if args.rgb:
            images = np.repeat(images, 3, axis=3)
        write_dataset(args.out, images, labels, names, source=f"sklearn-digits@{args.resolution}px")
        info = read_info(args.out)
    except UserError as exc:
        print(f"data_prep: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out}: {sum(info.counts)} images, {info.num_classes} classes "
        f"({min(info.counts)}..{max(info.counts)} per class), {info.resolution} px, "
        f"{info.channels} channel(s), {info.size_bytes / 1e6:.1f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
