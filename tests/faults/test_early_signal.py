"""A scheduler's warning that comes before the training loop listens (while a rank imports torch)
or after it (while the summary is written) is recorded, not fatal: Python's default action for
SIGUSR1/SIGUSR2 would end the rank, and a job told to stop and requeue would fail instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, cli_command, run_cli, tiny_args

from distcgan.mpi import signals


def _loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_a_warning_while_train_imports_torch_stops_the_job_with_exit_75(tmp_path, digits_file):
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--classes", "0", "--steps", "100000", "--threads", "1")
    proc = subprocess.Popen(
        cli_command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        while not _loaded(proc.pid, "libtorch"):  # torch is being imported: seconds to go
            if proc.poll() is not None:
                pytest.fail(f"train ended before it imported torch: {proc.communicate()[1]}")
            assert time.monotonic() < deadline, "train did not import torch within 60 s"
            time.sleep(0.002)
        proc.send_signal(signal.SIGUSR1)
        # Before the fix the rank died of it, or (mpich catches SIGUSR1 at MPI_Init) trained on
        # as if nothing came.
        try:
            _, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("train went on training after a SIGUSR1 that came while it started")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 75, stderr
    status = run_cli("status", "--run", str(run))
    assert status.returncode == 75 and "stopped by a signal" in status.stderr, status.stderr
    # The rank had trained nothing: its class is not started (nothing to lose), and --resume or a
    # requeue starts it.
    summary = json.loads((run / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["not_started"]


def test_a_stop_signal_after_training_is_recorded_not_fatal():
    stops = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    saved = {s: signal.getsignal(s) for s in stops}
    try:
        signals.hold_stop_signals(["train", "--run", "r"])
        _, previous = signals.install_stop_handlers()
        signals.restore_handlers(previous)  # training is over; the summary is being written
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.05)  # Python runs the handler in the main thread, between bytecodes
        assert signals._EARLY.signal_name == "SIGUSR2"
        again, previous = signals.install_stop_handlers()  # a loop started after it sees it
        assert again.requested
        signals.restore_handlers(previous)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        signals._EARLY.signal_name = None


def test_a_handler_python_did_not_install_is_restored_as_the_default():
    # signal.signal returns None for a handler installed outside Python (by an embedding
    # program or MPI's runtime); passing None back raised TypeError.
    saved = signal.getsignal(signal.SIGUSR2)
    try:
        signals.restore_handlers({signal.SIGUSR2: None})
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR2, saved)


def test_only_train_holds_signals_and_a_second_sigterm_still_ends_it():
    # Other commands never look for a stop request: they keep the default actions.
    script = (
        "import os, signal, sys, time\n"
        "from distcgan.mpi.signals import hold_stop_signals\n"
        "hold_stop_signals(sys.argv[1:])\n"
        "os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.5); print('held once', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.5); print('held twice')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv, out in ((["train"], "held once\n"), (["evaluate"], "")):
        result = subprocess.run(
            [sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env,
            timeout=60,
        )  # fmt: skip
        assert (result.returncode, result.stdout) == (-signal.SIGTERM, out), result.stderr
