"""`distcgan status` and `distcgan supervise`: a job's exit code comes from the run directory's
record of its launch, not from the launcher (Open MPI's returns 1 for ranks that exited 75), and
stop signals reach the launcher as SIGUSR1, then SIGTERM, then SIGKILL.

The real launchers are exercised in test_jobs.py (jobs/local.sh under a real mpiexec) and
faults/test_signals.py; here fake launchers make each decision deterministic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from helpers import REPO, run_cli, tiny_args


def _finished_run(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--classes", "0", "--steps", "3"))
    assert result.returncode == 0, result.stderr
    return run


def test_status_of_a_finished_run_then_of_a_launch_that_left_no_summary(tmp_path, digits_file):
    run = _finished_run(tmp_path, digits_file)
    done = run_cli("status", "--run", str(run))
    assert done.returncode == 0, done.stderr
    assert f"{run}: complete, 1 task(s) done" in done.stdout
    # A second launch that died before its summary (a rank killed, the launcher ended the job).
    with open(run / "launches.jsonl", "a") as fh:
        fh.write(json.dumps({"time_utc": "2026-01-01T00:00:00Z", "ranks": 2}) + "\n")
    crashed = run_cli("status", "--run", str(run))
    assert crashed.returncode == 1
    assert "launch 2 ended without a summary" in crashed.stderr
    assert f"distcgan train --run {run} --resume" in crashed.stderr


def test_status_of_a_folder_that_is_not_a_run(tmp_path):
    result = run_cli("status", "--run", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"distcgan: error: {tmp_path} is not a distcgan run directory (it has no config.json)"
    )


def _supervise(run, *command, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "distcgan", "supervise", "--run", str(run), "--", *command],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


# A launcher that records a launch which every rank left with `status`, then exits 1.
FAKE_LAUNCHER = """
import json, sys
from pathlib import Path
run, status = Path(sys.argv[1]), sys.argv[2]
with open(run / "launches.jsonl", "a") as fh:
    fh.write("{}\\n")
n = len((run / "launches.jsonl").read_text().splitlines())
tasks = [{"task": "class_000", "status": status, "error": "NaN loss"}]
summary = {"format_version": 1, "launch": n, "classes": tasks}
(run / "summary.json").write_text(json.dumps(summary))
sys.exit(1)
"""


def test_supervise_exits_with_the_code_the_run_records(tmp_path, digits_file):
    run = _finished_run(tmp_path, digits_file)
    for status, code in (("interrupted", 75), ("diverged", 3), ("done", 0)):
        job = _supervise(run, sys.executable, "-c", FAKE_LAUNCHER, str(run), status)
        out, err = job.communicate(timeout=60)
        assert job.returncode == code, err
        assert "the launcher exited 1; the run directory says:" in err


def test_supervise_takes_a_real_launch_and_passes_bad_input_through(tmp_path, digits_file):
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--classes", "0", "--steps", "3")
    train = [sys.executable, "-m", "distcgan", *args]
    ok = _supervise(run, *train)
    out, err = ok.communicate(timeout=300)
    assert ok.returncode == 0 and err == "", err
    # A launch that fails before it starts (here a missing data file) records nothing: its own
    # code stands, not the previous launch's.
    bad = _supervise(run, *[a if a != str(digits_file) else "nowhere.h5" for a in train])
    out, err = bad.communicate(timeout=300)
    assert bad.returncode == 2 and "nowhere.h5" in err, err


# A launcher that writes down every signal it gets and otherwise ignores it.
STUBBORN = """
import signal, sys, time
from pathlib import Path
log = Path(sys.argv[1])
for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
    signal.signal(s, lambda n, f: log.open("a").write(signal.Signals(n).name + "\\n"))
log.write_text("ready\\n")
while True:
    time.sleep(0.05)
