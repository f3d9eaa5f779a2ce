"""Shared fixtures: the digits data file and helpers that run the CLI, alone or under mpiexec."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def mpiexec() -> str:
    """The mpiexec beside this Python (the venv's mpich), else the one on PATH."""
    local = BIN / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec: install the local-mpi extra (pip install -e '.[local-mpi]')")
    return found


def run_cli(
    *args: str, ranks: int | None = None, timeout: float = 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run `distcgan ARGS` as a user would: one process, or `mpiexec -n RANKS python -m mpi4py`."""
    if ranks is None:
        cmd = [sys.executable, "-m", "distcgan", *args]
    else:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded digits at 16 px, written by the real converter."""
    out = tmp_path_factory.mktemp("data") / "digits16.h5"
    from data_prep.__main__ import main

    assert main(["digits", "--out", str(out), "--resolution", "16"]) == 0
    return out


def tiny_args(data: Path, run: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--run",
        str(run),
        "--no-progress",
        *extra,
    ]
