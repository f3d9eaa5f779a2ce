"""Real multi-rank runs under `mpiexec -n 2`, `-n 3` and `-n 5` (the local mpich)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO, ended_promptly, mpiexec, open_mpi, run_cli, run_timed, tiny_args

from distcgan.data import load_class
from distcgan.env import cpu_kernels, cpu_model
from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"rank"')]


def test_two_ranks_train_their_own_classes(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--classes", "0", "1", "2", "3"), ranks=2)
    assert result.returncode == 0, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ranks"] == 2
    assert [(c["class_id"], c["rank"]) for c in summary["classes"]] == [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 1),
    ]
    done = {
        (e["rank"], e["class_id"]) for e in _events(result.stdout) if e["event"] == "class_done"
    }
    assert done == {(0, 0), (0, 1), (1, 2), (1, 3)}
    env = json.loads((run / "env.json").read_text())
    assert env["ranks"] == 2 and sum(env["hosts"].values()) == 2
    # Each rank's torch threads: its share of the node's cores, no more than its own (a launcher
    # that binds ranks gives each its cores; mpich's leaves both on all the test's cores). The
    # machine's CPUs bound them, not this process's: under `taskset -c 0`, Debian's Open MPI 4.1
    # bound its two ranks to cores 0 and 1 (node_cores 2 where this process had 1).
    machine = os.cpu_count() or 1  # logical CPUs: an upper bound on physical cores
    for r in env["ranks_detail"]:
        # The CPU each rank ran on, and the kernels torch chose there: the same seed trained on
        # another CPU is not the same run (README, "Augmenting what D sees"). The model may be
        # "" (an aarch64 /proc/cpuinfo has no model name): compared, not required.
        assert (r["cpu"], r["cpu_kernels"]) == (cpu_model(), cpu_kernels()), r
        assert 1 <= r["cores"] <= r["node_cores"] <= machine, r
        assert r["threads"] == max(1, min(r["cores"], r["node_cores"] // 2)), r
    assert sum(r["threads"] for r in env["ranks_detail"]) <= max(
        2, env["ranks_detail"][0]["node_cores"]
    )


def test_three_ranks_dry_run_prints_the_plan_and_writes_nothing(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--dry-run"), ranks=3)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "resolved config:" in out and "batch_size = 16" in out
    assert "per-class: 10 G/D pair(s) for 10 classes on 3 ranks" in out
    rows = [line.split() for line in out.splitlines() if line[:2] in ("0 ", "1 ", "2 ")]
    assert [r[4] for r in rows] == ["0,1,2,3", "4,5,6", "7,8,9"]  # classes
    assert [r[5] for r in rows] == ["0", "1", "2"]  # each rank alone
    # With no GPU everything runs on the CPU; three ranks sharing one GPU all use cuda:0.
    dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert all(r[6:8] == [dev, dev] for r in rows)
    fused = "-" if dev == "cpu" else None  # auto: no fusion on a CPU
    assert fused is None or [r[-1] for r in rows] == [fused] * 3
    assert not run.exists()


def test_the_dry_run_shows_the_fused_groups(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--dry-run", "--fuse", "3"), ranks=2)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line[:2] in ("0 ", "1 ")]
    # 5 classes a rank at --fuse 3: two balanced groups, 3 + 2
    assert [r[-1] for r in rows] == ["[0,1,2][3,4]", "[5,6,7][8,9]"]
    assert "fused: the classes each rank trains at once" in result.stdout
    assert not run.exists()


@pytest.mark.launcher_neutral
def test_a_class_trains_the_same_on_one_rank_or_five(tmp_path, digits_file):
    alone, five = tmp_path / "alone", tmp_path / "five"
    r1 = run_cli(
        *tiny_args(digits_file, alone, "--classes", "3", "--threads", "1", "--devices", "cpu")
    )
    r5 = run_cli(
        *tiny_args(
            digits_file,
            five,
            "--classes",
            "0",
            "1",
            "2",
            "3",
            "4",
            "--threads",
            "1",
            "--devices",
            "cpu",
        ),
        ranks=5,
    )
    assert r1.returncode == 0 and r5.returncode == 0, r1.stderr + r5.stderr
    summary = json.loads((five / "summary.json").read_text())
    assert summary["classes"][3]["rank"] == 3
    a, b = (read(r / "class_003" / "checkpoint.pt") for r in (alone, five))
    for key in a["G"]:
        assert torch.equal(a["G"][key], b["G"][key]), key


@pytest.mark.launcher_neutral
def test_resume_on_a_different_number_of_ranks_matches_a_straight_run(tmp_path, digits_file):
    straight, split = tmp_path / "straight", tmp_path / "split"
    classes = "--classes 0 1 2 --threads 1 --checkpoint-every 4 --devices cpu".split()
    assert run_cli(*tiny_args(digits_file, straight, *classes, "--steps", "8")).returncode == 0
    first = run_cli(*tiny_args(digits_file, split, *classes, "--steps", "4"), ranks=2)
    assert first.returncode == 0, first.stderr
    second = run_cli(
        "train", "--run", str(split), "--resume", "--steps", "8", "--no-progress", ranks=3
    )
    assert second.returncode == 0, second.stderr
    for k in range(3):
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, split))
        assert a["step"] == b["step"] == 8
        assert all(torch.equal(a["G"][n], b["G"][n]) for n in a["G"]), k


def test_an_exception_on_rank_1_ends_the_job_promptly(tmp_path, digits_file):
    # Rank 1 fails at its first class's second step. Rank 0 would train for longer than the
    # wait's timeout on any machine (10^6 steps), so only the abort can end the job in time.
    result, job = run_timed(
        *tiny_args(
            digits_file,
            tmp_path / "run",
            "--classes",
            "0",
            "1",
            "--steps",
            "1000000",
            "--inject-fault",
            "raise:1:1",
        ),
        ranks=2,
        timeout=120,
    )
    assert result.returncode != 0
    said = "distcgan: rank 1 (class 1) failed: RuntimeError: injected fault"
    assert said in result.stderr
    assert ended_promptly(job, job.line_time(said)) is None


def test_a_failure_while_other_ranks_wait_in_a_collective_ends_the_job(tmp_path, digits_file):
    # Rank 0 finishes its classes and waits to gather results; rank 1 fails on its second class.
    result, job = run_timed(
        *tiny_args(
            digits_file,
            tmp_path / "run",
            "--classes",
            "0",
            "1",
            "2",
            "3",
            "--inject-fault",
            "raise:3:4",
        ),
        ranks=2,
        timeout=120,
    )
    assert result.returncode != 0
    assert "rank 1 (class 3) failed" in result.stderr
    assert ended_promptly(job, job.line_time("rank 1 (class 3) failed")) is None


def test_bad_input_under_mpi_is_reported_once(tmp_path, digits_file):
    result = run_cli(
        "train", "--run", str(tmp_path / "r"), "--data", str(tmp_path / "no.h5"), ranks=2
    )
    assert result.returncode == 2
    assert result.stderr.count("does not exist") == 1, result.stderr
    assert "Traceback" not in result.stderr and "Abort" not in result.stderr
    result = run_cli(
        *tiny_args(digits_file, tmp_path / "r", "--batch-size", "15", "--grad-accum", "2"), ranks=2
    )
    assert result.returncode == 2
    assert result.stderr.count("a rank's batch of 15 does not split into grad_accum=2") == 1


@pytest.mark.launcher_neutral
def test_sampling_under_mpi_matches_one_process(tmp_path, digits_file):
    # Classes out of order: rank 1 owns 5 then 3, which rank 0 writes as 3 then 5 (rank 1 sent
    # them in its own order, and class 5's images were written as class 3's).
    run = tmp_path / "run"
    classes = ("2", "7", "5", "3")
    assert run_cli(*tiny_args(digits_file, run, "--classes", *classes)).returncode == 0
    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    assert (
        run_cli("sample", "--run", str(run), "--per-class", "9", "--out", str(one)).returncode == 0
    )
    r2 = run_cli("sample", "--run", str(run), "--per-class", "9", "--out", str(two), ranks=2)
    assert r2.returncode == 0, r2.stderr
    for k in map(int, classes):
        assert (load_class(str(one), k) == load_class(str(two), k)).all(), k


def test_a_rank_that_reaches_its_exit_late_is_not_killed_and_the_code_stays(tmp_path):
    """An agreed error ends every rank with its code. Rank 1 here comes to its exit 1.5 s after
    rank 0 (a rank the scheduler put aside under load): under MPICH, a rank that skipped the
    library's exit hook made hydra SIGKILL the other, and mpiexec could return 9, not 2."""
    if open_mpi():
        pytest.skip("Open MPI's mpiexec ends the job at the first non-zero exit, by design")
    marker = tmp_path / "rank1-exited"
    script = tmp_path / "late.py"
    script.write_text(
        "import time\n"
        "from mpi4py import MPI\n"
        "from distcgan.mpi.exits import exit_process\n"
        "if MPI.COMM_WORLD.rank == 1:\n"
        "    finalize = MPI.Finalize\n"
        "    def late():\n"
        "        finalize()\n"
        "        time.sleep(1.5)\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "    MPI.Finalize = late\n"
        "exit_process(2)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(script)]
    for _ in range(3):
        marker.unlink(missing_ok=True)
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert marker.exists(), "rank 1 was killed before its exit: " + result.stdout
