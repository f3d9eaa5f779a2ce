"""MNIST and Fashion-MNIST from their IDX files, gzipped or not.

Files looked for in --src (or --src/raw, torchvision's layout): `train-images-idx3-ubyte` and
`train-labels-idx1-ubyte` (test split: the `t10k-` pair), each as is, with `.gz`, or with the dot
some unpackers leave (`train-images.idx3-ubyte`). An IDX file is a big-endian header (two zero
bytes, a type byte 0x08 = unsigned byte, the number of dimensions, then each size as a 32-bit
integer) followed by the values; images are magic 0x00000803 (N, rows, cols), labels 0x00000801
(N,). Checked: magic numbers, square images, N equal in both files, labels 0..9, the exact file
size (for .gz: the exact decompressed length, found while reading). The labels are read whole
(N bytes); the images are streamed in chunks (`rows.py`). Leaves out: the EMNIST variants.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data_prep.rows import RowSource
from distcgan.errors import UserError

FASHION_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
_IMAGES, _LABELS = 0x00000803, 0x00000801
_CHUNK_ROWS = 8192


def _find(src: Path, prefix: str, kind: str) -> Path:
    stems = [f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"]
    stems.append(stems[0].replace(f"-{kind}-", f"-{kind}."))
    for folder in (src, src / "raw"):
        for stem in stems:
            for name in (stem, stem + ".gz"):
                if (folder / name).is_file():
                    return folder / name
    raise UserError(
        f"no {prefix}-{kind} IDX file in {src}: expected {stems[0]} or {stems[0]}.gz (as "
        "downloaded from the dataset's site); point --src at the folder that holds them"
    )


def _open(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _header(fh: io.BufferedIOBase, path: Path, magic: int) -> tuple[int, ...]:
    head = fh.read(4)
    if len(head) < 4 or head[:3] != bytes([0, 0, 8]) or head[3] != (magic & 0xFF):
        raise UserError(
            f"{path} is not an IDX file of unsigned bytes with {magic & 0xFF} dimension(s): magic "
            f"number {head.hex() or 'missing'}, expected {magic:08x}; is it the right file?"
        )
    dims = fh.read(4 * head[3])
    if len(dims) < 4 * head[3]:
        raise UserError(f"{path} is truncated inside its header")
    return struct.unpack(f">{head[3]}I", dims)


def _read_errors(path: Path) -> tuple[type[BaseException], ...]:
    return (OSError, EOFError, zlib.error) if path.suffix == ".gz" else (OSError,)


def _check_size(path: Path, dims: tuple[int, ...]) -> None:
    if path.suffix == ".gz":
        return  # known only once decompressed: checked while reading
    expected = 4 + 4 * len(dims) + int(np.prod(dims))
    actual = path.stat().st_size
    if actual != expected:
        raise UserError(
            f"{path} has {actual} bytes but its header {dims} needs {expected}: the file is "
            "truncated or damaged; download it again"
        )


def _labels(path: Path) -> np.ndarray:
    try:
        with _open(path) as fh:
            (n,) = _header(fh, path, _LABELS)
            _check_size(path, (n,))
            labels = np.frombuffer(fh.read(n), np.uint8)
            trailing = fh.read(1)
    except _read_errors(path) as exc:
        raise UserError(f"cannot read {path}: {exc}; download it again") from exc
    if labels.size != n or trailing:
        raise UserError(
            f"{path}: header promises {n} labels, the data holds "
            f"{'more' if trailing else labels.size}; download it again"
        )
    if labels.size and labels.max() > 9:
        raise UserError(f"{path}: label {labels.max()} is outside 0..9; is it an MNIST file?")
    return labels.astype(np.int64)


def _image_chunks(path: Path, n: int, side: int) -> Iterator[tuple[int, np.ndarray]]:
    row = side * side
    try:
        with _open(path) as fh:
            _header(fh, path, _IMAGES)
            done = 0
            while done < n:
                take = min(_CHUNK_ROWS, n - done)
                buf = fh.read(take * row)
                if len(buf) != take * row:
                    raise UserError(
                        f"{path} is truncated: its header promises {n} images, the data ends "
                        f"after {done + len(buf) // row}; download it again"
                    )
                yield done, np.frombuffer(buf, np.uint8).reshape(take, side, side, 1)
                done += take
            if fh.read(1):
                raise UserError(f"{path} has data after its {n} images; download it again")
    except _read_errors(path) as exc:
        raise UserError(f"cannot read {path}: {exc}; download it again") from exc


def open_idx(src: Path, split: str, fashion: bool) -> RowSource:
    """The MNIST or Fashion-MNIST split in `src` as rows (labels read, images streamed)."""
    prefix = "train" if split == "train" else "t10k"
    images_path, labels_path = _find(src, prefix, "images"), _find(src, prefix, "labels")
    labels = _labels(labels_path)
    try:
        with _open(images_path) as fh:
            dims = _header(fh, images_path, _IMAGES)
    except _read_errors(images_path) as exc:
        raise UserError(f"cannot read {images_path}: {exc}; download it again") from exc
    n, rows, cols = dims
    if rows != cols or rows == 0:
        raise UserError(f"{images_path}: images are {rows}x{cols}; expected square images")
    if n != labels.size:
        raise UserError(
            f"{images_path} holds {n} images but {labels_path} {labels.size} labels: the two "
            "files are not a pair"
        )
    _check_size(images_path, dims)
    name = "fashion-mnist" if fashion else "mnist"
    return RowSource(
        names=FASHION_NAMES if fashion else tuple(str(k) for k in range(10)),
        labels=labels,
        size=rows,
        channels=1,
        read=lambda: _image_chunks(images_path, n, rows),
        where=f"{images_path.parent}/{prefix}-*",
        source=f"{name}:{split}",
    )
