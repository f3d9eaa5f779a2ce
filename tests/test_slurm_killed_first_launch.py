"""jobs/slurm.sbatch under the suite's one-node Slurm (tests/slurm_cluster.py) when one rank of
the job's first launch is killed (SIGKILL, as the OOM killer or a node failure would): the job's
`distcgan supervise` and a later `distcgan status` say the launch ended without a summary and how
to continue it (exit 1), not that the folder is not a run (exit 2)."""

from __future__ import annotations

import sys

import pytest
from helpers import REPO, launches, run_cli

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

TEMPLATE = REPO / "jobs" / "slurm.sbatch"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
CPU_JOB = ("--ntasks", "2", "--cpus-per-task", "1", "-t", "15")


def test_a_rank_killed_in_the_first_launch_is_said_by_supervise_and_status(
    slurm, tmp_path, digits_file
):
    run = tmp_path / "run"
    extra = "--classes 0 1 --steps 40 --threads 1 --inject-fault kill:1:3:1"
    env = {"PYTHONPATH": str(REPO), "PYTHON": sys.executable, "PRESET": "tiny"}
    env |= {"DATA": str(digits_file), "RUN": str(run), "EXTRA": extra}
    launches("jobs/slurm.sbatch")  # srun starts the ranks
    job = slurm.sbatch(*CPU_JOB, str(TEMPLATE), env=slurm.env(env), cwd=tmp_path)
    fields = slurm.wait_job(job, ENDED, 180)
    text = (tmp_path / f"distcgan.{job}.out").read_text()
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "1:0", "0")
    assert not (run / "summary.json").exists()
    said = [x for x in text.splitlines() if x.startswith("distcgan supervise:")]
    assert len(said) == 1, text
    advice = (
        f"{run}: launch 1 ended without a summary (a rank crashed or was killed; see the job's "
        f"log); continue with distcgan train --run {run} --resume (exit 1)"
    )
    assert said[0].startswith("distcgan supervise: the launcher exited ")
    assert said[0].endswith(f"the run directory says: {advice}")
    status = run_cli("status", "--run", str(run))
    assert (status.returncode, status.stderr.strip()) == (1, f"distcgan status: {advice}")
