"""Atomic file writes: write to a temporary file beside the target, fsync, rename, fsync the folder.

A reader (or a resumed run) therefore sees either the old file or the new one, never half of one,
even when the process is killed or the node dies mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distcgan.errors import UserError

# Errors that mean "the storage refused the write", as opposed to bugs in what was being written.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path` atomically.

    On any exception the temporary file is removed and `path` is left as it was.
    """
    target = Path(path)
    folder = target.parent
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise UserError(
            f"cannot write {target}: {exc.strerror} (check that {folder} exists and is writable)"
        ) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        _fsync_dir(folder)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            raise UserError(
                f"cannot write {target}: {exc.strerror} (free space on the file system or "
                f"make {folder} writable; the previous file, if any, is intact)"
            ) from exc
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())
