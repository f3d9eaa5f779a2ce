"""A launcher from another MPI library than mpi4py's: every process is a job of one. Caught."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from distcgan.errors import UserError
from distcgan.mpi.launch import check_world, launcher_size


def test_launcher_size_reads_each_launchers_variable():
    assert launcher_size({}) is None
    assert launcher_size({"PMI_SIZE": "4"}) == ("PMI_SIZE", 4)
    assert launcher_size({"OMPI_COMM_WORLD_SIZE": "2"}) == ("OMPI_COMM_WORLD_SIZE", 2)
    assert launcher_size({"JSM_NAMESPACE_SIZE": "6"}) == ("JSM_NAMESPACE_SIZE", 6)
    assert launcher_size({"PMI_SIZE": ""}) is None


def test_only_a_world_of_one_under_a_bigger_launch_is_refused():
    check_world(1, {})  # plain `python -m distcgan`
    check_world(1, {"PMI_SIZE": "1"})  # srun -n 1
    check_world(4, {"PMI_SIZE": "4"})  # the normal case
    with pytest.raises(UserError, match=r"started 3 processes \(OMPI_COMM_WORLD_SIZE=3\) but MPI"):
        check_world(1, {"OMPI_COMM_WORLD_SIZE": "3"})


@pytest.mark.parametrize("module", ["distcgan", "data_prep"])
def test_both_entry_points_refuse_a_mismatched_launch(module, tmp_path):
    # What each process of a mismatched `mpiexec -n 2` sees: a launcher variable saying 2 and an
    # MPI that initialises as a job of one.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PMI_SIZE": "2"}
    args = ["info", "x.h5"] if module == "distcgan" else ["digits", "--out", str(tmp_path / "d.h5")]
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2
    assert "the launcher started 2 processes (PMI_SIZE=2) but MPI sees a job of 1" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "d.h5").exists()


def test_srun_without_pmi_is_caught_only_inside_a_job_step():
    step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2"}
    assert launcher_size(step) == ("SLURM_STEP_NUM_TASKS", 2)
    with pytest.raises(UserError, match=r"srun started 2 tasks .* `srun --mpi=pmi2`"):
        check_world(1, step)  # srun --mpi=pmix or none with pip's MPICH
    check_world(2, step)
    check_world(1, {**step, "SLURM_STEP_NUM_TASKS": "1"})
    # The batch script itself (no step): SLURM_NTASKS is the job's, not this process's launch.
    batch = {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    assert launcher_size(batch) is None
    check_world(1, batch)
    # Under --mpi=pmi2 srun sets PMI_SIZE too; PMI_SIZE comes first.
    assert launcher_size({**step, "PMI_SIZE": "2"}) == ("PMI_SIZE", 2)
