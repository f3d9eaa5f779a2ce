"""Converting datasets that arrive as unsorted rows in batch files (IDX, CIFAR pickles, npz).

Memory is bounded by `budget_bytes` of output images plus one chunk of one batch file, never by
the dataset. Two kinds of pass over the batch files:
1. labels only (each source reads them its own way: a small IDX file, a pickle, an npz member);
   from them a pure plan says where each row goes (`select.assign_rows`) and cuts the output
   classes into consecutive groups that fit the budget (`select.plan_groups`);
2. one pass per group: every chunk of every batch file is read, the rows of the group's classes
   are resized and put in place, and the group's classes are written in order.
Per-class spill files would need one pass but a second copy of the dataset on disk; with the
default budget (1 GiB) CIFAR-10/100 and MNIST take a single pass and downsampled ImageNet 64 px
(about 16 GB) about 16, which is reading speed, not decoding: we chose passes. Leaves out: the
file formats (`idx.py`, `cifar.py`, `npz.py`, `digits.py`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from data_prep.output import Output
from data_prep.resize import fit_array
from data_prep.select import Selection, assign_rows, plan_groups
from distcgan.errors import UserError


@dataclass(frozen=True)
class RowSource:
    """A dataset as rows: labels known up front, pixels read in chunks, one pass per call."""

    names: tuple[str, ...]  # class names; class id = index
    labels: np.ndarray  # int64 (N,): source class id of each row, in row order
    size: int  # native side in px
    channels: int  # 1 or 3
    read: Callable[[], Iterator[tuple[int, np.ndarray]]]  # -> (first row, uint8 (n, S, S, C))
    where: str  # the files, for messages
    source: str  # the `source` attribute of the output


@dataclass(frozen=True)
class RowsOut:
    """Where and how `write_rows` writes: the output file, its resolution, whether grayscale
    becomes RGB, and the memory the images of one pass may take."""

    path: str | os.PathLike[str]
    resolution: int
    rgb: bool = False
    budget_bytes: int = 1 << 30
    provenance: dict[str, Any] | None = None  # what made it (output.Output)


def write_rows(
    src: RowSource, sel: Selection, out: RowsOut, log: Callable[[str], None] = lambda m: None
) -> list[int]:
    """Write the selected classes of `src` to `out.path`; returns the images per output class."""
    resolution, rgb, budget_bytes = out.resolution, out.rgb, out.budget_bytes
    target, slot, counts = assign_rows(src.labels, sel, src.where)
    channels = 3 if rgb else src.channels
    groups = plan_groups(counts, resolution * resolution * channels, budget_bytes)
    n_rows = src.labels.shape[0]
    if len(groups) > 1:
        log(f"{len(groups)} passes over the batch files (memory budget {budget_bytes >> 20} MiB)")
    with Output(out.path, sel.names, resolution, channels, src.source, out.provenance) as w:
        for group in groups:
            parts = {
                j: np.empty((counts[j], resolution, resolution, channels), np.uint8) for j in group
            }
            filled = 0
            for first, chunk in src.read():
                if first + chunk.shape[0] > n_rows:
                    raise UserError(
                        f"{src.where}: more images than labels ({first + chunk.shape[0]} > "
                        f"{n_rows}); the files do not belong together"
                    )
                t = target[first : first + chunk.shape[0]]
                rows = np.flatnonzero((t >= group.start) & (t < group.stop))
                if rows.size == 0:
                    continue
                images = fit_array(chunk[rows], resolution)
                if rgb and images.shape[3] == 1:
                    images = np.repeat(images, 3, axis=3)
                for j in np.unique(t[rows]):
                    mine = t[rows] == j
                    parts[int(j)][slot[first + rows[mine]]] = images[mine]
                filled += rows.size
            expected = sum(counts[j] for j in group)
            if filled != expected:
                raise UserError(
                    f"{src.where}: found {filled} of the {expected} images the labels promise for "
                    f"classes {group.start}..{group.stop - 1}; the files are truncated or changed"
                )
            for j in group:
                w.add_class(j, parts.pop(j))
    return counts
