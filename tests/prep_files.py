"""Tiny files in each real on-disk format, written the way the datasets ship them (for the
data_prep tests): IDX bytes with their magic numbers, CIFAR pickles (bytes keys, planar rows)
in a folder or a .tar.gz, downsampled-ImageNet npz batches, and folders of JPEG/PNG images in
the modes real ImageNet has (RGB, grayscale, CMYK, a PNG named .JPEG)."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file: 0, 0, 0x08 (unsigned byte), ndim, then the sizes (big-endian) and the data."""
    head = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray, gz: bool):
    folder.mkdir(parents=True, exist_ok=True)
    for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
        data = idx_bytes(arr)
        name = f"{prefix}-{kind}-ubyte"
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)


def cifar_rows(images: np.ndarray) -> np.ndarray:
    """(n, 32, 32, 3) -> CIFAR's rows: 1024 red, 1024 green, 1024 blue values."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(images.shape[0], 3072))


def _pickle(obj: dict) -> bytes:
    # The real files are Python 2 pickles: byte-string keys, protocol 2.
    return pickle.dumps({k.encode(): v for k, v in obj.items()}, protocol=2)


def write_cifar(
    root: Path, files: dict[str, dict], folder: str, archive: str | None, order=None
) -> Path:
    """Write `files` (name -> dict with str keys) as `root/folder/NAME`, or, with `archive`,
    as `root/archive` (a .tar.gz of `folder/NAME`, members in `order`). Returns --src."""
    blobs = {name: _pickle(obj) for name, obj in files.items()}
    if archive is None:
        (root / folder).mkdir(parents=True)
        for name, blob in blobs.items():
            (root / folder / name).write_bytes(blob)
        return root / folder
    path = root / archive
    with tarfile.open(path, "w:gz") as tar:
        for name in order or blobs:
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(blobs[name])
            tar.addfile(info, io.BytesIO(blobs[name]))
    return path


def write_npz(path: Path, images: np.ndarray, labels_1based, compressed: bool = False):
    """A downsampled-ImageNet batch: data (n, 3 S^2) planar RGB, labels 1-based, mean."""
    s = images.shape[1]
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(images.shape[0], 3 * s * s))
    save = np.savez_compressed if compressed else np.savez
    save(path, data=data, labels=list(int(x) for x in labels_1based), mean=data.mean(axis=0))


def random_images(rng, n: int, side: int, channels: int = 3) -> np.ndarray:
    return rng.integers(0, 256, (n, side, side, channels), dtype=np.uint8)


def photo(rng, w: int, h: int) -> Image.Image:
    """A smooth random RGB picture (JPEG-friendly), w x h."""
    small = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    return Image.fromarray(small, "RGB").resize((w, h), Image.Resampling.BICUBIC)


def save_as(img: Image.Image, path: Path, kind: str) -> None:
    """Save in one of the forms found in real ImageNet: rgb, gray or cmyk JPEG, or a PNG (the
    file's name may still say .JPEG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "rgb":
        img.save(path, "JPEG", quality=90)
    elif kind == "gray":
        img.convert("L").save(path, "JPEG", quality=90)
    elif kind == "cmyk":
        img.convert("CMYK").save(path, "JPEG", quality=90)
    elif kind == "png":
        img.save(path, "PNG")
    else:
        raise ValueError(kind)


WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475"]
KINDS = ["rgb", "gray", "cmyk", "png", "rgb"]


def imagenet_train_folder(root, per_class=3, seed=0, scale=1):
    """An ILSVRC2012-like train folder of JPEGs (RGB, gray, CMYK, PNG named .JPEG), uneven
    classes, with LOC_synset_mapping.txt beside it."""
    rng = np.random.default_rng(seed)
    for k, wnid in enumerate(WNIDS):
        for i in range(per_class + k % 2):  # uneven classes
            img = photo(rng, scale * (50 + 13 * (i % 10)), scale * (40 + 7 * k))
            save_as(img, root / wnid / f"{wnid}_{i}.JPEG", KINDS[(k + i) % len(KINDS)])
    (root.parent / "LOC_synset_mapping.txt").write_text(
        "".join(f"{w} class number {k}\n" for k, w in enumerate(WNIDS))
    )
    return root
