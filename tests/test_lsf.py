"""jobs/lsf_jsrun.lsf under the LSF/jsrun stand-in (tests/fake_lsf: bsub, jsrun, jskill, which
apply the documented rules cited in tests/fake_lsf/lsf_rules.py), on a Summit-shaped allocation:
a launch node plus 4 compute nodes of 42 slots, 6 GPUs and SMT4 cores each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, find_mpiexec, launches

sys.path.insert(0, str(REPO / "tests" / "fake_lsf"))
from lsf_rules import allocation, merge, minutes, parse_options, requeues, script_options  # noqa: E402

from distcgan.plan import physical_cores  # noqa: E402
from distcgan.run.checkpoint import read  # noqa: E402

FAKE = REPO / "tests" / "fake_lsf"
TEMPLATE = REPO / "jobs" / "lsf_jsrun.lsf"
SMT4 = {4 * core + t: (core // 21, core) for core in range(42) for t in range(4)}


def lsf_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The submission environment: the stand-ins and this venv's python first on PATH."""
    params = ("DATA", "RUN", "NODES", "RANKS", "CLASSES", "GPUS_PER_RANK", "PRESET", "EXTRA",
              "CLASSES_PER_RANK", "CLASSES_PER_GPU", "RANKS_PER_NODE")  # fmt: skip
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LSB_", "DRY_RUN", "FAKE_")) and k not in params
    }
    path = f"{FAKE}:{Path(sys.executable).parent}:{env['PATH']}"
    return {
        **env,
        "PATH": path,
        "PYTHONPATH": str(REPO),
        "FAKE_LSF_DIR": str(tmp_path / "lsf"),
        "FAKE_JSRUN_MPIEXEC": find_mpiexec(),
        **extra,
    }


def bsub(tmp_path: Path, *args: str, script: str | Path, timeout: float = 60, **env: str):
    """`bsub -K ARGS SCRIPT` (a script's text is written to tmp_path/job.sh first), run in
    tmp_path; returns the result and the job's log text. A job step that the stand-in jsrun
    started is an mpiexec (it logs each in launches.log)."""
    if isinstance(script, str):
        (tmp_path / "job.sh").write_text(script)
        script = tmp_path / "job.sh"
    result = subprocess.run(
        [str(FAKE / "bsub"), "-K", *args, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=lsf_env(tmp_path, **env),
        timeout=timeout,
    )
    if (tmp_path / "lsf" / "launches.log").exists():
        launches("jsrun")
    job_id = re.search(r"Job <(\d+)> is submitted", result.stdout)
    assert job_id, result.stdout + result.stderr
    log = tmp_path / f"distcgan.{job_id.group(1)}.out"
    return result, (log.read_text() if log.exists() else "")


def events(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "lsf" / "events.log").read_text().splitlines()]


# ---- the rules themselves ----------------------------------------------------------------------


def test_the_templates_bsub_lines_as_bsub_reads_them_from_the_named_script():
    opts = script_options(TEMPLATE.read_text())
    assert opts == {
        "-J": "distcgan",
        "-o": "distcgan.%J.out",
        "-wa": "USR1",
        "-wt": "10",
        "-Q": "75",
    }
    assert "-e" not in opts  # stderr in the same log, in order
    command_line, _ = parse_options(["-wt", "2", "-oo", "x.out", "-nnodes", "4"])
    merged = merge(opts, command_line)
    assert merged["-wt"] == "2" and merged["-oo"] == "x.out" and "-o" not in merged
    assert minutes("10") == 10 and minutes("0:30") == 30 and minutes("2:00") == 120
    assert requeues("75", 75) and not requeues("75", 2) and not requeues("all ~75", 75)


def test_summit_allocation_environment():
    alloc = allocation(4)
    hosts = alloc.lsb_hosts()
    assert "\n" not in hosts and hosts.split()[0] == "batch1" and len(hosts.split()) == 1 + 4 * 42
    lines = alloc.hostfile().splitlines()
    assert lines[0] == "batch1" and lines[1:] == [
        h for h in ("h1", "h2", "h3", "h4") for _ in range(42)
    ]
    assert alloc.mcpu_hosts() == "batch1 1 h1 42 h2 42 h3 42 h4 42"


