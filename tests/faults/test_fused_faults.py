"""Faults in a fused group, as real processes: `kill -9` mid-training, then `--resume` fused or
unfused (a resume may change --fuse and the rank count), and the scheduler's stop signal, which
checkpoints every class of the group. Each ends with the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, events, mpiexec, run_cli, tiny_args

from distcgan.run.checkpoint import read

COMMON = "--classes 0 1 2 3 --steps 12 --checkpoint-every 3 --log-every 1 --devices cpu".split()
# The CPU arithmetic in which fused and unfused steps round alike (see tests/test_fused.py):
# oneDNN off, contiguous weights, batch 16, no dropout.
EXACT = "--d-dropout 0 --no-channels-last --threads 1".split()
EXACT_MAIN = (
    "import sys, torch; torch.backends.mkldnn.enabled = False\n"
    "from distcgan.cli import exit_process, main\n"
    "exit_process(main(sys.argv[1:]))\n"
)


def _exact_cli(*args: str, ranks: int | None = None) -> subprocess.CompletedProcess[str]:
    """`distcgan ARGS` with oneDNN off: one process, or under mpiexec."""
    cmd = [sys.executable, "-c", EXACT_MAIN, *args]
    if ranks is not None:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", EXACT_MAIN, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def _saved_step(run, k: int) -> int:
    path = run / f"class_{k:03d}" / "checkpoint.pt"
    return read(path)["step"] if path.exists() else 0


def _fused_after_resume(saved: dict[int, int], group: tuple[int, ...], steps: int = 12):
    """The "fused" events a resumed fused group logs: its unfinished members, from their saved
    steps; then, each time members finish (the furthest first), the ones left. A kill may
    land between two members' checkpoints of one step, so they may resume at different steps."""
    left = {k: saved[k] for k in group if saved[k] < steps}
    out = []
    while left:
        out.append((sorted(left), [left[k] for k in sorted(left)]))
        moved = steps - max(left.values())
        left = {k: s + moved for k, s in left.items() if s + moved < steps}
    return out


def _same_weights(run_a, run_b, classes, steps=12):
    for k in classes:
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (run_a, run_b))
        assert a["step"] == b["step"] == steps
        for role in ("G", "D", "G_ema"):
            assert all(torch.equal(a[role][n], b[role][n]) for n in a[role]), (k, role)
        assert torch.equal(a["rng"]["noise"], b["rng"]["noise"])


@pytest.mark.mpi
@pytest.mark.launcher_neutral  # the resumed weights: MPICH's run shows them
@pytest.mark.parametrize("resume_fuse", ["1", "2"])
def test_kill_9_in_a_fused_group_then_resume_fused_or_unfused(resume_fuse, tmp_path, digits_file):
    """2 ranks x 2 classes fused; rank 1 dies at class 3's step 7. The resume (on 1 rank, at
    --fuse 1 or 2) equals an uninterrupted unfused run, bit for bit."""
    run, straight = tmp_path / "run", tmp_path / "straight"
    fault = ("--inject-fault", "kill:3:7")
    killed = _exact_cli(
        *tiny_args(digits_file, run, *COMMON, *EXACT, "--fuse", "2", *fault), ranks=2
    )
    assert killed.returncode != 0
    fused = sorted(e["classes"] for e in events(killed.stdout) if e["event"] == "fused")
    assert fused == [[0, 1], [2, 3]]  # the ranks print in either order
    saved = {k: _saved_step(run, k) for k in range(4)}
    assert saved[2] == saved[3] == 6  # the group died together, past its checkpoint at step 6

    resumed = _exact_cli(
        "train", "--run", str(run), "--resume", "--no-progress", "--fuse", resume_fuse
    )
    assert resumed.returncode == 0, resumed.stderr
    starts = {
        e["class_id"]: e["start_step"]
        for e in events(resumed.stdout)
        if e["event"] == "class_start"
    }
    assert starts[2] == starts[3] == 6
    fused = [(e["classes"], e["steps"]) for e in events(resumed.stdout) if e["event"] == "fused"]
    expected = []
    if resume_fuse == "2":  # rank 0's 0 and 1 were stopped wherever mpiexec's kill found them
        expected = _fused_after_resume(saved, (0, 1)) + _fused_after_resume(saved, (2, 3))
    assert fused == expected, saved

    assert (
        _exact_cli(*tiny_args(digits_file, straight, *COMMON, *EXACT, "--fuse", "1")).returncode
        == 0
    )
    _same_weights(run, straight, range(4))


def test_a_fused_run_killed_and_resumed_fused_equals_a_straight_fused_run(tmp_path, digits_file):
    """The default arithmetic (oneDNN, channels_last, dropout 0.25): a fused group resumed at the
    same --fuse continues exactly, its dropout masks included."""
    run, straight = tmp_path / "run", tmp_path / "straight"
    args = (*COMMON, "--fuse", "4", "--threads", "1")
    killed = run_cli(*tiny_args(digits_file, run, *args, "--inject-fault", "kill:2:7"))
    assert killed.returncode != 0
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert run_cli(*tiny_args(digits_file, straight, *args)).returncode == 0
    _same_weights(run, straight, range(4))


def test_a_stop_signal_checkpoints_every_class_of_a_fused_group(tmp_path, digits_file, background):
    run, straight = tmp_path / "run", tmp_path / "straight"
    args = ("--classes", "0", "1", "2", "--devices", "cpu", "--threads", "1", "--fuse", "3")
    job = background(*tiny_args(digits_file, run, *args, "--steps", "100000"))
    job.wait_event("fused")  # after every class_start of the group
    time.sleep(1.0)
    job.proc.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=60) == 75
    stopped = [e for e in events("".join(job.stdout)) if e["event"] == "class_interrupted"]
    assert sorted(e["class_id"] for e in stopped) == [0, 1, 2]
    assert len({e["step"] for e in stopped}) == 1  # the group stops at one step
    step = stopped[0]["step"]
    for k in range(3):
        assert read(run / f"class_{k:03d}" / "checkpoint.pt")["step"] == step
    summary = json.loads((run / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["interrupted"] * 3
    # resumed to a fixed end, it equals a run that went straight there
    end = ("--steps", str(step + 5))
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", *end)
    assert resumed.returncode == 0, resumed.stderr
    assert run_cli(*tiny_args(digits_file, straight, *args, *end)).returncode == 0
    _same_weights(run, straight, range(3), steps=step + 5)


@pytest.mark.mpi
def test_an_error_in_a_fused_group_ends_the_job_naming_the_rank_and_its_classes(
    tmp_path, digits_file
):
    args = ("--classes", "0", "1", "2", "3", "--fuse", "2", "--devices", "cpu")
    result = run_cli(
        *tiny_args(digits_file, tmp_path / "run", *args, "--inject-fault", "raise:3:2"), ranks=2
    )
    assert result.returncode != 0
    assert (
        "distcgan: rank 1 (classes 2, 3, trained fused) failed: RuntimeError: injected fault "
        "at class 3, step 2" in result.stderr
    ), result.stderr
