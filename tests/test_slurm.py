"""jobs/slurm.sbatch under a real Slurm (the one-node cluster of tests/slurm_cluster.py), with real
sbatch, srun, scontrol and scancel: a CPU job to the end, Slurm's own time-limit warning with the
requeue and a bit-exact resume, scancel then resume, bad input, and srun without PMI-2.

Run with `-s` to see the measured seconds from sbatch to the first step and of the requeue."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
import torch
from helpers import REPO, events, launches, run_cli, tiny_args

from distcgan.run.checkpoint import read
from distcgan.run.rundir import RunDir

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

TEMPLATE = REPO / "jobs" / "slurm.sbatch"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
# A CPU partition's job (docs/cluster.md's lines themselves run in test_cluster_doc.py). A time
# limit above the template's 600 s warning lead: under it Slurm sends the warning at its first
# check, maybe while the ranks still import torch.
CPU_JOB = ("--ntasks", "2", "--cpus-per-task", "1", "-t", "15")


def job_env(slurm, **env: str) -> dict[str, str]:
    """What a job of the template gets: this checkout's package and Python, the tiny preset."""
    base = {"PYTHONPATH": str(REPO), "PYTHON": sys.executable, "PRESET": "tiny"}
    return slurm.env({**base, **env})


def submit(slurm, cwd: Path, *sbatch_args: str, **env: str) -> int:
    return slurm.sbatch(*sbatch_args, str(TEMPLATE), env=job_env(slurm, **env), cwd=cwd)


def log(cwd: Path, job: int) -> str:
    path = cwd / f"distcgan.{job}.out"  # the template's #SBATCH --output, in the submit folder
    return path.read_text() if path.exists() else ""


def metrics_lines(run: Path, class_id: int) -> int:
    path = run / f"class_{class_id:03d}" / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(ready, what: str, timeout: float) -> float:
    """Poll `ready()` every 0.1 s; returns the monotonic time at which it held."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)
    return time.monotonic()


def own_lines(text: str) -> list[str]:
    """A job log's lines without srun's own notices ("srun: error: ... Exited with exit code 2",
    "srun: cluster configuration lacks support for cpu binding")."""
    return [x for x in text.splitlines() if x.strip() and not x.startswith("srun: ")]


def test_cpu_job_trains_two_ranks_to_the_end(slurm, tmp_path, digits_file):
    run = tmp_path / "run"
    t0 = time.monotonic()
    extra = "--classes 0 1 --steps 6 --log-every 1"
    job = submit(slurm, tmp_path, *CPU_JOB, DATA=str(digits_file), RUN=str(run), EXTRA=extra)
    first = wait_for(lambda: metrics_lines(run, 0) > 0, "the first step", 180)
    fields = slurm.wait_job(job, ENDED, 180)
    text = log(tmp_path, job)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert "(2 classes on 2 ranks" in text  # one world of 2 (srun --mpi=pmi2), not two of 1
    status = run_cli("status", "--run", str(run))
    assert status.returncode == 0 and "complete, 2 task(s) done" in status.stdout
    print(f"\nslurm: sbatch to the first training step {first - t0:.1f} s")


def test_gpu_partition_line_gives_srun_the_allocations_gpus(slurm, tmp_path):
    # A GPU partition's line (two GPUs a rank) on the test node's stand-in GPUs; DRY_RUN=1 prints
    # srun's line from inside the real allocation.
    gpu_job = ("--ntasks", "2", "--ntasks-per-node", "2", "--gpus-per-task", "2")
    job = submit(
        slurm, tmp_path, *gpu_job, "--cpus-per-task", "1", "-t", "15",
        DATA="d.h5", RUN=str(tmp_path / "run"), DRY_RUN="1",
    )  # fmt: skip
    fields = slurm.wait_job(job, ENDED, 60)
    cmd = log(tmp_path, job).split()
    assert fields["JobState"] == "COMPLETED", cmd
    srun = cmd[cmd.index("srun") : cmd.index("--cpu-bind=cores")]
    assert srun == ["srun", "--mpi=pmi2", "--ntasks", "2", "--cpus-per-task", "1", "--wait=60",
                    "--ntasks-per-node", "2", "--gpus-per-task", "2"]  # fmt: skip


def _runtime_s(text: str) -> int:
    """`scontrol`'s RunTime ([D-]HH:MM:SS) in seconds."""
    days, _, hms = text.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def _task_pids(slurm, job: int) -> list[int]:
    """The pids of the job's srun tasks (the ranks), from `scontrol listpids`."""
    rows = [x.split() for x in slurm.run("scontrol", "listpids", str(job)).stdout.splitlines()]
    return [int(r[0]) for r in rows[1:] if len(r) == 5 and r[2] != "batch" and r[3] != "-"]


