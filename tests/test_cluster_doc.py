"""The job lines of docs/cluster.md and the README, run as written.

Every `sbatch`, `bsub`, `bash jobs/local.sh` and `python jobs/weak_scaling.py` line in their
```bash blocks runs here, in a folder of its own (relative RUN and --out land there, `jobs` is a
link to this checkout's), with this environment's Python first on PATH (an activated
environment), under the suite's one-node Slurm (tests/slurm_cluster.py) or the LSF/jsrun
stand-in (tests/fake_lsf, Summit's rules), or mpiexec. Only what one small node cannot hold is
put in (SUBSTITUTED): a two-class data file for DATA and --data, PRESET=tiny, two classes and
ranks, one core a rank, a few steps. Every other variable and flag stays as written, and a line
without PRESET fails as a user's job would. Each job must end with exit 0 and a complete run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, find_mpiexec, launches

DOCS = (REPO / "docs" / "cluster.md", REPO / "README.md")
FAKE_LSF = REPO / "tests" / "fake_lsf"
BIN = Path(sys.executable).parent
OPERATORS = {"<", ">", "|", "&&", ";", "&"}
# What one small node cannot hold, and nothing else (DATA and --data: the two-class file).
SUBSTITUTED = {
    "PRESET": "tiny",
    "CLASSES": "2",
    "--preset": "tiny",
    "--ntasks": "2",
    "--cpus-per-task": "1",
    "--cpus-per-rank": "1",
    "--steps": "4",
}
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def bash_lines(path: Path) -> list[tuple[str, str]]:
    """(where, line) for each command line of the file's ```bash blocks: continuations joined,
    comment lines left out."""
    found = []
    text = path.read_text()
    for block in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
        first = text[: block.start()].count("\n") + 2
        joined = block.group(1).replace("\\\n", " ").splitlines()
        for i, line in enumerate(joined):
            if line.strip() and not line.lstrip().startswith("#"):
                found.append((f"{path.name}:{first + i}", line.strip()))
    return found


def words(line: str) -> list[str]:
    """The shell's words of a line, with its operators (<, |) as words of their own."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def kind(line: str) -> str | None:
    """Which job a line submits or runs, if any."""
    w = words(line)
    if "sbatch" in w:
        return "slurm"
    if "bsub" in w:
        return "lsf"
    if "jobs/local.sh" in w:
        return "local"
    if "jobs/weak_scaling.py" in w and "--collect" not in w:
        return "sweep-" + w[w.index("--launcher") + 1] if "--launcher" in w else "sweep-local"
    return None


# Each distinct line once (the README repeats some of the page's).
JOB_LINES = list(
    {line: (where, line) for path in reversed(DOCS) for where, line in bash_lines(path)
     if kind(line)}.values()
)  # fmt: skip


def collect_line(sweep: str) -> str | None:
    """The documented --collect line for this sweep's --out."""
    out = words(sweep)[words(sweep).index("--out") + 1]
    for _, line in (x for path in DOCS for x in bash_lines(path)):
        w = words(line)
        if "--collect" in w and w[w.index("--out") + 1] == out:
            return line
    return None


def as_run(line: str, data: Path) -> str:
    """The line with SUBSTITUTED values and the test's data file; everything else as written."""
    w, out = words(line), []
    i, prefix = 0, True  # NAME=value words before the command: its environment
    while i < len(w):
        word = w[i]
        name, eq, value = word.partition("=")
        prefix = prefix and bool(eq) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) is not None
        if prefix:
            value = str(data) if name == "DATA" else SUBSTITUTED.get(name, value)
            out.append(f"{name}={value}")
        elif word == "--ranks":
            out += ["--ranks", "1", "2"]
            while i + 1 < len(w) and w[i + 1].isdigit():
                i += 1
        elif word == "--data" or word in SUBSTITUTED:
            out += [word, str(data) if word == "--data" else SUBSTITUTED[word]]
            i += 1
        else:
            out.append(word)
        i += 1
    return " ".join(x if x in OPERATORS else shlex.quote(x) for x in out)


@pytest.fixture(scope="module")
def two_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits' first two classes at 16 px, written by the real converter."""
    out = tmp_path_factory.mktemp("data") / "two16.h5"
    from data_prep.__main__ import main

    assert main(["digits", "--out", str(out), "--resolution", "16", "--classes", "0", "1"]) == 0
    return out


def job_folder(tmp_path: Path) -> Path:
    (tmp_path / "jobs").symlink_to(REPO / "jobs")
    return tmp_path


