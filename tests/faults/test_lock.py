"""Fault 7: a second job on a run directory in use is refused, and the lock does not outlive
its owner (a killed job leaves no stale lock)."""

from __future__ import annotations

import pytest
from helpers import run_cli, tiny_args

from distcgan.run import checkpoint

pytestmark = pytest.mark.mpi


def test_second_job_is_refused_and_a_killed_owner_leaves_no_lock(tmp_path, digits_file, background):
    run = tmp_path / "run"
    first = background(
        *tiny_args(digits_file, run, "--classes", "0", "1", "--steps", "100000"), ranks=2
    )
    first.wait_event("class_start", class_id=0)

    second = run_cli("train", "--run", str(run), "--resume", "--no-progress")
    assert second.returncode == 2
    assert "is in use by another job (host" in second.stderr
    third = run_cli(*tiny_args(digits_file, run, "--overwrite"))
    assert third.returncode == 2 and "is in use by another job" in third.stderr
    assert (run / "config.json").exists()  # --overwrite did not delete a live run

    first.kill()  # SIGKILL to mpiexec and both ranks: no cleanup code runs
    # To 4 steps, or the steps a class already trained if more (a resume cannot take steps back).
    trained = [checkpoint.read(p)["step"] for p in run.glob("class_*/checkpoint.pt")]
    steps = str(max([4, *trained]))
    # On 2 ranks as the first job: each started class keeps its threads (--resume's rule).
    again = run_cli("train", "--run", str(run), "--resume", "--steps", steps, "--no-progress",
                    ranks=2)  # fmt: skip
    assert again.returncode == 0, again.stderr
