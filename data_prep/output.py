"""Writing a converter's result: `distcgan.data.DatasetWriter`, class by class, checked before it
appears.

Each class's images are hashed (BLAKE2b) as they are written, and the digests kept in the file
(`class_digests`, checked by every later whole-class read); when the last class is in, the
finished temporary file is re-opened through the trainer's own reader (`read_info`, `load_class`:
layout, offsets, labels of every row), one class at a time, and every class must hash to what
was written. Only then is it renamed to the output path, so an interrupted or failed conversion
never leaves a file there (the temporary file is `.NAME.*.tmp` beside it, removed on failure).
Leaves out: where the images come from.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distcgan.data import PROVENANCE, DatasetWriter, load_class, read_info
from distcgan.errors import UserError
from distcgan.run.atomic import refuse_existing, storage_errors


def check_out_path(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """Fail early (before hours of decoding) if the output cannot be written where asked, or
    is already there without --overwrite (an hours-long conversion, or a data set, replaced
    without a word). A missing folder is fine (`Output` makes it, as `mkdir -p` would: a fresh
    clone has no data/) when its nearest existing ancestor is a writable folder; nothing is
    created here, so a conversion that fails on its input leaves nothing behind."""
    path = Path(out)
    if path.is_dir():
        raise UserError(f"--out {path} is a folder: give a file name such as {path}/data.h5")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"--out {path}: {folder} is not a folder: write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out {path}: folder {folder} is not writable: write elsewhere")
    refuse_existing(path, "--out", overwrite)
    return path


def _digest(images: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(images).data, digest_size=16).hexdigest()


class Output:
    """A data file being written class by class (classes in order 0..K-1), verified on close.

    Use as a context manager; on an exception nothing appears at `path`. `provenance` is what
    made it (env.provenance, unstamped), kept as the file's provenance attribute.
    """

    def __init__(  # noqa: PLR0913 - the file's layout (5) and its record
        self,
        path: str | os.PathLike[str],
        class_names: Sequence[str],
        resolution: int,
        channels: int,
        source: str,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.names = tuple(str(n) for n in class_names)
        self.resolution, self.channels, self.source = resolution, channels, source
        self.written: list[tuple[int, str]] = []  # (images, digest) per class
        with storage_errors(self.path.parent):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        made = {PROVENANCE: json.dumps(provenance)} if provenance is not None else {}
        self._writer = DatasetWriter(
            self.path, self.names, resolution, channels, source, verify=self._verify, attrs=made
        )

    def add_class(self, class_id: int, images: np.ndarray) -> None:
        if images.shape[0] == 0:
            raise UserError(f"class {class_id} ({self.names[class_id]}) has no images")
        self._writer.add_class(class_id, images)  # hashes them, for the file's class_digests
        self.written.append((int(images.shape[0]), self._writer.digests[-1]))

    def _verify(self, tmp: Path) -> None:
        where = f"{self.path} (checked as {tmp.name} before the rename)"
        info = read_info(str(tmp))
        expected = (
            self.names,
            tuple(n for n, _ in self.written),
            self.resolution,
            self.channels,
            self.source,
        )
        found = (info.class_names, info.counts, info.resolution, info.channels, info.source)
        if found != expected:
            raise UserError(
                f"{where}: re-reading gave classes/counts/resolution/channels/source {found!r:.200}"
                f" instead of {expected!r:.200}; nothing was written: check the storage"
            )
        for k, (_, digest) in enumerate(self.written):
            if _digest(load_class(str(tmp), k, verify=False)) != digest:  # compared here
                raise UserError(
                    f"{where}: class {k}'s images read back differ from those written; nothing "
                    "was written: check the storage and convert again"
                )

    def __enter__(self) -> Output:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._writer.__exit__(exc_type, exc, tb)
