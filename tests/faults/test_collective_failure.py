"""Fault 5: a rank that fails while the others wait in a collective (sample gathering, the
end-of-training gather) ends the whole job promptly, naming the rank and the class."""

from __future__ import annotations

import pytest
from helpers import ended_promptly, run_cli, run_timed, tiny_args

pytestmark = pytest.mark.mpi


def test_failure_during_sample_gathering_aborts_the_job(tmp_path, digits_file):
    run = tmp_path / "run"
    assert run_cli(*tiny_args(digits_file, run, "--classes", "0", "1", "2")).returncode == 0
    # Rank 0 samples class 0 and 1 and waits to gather; rank 1 fails on class 2.
    result, job = run_timed(
        "sample",
        "--run",
        str(run),
        "--per-class",
        "4",
        "--out",
        str(tmp_path / "s.h5"),
        "--inject-fault",
        "raise:2:0",
        ranks=2,
        timeout=120,
    )
    assert result.returncode != 0
    said = "distcgan: rank 1 (class 2) failed: RuntimeError: injected fault"
    assert said in result.stderr
    assert ended_promptly(job, job.line_time(said)) is None
    assert not (tmp_path / "s.h5").exists()
