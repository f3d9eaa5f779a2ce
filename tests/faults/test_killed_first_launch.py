"""A first launch ended by `kill -9` of one rank, before rank 0 wrote any summary.json: `distcgan
status` and `distcgan supervise` say it ended without a summary and how to continue it (exit 1),
not that the folder is not a run (exit 2, which stays for a folder that is not one:
test_supervise.py). Under mpiexec here; under the
suite's Slurm, where the job template wraps srun in supervise, in test_slurm_killed_first_launch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, cli_command, run_cli, tiny_args

pytestmark = pytest.mark.mpi

# Class 1 trains on rank 1 (2 classes on 2 ranks); the fault SIGKILLs that rank at its step 3.
KILLED = ("--classes", "0", "1", "--steps", "40", "--threads", "1", "--devices", "cpu")
KILL = ("--inject-fault", "kill:1:3:1")


def ended_without_summary(run) -> str:
    return (
        f"distcgan status: {run}: launch 1 ended without a summary (a rank crashed or was killed; "
        f"see the job's log); continue with distcgan train --run {run} --resume (exit 1)"
    )


def test_status_after_kill_9_of_a_rank_in_the_first_launch(tmp_path, digits_file):
    run = tmp_path / "run"
    killed = run_cli(*tiny_args(digits_file, run, *KILLED, *KILL), ranks=2, timeout=180)
    assert killed.returncode != 0
    assert not (run / "summary.json").exists() and (run / "launches.jsonl").is_file()
    status = run_cli("status", "--run", str(run))
    assert (status.returncode, status.stderr.strip()) == (1, ended_without_summary(run))
    # The advice works: the resume trains both classes to the end.
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    assert run_cli("status", "--run", str(run)).returncode == 0


def test_supervise_around_mpiexec_whose_rank_is_killed(tmp_path, digits_file):
    run = tmp_path / "run"
    train = cli_command(*tiny_args(digits_file, run, *KILLED, *KILL), ranks=2)
    job = subprocess.run(
        [sys.executable, "-m", "distcgan", "supervise", "--run", str(run), "--", *train],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert job.returncode == 1, job.stderr
    said = [x for x in job.stderr.splitlines() if x.startswith("distcgan supervise:")]
    assert len(said) == 1, job.stderr
    assert said[0].startswith("distcgan supervise: the launcher exited ")
    assert said[0].endswith(
        f"the run directory says: {run}: launch 1 ended without a summary (a rank crashed or was "
        f"killed; see the job's log); continue with distcgan train --run {run} --resume (exit 1)"
    )
    assert "summary.json is missing" not in job.stderr
