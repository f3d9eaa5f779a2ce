"""Checkpoints: atomic writes, checksums, and the fallback to the previous one."""

from __future__ import annotations

import pytest
import torch

from distcgan.errors import UserError
from distcgan.run import checkpoint
from distcgan.run.atomic import atomic_write_bytes
from distcgan.run.checkpoint import CorruptCheckpoint, load_latest, read, save


def _state(step: int) -> dict:
    return {"step": step, "w": torch.full((3,), float(step)), "rng": torch.get_rng_state()}


def test_round_trip_and_rotation(tmp_path):
    save(tmp_path, _state(1))
    save(tmp_path, _state(2))
    assert read(tmp_path / "checkpoint.pt")["step"] == 2
    assert read(tmp_path / "checkpoint.prev.pt")["step"] == 1
    assert torch.equal(load_latest(tmp_path)["w"], torch.full((3,), 2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.pt", "checkpoint.pt"]


def _damage(path, how):
    data = path.read_bytes()
    if how == "flip":
        i = len(data) - 50
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
    elif how == "cut":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(b"")


def test_damaged_checkpoint_is_never_loaded_and_the_previous_is_used(tmp_path):
    for how in ("flip", "cut", "empty"):
        save(tmp_path, _state(1))
        save(tmp_path, _state(2))
        _damage(tmp_path / "checkpoint.pt", how)
        logged = []
        state = load_latest(tmp_path, log=logged.append)
        assert state["step"] == 1, how
        assert len(logged) == 1 and "skipping damaged checkpoint" in logged[0], how


def test_checksum_detects_a_single_flipped_byte(tmp_path):
    save(tmp_path, _state(5))
    _damage(tmp_path / "checkpoint.pt", "flip")
    try:
        read(tmp_path / "checkpoint.pt")
    except CorruptCheckpoint as exc:
        assert "checksum mismatch" in str(exc)
    else:
        raise AssertionError("a flipped byte was not detected")


def test_no_intact_checkpoint_means_start_from_scratch(tmp_path):
    assert load_latest(tmp_path) is None
    save(tmp_path, _state(1))
    _damage(tmp_path / "checkpoint.pt", "cut")
    assert load_latest(tmp_path, log=lambda m: None) is None


def test_a_crash_between_the_renames_leaves_the_previous_one(tmp_path):
    save(tmp_path, _state(1))
    save(tmp_path, _state(2))
    (tmp_path / checkpoint.CURRENT).unlink()  # as if killed after the first rename
    assert load_latest(tmp_path)["step"] == 1


def test_writing_into_a_missing_folder_says_so(tmp_path):
    target = tmp_path / "nope" / "x.bin"
    with pytest.raises(UserError, match=r"the folder .*nope does not exist; create it \(mkdir -p"):
        atomic_write_bytes(target, b"x")


def test_cuda_rng_states_follow_their_role_to_whatever_gpu_it_is_on_now():
    # Kept by role, a state saved on cuda:0 goes on with D on cuda:1 (a resume on another
    # GPU index, a data-parallel rank after the first); before, it was kept by device and only
    # a device of the same name got it back: D's dropout masks then took another stream.
    from distcgan.train.pair import cuda_rng_targets

    g, d = torch.tensor([1]), torch.tensor([2])
    assert cuda_rng_targets({"G": g, "D": d}, "cuda:3", "cuda:1") == [("cuda:3", g), ("cuda:1", d)]
    # G and D now on one GPU: D's last, so D's stream is the one that goes on.
    assert [dev for dev, _ in cuda_rng_targets({"G": g, "D": d}, "cuda:0", "cuda:0")] == [
        "cuda:0",
        "cuda:0",
    ]
    assert cuda_rng_targets({"G": g, "D": d}, "cuda:0", "cuda:0")[-1][1] is d
    assert cuda_rng_targets({"D": d}, "cpu", "cuda:2") == [("cuda:2", d)]
    assert cuda_rng_targets({"G": g, "D": d}, "cpu", "cpu") == []  # on the CPU: nothing
    # A checkpoint from before kept them by device: restored onto that device only, as then.
    assert cuda_rng_targets({"cuda:0": d}, "cuda:0", "cuda:0") == [("cuda:0", d), ("cuda:0", d)]
    assert cuda_rng_targets({"cuda:0": d}, "cuda:1", "cuda:1") == []
