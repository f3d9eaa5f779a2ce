"""`make test`: run every stage of the test suite, each under its MPI, and say what each did.

    python tests/stages.py lint mpich openmpi openmpi4

Each stage is `make test-STAGE` (which builds its venv first) with pytest writing a JUnit XML
report; the stage "lint" is `make lint` (ruff, then mypy), one check that passes or fails. A
failing stage does not stop the others. The end is one line per stage ("mpich: 390
passed, 0 failed, 11 skipped in 612 s") and a last line "N passed, N failed" over all stages;
the exit status is 1 if any stage failed or did not report (its set-up failed), else 0.
It says first and again above those lines the machine it ran on (CPU, cores, AVX2/AVX-512/AMX),
so a log from a CI machine or a user's names the machine. Standard library only: it runs before
any venv has its packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Stage:
    name: str
    rc: int
    seconds: float
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reported: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.reported and self.failed == 0

    def line(self) -> str:
        took = f"in {self.seconds:.0f} s"
        if not self.reported:
            return f"{self.name}: no tests ran (make test-{self.name} exited {self.rc}) {took}"
        counts = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped {took}"
        if self.rc not in (0, 1):  # pytest: 1 is tests failed; anything else is not a count
            counts += f" (pytest exited {self.rc})"
        return f"{self.name}: {counts}"


def counts(report: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) from a pytest JUnit XML report; errors count as failed."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = failed = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def run_stage(name: str, folder: Path) -> Stage:
    if name == "lint":
        return run_lint()
    report = folder / f"{name}.xml"
    print(f"==> stage {name}: make test-{name}", flush=True)
    start = time.monotonic()
    # The caller's PYTEST_ARGS (make test PYTEST_ARGS=...) go on to each stage's pytest.
    args = f"{os.environ.get('PYTEST_ARGS', '')} --junitxml={report}".strip()
    rc = subprocess.call(
        ["make", "--no-print-directory", f"test-{name}", f"PYTEST_ARGS={args}"], cwd=REPO
    )
    stage = Stage(name, rc, time.monotonic() - start)
    if report.exists():
        stage.passed, stage.failed, stage.skipped = counts(report)
        stage.reported = True
    return stage


def run_lint() -> Stage:
    """`make lint` as a stage of one check."""
    print("==> stage lint: make lint", flush=True)
    start = time.monotonic()
    rc = subprocess.call(["make", "--no-print-directory", "lint"], cwd=REPO)
    return Stage("lint", rc, time.monotonic() - start, int(rc == 0), int(rc != 0), 0, True)


# The vector extensions that choose torch's CPU kernels (oneDNN, its BLAS): /proc/cpuinfo's flag
# for each. A test whose outcome differs between these is a test tied to the machine.
EXTENSIONS = (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AMX", "amx_tile"))


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The machine, in one line: the CPU's model, the cores this process may use of the machine's,
    and which of EXTENSIONS it has ("machine: AMD EPYC, 2 of 2 cores, AVX2, AVX-512")."""
    model, flags = "", set()
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "model name" and not model:
                model = value
            elif key == "flags" and not flags:
                flags = set(value.split())
    except OSError:  # not Linux: the model and extensions are not known
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    extensions = ", ".join(name for name, flag in EXTENSIONS if flag in flags)
    return (
        f"machine: {model or 'CPU model unknown'}, {usable} of {os.cpu_count()} cores, "
        f"{extensions or 'none of AVX2, AVX-512, AMX'}"
    )


def main(names: list[str]) -> int:
    if not names:
        print("usage: python tests/stages.py STAGE [STAGE ...] (lint, mpich, openmpi, openmpi4)")
        return 2
    print(f"==> {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="distcgan-stages-") as tmp:
        stages = [run_stage(name, Path(tmp)) for name in names]
    print(f"\n==> every stage, on this {machine()}")
    for stage in stages:
        print(stage.line())
    passed = sum(s.passed for s in stages)
    failed = sum(s.failed for s in stages) + sum(not s.reported for s in stages)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if all(s.ok for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
