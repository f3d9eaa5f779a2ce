"""Fault 2: a checkpoint flipped, cut short or emptied on disk is detected by its checksum and
never loaded; the previous one is used, the log says so, and the result is still exact."""

from __future__ import annotations

import pytest
import torch
from helpers import events, run_cli, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi

COMMON = "--classes 0 1 2 --checkpoint-every 3 --devices cpu --threads 1".split()


@pytest.mark.launcher_neutral
def test_damaged_checkpoints_fall_back_to_the_previous_one(tmp_path, digits_file):
    run, straight = tmp_path / "run", tmp_path / "straight"
    assert run_cli(*tiny_args(digits_file, run, *COMMON, "--steps", "6"), ranks=2).returncode == 0
    for k, how in enumerate(("flip", "cut", "empty")):
        path = run / f"class_{k:03d}" / "checkpoint.pt"
        data = path.read_bytes()
        if how == "flip":
            data = data[:1000] + bytes([data[1000] ^ 0x01]) + data[1001:]
        path.write_bytes({"flip": data, "cut": data[: len(data) // 3], "empty": b""}[how])

    resumed = run_cli(
        "train", "--run", str(run), "--resume", "--steps", "9", "--no-progress", ranks=2
    )
    assert resumed.returncode == 0, resumed.stderr
    out = events(resumed.stdout)
    warnings = [e["message"] for e in out if e["event"] == "warning"]
    assert len(warnings) == 3 and all("skipping damaged checkpoint" in w for w in warnings)
    assert any("checksum mismatch" in w for w in warnings)
    starts = {e["class_id"]: e["start_step"] for e in out if e["event"] == "class_start"}
    assert starts == {0: 3, 1: 3, 2: 3}

    assert run_cli(*tiny_args(digits_file, straight, *COMMON, "--steps", "9")).returncode == 0
    for k in range(3):
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, run))
        assert all(torch.equal(a["G"][n], b["G"][n]) for n in a["G"]), k
