"""The step every source shares: which classes to keep, in which order, and how many images each.

`--classes` names source classes by name (a folder name, a WordNet id, a CIFAR label name) or by
id (0-based, in the source's class order); a token that is a name is a name. The kept classes
are renumbered 0..K-1 in the order given. `--max-per-class N` keeps the first N images of each
class in the source's own order (file order for batch files, sorted file names for folders).
Also: the pure plans of the batch converters (which row goes where; which classes share a pass).
Leaves out: reading any file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distcgan.errors import UserError


@dataclass(frozen=True)
class Selection:
    """The output classes: output class j is source class `keep[j]`, named `names[j]`."""

    keep: tuple[int, ...]
    names: tuple[str, ...]
    cap: int | None  # images per class at most (None: all)


def select_classes(
    names: Sequence[str],
    classes: Sequence[str] | None,
    max_per_class: int | None,
    keys: Sequence[str] | None = None,
    where: str = "the source",
) -> Selection:
    """Resolve --classes tokens against the source's class names (and keys, e.g. folder names)."""
    names = [str(n) for n in names]
    seen: dict[str, int] = {}
    for k, name in enumerate(names):
        if name in seen:
            raise UserError(
                f"{where} has two classes named {name!r} (ids {seen[name]} and {k}): class "
                "names must be unique; rename one"
            )
        seen[name] = k
    lookup = dict(seen)
    for k, key in enumerate(keys or ()):
        lookup.setdefault(str(key), k)
    if max_per_class is not None and max_per_class < 1:
        raise UserError(f"--max-per-class must be a positive number of images, got {max_per_class}")
    if not classes:
        return Selection(tuple(range(len(names))), tuple(names), max_per_class)
    keep: list[int] = []
    for token in classes:
        if token in lookup:  # a name first: folders may be called "001", "002"...
            k = lookup[token]
        elif token.isdigit():
            k = int(token)
            if k >= len(names):
                raise UserError(
                    f"--classes {token} is out of range: {where} has classes 0..{len(names) - 1}"
                )
        else:
            raise UserError(
                f"--classes {token!r} is neither a class id nor a class name of {where} (its "
                f"classes: {_preview(names)})"
            )
        if k in keep:
            raise UserError(f"--classes names class {k} ({names[k]}) twice: list each once")
        keep.append(k)
    return Selection(tuple(keep), tuple(names[k] for k in keep), max_per_class)


def _preview(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 5 else "")


def assign_rows(
    labels: np.ndarray, sel: Selection, where: str
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """For rows labelled with source class ids: (output class per row or -1, slot of the row in
    its output class, images per output class). Each class keeps its first `cap` rows."""
    target = np.full(labels.shape[0], -1, dtype=np.int32)
    slot = np.zeros(labels.shape[0], dtype=np.int64)
    counts = []
    for j, k in enumerate(sel.keep):
        rows = np.flatnonzero(labels == k)
        if rows.size == 0:
            raise UserError(
                f"{where} has no images of class {k} ({sel.names[j]}): the source is incomplete; "
                "re-download it or leave the class out with --classes"
            )
        rows = rows[: sel.cap]
        target[rows] = j
        slot[rows] = np.arange(rows.size)
        counts.append(int(rows.size))
    return target, slot, counts


def plan_groups(counts: Sequence[int], image_bytes: int, budget_bytes: int) -> list[range]:
    """Cut output classes 0..K-1 into consecutive groups of at most `budget_bytes` of images
    (a class larger than the budget forms a group alone): one pass over the batch files each."""
    groups: list[range] = []
    start, used = 0, 0
    for j, n in enumerate(counts):
        size = n * image_bytes
        if j > start and used + size > budget_bytes:
            groups.append(range(start, j))
            start, used = j, 0
        used += size
    if counts:
        groups.append(range(start, len(counts)))
    return groups