def test_summit_refuses_a_script_on_stdin_and_a_site_without_parse_script_reads_it_there(
    tmp_path,
):
    script = "#BSUB -o from_bsub_line.out\necho ran\n"

    def submit(*args: str, stdin: str | None = None, **env: str):
        return subprocess.run(
            [str(FAKE / "bsub"), "-K", *args], input=stdin, capture_output=True, text=True,
            cwd=tmp_path, env=lsf_env(tmp_path, **env), timeout=60,
        )  # fmt: skip

    refused = submit(stdin=script)  # Summit (LSB_BSUB_PARSE_SCRIPT=Y): `bsub < script` fails
    assert (refused.returncode, refused.stderr.splitlines()) == (
        1,
        [
            "bsub (stand-in for Summit): no job script named: submit it as bsub [options] SCRIPT "
            "(`bsub < script` will not work on Summit, OLCF)"
        ],
    )
    assert not (tmp_path / "lsf").exists() or not list((tmp_path / "lsf").glob("10*"))
    # A site without that setting reads #BSUB lines from stdin only; a named script is a command.
    assert submit(stdin=script, FAKE_LSF_PARSE_SCRIPT="N").returncode == 0
    assert (tmp_path / "from_bsub_line.out").read_text().startswith("ran\n")
    (tmp_path / "job.sh").write_text(script)
    (tmp_path / "job.sh").chmod(0o755)
    assert submit("./job.sh", FAKE_LSF_PARSE_SCRIPT="N").returncode == 0
    assert (tmp_path / "lsf" / "1002" / "mail").read_text().startswith("ran\n")  # no -o read
    assert (tmp_path / "from_bsub_line.out").read_text().count("ran") == 1


@pytest.mark.parametrize("option, runs_kept", [("-o", 2), ("-oo", 1)])
def test_a_requeued_jobs_log_keeps_every_run_with_o_and_only_the_last_with_oo(
    tmp_path, option, runs_kept
):
    script = '#BSUB -Q "75"\necho "run of job $LSB_JOBID"\nexit 75\n'
    bsub(
        tmp_path,
        option,
        "log.%J",
        script=script,
        FAKE_LSF_MAX_RUNS="2",
        FAKE_LSF_REQUEUE_DELAY_S="0",
    )
    assert (tmp_path / "log.1001").read_text().count("run of job 1001") == runs_kept


# ---- the template, rendered inside a job ------------------------------------------------------


def rendered(tmp_path: Path, **env: str) -> list[str]:
    result, log = bsub(
        tmp_path,
        "-nnodes",
        "4",
        "-W",
        "2:00",
        script=TEMPLATE,
        DRY_RUN="1",
        PRESET="imagenet64",
        DATA="d.h5",
        RUN="runs/x",
        **env,
    )
    assert result.returncode == 0, log
    line = next(x for x in log.splitlines() if x.startswith("python -m distcgan supervise"))
    return line.split()


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_summit_job_requests_one_rank_per_class_up_to_its_resource_sets(tmp_path):
    two = rendered(tmp_path, CLASSES="1000")  # 334-node commands give 1,000 ranks, not 1,002
    assert [flag(two, f) for f in ("--nrs", "--gpu_per_rs", "--rs_per_host", "--bind")] == [
        "12",
        "2",
        "3",
        "packed:7",
    ]
    one = rendered(tmp_path, CLASSES="1000", GPUS_PER_RANK="1")
    assert [flag(one, f) for f in ("--nrs", "--gpu_per_rs", "--rs_per_host")] == ["24", "1", "6"]
    assert flag(rendered(tmp_path, CLASSES="10"), "--nrs") == "10"
    assert flag(rendered(tmp_path, RANKS="5", CLASSES="10"), "--nrs") == "5"
    cpu = rendered(tmp_path, GPUS_PER_RANK="0")  # no division by zero: 6 ranks of 7 cores
    assert (
        flag(cpu, "--nrs") == "24"
        and flag(cpu, "--gpu_per_rs") == "0"
        and "cpu" == flag(cpu, "--devices")
    )


