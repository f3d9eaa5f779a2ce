"""CIFAR-10 and CIFAR-100 from the Python pickles: the extracted folder or the .tar.gz itself.

CIFAR-10: `cifar-10-batches-py/` (or `cifar-10-python.tar.gz`) with `data_batch_1`..`_5` (train),
`test_batch` (test) and `batches.meta` (`label_names`). CIFAR-100: `cifar-100-python/` (or
`cifar-100-python.tar.gz`) with `train`, `test` and `meta` (`fine_label_names`,
`coarse_label_names`); labels `fine_labels` (100 classes, the default) or `coarse_labels` (20,
--coarse). Each file is a pickled dict (Python 2 strings: bytes keys) whose `data` is uint8
(n, 3072): per row the 1024 red values of the 32x32 image, then green, then blue. --src may be
the archive, the extracted folder, or a folder holding either.

A pickle can run code when loaded, so the unpickler here accepts only what these files hold
(numpy arrays, lists, bytes, numbers). Memory is one batch file at a time (a CIFAR-100 split is a
single 150 MB file). An archive is streamed front to back once per pass, never extracted; its
members come in archive order, and each batch's rows go to their place by the batch's number.
Leaves out: the CIFAR binary (.bin) versions.
"""

from __future__ import annotations

import pickle
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from data_prep.rows import RowSource
from distcgan.errors import UserError

try:  # numpy 2 moved it; pickles name either module
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    # With numpy 2 installed mypy reads both imports: numpy._core's stub types the name, while
    # numpy.core.multiarray, numpy 2's shim of the old module, has no stub.
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

_LAYOUT = {
    # source: (folder, archive, train files, test files, meta file)
    "cifar10": (
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "batches.meta",
    ),
    "cifar100": ("cifar-100-python", "cifar-100-python.tar.gz", ("train",), ("test",), "meta"),
}


_MAX_LABELS = 1 << 31  # before the meta file is read


class _ArraysOnly(pickle.Unpickler):
    """Unpickles numpy arrays and plain Python values; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if name == "_reconstruct" and module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            return _reconstruct
        if (module, name) in (("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a CIFAR file does not")


def _unpickle(fh: IO[bytes], where: str) -> dict[str, Any]:
    try:
        obj = _ArraysOnly(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, OSError, zlib.error, ValueError, TypeError) as exc:
        raise UserError(
            f"{where} is not a readable CIFAR pickle ({exc}); download it again"
        ) from exc
    if not isinstance(obj, dict):
        raise UserError(f"{where} holds a {type(obj).__name__}, not the dict of a CIFAR batch")
    return {k.decode() if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _members(container: Path, names: Sequence[str]) -> Iterator[tuple[str, IO[bytes], str]]:
    """Yield (name, open file, where) for each wanted file, in storage order; each at most once."""
    if container.is_dir():
        for name in names:
            path = container / name
            if not path.is_file():
                raise UserError(f"{container} has no {name}: is it the extracted CIFAR folder?")
            with open(path, "rb") as fh:
                yield name, fh, str(path)
        return
    missing = list(names)
    try:
        with tarfile.open(container, "r|gz") as tar:  # a stream: one front-to-back read
            for member in tar:
                name = Path(member.name).name
                if member.isfile() and name in missing:
                    missing.remove(name)
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    yield name, extracted, f"{container}:{member.name}"
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise UserError(f"cannot read {container} as a .tar.gz ({exc}); download it again") from exc
    if missing:
        raise UserError(f"{container} has no {missing[0]}: is it the CIFAR python archive?")


def _locate(src: Path, folder: str, archive: str, probe: str) -> Path:
    if src.is_file():
        return src
    for candidate in (src, src / folder):
        if (candidate / probe).is_file():
            return candidate
    if (src / archive).is_file():
        return src / archive
    raise UserError(
        f"no CIFAR files in {src}: expected {folder}/ (with {probe}) or {archive}; point --src at "
        "the archive or the folder"
    )


def _names(meta: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    if key not in meta:
        raise UserError(f"{where} has no {key!r}: is it the right CIFAR meta file?")
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in meta[key])


def _batch(obj: dict[str, Any], label_key: str, k: int, where: str) -> tuple[np.ndarray, Any]:
    """Check one batch: labels (n,) in 0..k-1 and data uint8 (n, 3072); return (labels, data)."""
    if label_key not in obj or "data" not in obj:
        raise UserError(f"{where} has no {label_key!r} or 'data': is it a CIFAR batch file?")
    labels, data = np.asarray(obj[label_key]), obj["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise UserError(f"{where}: data must be a uint8 (n, 3072) array, got {type(data).__name__}")
    if data.shape != (labels.shape[0], 3072) or labels.ndim != 1:
        raise UserError(
            f"{where}: data {data.shape} and {labels.shape} labels do not match (n, 3072) and (n,)"
        )
    if labels.size and (labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= k):
        raise UserError(
            f"{where}: labels must be integers in 0..{k - 1}, found {labels.dtype} "
            f"{labels.min()}..{labels.max()}"
        )
    return labels.astype(np.int64), data


def open_cifar(src: Path, source: str, split: str, coarse: bool = False) -> RowSource:
    """CIFAR-10 (`source` 'cifar10') or CIFAR-100 ('cifar100') as rows: one pass reads the meta
    file and every batch's labels; each later pass (`read`) streams the batches again."""
    folder, archive, train, test, meta_name = _LAYOUT[source]
    container = _locate(src, folder, archive, meta_name)
    batches = train if split == "train" else test
    label_key = "labels" if source == "cifar10" else ("coarse_labels" if coarse else "fine_labels")
    names_key = "label_names" if source == "cifar10" else label_key.replace("labels", "label_names")

    labels: dict[str, np.ndarray] = {}
    names: tuple[str, ...] = ()
    for name, fh, where in _members(container, (meta_name, *batches)):
        obj = _unpickle(fh, where)
        if name == meta_name:
            names = _names(obj, names_key, where)
        else:  # an archive may hold a batch before the meta file: the range is checked below
            labels[name] = _batch(obj, label_key, _MAX_LABELS, where)[0]
        del obj  # one batch file in memory at a time
    for name in batches:
        if labels[name].size and labels[name].max() >= len(names):
            raise UserError(
                f"{container}: {name} has label {labels[name].max()} but the meta file names "
                f"{len(names)} classes; the files do not belong together"
            )
    offsets, start = {}, 0
    for name in batches:
        offsets[name], start = start, start + labels[name].shape[0]
    rows = {name: labels[name].shape[0] for name in batches}

    def read() -> Iterator[tuple[int, np.ndarray]]:
        for name, fh, where in _members(container, batches):
            _, data = _batch(_unpickle(fh, where), label_key, len(names), where)
            if data.shape[0] != rows[name]:
                raise UserError(f"{where} changed while it was being converted")
            yield (
                offsets[name],
                np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)),
            )

    return RowSource(
        names=names,
        labels=np.concatenate([labels[b] for b in batches]),
        size=32,
        channels=3,
        read=read,
        where=str(container),
        source=f"{source}:{split}" + (":coarse" if coarse else ""),
    )