def user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A user's shell: this environment activated, this checkout's package, no outer job's
    scheduler variables or template parameters."""
    params = {"DATA", "RUN", "PRESET", "RANKS", "CLASSES", "NODES", "EXTRA", "DRY_RUN", "PYTHON"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "LSB_", "FAKE_")) and k not in params
    }
    env.update(extra or {})
    env["PATH"] = f"{BIN}:{env['PATH']}"
    return {**env, "PYTHONPATH": str(REPO)}


def shell(line: str, cwd: Path, env: dict[str, str], timeout: float = 300):
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def complete(run: Path) -> None:
    status = subprocess.run(
        [sys.executable, "-m", "distcgan", "status", "--run", str(run)],
        capture_output=True, text=True, timeout=120, env=user_env(),
    )  # fmt: skip
    assert status.returncode == 0 and "complete" in status.stdout, status.stdout + status.stderr


def run_dirs(line: str, cwd: Path) -> list[Path]:
    """The run directories a job line trains: RUN, or each size under a sweep's --out."""
    w = words(line)
    runs = [cwd / x.partition("=")[2] for x in w if x.startswith("RUN=")]
    if "--out" in w:
        runs += [cwd / w[w.index("--out") + 1] / f"ranks_{r:05d}" for r in (1, 2)]
    return runs


def lines_of(*kinds: str) -> list:
    chosen = [(where, line) for where, line in JOB_LINES if kind(line) in kinds]
    return [pytest.param(line, id=where) for where, line in chosen]


# ---- what the page must hold ---------------------------------------------------------------------


def test_the_page_has_each_job_line_in_the_form_the_templates_take():
    ours = [line for where, line in JOB_LINES if where.startswith("cluster.md")]
    slurm = [words(x) for x in ours if kind(x) == "slurm"]
    assert any(w[w.index("--gpus-per-task") + 1] == "2" for w in slurm if "--gpus-per-task" in w)
    assert any("--gpus-per-task" not in w for w in slurm)  # a CPU partition
    assert {kind(x) for x in ours} >= {"slurm", "lsf", "local", "sweep-local", "sweep-slurm",
                                       "sweep-lsf"}  # fmt: skip
    for where, line in JOB_LINES:
        w = words(line)
        if kind(line) in ("slurm", "lsf", "local"):
            assert any(x.startswith("PRESET=") for x in w), f"{where}: no PRESET: {line}"
        if kind(line) == "lsf":  # `bsub [options] jobs/lsf_jsrun.lsf`: Summit's form
            assert "<" not in w and w[-1] == "jobs/lsf_jsrun.lsf", f"{where}: {line}"
        if kind(line).startswith("sweep"):
            assert "--preset" in w, f"{where}: {line}"
    for line in (x for _, x in JOB_LINES if kind(x) in ("sweep-slurm", "sweep-lsf")):
        assert collect_line(line), f"no --collect line for {line}"


def test_substitution_keeps_every_other_word():
    line = (
        "PRESET=imagenet32 DATA=/p/in32.h5 RUN=runs/in32 CLASSES_PER_RANK=10 sbatch --ntasks 100 "
        "--ntasks-per-node 2 --gpus-per-task 2 --cpus-per-task 32 -t 2:00:00 -A PROJ "
        "jobs/slurm.sbatch"
    )
    assert as_run(line, Path("/t/two.h5")) == (
        "PRESET=tiny DATA=/t/two.h5 RUN=runs/in32 CLASSES_PER_RANK=10 sbatch --ntasks 2 "
        "--ntasks-per-node 2 --gpus-per-task 2 --cpus-per-task 1 -t 2:00:00 -A PROJ "
        "jobs/slurm.sbatch"
    )
    sweep = "python jobs/weak_scaling.py --ranks 1 8 64 --data d --submit-args='-A PROJ'"
    assert as_run(sweep, Path("x")) == (
        "python jobs/weak_scaling.py --ranks 1 2 --data x '--submit-args=-A PROJ'"
    )
    assert as_run("DATA=d bsub -P P < jobs/lsf_jsrun.lsf", Path("x")).endswith(
        "< jobs/lsf_jsrun.lsf"
    )  # an operator stays one: the stand-in would refuse that line


