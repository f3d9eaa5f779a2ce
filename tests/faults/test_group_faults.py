"""A data-parallel group of 3 ranks under a real `mpiexec -n 3` where one rank alone is hit: a
stop signal sent to that rank, or a NaN in that rank's loss. The group stops, or rolls back,
together at one step, its replicas stay equal, and nothing hangs (tests/test_loop.py checks the
same rules with a fake communicator)."""

from __future__ import annotations

import json
import math
import os
import signal
import time

import pytest
import torch
from helpers import ended_promptly, events, run_cli, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi

# One model trained by 3 ranks (gan mode: the group's task is "all", fault class -1).
GROUP = "--mode gan --classes 0 1 2 --devices cpu --threads 1".split()


def _replicas(stdout: str) -> list[dict]:
    return [e for e in events(stdout) if e["event"] == "replica"]


@pytest.mark.launcher_neutral
@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_a_nan_on_one_rank_of_a_group_rolls_the_whole_group_back(tmp_path, digits_file, schedule):
    # Under async too (that each rank takes back its own cached fakes is pinned by
    # test_schedule's data-parallel resume, which must equal a straight run).
    run = tmp_path / "run"
    args = [*GROUP, "--steps", "9", "--checkpoint-every", "3", "--log-every", "3"]
    args += ["--schedule", schedule]
    fault = ["--inject-fault", "nan:-1:4:2"]  # step 4, rank 2 only
    result = run_cli(*tiny_args(digits_file, run, *args, *fault), ranks=3, timeout=240)
    assert result.returncode == 0, result.stderr
    found = events(result.stdout)
    rollbacks = [e for e in found if e["event"] == "rollback"]
    assert sorted(e["rank"] for e in rollbacks) == [0, 1, 2], result.stdout
    assert {(e["diverged_at"], e["back_to"], e["retry"]) for e in rollbacks} == {(6, 3, 1)}
    replicas = _replicas(result.stdout)
    assert sorted(r["group_rank"] for r in replicas) == [0, 1, 2]
    assert len({(r["step"], r["g_sha256"], r["d_sha256"]) for r in replicas}) == 1
    summary = json.loads((run / "summary.json").read_text())
    assert [(c["status"], c["retries"], c["ranks"]) for c in summary["classes"]] == [
        ("done", 1, [0, 1, 2])
    ]
    lines = [json.loads(x) for x in (run / "all" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [3, 6, 9]
    assert all(math.isfinite(m["loss_d"]) and math.isfinite(m["loss_g"]) for m in lines)


@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_a_stop_signal_to_one_rank_of_a_group_stops_the_group_together(
    tmp_path, digits_file, background, schedule
):
    run = tmp_path / "run"
    args = [*GROUP, "--steps", "100000", "--log-every", "5", "--checkpoint-every", "100000"]
    args += ["--schedule", schedule]
    job = background(*tiny_args(digits_file, run, *args), ranks=3)
    job.wait_event("class_start", rank=2)
    time.sleep(0.5)
    pids = job.rank_pids()
    assert len(pids) == 3
    signalled = time.time()
    os.kill(pids[-1], signal.SIGUSR1)  # one rank of the three, as a node's own signal would be
    rc = job.wait(timeout=90)
    assert ended_promptly(job, signalled) is None
    stdout, stderr = "".join(job.stdout), "".join(job.stderr)
    assert rc == 75, stderr
    stopped = [e for e in events(stdout) if e["event"] == "class_interrupted"]
    assert len(stopped) == 3 and len({e["step"] for e in stopped}) == 1, stopped
    # The signalled rank names its signal; the two others stopped because a peer was asked.
    assert sorted(e["signal"] for e in stopped) == ["SIGUSR1", "peer", "peer"]
    step = stopped[0]["step"]
    assert step % 5 == 0  # at a log step, where the group can agree
    replicas = _replicas(stdout)
    assert len({(r["step"], r["g_sha256"], r["d_sha256"]) for r in replicas}) == 1
    assert len(replicas) == 3 and replicas[0]["step"] == step
    assert read(run / "all" / "checkpoint.pt")["step"] == step
    summary = json.loads((run / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["interrupted"]
    # The resubmitted job continues from that checkpoint on every rank.
    again = run_cli(
        "train", "--run", str(run), "--resume", "--steps", str(step + 5), "--no-progress", ranks=3
    )
    assert again.returncode == 0, again.stderr
    state = read(run / "all" / "checkpoint.pt")
    assert state["step"] == step + 5
    if schedule == "async":  # every rank's cached fakes, its own slice of the batch
        assert len(state["async_cache_ranks"]) == 3
    assert all(torch.isfinite(v).all() for v in state["G"].values() if v.is_floating_point())
