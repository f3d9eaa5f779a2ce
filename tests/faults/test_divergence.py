"""Fault 4: a NaN loss rolls the class back to its last good checkpoint and retries with a new
noise seed; a class that keeps diverging is given up after --max-retries with a clear message,
and the other classes finish."""

from __future__ import annotations

import json
import math

import pytest
from helpers import events, run_cli, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi

COMMON = "--classes 0 1 2 3 --steps 9 --checkpoint-every 3 --log-every 3".split()


@pytest.mark.launcher_neutral
def test_one_nan_rolls_back_and_the_class_finishes(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, *COMMON, "--inject-fault", "nan:1:4"), ranks=2)
    assert result.returncode == 0, result.stderr
    rollbacks = [e for e in events(result.stdout) if e["event"] == "rollback"]
    assert rollbacks == [
        {
            "rank": 0,
            "event": "rollback",
            "task": "class_001",
            "class_id": 1,
            "diverged_at": 6,
            "back_to": 3,
            "retry": 1,
        }
    ]
    summary = json.loads((run / "summary.json").read_text())
    assert [(c["status"], c["retries"]) for c in summary["classes"]] == [
        ("done", 0),
        ("done", 1),
        ("done", 0),
        ("done", 0),
    ]
    lines = [
        json.loads(x) for x in (run / "class_001" / "metrics.jsonl").read_text().split("\n") if x
    ]
    assert [m["step"] for m in lines] == [3, 6, 9]
    assert all(math.isfinite(m["loss_d"]) and math.isfinite(m["loss_g"]) for m in lines)


@pytest.mark.launcher_neutral
def test_a_class_that_keeps_diverging_is_given_up_and_the_others_finish(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(
        *tiny_args(digits_file, run, *COMMON, "--inject-fault", "nan-always:2:4"), ranks=2
    )
    assert result.returncode == 3
    assert "1 task(s) diverged and were given up (class_002); the others finished" in result.stderr
    assert "class 2 diverged: loss not finite by step 6" in result.stderr
    assert "after 2 rollback(s)" in result.stderr and "Traceback" not in result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["done", "done", "diverged", "done"]
    assert not summary["complete"]
    assert read(run / "class_002" / "checkpoint.pt")["step"] == 3  # the last good state is kept
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert resumed.returncode == 0, resumed.stderr  # without the fault, class 2 now finishes
    assert read(run / "class_002" / "checkpoint.pt")["step"] == 9


@pytest.mark.launcher_neutral
def test_a_stop_after_the_loss_went_bad_keeps_the_last_good_checkpoint(tmp_path, digits_file):
    """The scheduler's SIGTERM at step 15 of a rank alone, the loss non-finite since that step
    and not yet checked (the next log step is 20). The stop checkpointed those weights, and
    --resume then rolled back to them on every retry until the class was given up (exit 3)."""
    run = tmp_path / "run"
    common = ("--classes", "0", "--log-every", "10", "--checkpoint-every", "10", "--threads", "1")
    args = tiny_args(digits_file, run, *common, "--steps", "40", "--devices", "cpu")
    stopped = run_cli(*args, "--inject-fault", "nan-term:0:15", ranks=1)
    assert stopped.returncode == 75, stopped.stderr
    (event,) = [e for e in events(stopped.stdout) if e["event"] == "class_interrupted"]
    assert 15 <= event["step"] < 20 and event["checkpoint"] is False, event
    state = read(run / "class_000" / "checkpoint.pt")
    assert state["step"] == 10
    assert all(v.isfinite().all() for v in state["G"].values() if v.is_floating_point())
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=1)
    assert resumed.returncode == 0, resumed.stderr
    assert read(run / "class_000" / "checkpoint.pt")["step"] == 40
