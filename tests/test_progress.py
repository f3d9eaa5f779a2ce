"""Progress bars: drawn on rank 0 when stderr is a terminal, never in a batch job's log (no TTY),
and `--no-progress` turns them off; checked on real commands run under a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from helpers import REPO, imagenet_train_folder, make_samples, save_tiny, tiny_args

from distcgan.cli import main
from distcgan.progress import NoBar, bar, shown


def test_a_bar_needs_rank_0_a_terminal_and_no_no_progress(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert shown(True, 0) and not shown(True, 1) and not shown(False, 0)
    assert not isinstance(bar(10, "x"), NoBar)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a batch job's log
    assert not shown(True, 0) and isinstance(bar(10, "x"), NoBar)


def _stderr_on_a_terminal(args: list[str], module: str | None = "distcgan") -> tuple[int, str]:
    """Run `python -m MODULE ARGS` (module None: `python ARGS`) with stderr on a
    pseudo-terminal; its exit code and what the terminal showed."""
    leader, follower = pty.openpty()
    # A new pseudo-terminal is 0 columns wide, where tqdm draws nothing: 24 x 100, as a window.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, *(["-m", module] if module else []), *args],
        stderr=follower,
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )
    os.close(follower)
    shown_text = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown_text += chunk
    os.close(leader)
    return proc.wait(timeout=300), shown_text.decode(errors="replace")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, digits_file):
    root = tmp_path_factory.mktemp("progress")
    run = root / "run"
    assert main(tiny_args(digits_file, run, "--classes", "1", "2")) == 0
    samples = make_samples(digits_file, root / "samples.h5", per_class=30)
    return root, run, samples, save_tiny(root / "tiny.pt")


@pytest.mark.parametrize(
    "command, desc",
    [
        ("evaluate", "rank 0 scored"),
        ("sample", "sampled"),
        ("classifier", "classifier"),
    ],
)
def test_long_commands_show_a_bar_on_a_terminal_unless_told_not_to(
    inputs, digits_file, tmp_path, command, desc
):
    root, run, samples, net = inputs
    args = {
        "evaluate": ["evaluate", "--samples", str(samples), "--network", str(net), "--splits", "2"],
        "sample": [
            "sample",
            "--run",
            str(run),
            "--per-class",
            "4",
            "--out",
            str(tmp_path / "s.h5"),
        ],
        "classifier": ["classifier", "train", str(digits_file), "--out", str(tmp_path / "c.pt")],
    }[command]
    if command == "classifier":
        args += ["--epochs", "1"]
    if command == "evaluate":
        args += ["--json", str(tmp_path / "e.json")]
    args += ["--overwrite"]  # each command runs again below, onto its own output
    code, text = _stderr_on_a_terminal(args)
    assert code == 0, text
    assert desc in text, text  # the bar
    code, text = _stderr_on_a_terminal([*args, "--no-progress"])
    assert code == 0 and desc not in text, text
    if command != "evaluate":
        return
    # No terminal (a batch job): no bar either.
    piped = subprocess.run(
        [sys.executable, "-m", "distcgan", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=300,
    )
    assert piped.returncode == 0 and desc not in piped.stderr, piped.stderr


def test_data_prep_on_an_imagenet_folder_shows_a_bar_unless_told_not_to(tmp_path):
    src = imagenet_train_folder(tmp_path / "ILSVRC" / "train", per_class=2)
    args = ["imagenet", "--src", str(src), "--resolution", "16"]
    code, text = _stderr_on_a_terminal([*args, "--out", str(tmp_path / "a.h5")], "data_prep")
    assert code == 0 and "classes" in text and "class/s" in text, text
    code, text = _stderr_on_a_terminal(
        [*args, "--out", str(tmp_path / "b.h5"), "--no-progress"], "data_prep"
    )
    assert code == 0 and "class/s" not in text, text


def test_the_weak_scaling_sweep_shows_a_bar_of_its_sizes_unless_told_not_to(tmp_path, digits_file):
    sweep = [str(REPO / "jobs" / "weak_scaling.py"), "--ranks", "1", "--preset", "tiny"]
    sweep += ["--steps", "2", "--data", str(digits_file), "--launcher", "local"]
    code, text = _stderr_on_a_terminal([*sweep, "--out", str(tmp_path / "a")], None)
    assert code == 0 and "sizes" in text, text
    code, text = _stderr_on_a_terminal(
        [*sweep, "--out", str(tmp_path / "b"), "--no-progress"], None
    )
    assert code == 0 and "sizes" not in text, text
