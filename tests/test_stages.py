"""`make test`'s stage runner (tests/stages.py): counts from pytest's own JUnit report, every stage
run even after one fails, a line per stage and "N passed, N failed" last."""

from __future__ import annotations

import subprocess
import sys

import stages


def test_counts_come_from_a_real_pytest_report(tmp_path):
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "@pytest.mark.skip(reason='x')\n"
        "def test_skipped(): pass\n"
        "@pytest.fixture\n"
        "def broken(): raise RuntimeError\n"
        "def test_error(broken): pass\n"
    )
    report = tmp_path / "r.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    subprocess.run([*cmd, str(tmp_path / "test_three.py")], capture_output=True, cwd=tmp_path)
    assert stages.counts(report) == (1, 2, 1)  # an error in a fixture counts as failed


def test_every_stage_runs_and_the_last_line_sums_them(monkeypatch, capsys):
    ran = []

    def fake(name, folder):
        ran.append(name)
        if name == "b":
            return stages.Stage(name, 1, 3.0, passed=5, failed=2, skipped=1, reported=True)
        if name == "c":  # its venv could not be built: no report
            return stages.Stage(name, 2, 1.0)
        return stages.Stage(name, 0, 60.4, passed=10, skipped=3, reported=True)

    monkeypatch.setattr(stages, "run_stage", fake)
    assert stages.main(["a", "b", "c", "d"]) == 1
    assert ran == ["a", "b", "c", "d"]  # a failed stage does not stop the next
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"==> {stages.machine()}"
    assert out[-6] == f"==> every stage, on this {stages.machine()}"
    assert out[-5:] == [
        "a: 10 passed, 0 failed, 3 skipped in 60 s",
        "b: 5 passed, 2 failed, 1 skipped in 3 s",
        "c: no tests ran (make test-c exited 2) in 1 s",
        "d: 10 passed, 0 failed, 3 skipped in 60 s",
        "25 passed, 3 failed",
    ]
    monkeypatch.setattr(stages, "run_stage", lambda n, f: stages.Stage(n, 0, 1.0, 4, 0, 0, True))
    assert stages.main(["a", "b"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "8 passed, 0 failed"


def test_lint_is_a_stage_of_one_check_that_make_lint_decides(monkeypatch, capsys):
    called = []

    def fake_call(cmd, cwd):
        called.append(cmd)
        return 2 if len(called) == 1 else 0

    monkeypatch.setattr(stages.subprocess, "call", fake_call)
    failed, passed = stages.run_stage("lint", None), stages.run_stage("lint", None)
    assert called == [["make", "--no-print-directory", "lint"]] * 2
    assert (failed.ok, failed.passed, failed.failed) == (False, 0, 1)
    assert (passed.ok, passed.passed, passed.failed) == (True, 1, 0)
    assert failed.line().startswith("lint: 0 passed, 1 failed, 0 skipped in ")


def test_a_stage_gets_the_callers_pytest_args_and_its_report(monkeypatch, tmp_path):
    called = []
    monkeypatch.setattr(stages.subprocess, "call", lambda cmd, cwd: called.append(cmd) or 2)
    monkeypatch.setenv("PYTEST_ARGS", "-x -k bad")
    stage = stages.run_stage("mpich", tmp_path)
    report = tmp_path / "mpich.xml"
    assert called == [
        ["make", "--no-print-directory", "test-mpich", f"PYTEST_ARGS=-x -k bad --junitxml={report}"]
    ]
    assert not stage.reported and not stage.ok  # make failed before pytest wrote a report


def test_the_machine_line_names_the_cpu_its_cores_and_its_vector_extensions(tmp_path):
    import os

    cores = f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} cores"  # this machine's
    xeon = tmp_path / "xeon"
    xeon.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu\n"
    )
    line = stages.machine(xeon)
    assert line == f"machine: Intel(R) Xeon(R) Platinum 8480+, {cores}, AVX2, AVX-512, AMX"
    epyc = tmp_path / "epyc"
    epyc.write_text("model name\t: AMD EPYC 7B13\nflags\t\t: fpu avx avx2 fma\n")
    assert stages.machine(epyc) == f"machine: AMD EPYC 7B13, {cores}, AVX2"
    assert stages.machine(tmp_path / "absent") == (
        f"machine: CPU model unknown, {cores}, none of AVX2, AVX-512, AMX"
    )
    assert stages.machine().startswith("machine: ")  # this machine's own /proc/cpuinfo
