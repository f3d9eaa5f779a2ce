"""The scheduler's warning signal (SIGTERM, SIGUSR1, SIGUSR2) sent to a real `mpiexec`: every
rank checkpoints and the job exits cleanly with code 75 (under Open MPI's mpiexec, SIGTERM gives
exit 1 but the same checkpoints and record); a resubmitted job (`--resume`) finishes, with the
same weights as a run that was never stopped."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch
from helpers import ended_promptly, events, open_mpi, run_cli, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi

COMMON = "--classes 0 1 2 --devices cpu --threads 1 --checkpoint-every 50".split()


STOPPED = ("interrupted", "not_started", "interrupted")  # rank 0: classes 0 then 1; rank 1: 2


def _stop_with(
    sig, run, digits_file, background, steps, to_ranks=False, extra=(), statuses=STOPPED
):
    args = tiny_args(digits_file, run, *COMMON, *extra, "--steps", str(steps))
    job = background(*args, ranks=2)
    job.wait_event("class_start", class_id=2)  # rank 1 is training
    time.sleep(0.5)
    signalled = time.time()
    if to_ranks:  # as Slurm's --signal=SIG@T does: straight to the tasks
        pids = job.rank_pids()
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, sig)
    else:
        job.proc.send_signal(sig)  # to mpiexec, which forwards it to every rank
    rc = job.wait(timeout=60)
    assert ended_promptly(job, signalled) is None
    stderr = "".join(job.stderr)
    # The run directory's record of the launch, which job scripts go by (distcgan supervise).
    status = run_cli("status", "--run", str(run))
    assert status.returncode == 75 and "stopped by a signal" in status.stderr, status.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False
    assert [c["status"] for c in summary["classes"]] == list(statuses)
    if sig == signal.SIGTERM and not to_ranks and open_mpi():
        # Open MPI's mpiexec passes SIGTERM on, then ends the job itself: exit 1, and the ranks'
        # last lines are not printed. The checkpoints and the record above are all there.
        assert rc != 0
        return
    assert rc == 75, stderr
    assert "stopped by a signal" in stderr and "--resume" in stderr
    stopped = [e for e in events("".join(job.stdout)) if e["event"] == "class_interrupted"]
    interrupted = {k for k, status in enumerate(statuses) if status == "interrupted"}
    assert {e["class_id"] for e in stopped} == interrupted and all(
        e["signal"] == sig.name for e in stopped
    )
    for e in stopped:  # the checkpoint is at the step where the signal stopped the class
        assert read(run / f"class_{e['class_id']:03d}" / "checkpoint.pt")["step"] == e["step"]


def _resume_past_the_stop(run, straight, digits_file, extra=()):
    """Resume the stopped run to 50 steps past its furthest class, and train a straight run to
    the same step; the two runs' checkpoints. The stopped run was asked for so many steps that
    no class can finish before the signal on any machine (a class of 150 steps once did, on a
    loaded core: a test must not depend on the machine's speed)."""
    stopped = [read(p)["step"] for p in sorted(run.glob("class_*/checkpoint.pt"))]
    assert stopped and max(stopped) < 100000
    end = str(max(stopped) + 50)
    resumed = run_cli("train", "--run", str(run), "--resume", "--steps", end, "--no-progress",
                      ranks=2)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (
        run_cli(*tiny_args(digits_file, straight, *COMMON, *extra, "--steps", end)).returncode == 0
    )
    pairs = [
        tuple(read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, run))
        for k in range(3)
    ]
    for a, b in pairs:
        assert a["step"] == b["step"] == int(end)
    return pairs


def test_sigterm_checkpoints_and_exits_then_resume_matches_a_straight_run(
    tmp_path, digits_file, background
):
    run, straight = tmp_path / "run", tmp_path / "straight"
    _stop_with(signal.SIGTERM, run, digits_file, background, steps=100000)
    for k, (a, b) in enumerate(_resume_past_the_stop(run, straight, digits_file)):
        assert all(torch.equal(a["G"][n], b["G"][n]) for n in a["G"]), k


@pytest.mark.launcher_neutral
@pytest.mark.parametrize("fuse", ["1", "2"])
def test_a_stop_under_the_async_schedule_resumes_to_a_straight_runs_weights(
    fuse, tmp_path, digits_file, background
):
    # The cached fakes of the step before are in the stop's checkpoint: the resumed run is the
    # straight one, bit for bit. With --fuse 2, rank 0 trains classes 0 and 1 as one fused
    # pair, and the signal stops both.
    run, straight = tmp_path / "run", tmp_path / "straight"
    extra = ("--schedule", "async", "--fuse", fuse)
    statuses = STOPPED if fuse == "1" else ("interrupted",) * 3
    _stop_with(
        signal.SIGUSR1, run, digits_file, background, steps=100000, extra=extra,
        statuses=statuses,
    )  # fmt: skip
    for k, (a, b) in enumerate(_resume_past_the_stop(run, straight, digits_file, extra)):
        assert all(torch.equal(a["G"][n], b["G"][n]) for n in a["G"]), k
        assert all(torch.equal(x, y) for x, y in zip(a["async_cache"], b["async_cache"]))
        assert all(torch.equal(x, y) for x, y in zip(a["async_cache"], b["async_cache"]))


def test_sigusr1_through_mpiexec_stops_cleanly(tmp_path, digits_file, background):
    _stop_with(signal.SIGUSR1, tmp_path / "run", digits_file, background, steps=100000)


def test_sigusr2_delivered_to_the_ranks_stops_cleanly(tmp_path, digits_file, background):
    # mpich's mpiexec forwards SIGTERM, SIGINT and SIGUSR1 but not SIGUSR2; schedulers that use
    # USR2 send it to the tasks themselves.
    _stop_with(
        signal.SIGUSR2, tmp_path / "run", digits_file, background, steps=100000, to_ranks=True
    )