"""


def _wait_lines(path, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= n:
            return path.read_text().split()
        time.sleep(0.05)
    raise AssertionError(f"{path}: {path.read_text() if path.exists() else 'missing'}")


def test_supervise_passes_stop_signals_on_usr1_then_term_then_kill(tmp_path):
    log = tmp_path / "signals.txt"
    job = _supervise(tmp_path / "run", sys.executable, "-c", STUBBORN, str(log))
    _wait_lines(log, 1)
    job.send_signal(signal.SIGTERM)  # the scheduler's warning: the ranks checkpoint and stop
    assert _wait_lines(log, 2) == ["ready", "SIGUSR1"]
    job.send_signal(signal.SIGINT)  # asked again: the launcher may end the job
    assert _wait_lines(log, 3) == ["ready", "SIGUSR1", "SIGTERM"]
    job.send_signal(signal.SIGTERM)  # and again: the launcher and its children are killed
    out, err = job.communicate(timeout=30)
    assert job.returncode == 128 + signal.SIGKILL, err
    assert "SIGTERM received; sent SIGKILL to the launcher" in err


def test_supervise_without_a_launcher_says_what_to_give(tmp_path):
    for command, message in (
        ([], "supervise: give the launcher command after --, e.g. -- mpiexec -n 2 ..."),
        (
            ["no-such-mpiexec", "-n", "2"],
            "supervise: cannot start the launcher 'no-such-mpiexec' (No such file or directory): "
            "check the command after -- (is the launcher on PATH?)",
        ),
    ):
        job = _supervise(tmp_path / "run", *command)
        out, err = job.communicate(timeout=60)
        assert job.returncode == 2
        assert err.strip() == f"distcgan: error: {message}"


def test_supervise_refuses_a_run_it_could_not_read_before_the_launcher_starts(tmp_path):
    """A file as --run ended in a traceback after the whole job, and a job that trained another
    run than supervise's (a typo) exited 1 without a word after it had trained. Each is said
    first now, and the launcher (here one that leaves a mark) never starts."""
    mark = tmp_path / "started"
    touch = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w')", str(mark)]
    afile, export = tmp_path / "data.h5", tmp_path / "export"
    afile.write_text("x")
    export.mkdir()
    (export / "config.json").write_text(json.dumps({"format": "distcgan-generator"}))
    run = tmp_path / "run"
    for target, command, message in (
        (afile, touch, f"supervise: --run {afile} is a file: give the run directory that the"),
        (export, touch, f"supervise: --run {export} is a distcgan export, not a run directory"),
        (
            run,
            [*touch, "train", "--run", str(tmp_path / "rnu")],
            f"supervise --run {run}, but the command trains --run {tmp_path / 'rnu'}: give both",
        ),
        (
            run,
            [*touch, f"--run={tmp_path}/x"],
            f"supervise --run {run}, but the command trains --run {tmp_path}/x: give both",
        ),
    ):
        job = _supervise(target, *command)
        out, err = job.communicate(timeout=60)
        assert job.returncode == 2, err
        assert err.startswith(f"distcgan: error: {message}") and len(err.splitlines()) == 1, err
        assert not mark.exists()
    status = run_cli("status", "--run", str(export))
    assert status.returncode == 2
    assert f"{export} is a distcgan export, not a run directory" in status.stderr
    # The same run, spelled otherwise, or a launcher that starts the ranks in another folder
    # (whose relative --run is not supervise's): started. It records no launch, and a launcher's
    # 0 without one is not taken for success, silently or otherwise.
    for command in (
        [*touch, "--run", f"{tmp_path}/./run/"],
        [*touch, "-wdir", "/elsewhere", "--run", "run"],
    ):
        job = _supervise(run, *command)
        out, err = job.communicate(timeout=60)
        assert job.returncode == 1 and mark.exists(), err
        assert err.strip() == (
            f"distcgan supervise: the launcher exited 0, but no launch was recorded in {run}: the "
            f"command must run distcgan train --run {run} (exit 1)"
        )
        mark.unlink()


def test_a_record_cut_short_is_ended_before_the_next_so_no_later_launch_is_lost(tmp_path):
    """launches.jsonl (and metrics.jsonl) after a write cut short by a full disk or a crash: the
    next launch's line used to join the cut one, and readers stopped there, so that launch and
    every later one were lost to the report and compare, and supervise counted one launch too
    few ("nothing started", for a launch that trained)."""
    from distcgan.run.rundir import RunDir, append_jsonl, read_jsonl

    rd = RunDir(tmp_path)
    assert rd.append_launch({"amp": "off"}) == 1
    with open(rd.launches_file, "a") as fh:
        fh.write('{"amp": "bf')  # launch 2 started, and its line was cut short
    assert rd.append_launch({"amp": "bf16"}) == 3
    assert read_jsonl(rd.launches_file) == [{"amp": "off"}, {"amp": "bf16"}]
    assert rd.precisions() == "off, then bf16"
    # A line cut just before its newline parses: it is kept, and the next one stays its own.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n{"step": 2}')
    append_jsonl(metrics, {"step": 3})
    assert read_jsonl(metrics) == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert metrics.read_text().endswith('{"step": 2}\n{"step": 3}\n')
