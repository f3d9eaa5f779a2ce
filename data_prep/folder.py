"""Folders of class sub-folders of images (the ImageFolder convention): listing and one class.

--src holds one sub-folder per class; classes are the sub-folders in sorted order, named after
them. A class's images are its files (not hidden, not in deeper folders) with an image
extension (.jpg .jpeg .png .bmp .gif .tif .tiff .webp .ppm .pgm, any case), in sorted name
order; every image becomes RGB at R x R (`resize.decode_file`). A file PIL cannot decode is
skipped and counted; a class fails when its skipped files exceed `max_unreadable` (a fraction)
of those it tried. Memory: one class of output images plus one decoded image. Leaves out:
spreading classes over ranks (`parallel.py`) and ImageNet's names (`imagenet.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data_prep.resize import decode_file
from distcgan.errors import UserError

IMAGE_EXTENSIONS = (
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".ppm",
    ".pgm",
)
_EXAMPLES = 3  # unreadable files named per class in the report


@dataclass
class ClassReport:
    """What converting one class found: files tried, images kept, files skipped (a few named)."""

    tried: int = 0
    images: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)


def class_folders(root: Path) -> list[str]:
    """The class sub-folders of `root`, sorted; checks that there is at least one."""
    if not root.is_dir():
        raise UserError(f"--src {root} is not a folder: give the folder of class sub-folders")
    with os.scandir(root) as it:
        dirs = sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))
    if not dirs:
        raise UserError(
            f"{root} has no sub-folders: an image folder holds one sub-folder of images per class"
        )
    return dirs


def image_files(folder: Path) -> list[str]:
    """The image files of one class folder, sorted by name."""
    with os.scandir(folder) as it:
        return sorted(
            e.name
            for e in it
            if not e.name.startswith(".")
            and e.name.lower().endswith(IMAGE_EXTENSIONS)
            and e.is_file()
        )


def class_images(folder: Path) -> list[str]:
    """`image_files`, refusing a class folder that has none."""
    files = image_files(folder)
    if not files:
        raise UserError(
            f"class folder {folder} has no image files ({', '.join(IMAGE_EXTENSIONS[:4])}...): "
            "remove it or leave it out with --classes"
        )
    return files


def convert_class(
    folder: Path,
    resolution: int,
    cap: int | None,
    max_unreadable: float,
    order: tuple[int, int] | None = None,
) -> tuple[np.ndarray, ClassReport]:
    """Decode the images of one class folder (the first `cap` readable ones) to uint8
    (n, R, R, 3); unreadable files are skipped and counted, up to `max_unreadable`. With
    `order` (--long-tail's seed and source class id) the files are tried in select.tail_order
    and the images kept are then put back in name order."""
    files = class_images(folder)
    index = list(range(len(files)))
    if order is not None:
        from data_prep.select import tail_order

        index = [int(i) for i in tail_order(len(files), *order)]
    want = len(files) if cap is None else min(cap, len(files))
    out = np.empty((want, resolution, resolution, 3), np.uint8)
    kept: list[int] = []  # the file index of each image in `out`
    report = ClassReport()
    for i in index:
        if report.images == want:
            break
        report.tried += 1
        name = files[i]
        try:
            out[report.images] = decode_file(folder / name, resolution)
        except Exception as exc:  # PIL raises many types for damaged files; each is a skip
            report.skipped += 1
            if len(report.examples) < _EXAMPLES:
                report.examples.append(
                    f"{folder / name}: {type(exc).__name__}: {exc}".replace("\n", " ")
                )
            continue
        kept.append(i)
        report.images += 1
    if report.skipped > max_unreadable * report.tried or report.images == 0:
        raise UserError(
            f"class folder {folder}: {report.skipped} of {report.tried} images are unreadable, "
            f"more than --max-unreadable {max_unreadable:g} allows (first: {report.examples[0]});"
            " repair or remove them, or raise --max-unreadable"
        )
    if order is None:
        return out[: report.images], report
    return out[np.argsort(kept)], report
