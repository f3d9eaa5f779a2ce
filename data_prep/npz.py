"""Downsampled ImageNet (Chrabaszcz et al. 2017: ImageNet 8/16/32/64 px) from its .npz batches.

Files in --src: `train_data_batch_1.npz`..`train_data_batch_10.npz` (train) or `val_data.npz`
(test). Each holds `data`, uint8 (n, 3 S^2), per row the S x S red values, then green, then blue;
`labels`, 1-based (1..1000, in the order of the devkit's `map_clsloc.txt`, not sorted WordNet
ids); and, in train batches, `mean` (unused). S comes from the row length. Class k (0-based) is
label k + 1, named "label1".."label1000" (not "1": --classes would mistake it for an id) unless
`map_clsloc.txt` (lines `n02119789 1 kit_fox`) is in --src, then "n02119789 kit_fox". Checked:
the batches are numbered 1..n without gaps, dtype and shape of both arrays, labels 1..K with no
class missing (K = the largest label), rows = labels per file.

Memory: `labels` are read whole (8 bytes a row); `data` is streamed out of the zip member in
chunks (the .npy header, then rows; zipfile inflates as it goes), so even one batch file (1.5 GB
at 64 px) is never held whole. Leaves out: the older pickled (non-npz) batches.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from data_prep.rows import RowSource
from distcgan.errors import UserError

_CHUNK_BYTES = 8 << 20
_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, KeyError)


def _batches(src: Path, split: str) -> list[Path]:
    if not src.is_dir():
        raise UserError(f"--src {src} is not a folder: give the folder of the .npz batches")
    if split == "test":
        path = src / "val_data.npz"
        if not path.is_file():
            raise UserError(f"no val_data.npz in {src}: the test split of downsampled ImageNet")
        return [path]
    found = {}
    for path in src.glob("train_data_batch_*.npz"):
        m = re.fullmatch(r"train_data_batch_(\d+)\.npz", path.name)
        if m:
            found[int(m.group(1))] = path
    if not found:
        raise UserError(
            f"no train_data_batch_N.npz in {src}: expected the downsampled ImageNet npz batches "
            "(train_data_batch_1.npz .. train_data_batch_10.npz)"
        )
    missing = [i for i in range(1, max(found) + 1) if i not in found]
    if missing:
        raise UserError(
            f"{src} has train_data_batch_{max(found)}.npz but not train_data_batch_{missing[0]}"
            ".npz: the download is incomplete"
        )
    return [found[i] for i in sorted(found)]


def _open_data(path: Path) -> tuple[zipfile.ZipFile, IO[bytes], tuple[int, ...]]:
    """Open the `data` member of an npz and read its .npy header; the stream is at row 0."""
    zf = zipfile.ZipFile(path)
    try:
        fh = zf.open("data.npy")
        version = np.lib.format.read_magic(fh)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(fh)
    except BaseException:
        zf.close()
        raise
    if dtype != np.uint8 or len(shape) != 2 or fortran:
        zf.close()
        raise UserError(
            f"{path}: data must be a C-order uint8 (n, 3*S*S) array, got {dtype} {shape}"
            f"{' (Fortran order)' if fortran else ''}"
        )
    return zf, fh, shape


def _side(cols: int, path: Path) -> int:
    side = int(round((cols / 3) ** 0.5))
    if 3 * side * side != cols:
        raise UserError(f"{path}: rows of {cols} values are not 3 x S x S images")
    return side


def _labels(path: Path) -> np.ndarray:
    with np.load(path, allow_pickle=False) as z:
        if "labels" not in z.files or "data" not in z.files:
            raise UserError(
                f"{path} has no 'data' or 'labels': is it a downsampled ImageNet batch?"
            )
        labels = z["labels"]
    if labels.ndim != 1 or (labels.size and labels.dtype.kind not in "iu"):
        raise UserError(f"{path}: labels must be integers (n,), got {labels.dtype} {labels.shape}")
    if labels.size and labels.min() < 1:
        raise UserError(
            f"{path}: label {labels.min()} found; downsampled ImageNet labels are 1-based (1..1000)"
        )
    return labels.astype(np.int64) - 1


def _chunks(path: Path, first: int, side: int) -> Iterator[tuple[int, np.ndarray]]:
    zf, fh, (n, cols) = _open_data(path)
    with zf, fh:
        rows = max(1, _CHUNK_BYTES // cols)
        done = 0
        while done < n:
            take = min(rows, n - done)
            buf = fh.read(take * cols)
            if len(buf) != take * cols:
                raise UserError(f"{path}: data ends after {done + len(buf) // cols} of {n} rows")
            planes = np.frombuffer(buf, np.uint8).reshape(take, 3, side, side)
            yield first + done, np.ascontiguousarray(planes.transpose(0, 2, 3, 1))
            done += take


def _class_names(src: Path, k: int) -> tuple[str, ...]:
    path = src / "map_clsloc.txt"
    if not path.is_file():
        return tuple(f"label{i + 1}" for i in range(k))
    names: dict[int, str] = {}
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) in names:
            raise UserError(
                f"{path}:{line_no}: expected 'WNID LABEL NAME' with a new label, got {line!r}"
            )
        names[int(parts[1])] = f"{parts[0]} {parts[2]}"
    missing = [i for i in range(1, k + 1) if i not in names]
    if missing:
        raise UserError(f"{path} has no line for label {missing[0]}: is it the devkit's file?")
    return tuple(names[i] for i in range(1, k + 1))


def open_npz(src: Path, split: str) -> RowSource:
    """Downsampled ImageNet batches in `src` as rows (labels read; pixels streamed per pass)."""
    paths = _batches(src, split)
    labels, firsts, side, start = [], [], None, 0
    for path in paths:
        try:
            lab = _labels(path)
            zf, fh, (n, cols) = _open_data(path)
            zf.close()
        except _ERRORS as exc:
            raise UserError(
                f"cannot read {path} as an npz file ({exc}); download it again"
            ) from exc
        s = _side(cols, path)
        if side is not None and s != side:
            raise UserError(f"{path} holds {s} px images but {paths[0]} {side} px")
        if n != lab.size:
            raise UserError(f"{path}: {n} rows of data but {lab.size} labels")
        side = s
        labels.append(lab)
        firsts.append(start)
        start += n
    assert side is not None  # _batches found at least one file
    all_labels = np.concatenate(labels)
    k = int(all_labels.max()) + 1 if all_labels.size else 0
    present = np.bincount(all_labels, minlength=k) > 0
    if not present.all():
        raise UserError(
            f"{src}: no images of label {int(np.flatnonzero(~present)[0]) + 1} (labels run to {k}):"
            " the download is incomplete"
        )

    def read() -> Iterator[tuple[int, np.ndarray]]:
        for path, first in zip(paths, firsts):
            try:
                yield from _chunks(path, first, side)
            except _ERRORS as exc:
                raise UserError(f"cannot read {path} ({exc}); download it again") from exc

    return RowSource(
        names=_class_names(src, k),
        labels=all_labels,
        size=int(side),
        channels=3,
        read=read,
        where=str(src),
        source=f"imagenet{side}-npz:{split}",
    )
