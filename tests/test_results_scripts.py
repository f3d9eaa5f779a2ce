"""The scripts under benchmarks/results/ that re-make a results folder: bad settings are one line
and a non-zero exit, and a training run that fails says which run and where its log is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
X3V = ROOT / "benchmarks/results/2026-11-28-pc32-3x/x3v.sh"


def run_x3v(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    core = str(min(os.sched_getaffinity(0)))
    # This process's environment (an MPI found through LD_LIBRARY_PATH, a hidden GPU) without the
    # script's own settings, then this test's.
    knobs = {"ARM", "CORE", "DATA", "OUT", "PY", "REPO", "SEEDS", "TAG", "VARIANT"}
    base = {k: v for k, v in os.environ.items() if k not in knobs}
    base.update({"OUT": str(tmp_path / "runs"), "CORE": core})
    base.update({"PY": sys.executable, "REPO": str(ROOT), "DATA": str(tmp_path / "nowhere")})
    return subprocess.run(
        ["bash", str(X3V)], env={**base, **env}, capture_output=True, text=True, timeout=300
    )


def test_x3v_refuses_an_unknown_arm_or_variant_in_one_line(tmp_path):
    arm = run_x3v(tmp_path, ARM="augmented")
    assert arm.returncode == 2
    assert arm.stderr == "x3v.sh: ARM=augmented is not an arm: set ARM=none or ARM=aug\n"
    variant = run_x3v(tmp_path, VARIANT="dcgan")
    assert variant.returncode == 2
    assert variant.stderr.startswith("x3v.sh: VARIANT=dcgan is not a variant: set VARIANT=")
    assert variant.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_x3v_names_the_failed_run_and_its_log(tmp_path):
    done = run_x3v(tmp_path, ARM="aug", SEEDS="7")
    log = tmp_path / "runs" / "perclass32x3-aug-s7.log"
    assert done.returncode == 1
    assert done.stderr.startswith(f"x3v.sh: per-class aug seed 7 failed (exit 2): see {log}")
    assert done.stderr.count("\n") == 1
    assert "does not exist" in log.read_text()
    assert not (tmp_path / "runs" / "done.log").exists()


def test_x3v_says_which_folder_it_cannot_use(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = run_x3v(tmp_path, OUT=str(blocker / "runs"))
    assert out.returncode == 1
    assert out.stderr == (
        f"x3v.sh: cannot make OUT={blocker / 'runs'} or enter REPO={ROOT}: set OUT to a writable "
        "folder, REPO to a checkout\n"
    )
    gone = run_x3v(tmp_path, REPO=str(tmp_path / "no-checkout"))
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"x3v.sh: cannot make OUT={tmp_path / 'runs'} or enter REPO=")
    assert gone.stderr.count("\n") == 1
