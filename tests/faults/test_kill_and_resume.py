"""Fault 1: `kill -9` of one rank mid-training. The job ends (no hang); `--resume` finishes every
class, losing at most one checkpoint interval, never retraining finished classes, and the
final weights equal an uninterrupted run's. Also fault 6: the resume uses another rank count."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import ended_promptly, events, run_cli, run_timed, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi

# One thread a rank on every machine: on 2 ranks and then 3 the threads stay the same, so the
# resume keeps every started class as it was (a change would be refused: --allow-regroup).
COMMON = (
    "--classes 0 1 2 3 --steps 12 --checkpoint-every 3 --log-every 1 --devices cpu --threads 1"
).split()


def _last_line(run, k):
    path = run / f"class_{k:03d}" / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1]) if lines else {"step": 0}


def test_kill_9_of_a_rank_then_resume_on_three_ranks(tmp_path, digits_file):
    run, straight = tmp_path / "run", tmp_path / "straight"
    killed, job = run_timed(
        *tiny_args(digits_file, run, *COMMON, "--inject-fault", "kill:3:7"), ranks=2, timeout=120
    )
    assert killed.returncode != 0
    last = {k: _last_line(run, k) for k in range(4)}  # log_every 1: progress at the kill
    reached = {k: line["step"] for k, line in last.items()}
    # Class 3's step-7 line is its last before the kill.
    assert ended_promptly(job, last[3]["time_unix"]) is None
    # Finished = its final checkpoint is on disk (a rank may die between the last metrics line
    # and the final checkpoint).
    # Rank 0 may not have reached class 1 by then (the ranks run at their own pace).
    done_before = {
        k
        for k in range(4)
        if (run / f"class_{k:03d}" / "checkpoint.pt").exists()
        and read(run / f"class_{k:03d}" / "checkpoint.pt")["step"] == 12
    }
    assert reached[3] == 7 and 2 in done_before

    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=3)
    assert resumed.returncode == 0, resumed.stderr
    starts = {
        e["class_id"]: e["start_step"]
        for e in events(resumed.stdout)
        if e["event"] == "class_start"
    }
    assert not set(starts) & done_before  # finished classes are not retrained
    for k, start in starts.items():
        assert 0 <= reached[k] - start <= 3, (k, reached[k], start)  # one interval at most

    assert run_cli(*tiny_args(digits_file, straight, *COMMON)).returncode == 0
    for k in range(4):
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, run))
        assert a["step"] == b["step"] == 12
        assert all(torch.equal(a["G"][n], b["G"][n]) for n in a["G"]), k
