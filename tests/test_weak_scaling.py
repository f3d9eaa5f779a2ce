"""jobs/weak_scaling.py: the submit lines it builds (walltime, nodes, exactly R ranks, submit
args, the LSF template as bsub's argument) as dry runs, and the rerun contract with the local
launcher. The sweep through a real Slurm is in test_slurm.py."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import REPO, launches

from distcgan.options import walltime_minutes
from distcgan.run.rundir import RunDir

SWEEP = REPO / "jobs" / "weak_scaling.py"


def _module():
    spec = importlib.util.spec_from_file_location("weak_scaling", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SWEEP), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def dry_run(*args: str) -> list[list[str]]:
    """The submit commands the sweep would run, split into words."""
    result = sweep("--dry-run", "--data", "d.h5", "--preset", "imagenet32", *args)
    assert result.returncode == 0, result.stderr
    return [line.split() for line in result.stdout.splitlines()]


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_walltime_is_minutes_in_each_schedulers_format():
    assert walltime_minutes("0:30") == 30 and walltime_minutes("90") == 90
    assert walltime_minutes("2:00") == 120
    for bad in ("0:5", "1:30:00", "abc"):
        with pytest.raises(argparse.ArgumentTypeError, match="give H:MM"):
            walltime_minutes(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="at least one minute"):
        walltime_minutes("0:00")
    # The default 0:30 was handed to sbatch -t as typed: 30 seconds there.
    (slurm,) = dry_run("--launcher", "slurm", "--ranks", "2")
    assert option(slurm, "-t") == "0:30:00"
    (lsf,) = dry_run("--launcher", "lsf", "--ranks", "2", "--walltime", "90")
    assert option(lsf, "-W") == "1:30"


def test_exactly_r_ranks_on_the_templates_nodes():
    # Slurm: 4 GPUs a node, 2 per rank (G and D) -> 2 ranks a node; 1,000 classes, 1,000 ranks.
    cmds = dry_run("--launcher", "slurm", "--ranks", "1", "8", "1000")
    assert [(option(c, "--ntasks"), option(c, "--nodes")) for c in cmds] == [
        ("1", "1"),
        ("8", "4"),
        ("1000", "500"),
    ]
    # no more a node than the job has (Slurm refuses --ntasks 1 --ntasks-per-node 2 with GPUs)
    assert [option(c, "--ntasks-per-node") for c in cmds] == ["1", "2", "2"]
    assert all(option(c, "--gpus-per-task") == "2" for c in cmds)
    # LSF on Summit: 6 GPUs a node -> 3 ranks of 2 GPUs, or 6 of 1; the ranks themselves go to
    # the template as RANKS (334 nodes x 3 would be 1,002 ranks).
    (two,) = dry_run("--launcher", "lsf", "--ranks", "1000")
    (one,) = dry_run("--launcher", "lsf", "--ranks", "1000", "--gpus-per-rank", "1")
    assert option(two, "-nnodes") == "334" and option(one, "-nnodes") == "167"
    # The templates' rule (distcgan/run/jobplan.py), so that the LSF template agrees: CPU-only
    # ranks are 6 of 7 cores a node there.
    ws = _module()
    for gpus, per_node in (("2", 3), ("1", 6), ("0", 6)):
        args = ws.parse_args(
            ["--launcher", "lsf", "--ranks", "1", "--gpus-per-rank", gpus, "--preset", "tiny"]
        )
        assert ws.plan(args, 13).ranks_per_node == per_node
    assert ws.plan(args, 13).nodes == 3


def test_cpu_partition_asks_for_no_gpus():
    (cmd,) = dry_run(
        "--launcher", "slurm", "--ranks", "3", "--gpus-per-rank", "0",
        "--ranks-per-node", "2", "--cpus-per-rank", "4",
    )  # fmt: skip
    assert "--gpus-per-task" not in cmd
    assert (option(cmd, "--nodes"), option(cmd, "--cpus-per-task")) == ("2", "4")
    result = sweep(
        "--dry-run", "--launcher", "slurm", "--ranks", "2", "--gpus-per-rank", "0",
        "--preset", "tiny",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "weak_scaling: with --gpus-per-rank 0 (CPUs), give --ranks-per-node"
    )


def test_submit_args_as_the_docs_write_them_and_the_lsf_template_as_bsubs_argument():
    # argparse took "-A" for an option of its own; now one string, split like a shell.
    (slurm,) = dry_run("--launcher", "slurm", "--ranks", "2", "--submit-args=-A PROJ -p gpu")
    assert slurm[-5:] == ["-A", "PROJ", "-p", "gpu", str(REPO / "jobs" / "slurm.sbatch")]
    (same,) = dry_run("--launcher", "slurm", "--ranks", "2", "--submit-args", "-A PROJ")
    assert same[-3:-1] == ["-A", "PROJ"]
    # `bsub [options] jobs/lsf_jsrun.lsf`, the form Summit takes (`bsub < script` will not work
    # there); nothing on stdin.
    (lsf,) = dry_run("--launcher", "lsf", "--ranks", "2", "--submit-args=-P PROJ")
    assert lsf == ["bsub", "-nnodes", "1", "-W", "0:30", "-P", "PROJ",
                   str(REPO / "jobs" / "lsf_jsrun.lsf")]  # fmt: skip
    assert "stdin" not in SWEEP.read_text()


@pytest.mark.mpi
def test_rerun_continues_skips_what_is_done_and_overwrite_measures_afresh(tmp_path, digits_file):
    out, run = tmp_path / "weak", tmp_path / "weak" / "ranks_00001"
    launches("jobs/weak_scaling.py --launcher local")

    def local(steps: int, *more: str) -> subprocess.CompletedProcess[str]:
        result = sweep(
            "--launcher", "local", "--ranks", "1", "--data", str(digits_file), "--out", str(out),
            "--preset", "tiny", "--steps", str(steps), "--extra", "--threads 1", *more,
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert (out / "weak_scaling.csv").exists()
        return result

    def starts(result) -> list[int]:
        return [
            json.loads(x)["start_step"]
            for x in result.stdout.splitlines()
            if '"event": "class_start"' in x
        ]

    assert starts(local(4)) == [0]
    # More steps into the same --out: the template's --resume continues from step 4 (the sweep
    # used to add --overwrite as well, which train refuses beside --resume).
    assert starts(local(6)) == [4] and RunDir(run).count_launches() == 2
    skipped = local(6)  # complete at 6 steps: nothing runs, the CSV is written again
    assert f"{run}: complete, skipped" in skipped.stdout and RunDir(run).count_launches() == 2
    assert starts(local(6, "--overwrite")) == [0] and RunDir(run).count_launches() == 1


def test_a_walltime_within_the_templates_warning_lead_is_refused():
    # The templates warn 10 minutes before the limit: a 10-minute job would be warned at its
    # start, stop and requeue itself without training, part after part.
    result = sweep(
        "--dry-run", "--launcher", "slurm", "--ranks", "2", "--walltime", "10", "--preset", "tiny"
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--walltime 10 min is within the templates' 10-minute warning lead: every part of each "
            "job would be warned at once and requeued without training; give more than 10 minutes"
        )
    )
    assert dry_run("--launcher", "lsf", "--ranks", "2", "--walltime", "11")


def test_collect_refuses_a_run_that_did_not_complete(tmp_path):
    # A launch stopped by a signal writes a summary too; its tasks have no "steps" to count.
    run = tmp_path / "weak" / "ranks_00001"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "launches.jsonl").write_text("{}\n")
    tasks = [{"task": "class_000", "status": "interrupted", "rank": 0}]
    summary = {"format_version": 1, "launch": 1, "classes": tasks}
    (run / "summary.json").write_text(json.dumps(summary))
    result = sweep("--collect", "--ranks", "1", "--out", str(tmp_path / "weak"))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"weak_scaling: ranks [1] under {tmp_path / 'weak'} are not complete")
    assert "stopped by a signal" in line and line.endswith("run the sweep again to continue them")


@pytest.mark.mpi
def test_classes_per_rank_gives_each_rank_k_classes(tmp_path, digits_file):
    """K = 2: size R trains classes 0..2R-1, each rank its 2 fused; the CSV says so, and a rerun
    into the same --out at another K is refused in one line."""
    out = tmp_path / "weak"
    launches("jobs/weak_scaling.py --launcher local")  # mpiexec -n 1, then -n 2
    ws = _module()
    args = ws.parse_args(["--ranks", "1", "2", "--classes-per-rank", "2", "--preset", "tiny"])
    assert [ws.size_classes(args, r) for r in (1, 2)] == [[0, 1], [0, 1, 2, 3]]
    assert dry_run("--ranks", "2", "--classes-per-rank", "2")[0][:2] == [
        "RANKS=2",
        "CLASSES_PER_RANK=2",
    ]
    common = ("--launcher", "local", "--data", str(digits_file), "--out", str(out), "--preset",
              "tiny", "--steps", "4", "--extra", "--threads 1 --devices cpu")  # fmt: skip
    result = sweep(*common, "--ranks", "1", "2", "--classes-per-rank", "2", timeout=300)
    assert result.returncode == 0, result.stderr
    fused = [json.loads(x)["classes"] for x in result.stdout.splitlines() if '"fused"' in x]
    assert sorted(fused) == [[0, 1], [0, 1], [2, 3]]
    rows = list(csv.DictReader((out / "weak_scaling.csv").open()))
    assert [(r["ranks"], r["classes"], r["classes_per_rank"]) for r in rows] == [
        ("1", "2", "2"),
        ("2", "4", "2"),
    ]
    for r in (1, 2):
        summary = RunDir(out / f"ranks_{r:05d}").read_summary()
        assert [c["class_id"] for c in summary["classes"]] == list(range(2 * r))
    again = sweep(*common, "--ranks", "1", timeout=60)  # K = 1 into the same --out
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
    assert "trained 2 classes on 1 rank(s), not the 1 of --classes-per-rank 1" in again.stderr
    assert "--overwrite" in again.stderr


def test_classes_per_rank_must_be_positive_and_classes_per_gpu_is_its_old_name():
    for flag in ("--classes-per-rank", "--classes-per-gpu"):
        result = sweep("--ranks", "1", flag, "0")
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1].endswith(
            f"error: {flag} must be a positive number of classes"
        )
    result = sweep(
        "--dry-run", "--data", "d.h5", "--ranks", "2", "--classes-per-gpu", "3", "--preset", "tiny"
    )
    assert result.returncode == 0 and result.stdout.split()[:2] == ["RANKS=2", "CLASSES_PER_RANK=3"]
    assert result.stderr.splitlines() == [
        "weak_scaling: note: --classes-per-gpu is deprecated, use --classes-per-rank"
    ]
    result = sweep("--ranks", "1", "--classes-per-rank", "2", "--classes-per-gpu", "3")
    assert result.returncode == 2 and result.stderr.splitlines()[-1].endswith(
        "error: --classes-per-rank 2 and --classes-per-gpu 3 disagree: give --classes-per-rank "
        "alone (--classes-per-gpu is its deprecated name)"
    )


def test_a_rank_larger_than_a_node_is_one_line():
    result = sweep(
        "--dry-run", "--launcher", "lsf", "--ranks", "2", "--gpus-per-rank", "8", "--preset", "tiny"
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "weak_scaling: a node holds no rank: GPUS_PER_RANK=8 is more than GPUS_PER_NODE=6; ask "
        "for fewer GPUs a rank"
    ]


def test_the_local_sweep_falls_back_to_mpiexec_on_path(tmp_path, monkeypatch):
    # A Python with no mpiexec beside it (its MPI installed under another prefix, as on a lent
    # GPU machine): local.sh's own default, mpiexec on PATH, not a path that does not exist.
    weak = _module()
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    monkeypatch.setattr(weak.sys, "executable", str(python))
    assert weak.local_mpiexec({}) is None
    (tmp_path / "bin" / "mpiexec").touch()
    assert weak.local_mpiexec({}) == str(tmp_path / "bin" / "mpiexec")
    assert weak.local_mpiexec({"MPIEXEC": "/opt/mpi/bin/mpirun"}) == "/opt/mpi/bin/mpirun"


def test_the_sweep_needs_a_preset_but_to_collect():
    # The templates have no default preset, and the sweep none either (it was digits).
    from distcgan.config import PRESETS

    result = sweep("--dry-run", "--launcher", "slurm", "--ranks", "2")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"weak_scaling.py: error: --preset is required: the preset of your data, one of "
        f"{', '.join(PRESETS)} (e.g. --preset imagenet32)"
    )
    result = sweep("--dry-run", "--ranks", "2", "--preset", "imagenet")
    assert (
        result.returncode == 2
        and "argument --preset: invalid choice: 'imagenet'" in (result.stderr.splitlines()[-1])
    )
    args = _module().parse_args(["--collect", "--ranks", "1", "2"])
    assert args.preset is None