def _signalled(pid: int, sig: signal.Signals) -> bool:
    """Whether stopped process `pid` got `sig`: pending, or already let run on (slurmstepd sends
    SIGCONT with the signals it delivers) or gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    fields = dict(x.split(":", 1) for x in status.splitlines() if ":" in x)
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return not fields["State"].strip().startswith("T") or bool(pending >> (sig - 1) & 1)


def test_time_limit_warning_checkpoints_requeues_and_resumes_bit_exact(
    slurm, tmp_path, digits_file, background
):
    run, straight = tmp_path / "run", tmp_path / "straight"
    extra = "--classes 0 1 --steps 40 --threads 1 --checkpoint-every 10 --log-every 1"
    # The uninterrupted run to compare with, alongside (it fills the job's waits).
    reference = background(*tiny_args(digits_file, straight, *extra.split()), ranks=2)
    job = submit(
        slurm, tmp_path, *CPU_JOB, "-t", "10", "--signal=USR1@100",
        DATA=str(digits_file), RUN=str(run), EXTRA=extra,
    )  # fmt: skip
    wait_for(lambda: min(metrics_lines(run, k) for k in (0, 1)) >= 3, "training to start", 180)
    # Once both ranks train, a time limit that ends in 40-100 s: inside the 100 s lead, so Slurm
    # sends its warning at its next time-limit check (every 30 s), before the limit kills. The
    # ranks wait for it stopped (SIGSTOP), so that the run outlasts the limit on any machine.
    ranks = _task_pids(slurm, job)
    assert len(ranks) == 2
    for pid in ranks:
        os.kill(pid, signal.SIGSTOP)
    try:
        minutes = math.ceil((_runtime_s(slurm.job(job)["RunTime"]) + 40) / 60)
        slurm.run("scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}")
        wait_for(lambda: all(_signalled(p, signal.SIGUSR1) for p in ranks), "the warning", 90)
    finally:
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    t_stop = wait_for(lambda: "requeueing job" in log(tmp_path, job), "the exit 75", 120)
    wait_for(lambda: slurm.job(job)["Restarts"] == "1", "the requeue", 60)
    # The requeued job keeps its 1-2 minute limit, inside the lead: it would be warned at once
    # and requeued again, and again. Give the resumed part room to finish.
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=10")
    wait_for(lambda: RunDir(run).count_launches() == 2, "the requeued job to start", 120)
    before = (run / "class_000" / "metrics.jsonl").stat().st_mtime_ns
    t_resumed = wait_for(
        lambda: (run / "class_000" / "metrics.jsonl").stat().st_mtime_ns > before,
        "the requeued job's first step",
        120,
    )
    fields = slurm.wait_job(job, ENDED, 300)
    text = log(tmp_path, job)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), text
    stopped = [e for e in events(text) if e["event"] == "class_interrupted"]
    assert sorted(e["class_id"] for e in stopped) == [0, 1], text  # every rank checkpointed
    assert all(e["signal"] == "SIGUSR1" and 0 < e["step"] < 40 for e in stopped), stopped
    # Both parts in one log (--open-mode=append); the second starts where the first stopped.
    assert text.count("run directory:") == 2, text
    starts = [e for e in events(text) if e["event"] == "class_start"][2:]
    assert {e["class_id"]: e["start_step"] for e in starts} == {
        e["class_id"]: e["step"] for e in stopped
    }
    assert run_cli("status", "--run", str(run)).returncode == 0
    assert reference.wait(timeout=300) == 0
    for k in (0, 1):
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, run))
        assert a["step"] == b["step"] == 40
        assert all(torch.equal(a[net][n], b[net][n]) for net in ("G", "D") for n in a[net]), k
    print(f"\nslurm: exit 75 to the requeued job's first step {t_resumed - t_stop:.1f} s")


def test_scancel_leaves_a_run_that_resume_continues(slurm, tmp_path, digits_file):
    run = tmp_path / "run"
    extra = "--classes 0 1 --steps 100000 --threads 1 --checkpoint-every 5 --log-every 1"
    job = submit(slurm, tmp_path, *CPU_JOB, DATA=str(digits_file), RUN=str(run), EXTRA=extra)
    wait_for(lambda: min(metrics_lines(run, k) for k in (0, 1)) >= 6, "a checkpoint", 180)
    slurm.run("scancel", str(job))
    fields = slurm.wait_job(job, ENDED, 60)
    assert (fields["JobState"], fields["Restarts"]) == ("CANCELLED", "0")  # not requeued
    reached = {k: read(run / f"class_{k:03d}" / "checkpoint.pt")["step"] for k in (0, 1)}
    assert min(reached.values()) >= 5
    steps = max(reached.values()) + 3
    again = submit(
        slurm, tmp_path, *CPU_JOB,
        DATA=str(digits_file), RUN=str(run), EXTRA=f"--steps {steps} --log-every 1",
    )  # fmt: skip
    fields = slurm.wait_job(again, ENDED, 180)
    text = log(tmp_path, again)
    assert fields["JobState"] == "COMPLETED", text
    starts = {e["class_id"]: e["start_step"] for e in events(text) if e["event"] == "class_start"}
    assert starts == reached  # each class went on from its checkpoint
    assert run_cli("status", "--run", str(run)).returncode == 0


@pytest.mark.parametrize("case", ["missing PRESET", "missing DATA", "not our data file"])
def test_bad_input_fails_in_one_line_with_exit_2_and_is_not_requeued(
    slurm, tmp_path, digits_file, case
):
    run, data = tmp_path / "run", tmp_path / "empty.h5"
    h5py.File(data, "w").close()  # a valid HDF5 file without our layout
    env = job_env(slurm, RUN=str(run), DATA=str(data), EXTRA="--classes 0 1")
    if case.startswith("missing"):
        del env[case.split()[1]]
    job = slurm.sbatch(*CPU_JOB, str(TEMPLATE), env=env, cwd=tmp_path)
    fields = slurm.wait_job(job, ENDED, 120)
    lines = own_lines(log(tmp_path, job))
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "2:0", "0")
    assert len(lines) == 1, lines
    if case == "missing PRESET":  # no default preset: the job says so at once
        assert lines[0] == (
            "slurm.sbatch: error: set PRESET to the preset of your data, one of digits, mnist, "
            "cifar10, cifar100, imagenet32, imagenet64, tiny (PRESET=imagenet32 "
            "DATA=/path/data.h5 RUN=runs/name sbatch ...)"
        )
    elif case == "missing DATA":
        assert lines[0].startswith("slurm.sbatch: error: set DATA to the HDF5 data file")
    else:
        assert lines[0].startswith(
            f"distcgan: error: data file {data} has no 'images' dataset, so it is not in the "
            "class-partitioned layout"
        )


def test_srun_without_pmi2_is_one_line_not_two_jobs_of_one(slurm, tmp_path, digits_file):
    cmd = [sys.executable, "-m", "distcgan", "info", str(digits_file)]
    env = slurm.env({"PYTHONPATH": str(REPO)})
    # (Under --mpi=pmi2 the same is one world of 2: test_cpu_job_trains_two_ranks_to_the_end.)
    bad = slurm.run("srun", "--mpi=none", "-n", "2", *cmd, env=env, timeout=120, check=False)
    assert bad.returncode == 2
    lines = set(own_lines(bad.stderr))  # each world of 1 is its own rank 0, so each says it
    assert lines == {
        "distcgan: error: srun started 2 tasks (SLURM_STEP_NUM_TASKS=2) but MPI sees a "
        "job of 1: srun gave MPI no process-management interface it speaks; launch with "
        "`srun --mpi=pmi2` (pip's MPICH, most MPICH and Intel MPI builds) or the --mpi your MPI "
        "was built for (`srun --mpi=list` names the choices)"
    }, bad.stderr


def test_weak_scaling_sweep_through_slurm_then_a_rerun_skips_what_is_done(
    slurm, tmp_path, digits_file
):
    out = tmp_path / "weak"
    launches("jobs/weak_scaling.py --launcher slurm")  # its own sbatch
    cmd = [
        sys.executable, str(REPO / "jobs" / "weak_scaling.py"), "--launcher", "slurm",
        "--ranks", "1", "2", "--data", str(digits_file), "--out", str(out), "--preset", "tiny",
        "--steps", "4", "--extra", "--threads 1", "--gpus-per-rank", "0",
        "--ranks-per-node", "2", "--walltime", "15", "--wait",
    ]  # fmt: skip
    first = subprocess.run(
        cmd, env=job_env(slurm), capture_output=True, text=True, timeout=400, cwd=tmp_path
    )
    assert first.returncode == 0, first.stdout + first.stderr
    rows = list(csv.DictReader((out / "weak_scaling.csv").open()))
    assert [(r["ranks"], r["classes"], r["nodes"]) for r in rows] == [
        ("1", "1", "1"),
        ("2", "2", "1"),
    ]
    assert (out / "weak_scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list(out.glob("ranks_0000[12].*.out"))) == 2  # each size's job log beside its run
    again = subprocess.run(
        cmd, env=job_env(slurm), capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    for r in (1, 2):
        assert f"{out / f'ranks_{r:05d}'}: complete, skipped" in again.stdout
        assert RunDir(out / f"ranks_{r:05d}").count_launches() == 1
    assert "sbatch" not in again.stdout  # nothing submitted
