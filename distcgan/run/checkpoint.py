"""Per-class checkpoints: atomic, checksummed, with the previous one kept as a fallback.

File format: a magic line, the SHA-256 of the payload in hex, a newline, then the payload (a
`torch.save` of plain tensors, numbers and strings, loaded with `weights_only=True`). A file that
is cut short or has flipped bytes fails the checksum and is never loaded; the loader then falls
back to `checkpoint.prev.pt`. A checkpoint of a later format version is an error, not damage,
when its payload bears the first line out (its checksum holds and it names the same version);
a first line whose version digit was flipped is damage.
Leaves out: what goes into the state (see `train/pair.py`). torch is imported only to encode and
decode a payload, so that the run package starts without it.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

from distcgan.errors import UserError
from distcgan.run.atomic import atomic_path

FORMAT_VERSION = 1
PREFIX = b"distcgan-checkpoint-v"
MAGIC = PREFIX + str(FORMAT_VERSION).encode() + b"\n"
CURRENT, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"


class CorruptCheckpoint(Exception):
    pass


def save(class_dir: Path, state: dict[str, Any]) -> Path:
    """Write `state` as class_dir/checkpoint.pt; the one it replaces becomes checkpoint.prev.pt."""
    import torch  # lazy: distcgan.run loads without torch (status, supervise, job-plan)

    buf = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **state}, buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    current, previous = class_dir / CURRENT, class_dir / PREVIOUS
    with atomic_path(current) as tmp:
        tmp.write_bytes(MAGIC + digest + b"\n" + payload)
        # Keep the old checkpoint as the fallback before the new one replaces it. A crash
        # between this rename and atomic_path's leaves only checkpoint.prev.pt, which
        # load_latest() falls back to.
        if current.exists():
            os.replace(current, previous)
    return current


def read(path: Path) -> dict[str, Any]:
    """Load one checkpoint file, raising CorruptCheckpoint unless it is whole and intact."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptCheckpoint(f"{path}: cannot read ({exc.strerror})") from exc
    head = len(MAGIC) + 65
    if data.startswith(PREFIX) and not data.startswith(MAGIC):
        _other_version(path, data)
    if not data.startswith(MAGIC) or len(data) < head or data[head - 1 : head] != b"\n":
        raise CorruptCheckpoint(f"{path}: not a distcgan checkpoint or cut short")
    digest, payload = data[len(MAGIC) : head - 1], data[head:]
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CorruptCheckpoint(f"{path}: checksum mismatch (truncated or corrupted on disk)")
    return _load(payload)


def _load(payload: bytes) -> Any:
    """A checksummed payload's state, as torch.load reads it (tensors on the CPU)."""
    import torch  # lazy: distcgan.run loads without torch (status, supervise, job-plan)

    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def _other_version(path: Path, data: bytes) -> None:
    """A file whose first line names another version: a UserError if it names a later one that
    its payload bears out, else CorruptCheckpoint: the checksum does not cover the first line,
    so a flipped version digit read as "version 0", or as "version 2" of a version 1 payload."""
    line = data[len(PREFIX) : len(PREFIX) + 8].split(b"\n")[0]
    version = line.decode(errors="replace")
    if not (version.isascii() and version.isdigit()) or int(version) <= FORMAT_VERSION:
        raise CorruptCheckpoint(f"{path}: its first line is damaged")
    rest = data[len(PREFIX) + len(line) + 1 :]
    digest, payload = rest[:64], rest[65:]
    intact = rest[64:65] == b"\n" and hashlib.sha256(payload).hexdigest().encode() == digest
    if not intact or _payload_version(payload) not in (None, int(version)):
        raise CorruptCheckpoint(
            f"{path}: its first line names version {version}, which its payload does not bear "
            "out: the line is damaged"
        )
    raise UserError(
        f"{path} is a version {version} checkpoint; this distcgan reads version "
        f"{FORMAT_VERSION}: continue the run with the distcgan that wrote it, or start anew"
    )


def _payload_version(payload: bytes) -> int | None:
    """The format_version a checksummed payload holds, or None where this distcgan cannot load
    it (a later version may hold what weights_only refuses)."""
    try:
        state = _load(payload)
    except Exception:  # noqa: BLE001 - any payload this version cannot read names no version
        return None
    version = state.get("format_version") if isinstance(state, dict) else None
    return version if isinstance(version, int) else None


def load_latest(class_dir: Path, log: Any = print) -> dict[str, Any] | None:
    """The newest intact checkpoint of a class (current, else previous), or None if there is none.

    A damaged file is reported through `log` and skipped, never loaded.
    """
    for name in (CURRENT, PREVIOUS):
        path = class_dir / name
        if not path.exists():
            continue
        try:
            return read(path)
        except CorruptCheckpoint as exc:
            log(f"skipping damaged checkpoint {exc}")
    return None