def test_fused_job_starts_one_rank_per_k_classes_up_to_its_resource_sets(tmp_path):
    fused = rendered(tmp_path, CLASSES="20", CLASSES_PER_RANK="10")
    assert (flag(fused, "--nrs"), flag(fused, "--fuse")) == ("2", "10")
    assert flag(rendered(tmp_path, CLASSES="1000", CLASSES_PER_RANK="10"), "--nrs") == "12"


def test_a_bad_classes_per_rank_is_one_line_exit_2_and_not_requeued(tmp_path):
    result, log = bsub(
        tmp_path, "-nnodes", "1", script=TEMPLATE, PRESET="tiny", DATA="d.h5", RUN="runs/x",
        CLASSES_PER_RANK="0",
    )  # fmt: skip
    assert result.returncode == 2
    assert [x for x in log.splitlines() if x.startswith("distcgan")] == [
        "distcgan: error: CLASSES_PER_RANK must be a positive number of classes, got '0' "
        "(e.g. CLASSES_PER_RANK=10)"
    ]
    assert [e["event"] for e in events(tmp_path)] == ["start", "end"]


def test_a_job_without_an_allocation_or_nodes_fails_in_one_line(tmp_path):
    env = {**lsf_env(tmp_path), "PRESET": "tiny", "DATA": "d", "RUN": "r"}
    result = subprocess.run(
        ["bash", str(TEMPLATE)], capture_output=True, text=True, timeout=30, env=env
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "lsf_jsrun.lsf: error: cannot tell the compute nodes (no LSB_DJOB_HOSTFILE or LSB_HOSTS): "
        "set NODES"
    ]


def test_nodes_from_lsb_hosts_when_there_is_no_host_file(tmp_path):
    env = {
        **lsf_env(tmp_path),
        "PRESET": "tiny",
        "DATA": "d",
        "RUN": "r",
        "DRY_RUN": "1",
        "LSB_HOSTS": allocation(2).lsb_hosts(),
    }
    result = subprocess.run(
        ["bash", str(TEMPLATE)], capture_output=True, text=True, timeout=30, env=env
    )
    assert flag(result.stdout.split(), "--nrs") == "6", result.stderr


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"DATA": "d.h5", "RUN": "runs/x"}, "lsf_jsrun.lsf: error: set PRESET to the preset of "
         "your data, one of digits, mnist, cifar10, cifar100, imagenet32, imagenet64, tiny "
         "(PRESET=imagenet64 DATA=/path/data.h5 RUN=runs/name bsub ... jobs/lsf_jsrun.lsf)"),
        ({"PRESET": "tiny", "RUN": "runs/x"}, "lsf_jsrun.lsf: error: set DATA to the HDF5 data "
         "file (DATA=/path/data.h5 bsub ... jobs/lsf_jsrun.lsf)"),
    ],
    ids=["PRESET", "DATA"],
)  # fmt: skip
def test_a_missing_parameter_is_one_line_exit_2_and_not_requeued(tmp_path, env, said):
    result, log = bsub(tmp_path, "-nnodes", "1", script=TEMPLATE, **env)
    assert result.returncode == 2
    assert [x for x in log.splitlines() if x.startswith("lsf_jsrun.lsf")] == [said]
    assert [e["event"] for e in events(tmp_path)] == ["start", "end"]


@pytest.mark.mpi
def test_a_data_file_that_is_not_there_is_one_line_exit_2_through_jsrun_and_not_requeued(tmp_path):
    result, log = bsub(
        tmp_path,
        "-nnodes",
        "1",
        script=TEMPLATE,
        timeout=120,
        PRESET="tiny",
        DATA=str(tmp_path / "missing.h5"),
        RUN=str(tmp_path / "run"),
        CLASSES="2",
    )
    assert result.returncode == 2, log
    errors = [x for x in log.splitlines() if x.startswith("distcgan: error")]
    assert len(errors) == 1 and "missing.h5 does not exist" in errors[0]
    assert [e["event"] for e in events(tmp_path)] == ["start", "end"]


# ---- jsrun's resource sets ----------------------------------------------------------------------

DUMP = (
    'python -c \'import os, json, pathlib; pathlib.Path("tasks", os.environ["JSM_NAMESPACE_RANK"])'
    ".write_text(json.dumps(dict(os.environ)))'"
)


