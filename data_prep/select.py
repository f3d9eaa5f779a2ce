"""The step every source shares: which classes to keep, in which order, and how many images each.

`--classes` names source classes by name (a folder name, a WordNet id, a CIFAR label name) or by
id (0-based, in the source's class order); a token that is a name is a name. The kept classes
are renumbered 0..K-1 in the order given. `--max-per-class N` keeps the first N images of each
class in the source's own order (file order for batch files, sorted file names for folders).
`--long-tail RATIO` makes class sizes fall geometrically by RATIO from the first kept class to
the last, each class keeping a seeded choice of its images (`tail_sizes`, `tail_order`).
Also: the pure plans of the batch converters (which row goes where; which classes share a pass).
Leaves out: reading any file.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from distcgan.errors import UserError


@dataclass(frozen=True)
class Selection:
    """The output classes: output class j is source class `keep[j]`, named `names[j]`."""

    keep: tuple[int, ...]
    names: tuple[str, ...]
    cap: int | None  # images per class at most (None: all)
    long_tail: float | None = None  # --long-tail RATIO: first class's size over the last's
    seed: int = 0  # which images a long-tailed class keeps (tail_order)


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
    keep = _resolve(classes, names, lookup, where) if classes else list(range(len(names)))
    return Selection(tuple(keep), tuple(names[k] for k in keep), max_per_class)


def check_ratio(ratio: float) -> None:
    """--long-tail RATIO: a finite number of 1 or more."""
    if not (math.isfinite(ratio) and ratio >= 1):
        raise UserError(
            f"--long-tail is the first class's size over the last's, a number of 1 or more; got "
            f"{ratio:g}"
        )


def with_long_tail(sel: Selection, ratio: float | None, seed: int) -> Selection:
    """`sel` with --long-tail RATIO and its --seed (unchanged without a ratio)."""
    if ratio is None:
        return sel
    check_ratio(ratio)
    if len(sel.keep) < 2:
        raise UserError(
            f"--long-tail needs two classes or more to fall across, and {len(sel.keep)} is kept: "
            "name more with --classes, or drop --long-tail"
        )
    return replace(sel, long_tail=ratio, seed=seed)


def _resolve(
    classes: Sequence[str], names: Sequence[str], lookup: dict[str, int], where: str
) -> list[int]:
    """The source class ids of the --classes tokens, in the order given."""
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
    return keep


def _preview(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 5 else "")


def tail_sizes(sel: Selection, available: Sequence[int]) -> list[int]:
    """--long-tail: the images output class j keeps, n_j = floor(n_0 / RATIO ** (j / (K - 1))),
    falling geometrically from n_0 (the smallest class's `available` images, or --max-per-class
    where that is fewer) to n_0 / RATIO for the last of the K classes. Without --long-tail: each
    class's own, up to --max-per-class. Refuses a class left with no images."""
    if sel.long_tail is None:
        return [n if sel.cap is None else min(n, sel.cap) for n in available]
    first = min(available) if sel.cap is None else min(*available, sel.cap)
    last = len(available) - 1
    sizes = [math.floor(first / sel.long_tail ** (j / last)) for j in range(len(available))]
    if sizes[-1] < 1:
        raise UserError(
            f"--long-tail {sel.long_tail:g} leaves class {sel.keep[-1]} ({sel.names[-1]}) with no "
            f"images ({first} / {sel.long_tail:g} is below 1): use a ratio of at most {first}"
        )
    return sizes


def tail_order(n: int, seed: int, class_id: int) -> np.ndarray:
    """The order in which a long-tailed class offers its n images (0..n-1 in the source's
    order): by the BLAKE2b-64 of "SEED/CLASS/INDEX" (CLASS the source class id), so the choice
    depends on nothing but the seed, the class and the image's place, on any numpy; the first
    n_j of this order are the class's images, and a smaller n_j keeps a subset of them."""

    def key(i: int) -> bytes:
        return hashlib.blake2b(f"{seed}/{class_id}/{i}".encode(), digest_size=8).digest()

    return np.array(sorted(range(n), key=key), dtype=np.int64)


def assign_rows(
    labels: np.ndarray, sel: Selection, where: str
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """For rows labelled with source class ids: (output class per row or -1, slot of the row in
    its output class, images per output class). Each class keeps its first `cap` rows, or with
    --long-tail the first `tail_sizes` of its `tail_order`, in the source's order."""
    target = np.full(labels.shape[0], -1, dtype=np.int32)
    slot = np.zeros(labels.shape[0], dtype=np.int64)
    counts = []
    every = []
    for j, k in enumerate(sel.keep):
        rows = np.flatnonzero(labels == k)
        if rows.size == 0:
            raise UserError(
                f"{where} has no images of class {k} ({sel.names[j]}): the source is incomplete; "
                "re-download it or leave the class out with --classes"
            )
        every.append(rows)
    sizes = tail_sizes(sel, [rows.size for rows in every])
    for j, (k, rows, n) in enumerate(zip(sel.keep, every, sizes)):
        if sel.long_tail is None:
            rows = rows[:n]
        else:
            rows = rows[np.sort(tail_order(rows.size, sel.seed, k)[:n])]
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