# ---- a workstation -------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("line", lines_of("local", "sweep-local"))
def test_local_line_as_written(line, tmp_path, two_classes):
    launches("jobs/local.sh")
    cwd = job_folder(tmp_path)
    env = user_env()  # mpiexec on PATH: this environment's
    result = shell(as_run(line, two_classes), cwd, env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    if "DRY_RUN=1" in line:
        assert result.stdout.startswith("python -m distcgan supervise --run ")
        return
    for run in run_dirs(line, cwd):
        complete(run)


# ---- Slurm ---------------------------------------------------------------------------------------


def wait_slurm_jobs(slurm, ids: list[int], timeout: float) -> list[dict[str, str]]:
    return [slurm.wait_job(job, ENDED, timeout) for job in ids]


@pytest.mark.slurm
@pytest.mark.mpi
@pytest.mark.parametrize("line", lines_of("slurm", "sweep-slurm"))
def test_slurm_line_as_written(line, slurm, tmp_path, two_classes):
    launches("sbatch")
    cwd = job_folder(tmp_path)
    env = user_env(slurm.env())
    result = shell(as_run(line, two_classes), cwd, env)
    assert result.returncode == 0, result.stdout + result.stderr
    # sbatch says "Submitted batch job N"; the sweep prints sbatch --parsable's "N" lines.
    ids = [int(x) for x in re.findall(r"^(?:Submitted batch job )?(\d+)(?:;\S*)?$",
                                      result.stdout, re.M)]  # fmt: skip
    assert ids, result.stdout
    for job, fields in zip(ids, wait_slurm_jobs(slurm, ids, 600), strict=True):
        logs = list(cwd.rglob(f"*.{job}.out"))
        text = logs[0].read_text() if logs else ""
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), text[-3000:]
    finish(line, cwd, env)


def finish(line: str, cwd: Path, env: dict[str, str]) -> None:
    """Each run complete; for a sweep, its documented --collect line then writes the CSV."""
    for run in run_dirs(line, cwd):
        complete(run)
    if kind(line).startswith("sweep"):
        collect = collect_line(line)
        assert collect is not None
        result = shell(as_run(collect, Path("unused")), cwd, env)
        assert result.returncode == 0, result.stderr
        out = cwd / words(line)[words(line).index("--out") + 1]
        rows = (out / "weak_scaling.csv").read_text().splitlines()
        assert [r.split(",")[:2] for r in rows[1:]] == [["1", "1"], ["2", "2"]]


# ---- LSF -----------------------------------------------------------------------------------------


def lsf_env(cwd: Path) -> dict[str, str]:
    env = user_env({"FAKE_LSF_DIR": str(cwd / "lsf"), "FAKE_JSRUN_MPIEXEC": find_mpiexec()})
    return {**env, "PATH": f"{FAKE_LSF}:{env['PATH']}"}


def lsf_ends(cwd: Path, jobs: list[str], timeout: float) -> dict[str, int]:
    """Each job's last exit code, once every job has ended without a requeue after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = cwd / "lsf" / "events.log"
        events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        last = {str(e["job"]): e for e in events}
        if all(j in last and last[j]["event"] == "end" for j in jobs):
            return {j: last[j]["code"] for j in jobs}
        time.sleep(0.5)
    raise AssertionError(f"LSF jobs {jobs} did not end in {timeout:.0f} s")


@pytest.mark.mpi
@pytest.mark.parametrize("line", lines_of("lsf", "sweep-lsf"))
def test_lsf_line_as_written(line, tmp_path, two_classes):
    launches("bsub")  # the template's jsrun starts the ranks with mpiexec
    cwd = job_folder(tmp_path)
    env = lsf_env(cwd)
    try:
        result = shell(as_run(line, two_classes), cwd, env)
        assert result.returncode == 0, result.stdout + result.stderr
        jobs = re.findall(r"Job <(\d+)> is submitted", result.stdout)
        assert jobs, result.stdout
        codes = lsf_ends(cwd, jobs, 600)
        logs = {j: (cwd / f"distcgan.{j}.out") for j in jobs}
        for j in jobs:
            text = logs[j].read_text() if logs[j].exists() else ""
            assert codes[j] == 0 and text.rstrip().endswith("Successfully completed."), text
        finish(line, cwd, env)
    finally:
        end_unfinished(cwd)


def end_unfinished(cwd: Path) -> None:
    """The process group of each stand-in job that has not ended (a test that gave up on it)."""
    log = cwd / "lsf" / "events.log"
    events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    last = {e["job"]: e for e in events}
    for event in last.values():
        if event["event"] == "start":
            try:
                os.killpg(event["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