def step_tasks(tmp_path: Path, jsrun_flags: str) -> list[dict]:
    (tmp_path / "tasks").mkdir(exist_ok=True)
    result, _ = bsub(
        tmp_path, "-nnodes", "4", "-o", "step.out", script=f"jsrun {jsrun_flags} {DUMP}\n"
    )
    assert result.returncode == 0, (tmp_path / "step.out").read_text()
    files = sorted((tmp_path / "tasks").iterdir(), key=lambda p: int(p.name))
    return [json.loads(p.read_text()) for p in files]


@pytest.mark.mpi
def test_summit_resource_sets_two_gpus_each(tmp_path):
    tasks = step_tasks(
        tmp_path,
        "--nrs 12 --tasks_per_rs 1 --cpu_per_rs 7 --gpu_per_rs 2 --rs_per_host 3 --bind packed:7",
    )
    assert len(tasks) == 12 and {t["JSM_NAMESPACE_SIZE"] for t in tasks} == {"12"}
    assert [t["FAKE_JSRUN_HOST"] for t in tasks] == [
        h for h in ("h1", "h2", "h3", "h4") for _ in range(3)
    ]
    assert {t["CUDA_VISIBLE_DEVICES"] for t in tasks} == {"0,1"}  # every rank: its own as 0 and 1
    for host in ("h1", "h2", "h3", "h4"):  # ... which are different physical GPUs on a node
        on = [t for t in tasks if t["FAKE_JSRUN_HOST"] == host]
        assert [t["FAKE_JSRUN_GPUS"] for t in on] == ["0,1", "2,3", "4,5"]
        assert [t["JSM_NAMESPACE_LOCAL_RANK"] for t in on] == ["0", "1", "2"]
    for t in tasks:  # packed:7 on SMT4: 28 hardware threads, 7 cores, and distcgan counts 7
        cpus = [int(c) for c in t["FAKE_JSRUN_CPUS"].split(",")]
        assert len(cpus) == 28 and len(physical_cores(cpus, SMT4)) == 7
        assert t["OMP_NUM_THREADS"] == "28" and len(t["FAKE_JSRUN_OMP_PLACES"].split(",")) == 7


@pytest.mark.mpi
def test_summit_resource_sets_one_gpu_each(tmp_path):
    tasks = step_tasks(tmp_path, "-n24 -a1 -c7 -g1 -r6 -bpacked:7")
    assert len(tasks) == 24 and {t["CUDA_VISIBLE_DEVICES"] for t in tasks} == {"0"}
    h1 = [t["FAKE_JSRUN_GPUS"] for t in tasks if t["FAKE_JSRUN_HOST"] == "h1"]
    assert h1 == ["0", "1", "2", "3", "4", "5"]


def test_jsrun_refuses_what_the_allocation_does_not_hold(tmp_path):
    for flags, message in [
        (
            "--nrs 13 --cpu_per_rs 7 --gpu_per_rs 2 --rs_per_host 3",
            "13 resource sets requested but the allocation holds 12",
        ),
        ("--nrs 4 --cpu_per_rs 7 --gpu_per_rs 2 --rs_per_host 4", "--rs_per_host 4 does not fit"),
    ]:
        result, _ = bsub(tmp_path, "-nnodes", "4", "-o", "step.out", script=f"jsrun {flags} true\n")
        assert result.returncode != 0 and message in (tmp_path / "step.out").read_text()


# ---- a real job: the walltime warning, the requeue and the resumed run --------------------------


