"""The `slurm` fixture's contract where Slurm is missing: the Slurm tests skip, except under
CI=true, where CI installs Slurm and a missing one is a failure, not a silent skip."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.parametrize("ci", ["", "true"])
def test_without_slurm_the_tests_skip_but_fail_under_ci(ci, tmp_path):
    # A PATH with no sbatch, srun, scontrol... (the daemons in /usr/sbin may still be found).
    env = {**os.environ, "PATH": str(tmp_path), "CI": ci, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/test_slurm.py", "-k", "srun_without_pmi2"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    if ci:
        assert result.returncode == 1, result.stdout
        assert "Slurm tests under CI=true: no " in result.stdout
    else:
        assert result.returncode == 0, result.stdout
        assert "1 skipped" in result.stdout and "install slurm-wlm and munge" in result.stdout
