"""A launcher from another MPI library than mpi4py's: every process is a job of one. Caught."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, foreign_mpiexec, open_mpi, own_lines

from distcgan.errors import UserError
from distcgan.mpi.launch import check_pmix, check_world, launcher_size


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


@pytest.mark.mpi
@pytest.mark.parametrize("module", ["distcgan", "data_prep"])
def test_both_entry_points_refuse_a_real_mismatched_launch(module, tmp_path):
    # A real mismatch: under MPICH, Debian's Open MPI mpiexec (a PMIx launcher) starting this
    # Python; under an Open MPI, pip's MPICH hydra. Each process is on its own, and says why.
    launcher = foreign_mpiexec()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    }
    out = tmp_path / "d.h5"
    args = ["info", str(out)] if module == "distcgan" else ["digits", "--out", str(out)]
    cmd = [launcher, "-n", "2", sys.executable, "-m", "mpi4py", "-m", module, *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert result.returncode != 0
    said = own_lines(result.stderr)
    if open_mpi():  # hydra's PMI_SIZE=2 to an Open MPI that initialises as a job of one
        want = "the launcher started 2 processes (PMI_SIZE=2) but MPI sees a job of 1: this"
    else:  # MPICH's MPI_Init would exit with an error stack: refused before it
        want = "a PMIx launcher (Open MPI's mpiexec, or srun --mpi=pmix) started this process"
    assert said and all(line.startswith(f"{module}: error") for line in said), result.stderr
    assert all(want in line for line in said), result.stderr
    assert len(said) <= 2  # once from each process
    assert "Traceback" not in result.stderr and not out.exists()


def test_an_mpich_without_pmix_refuses_a_pmix_launcher_before_initialising():
    mpich = "MPICH Version:      5.0.2\nMPICH configure:    --with-device=ch4:ofi --with-pm=hydra\n"
    with pytest.raises(UserError, match=r"mpi4py's MPI \(MPICH Version: 5.0.2\) is an MPICH"):
        check_pmix(mpich, {"PMIX_RANK": "0"})
    check_pmix(mpich, {})  # hydra, srun --mpi=pmi2, or no launcher
    check_pmix(mpich.replace("hydra", "hydra --with-pmi=pmix"), {"PMIX_RANK": "0"})
    check_pmix("Open MPI v5.0.11, package: Open MPI", {"PMIX_RANK": "0"})


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


def test_an_error_line_reaches_stderr_in_one_write(monkeypatch):
    # A launcher that forwards a rank's stderr may print its own text between two writes (Open
    # MPI 4.1 put its frame of dashes between our line and its newline): one write, newline in.
    import io

    from distcgan.errors import say

    class Writes(io.StringIO):
        calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", Writes())
    say("distcgan: error: what is wrong, and how to fix it")
    assert Writes.calls == ["distcgan: error: what is wrong, and how to fix it\n"]