@pytest.mark.mpi
def test_walltime_warning_checkpoints_requeues_and_the_job_resumes_to_the_end(
    tmp_path, digits_file
):
    # -W 3 -wt 1 with a minute of 15 s: SIGUSR1 at 30 s, the run limit at 45 s (on this loaded
    # 2-core machine a run takes about 15 s to its first step).
    steps = tmp_path / "steps.json"
    steps.write_text('{"steps": 100000}')
    run = tmp_path / "run"
    extra = f"--classes 0 1 --threads 1 --checkpoint-every 50 --config {steps}"
    launches("bsub")  # the template's jsrun starts the training with mpiexec
    job = subprocess.Popen(
        [str(FAKE / "bsub"), "-K", "-nnodes", "4", "-W", "3", "-wt", "1", str(TEMPLATE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=lsf_env(
            tmp_path,
            DATA=str(digits_file),
            RUN=str(run),
            CLASSES="2",
            PRESET="tiny",
            EXTRA=extra,
            FAKE_LSF_SECONDS_PER_MINUTE="15",
            FAKE_LSF_REQUEUE_DELAY_S="2",
        ),
    )
    try:
        # The first run stopped at the warning: both classes interrupted at a checkpoint. The
        # test then shortens the run (as a user would, with more walltime) so the requeued run,
        # which reads its config anew, can finish: a resume may change --steps.
        stopped = wait_for_lines(
            tmp_path / "distcgan.1001.out", '"event": "class_interrupted"', 2, timeout=90
        )
        last = max(json.loads(x)["step"] for x in stopped)
        steps.write_text(json.dumps({"steps": last + 10}))
        out, _ = job.communicate(timeout=120)
    finally:
        job.kill()
    log = (tmp_path / "distcgan.1001.out").read_text()
    assert job.returncode == 0, out + log
    assert [(e["event"], e.get("code")) for e in events(tmp_path) if e["event"] != "start"] == [
        ("warning", None),
        ("end", 75),
        ("requeued", 75),
        ("end", 0),
    ]
    # Both runs in one log, in order: the stop, the resume, the end.
    starts = [i for i, x in enumerate(log.splitlines()) if x.startswith("distcgan job 1001:")]
    assert len(starts) == 2 and "--resume" in log.splitlines()[starts[1]]
    assert "Exited with exit code 75." in log and log.rstrip().endswith("Successfully completed.")
    assert "distcgan supervise: SIGUSR1 received" in log
    assert json.loads((run / "summary.json").read_text())["complete"] is True
    for k in (0, 1):  # every rank checkpointed at the warning and trained on from there
        assert read(run / f"class_{k:03d}" / "checkpoint.pt")["step"] == last + 10
    assert json.loads((run / "env.json").read_text())["malloc"]["trim_threshold"] == 1 << 30


def wait_for_lines(path: Path, text: str, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [x for x in (path.read_text().splitlines() if path.exists() else []) if text in x]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(
        f"no {count} lines with {text} in {path}: {path.read_text() if path.exists() else ''}"
    )


# ---- signals: jsrun passes what it gets to every task; jskill signals a step's tasks -------------

WAITER = """
import os, pathlib, signal, sys, time
rank = os.environ["JSM_NAMESPACE_RANK"]
def stop(signum, frame):
    pathlib.Path("got", rank).touch()
    sys.exit(7)
signal.signal(signal.SIGUSR1, stop)
signal.signal(signal.SIGUSR2, stop)
pathlib.Path("ready", rank).touch()
time.sleep(60)
"""


def start_waiting_step(tmp_path: Path, launcher: list[str]) -> subprocess.Popen:
    for d in ("ready", "got"):
        (tmp_path / d).mkdir()
    (tmp_path / "hostfile").write_text(allocation(1).hostfile())
    env = lsf_env(tmp_path, LSB_DJOB_HOSTFILE=str(tmp_path / "hostfile"))
    launches("jsrun")  # the stand-in jsrun starts the tasks with mpiexec
    proc = subprocess.Popen(
        [*launcher, sys.executable, "-c", WAITER],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "ready").iterdir())) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the tasks did not start"
        time.sleep(0.1)
    return proc


@pytest.mark.mpi
def test_jsrun_passes_a_signal_to_every_task(tmp_path):
    # SIGUSR2 on purpose: mpich's mpiexec does not forward it; jsrun must.
    step = start_waiting_step(tmp_path, [str(FAKE / "jsrun"), "-n2", "-a1", "-c1"])
    try:
        step.send_signal(signal.SIGUSR2)
        assert step.wait(timeout=30) == 7
    finally:
        step.kill()
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == ["0", "1"]


@pytest.mark.mpi
def test_jskill_signals_the_tasks_of_a_step(tmp_path):
    step = start_waiting_step(tmp_path, [str(FAKE / "jsrun"), "-n2", "-a1", "-c1"])
    try:
        env = lsf_env(tmp_path)
        subprocess.run([str(FAKE / "jskill"), "-s", "USR1", "all"], env=env, timeout=30, check=True)
        assert step.wait(timeout=30) == 7
    finally:
        step.kill()
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == ["0", "1"]
