"""A checkpoint's version digit flipped to another number is damage, not a later version: the
checksum covers the payload only, so "distcgan-checkpoint-v2" over a version 1 payload was read
as a version 2 checkpoint ("continue the run with the distcgan that wrote it, or start anew")
instead of being skipped for checkpoint.prev.pt. A real later version (its payload checksummed
and naming the same version) is still said as one."""

from __future__ import annotations

import hashlib
import io

import pytest
import torch

from distcgan.errors import UserError
from distcgan.run.checkpoint import PREFIX, CorruptCheckpoint, load_latest, read, save


def later(state: dict, version: int) -> bytes:
    """A checkpoint as a later distcgan would write it: its first line, the SHA-256 of its
    payload, then a payload that names `version`."""
    buf = io.BytesIO()
    torch.save({**state, "format_version": version}, buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    return PREFIX + str(version).encode() + b"\n" + digest + b"\n" + payload


def test_a_flipped_version_digit_is_damage_and_a_real_later_version_is_said(tmp_path):
    save(tmp_path, {"step": 3, "w": torch.ones(2)})
    save(tmp_path, {"step": 4, "w": torch.zeros(2)})
    current = tmp_path / "checkpoint.pt"
    good = current.read_bytes()
    for digit in b"023456789":
        damaged = bytearray(good)
        damaged[len(PREFIX)] = digit
        current.write_bytes(bytes(damaged))
        with pytest.raises(CorruptCheckpoint, match="damaged"):
            read(current)
        logged: list[str] = []
        assert load_latest(tmp_path, logged.append)["step"] == 3  # the previous one
        assert len(logged) == 1 and logged[0].startswith(f"skipping damaged checkpoint {current}")
    for version in (2, 10):
        current.write_bytes(later({"step": 4}, version))
        with pytest.raises(UserError, match=f"is a version {version} checkpoint; this distcgan"):
            read(current)
    # A later version whose payload is damaged is damage, skipped like any other.
    damaged = bytearray(later({"step": 4}, 2))
    damaged[-40] ^= 0xFF
    current.write_bytes(bytes(damaged))
    with pytest.raises(CorruptCheckpoint):
        read(current)
