"""The launch templates (rendered as dry runs), the resubmit-resumes contract and the local
weak-scaling sweep."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, mpiexec

JOBS = REPO / "jobs"


def render(template: str, **env: str) -> list[str]:
    """The launcher command a template would run (checked to be wrapped in `distcgan supervise`
    on the same run directory, which turns the run's record into the job's exit code)."""
    full = {**os.environ, "DRY_RUN": "1", **env}
    out = subprocess.run(
        ["bash", str(JOBS / template)], env=full, capture_output=True, text=True, check=True
    )
    cmd = out.stdout.split()
    python = env.get("PYTHON", "python") if template == "local.sh" else "python"
    assert cmd[:7] == [python, "-m", "distcgan", "supervise", "--run", env["RUN"], "--"], cmd
    return cmd[7:]


def test_lsf_template_two_gpus_per_rank():
    cmd = render("lsf_jsrun.lsf", DATA="d.h5", RUN="runs/x", NODES="4")
    assert cmd[:15] == [
        "jsrun",
        "--nrs",
        "12",
        "--tasks_per_rs",
        "1",
        "--cpu_per_rs",
        "7",
        "--gpu_per_rs",
        "2",
        "--rs_per_host",
        "3",
        "--bind",
        "packed:7",
        "--smpiargs=-disable_gpu_hooks",
        "python",
    ]
    assert cmd[15:] == [
        "-m",
        "mpi4py",
        "-m",
        "distcgan",
        "train",
        "--preset",
        "digits",
        "--data",
        "d.h5",
        "--run",
        "runs/x",
        "--no-progress",
    ]


def test_lsf_template_one_gpu_per_rank_and_its_scheduler_settings():
    cmd = render("lsf_jsrun.lsf", DATA="d.h5", RUN="r", NODES="2", GPUS_PER_RANK="1")
    assert cmd[1:3] == ["--nrs", "12"] and "--gpu_per_rs" in cmd
    assert cmd[cmd.index("--gpu_per_rs") + 1] == "1"
    assert cmd[cmd.index("--rs_per_host") + 1] == "6"
    text = (JOBS / "lsf_jsrun.lsf").read_text()
    for line in ("#BSUB -wa USR1", '#BSUB -Q "75"', "HDF5_USE_FILE_LOCKING=FALSE"):
        assert line in text


def test_slurm_template_variants():
    cmd = render("slurm.sbatch", DATA="d.h5", RUN="r", NODES="3")
    assert cmd[:14] == [
        "srun",
        "--nodes",
        "3",
        "--ntasks",
        "6",
        "--ntasks-per-node",
        "2",
        "--gpus-per-task",
        "2",
        "--cpus-per-task",
        "32",
        "--cpu-bind=cores",
        "python",
        "-m",
    ]
    one = render(
        "slurm.sbatch",
        DATA="d.h5",
        RUN="r",
        NODES="3",
        GPUS_PER_RANK="1",
        GPUS_PER_NODE="4",
        CORES_PER_NODE="64",
    )
    assert one[one.index("--ntasks") + 1] == "12" and one[one.index("--gpus-per-task") + 1] == "1"
    assert "#SBATCH --signal=USR1@600" in (JOBS / "slurm.sbatch").read_text()


def test_local_template_and_resume_detection(tmp_path):
    run = tmp_path / "run"
    cmd = render("local.sh", DATA="d.h5", RUN=str(run), RANKS="3", EXTRA="--steps 5")
    assert cmd == [
        "mpiexec",
        "-n",
        "3",
        "python",
        "-m",
        "mpi4py",
        "-m",
        "distcgan",
        "train",
        "--preset",
        "digits",
        "--data",
        "d.h5",
        "--run",
        str(run),
        "--steps",
        "5",
    ]
    run.mkdir()
    (run / "config.json").write_text("{}")
    for template in ("local.sh", "lsf_jsrun.lsf", "slurm.sbatch"):
        assert "--resume" in render(template, DATA="d.h5", RUN=str(run), NODES="1")


def test_templates_refuse_missing_parameters():
    result = subprocess.run(
        ["bash", str(JOBS / "slurm.sbatch")],
        capture_output=True,
        text=True,
        env={**os.environ, "DRY_RUN": "1", "RUN": "r"},
    )
    assert result.returncode != 0 and "set DATA to the HDF5 data file" in result.stderr


@pytest.mark.mpi
def test_resubmitted_local_job_resumes_after_the_walltime_signal(tmp_path, digits_file, background):
    run = tmp_path / "run"
    env = {
        "DATA": str(digits_file),
        "RUN": str(run),
        "RANKS": "2",
        "PRESET": "tiny",
        "MPIEXEC": mpiexec(),
        "PYTHON": sys.executable,
        "EXTRA": "--classes 0 1 --steps 100000 --no-progress",
    }
    job = background(cmd=["bash", str(JOBS / "local.sh")], env=env)
    job.wait_event("class_start", class_id=1)
    time.sleep(1.5)  # some steps into both classes
    job.proc.send_signal(signal.SIGTERM)  # bash execs mpiexec: the signal reaches mpiexec
    assert job.wait(timeout=60) == 75
    env["EXTRA"] = "--steps 40 --no-progress"  # the resubmission (shorter, to end the test)
    again = subprocess.run(
        ["bash", str(JOBS / "local.sh")],
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert '"start_step": 0' not in again.stdout  # both classes continued from checkpoints


@pytest.mark.mpi
def test_local_weak_scaling_sweep_writes_csv_and_plot(tmp_path, digits_file):
    out = tmp_path / "weak"
    result = subprocess.run(
        [
            sys.executable,
            str(JOBS / "weak_scaling.py"),
            "--launcher",
            "local",
            "--ranks",
            "1",
            "2",
            "--data",
            str(digits_file),
            "--out",
            str(out),
            "--preset",
            "tiny",
            "--steps",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((out / "weak_scaling.csv").open()))
    assert [(r["ranks"], r["classes"]) for r in rows] == [("1", "1"), ("2", "2")]
    t1, t2 = (float(r["train_s_max"]) for r in rows)
    assert float(rows[0]["efficiency"]) == 1.0
    assert float(rows[1]["efficiency"]) == round(t1 / t2, 3)
    assert (out / "weak_scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
