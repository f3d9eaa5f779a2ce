"""Atomic file writes: write to a temporary file beside the target, fsync, rename, fsync the folder.

A reader (or a resumed run) therefore sees either the old file or the new one, never half of one,
even when the process is killed or the node dies mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distcgan.errors import UserError

# Errors that mean "the storage refused the write", as opposed to bugs in what was being written.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()


def fsync_dir(folder: Path) -> None:
    """fsync a folder: what was renamed into it (or out of it) reaches the disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(folder: Path) -> None:
    """fsync every file in `folder` (not below it), then the folder: before a rename puts a
    folder written in place (an export) where readers look, so that a crash after the rename
    cannot leave its files empty or short."""
    for f in folder.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(folder)


def _storage_message(target: Path, exc: OSError) -> str:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)  # HDF5's own text is a page long
    return (
        f"cannot write {target}: {reason} (free space on the file system or make "
        f"{target.parent} writable; the previous file, if any, is intact)"
    )


def check_free_space(folder: str | os.PathLike[str], nbytes: int, what: str) -> None:
    """Refuse to start a write of about `nbytes` into `folder` that cannot fit.

    HDF5 (2.0.0 with h5py 3.16) can crash the process when it closes a file after a failed
    write, so large HDF5 writes check first instead of relying on the error alone.
    """
    free = shutil.disk_usage(folder).free
    need = nbytes * 1.05 + (1 << 20)  # what the check asks for: 5% and 1 MiB of headroom
    if free < need:
        # The figure said is the one compared: the data alone (0.1 MB) beside 0.1 MB free
        # read as if it fitted.
        raise UserError(
            f"not enough space for {what} in {folder}: needs about {need / 1e6:,.2f} MB "
            f"({nbytes / 1e6:,.2f} MB of data and headroom), {free / 1e6:,.2f} MB free; free "
            "some space or write elsewhere"
        )


def refuse_existing(path: str | os.PathLike[str], flag: str | None, overwrite: bool) -> None:
    """The one rule of every command's outputs: something already at `path` (a file, a folder,
    a link) is replaced only when the user said --overwrite. Call it before any expensive work,
    so that a refusal costs nothing; the writer then replaces the old output atomically
    (atomic_path), once its inputs are checked. `flag` is the option that named `path` (None
    for a file a command names itself, such as RUN/report.html)."""
    if overwrite or not os.path.lexists(path):
        return
    if flag is None:
        raise UserError(f"{path} already exists: add --overwrite to replace it")
    raise UserError(
        f"{flag} {path} already exists: add --overwrite to replace it, or give another {flag}"
    )


def check_out_file(
    path: str | os.PathLike[str], flag: str, example: str = "out.json", *, overwrite: bool
) -> Path:
    """Refuse, before any work, an output file that cannot be written where asked: its folder
    missing, or the path itself a folder (os.replace would fail only at the very end, with
    IsADirectoryError), or a file already there without --overwrite (refuse_existing).
    `example` is a file name to suggest inside such a folder."""
    target = Path(path)
    if target.is_dir():
        raise UserError(
            f"{flag} {target} is a folder: give a file name, such as {target / example}"
        )
    if not target.absolute().parent.is_dir():
        folder = target.parent
        raise UserError(
            f"{flag} {target}: folder {folder} does not exist; create it (mkdir -p {folder}) "
            "or write elsewhere"
        )
    refuse_existing(target, flag, overwrite)
    return target


@contextlib.contextmanager
def storage_errors(target: str | os.PathLike[str]) -> Iterator[None]:
    """Turn "the storage refused the write" (disk full, read-only, no permission, quota) into a
    one-line UserError about `target`; other errors pass through unchanged."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _STORAGE_ERRNOS:
            raise UserError(_storage_message(Path(target), exc)) from exc
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path` atomically.

    On any exception the temporary file is removed and `path` is left as it was.
    """
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise UserError(f"cannot write {target}: it is a folder; give a file name")
    if not folder.is_dir():
        raise UserError(
            f"cannot write {target}: the folder {folder} does not exist; create it "
            f"(mkdir -p {folder}) or write elsewhere"
        )
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise UserError(_storage_message(target, exc)) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600; outputs get the usual umask mode
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        fsync_dir(folder)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            raise UserError(_storage_message(target, exc)) from exc
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())
