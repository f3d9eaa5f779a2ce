"""The launch templates (rendered as dry runs), the resubmit-resumes contract and the local
weak-scaling sweep."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, launches, mpiexec

JOBS = REPO / "jobs"


def template_env(**env: str) -> dict[str, str]:
    """A dry run's environment: no CI job's SLURM_ variables, and this Python first on PATH with
    this checkout's package, since each template asks `python -m distcgan job-plan` its plan.
    PRESET=digits unless given (the templates have no default preset; PRESET="" unsets it)."""
    outer = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    path = f"{Path(sys.executable).parent}:{outer['PATH']}"
    base = {"PATH": path, "PYTHONPATH": str(REPO), "DRY_RUN": "1", "PRESET": "digits"}
    return {**outer, **base, **env}


def run_template(template: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(JOBS / template)],
        env=template_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def render(template: str, **env: str) -> list[str]:
    """The launcher command a template would run (checked to be wrapped in `distcgan supervise`
    on the same run directory, which turns the run's record into the job's exit code)."""
    out = run_template(template, **env)
    assert out.returncode == 0, out.stderr
    cmd = out.stdout.split()
    python = env.get("PYTHON", "python")
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
    # One appending log for both runs of a requeued job; malloc is tuned by train itself.
    assert "#BSUB -o distcgan.%J.out" in text and "#BSUB -e" not in text
    assert "MALLOC_" not in text
    # K classes give K ranks, not every resource set of the nodes (tests/test_lsf.py for more).
    cmd = render("lsf_jsrun.lsf", DATA="d.h5", RUN="r", NODES="334", CLASSES="1000")
    assert cmd[1:3] == ["--nrs", "1000"]


def test_slurm_template_variants():
    # What the template reads from a GPU allocation (sbatch --ntasks 6 --ntasks-per-node 2
    # --gpus-per-task 2 --cpus-per-task 32): srun asks for exactly the same.
    alloc = {
        "SLURM_NTASKS": "6",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_GPUS_PER_TASK": "2",
    }
    cmd = render("slurm.sbatch", DATA="d.h5", RUN="r", **alloc)
    assert cmd[:13] == [
        "srun",
        "--mpi=pmi2",
        "--ntasks",
        "6",
        "--cpus-per-task",
        "32",
        "--wait=60",
        "--ntasks-per-node",
        "2",
        "--gpus-per-task",
        "2",
        "--cpu-bind=cores",
        "python",
    ]
    # A CPU allocation (sbatch --ntasks 2): no GPUs asked for, no division by zero.
    cpu = render("slurm.sbatch", DATA="d.h5", RUN="r", SLURM_NTASKS="2")
    assert cpu[:8] == ["srun", "--mpi=pmi2", "--ntasks", "2", "--cpus-per-task", "1", "--wait=60",
                       "--cpu-bind=cores"]  # fmt: skip
    one = render(
        "slurm.sbatch", DATA="d.h5", RUN="r", RANKS="12", GPUS_PER_RANK="1", SRUN_MPI="pmix"
    )
    assert one[one.index("--ntasks") + 1] == "12" and one[one.index("--gpus-per-task") + 1] == "1"
    assert one[1] == "--mpi=pmix"
    text = (JOBS / "slurm.sbatch").read_text()
    for line in ("#SBATCH --signal=USR1@600", "#SBATCH --open-mode=append", "#SBATCH --requeue"):
        assert line in text


def test_slurm_template_refuses_a_job_without_a_task_count():
    result = run_template("slurm.sbatch", DATA="d.h5", RUN="r")
    assert result.returncode == 2
    assert result.stderr == (
        "slurm.sbatch: error: no task count: submit with --ntasks R for R classes "
        "(sbatch --ntasks R ...)\n"
    )


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
        assert "--resume" in render(template, DATA="d.h5", RUN=str(run), NODES="1", RANKS="1")


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("slurm.sbatch", "slurm.sbatch: error: set DATA to the HDF5 data file (DATA=/path/data.h5 "
         "sbatch ...)"),
        ("local.sh", "local.sh: error: set DATA to the HDF5 data file (DATA=/path/data.h5 bash "
         "jobs/local.sh)"),
        ("lsf_jsrun.lsf", "lsf_jsrun.lsf: error: set DATA to the HDF5 data file (DATA=/path/"
         "data.h5 bsub ... jobs/lsf_jsrun.lsf)"),
    ],
)  # fmt: skip
def test_templates_refuse_missing_parameters(template, said):
    result = run_template(template, RUN="r")
    assert (result.returncode, result.stderr.splitlines()) == (2, [said])


# How each template says it in its hint (the submit command of its scheduler).
PRESET_HINT = {
    "local.sh": "PRESET=digits DATA=data/digits16.h5 RUN=runs/name bash jobs/local.sh",
    "lsf_jsrun.lsf": "PRESET=imagenet64 DATA=/path/data.h5 RUN=runs/name bsub ... "
    "jobs/lsf_jsrun.lsf",
    "slurm.sbatch": "PRESET=imagenet32 DATA=/path/data.h5 RUN=runs/name sbatch ...",
}


@pytest.mark.parametrize("preset", ["unset", "empty", "unknown", "two words"])
@pytest.mark.parametrize("template", sorted(PRESET_HINT))
def test_templates_refuse_a_missing_or_unknown_preset_before_anything_else(template, preset):
    # No default preset: a 64 px job under the old default (digits, 16 px) failed only after its
    # queue wait. The check comes before the Python one (PYTHON here is not there at all), so a
    # job without PRESET ends in one line at once.
    value = {"unset": None, "empty": "", "unknown": "imagenet", "two words": "digits mnist"}[preset]
    env = template_env(DATA="d.h5", RUN="r", NODES="1", RANKS="1", PYTHON="/no/python")
    env.pop("PRESET")
    if value is not None:
        env["PRESET"] = value
    result = subprocess.run(
        ["bash", str(JOBS / template)], env=env, capture_output=True, text=True, timeout=60
    )
    from distcgan.config import PRESETS

    unknown = f"unknown PRESET '{value}': " if value else ""
    said = (
        f"{template}: error: {unknown}set PRESET to the preset of your data, one of "
        f"{', '.join(PRESETS)} ({PRESET_HINT[template]})"
    )
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (2, "", [said])


PREFIX = {"local.sh": "local.sh: error:", "lsf_jsrun.lsf": "lsf_jsrun.lsf: error:",
          "slurm.sbatch": "slurm.sbatch: error:"}  # fmt: skip


WHY = {
    "missing": None,
    "without distcgan": "No module named 'distcgan'",
    # distcgan on PYTHONPATH, its dependencies not: the ranks would fail in `import torch`
    "without torch": "No module named 'numpy', 'torch', 'torchvision', 'mpi4py', 'h5py', "
    "'scipy', 'PIL', 'tqdm', 'matplotlib'",
}


@pytest.mark.parametrize("python", sorted(WHY))
@pytest.mark.parametrize("template", sorted(PREFIX))
def test_a_python_that_cannot_run_distcgan_is_one_line_exit_2(tmp_path, template, python):
    # Debian's python3 alone has no `python` on PATH, and a job may start outside the
    # environment distcgan is installed in: one line before any launch, not one from each rank.
    if python == "missing":
        exe = tmp_path / "bin" / "python"  # not there
    else:  # a new virtual environment, which sees none of this one's packages
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True
        )
        exe = tmp_path / "v" / "bin" / "python"
    path = str(REPO) if python == "without torch" else ""
    env = template_env(DATA="d.h5", RUN="r", NODES="1", RANKS="1", PYTHON=str(exe), PYTHONPATH=path)
    result = subprocess.run(  # outside the repository, whose distcgan folder python would see
        ["bash", str(JOBS / template)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    fix = "activate the environment distcgan is installed in, or set PYTHON to that environment's"
    if WHY[python] is None:
        said = f"{PREFIX[template]} no program '{exe}' here (PYTHON, default python): {fix} python"
    else:
        said = f"{PREFIX[template]} '{exe}' cannot run distcgan ({WHY[python]}): {fix} python"
    assert result.stderr.splitlines() == [said]


def test_the_environment_check_names_an_old_python(monkeypatch):
    # RHEL 9's system python3 is 3.9: the check says so rather than fail on distcgan's syntax
    from distcgan.run import envcheck

    assert envcheck.problem() is None  # this Python runs distcgan
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    monkeypatch.setattr(sys, "version", "3.9.18 (main, Jan 24 2024, 00:00:00) [GCC 11.4.1]")
    assert envcheck.problem() == "Python 3.9.18, and distcgan needs 3.10 or newer"


@pytest.mark.parametrize(
    ("template", "env", "said"),
    [
        ("local.sh", {"RANKS": "two"}, "local.sh: error: RANKS must be a positive number of "
         "ranks, got 'two' (e.g. RANKS=2)"),
        ("local.sh", {"RANKS": "0"}, "local.sh: error: RANKS must be a positive number of "
         "ranks, got '0' (e.g. RANKS=2)"),
        ("slurm.sbatch", {"RANKS": "-1"}, "slurm.sbatch: error: RANKS must be a positive number "
         "of ranks, got '-1' (e.g. RANKS=4, or sbatch --ntasks 4)"),
        ("slurm.sbatch", {"RANKS": "2", "CPUS_PER_RANK": "8c"}, "slurm.sbatch: error: "
         "CPUS_PER_RANK must be a positive number of cores, got '8c' (e.g. CPUS_PER_RANK=8, or "
         "sbatch --cpus-per-task 8)"),
        # Before, `[ two -gt 0 ]` was false: bash said "integer expression expected", and the
        # job went on to train on CPUs.
        ("slurm.sbatch", {"RANKS": "2", "GPUS_PER_RANK": "two"}, "slurm.sbatch: error: "
         "GPUS_PER_RANK must be 0 (CPUs only), a number of GPUs or TYPE:N, got 'two' (e.g. "
         "GPUS_PER_RANK=2, or sbatch --gpus-per-task 2)"),
    ],
    ids=["local-ranks-word", "local-ranks-0", "slurm-ranks", "slurm-cpus", "slurm-gpus"],
)  # fmt: skip
def test_a_count_that_is_not_one_is_one_line_exit_2(template, env, said):
    result = run_template(template, DATA="d.h5", RUN="r", **env)
    assert (result.returncode, result.stderr.splitlines()) == (2, [said])


def test_counts_with_leading_zeros_are_the_numbers_they_say():
    # as job-plan reads the LSF template's counts
    assert render("local.sh", DATA="d.h5", RUN="r", RANKS="08")[:3] == ["mpiexec", "-n", "8"]
    srun = render("slurm.sbatch", DATA="d.h5", RUN="r", RANKS="010", CPUS_PER_RANK="04")
    assert srun[srun.index("--ntasks") + 1] == "10"
    assert srun[srun.index("--cpus-per-task") + 1] == "4"


def test_slurm_gpus_may_be_typed_as_sbatch_takes_them():
    srun = render("slurm.sbatch", DATA="d.h5", RUN="r", RANKS="2", CPUS_PER_RANK="4",
                  GPUS_PER_RANK="a100:2")  # fmt: skip
    assert srun[srun.index("--gpus-per-task") + 1] == "a100:2"
    srun = render("slurm.sbatch", DATA="d.h5", RUN="r", RANKS="2", CPUS_PER_RANK="4",
                  GPUS_PER_RANK="a100:0")  # fmt: skip
    assert "--gpus-per-task" not in srun


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
    # Both classes past their first log step (step 2), so both checkpoints are beyond step 0: a
    # fixed sleep was too short for rank 0 on a loaded machine (seen under Open MPI 4.1).
    logs = [run / f"class_{k:03d}" / "metrics.jsonl" for k in (0, 1)]
    deadline = time.monotonic() + 120
    while not all(f.exists() and f.stat().st_size for f in logs):
        assert time.monotonic() < deadline and job.proc.poll() is None, "no first log step"
        time.sleep(0.2)
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
    launches("jobs/weak_scaling.py --launcher local")  # mpiexec -n 1, then -n 2
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


def test_lsf_template_refuses_more_ranks_than_resource_sets_and_takes_the_sweeps_layout(tmp_path):
    result = run_template("lsf_jsrun.lsf", DATA="d.h5", RUN="r", NODES="1", RANKS="4")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "distcgan: error: RANKS=4 is more than the 3 resource sets of 1 node(s) x 3: ask for "
        "more nodes or fewer ranks"
    ]
    # jobs/weak_scaling.py hands over the ranks per node its node request was made for.
    # The template plans with it too: a real one, this environment's (a symlink to this Python
    # would be the base interpreter without this environment's packages).
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    cmd = render(
        "lsf_jsrun.lsf", DATA="d.h5", RUN="r", NODES="2", RANKS="4", RANKS_PER_NODE="2",
        PYTHON=str(python),
    )  # fmt: skip
    assert cmd[1:3] == ["--nrs", "4"] and cmd[cmd.index("--rs_per_host") + 1] == "2"
    assert str(python) in cmd  # the ranks' Python too, not whatever `python` is


def test_slurm_template_says_when_a_rank_gets_one_core_by_default():
    result = run_template("slurm.sbatch", DATA="d.h5", RUN="r", SLURM_NTASKS="2")
    assert result.returncode == 0 and "--cpus-per-task 1" in result.stdout
    assert result.stderr.strip() == (
        "slurm.sbatch: note: no --cpus-per-task, so each rank gets 1 core (1 torch thread); "
        "submit with --cpus-per-task N for more"
    )
    result = run_template(
        "slurm.sbatch", DATA="d.h5", RUN="r", SLURM_NTASKS="2", SLURM_CPUS_PER_TASK="8"
    )
    assert result.stderr == "" and "--cpus-per-task 8" in result.stdout


TEMPLATES = ("local.sh", "lsf_jsrun.lsf", "slurm.sbatch")
# CPUS_PER_RANK: no note from slurm.sbatch of Slurm's default of one core.
BASE = {"DATA": "d.h5", "RUN": "r", "NODES": "1", "RANKS": "1", "CPUS_PER_RANK": "1"}


def test_templates_take_classes_per_rank():
    for template in TEMPLATES:
        cmd = render(template, **BASE, CLASSES_PER_RANK="3")
        assert cmd[cmd.index("--fuse") + 1] == "3", template
        assert "--fuse" not in render(template, **BASE)  # unset: distcgan's --fuse auto
    # LSF: one rank (resource set of 2 GPUs) per 10 classes, 3 a node
    env = {"DATA": "d.h5", "RUN": "r", "NODES": "34", "CLASSES": "1000", "CLASSES_PER_RANK": "10"}
    cmd = render("lsf_jsrun.lsf", **env)
    assert cmd[cmd.index("--nrs") + 1] == "100" and cmd[cmd.index("--fuse") + 1] == "10"
    cmd = render("lsf_jsrun.lsf", **{**env, "CLASSES": "1001"})
    assert cmd[cmd.index("--nrs") + 1] == "101"  # rounded up: no class left without a rank


def test_templates_refuse_a_bad_classes_per_rank_in_the_same_line():
    for bad in ("0", "x", "-1", "2.5"):
        want = (
            f"distcgan: error: CLASSES_PER_RANK must be a positive number of classes, got "
            f"'{bad}' (e.g. CLASSES_PER_RANK=10)"
        )
        for template in TEMPLATES:
            result = run_template(template, **BASE, CLASSES_PER_RANK=bad)
            assert (result.returncode, result.stdout) == (2, ""), (template, bad)
            assert result.stderr.splitlines() == [want], (template, result.stderr)


def test_templates_take_classes_per_gpu_with_a_note_and_refuse_a_bad_one():
    note = "distcgan: note: CLASSES_PER_GPU is deprecated, use CLASSES_PER_RANK"
    for template in TEMPLATES:
        result = run_template(template, **BASE, CLASSES_PER_GPU="3")
        assert result.returncode == 0 and result.stderr.splitlines() == [note], result.stderr
        cmd = result.stdout.split()
        assert cmd[cmd.index("--fuse") + 1] == "3", template
        assert render(template, **BASE, CLASSES_PER_GPU="3", CLASSES_PER_RANK="3")[-2:] == [
            "--fuse",
            "3",
        ]
        result = run_template(template, **BASE, CLASSES_PER_GPU="0")
        assert result.returncode == 2 and result.stderr.splitlines() == [
            "distcgan: error: CLASSES_PER_GPU must be a positive number of classes, got '0' "
            "(e.g. CLASSES_PER_RANK=10, its new name)"
        ], (template, result.stderr)
        result = run_template(template, **BASE, CLASSES_PER_GPU="4", CLASSES_PER_RANK="2")
        assert result.returncode == 2 and result.stderr.splitlines() == [
            "distcgan: error: CLASSES_PER_RANK=2 and CLASSES_PER_GPU=4 disagree: set "
            "CLASSES_PER_RANK alone (CLASSES_PER_GPU is its deprecated name)"
        ], (template, result.stderr)


def test_lsf_template_refuses_bad_sizes_in_one_line():
    cases = {
        ("NODES", "x"): "NODES must be a positive number of nodes, got 'x' (e.g. NODES=4)",
        ("NODES", "0"): "NODES must be a positive number of nodes, got '0' (e.g. NODES=4)",
        ("RANKS", "-1"): "RANKS must be a positive number of ranks, got '-1' (e.g. RANKS=12)",
        ("CLASSES", "0"): "CLASSES must be a positive number of classes, got '0' "
        "(e.g. CLASSES=1000)",
        ("GPUS_PER_RANK", "two"): "GPUS_PER_RANK must be 0 (CPUs only) or a positive number of "
        "GPUs, got 'two' (e.g. GPUS_PER_RANK=2)",
        ("GPUS_PER_RANK", "8"): "a node holds no rank: GPUS_PER_RANK=8 is more than "
        "GPUS_PER_NODE=6; ask for fewer GPUs a rank",
        ("CORES_PER_RANK", "43"): "a node holds no rank: CORES_PER_RANK=43 is more than "
        "CORES_PER_NODE=42; ask for fewer cores a rank",
        ("RANKS_PER_NODE", "0"): "RANKS_PER_NODE must be a positive number of ranks, got '0' "
        "(e.g. RANKS_PER_NODE=3)",
    }
    for (name, value), message in cases.items():
        env = {"DATA": "d.h5", "RUN": "r", "NODES": "2", name: value}
        result = run_template("lsf_jsrun.lsf", **env)
        assert (result.returncode, result.stdout) == (2, ""), (name, value)
        assert result.stderr.splitlines() == [f"distcgan: error: {message}"], result.stderr
