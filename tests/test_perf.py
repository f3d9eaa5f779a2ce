"""glibc's malloc thresholds (`tune_malloc`): each set on its own, the mmap one falling back to
the largest value an older glibc accepts, and what was applied reported."""

from __future__ import annotations

import platform

import pytest

from distcgan.train.perf import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, tune_malloc


class OldGlibc:
    """mallopt as glibc <= 2.34 answers it: an mmap threshold above 32 MiB is refused (0)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 0 if param == M_MMAP_THRESHOLD and value > 32 << 20 else 1


def test_a_refused_mmap_threshold_falls_back_and_the_trim_threshold_is_still_set():
    libc = OldGlibc()
    assert tune_malloc(libc) == {"mmap_threshold": 32 << 20, "trim_threshold": 1 << 30}
    assert (M_TRIM_THRESHOLD, 1 << 30) in libc.calls


def test_a_glibc_that_refuses_everything_reports_none():
    class Refuses:
        def mallopt(self, param: int, value: int) -> int:
            return 0

    assert tune_malloc(Refuses()) == {"mmap_threshold": None, "trim_threshold": None}


def test_this_machines_glibc():
    applied = tune_malloc()
    name, version = platform.libc_ver()
    if name != "glibc":
        pytest.skip(f"not glibc ({name or 'unknown'}): nothing to set")
    # glibc 2.35 and later take 1 GiB for both; older ones cap the mmap threshold at 32 MiB.
    new = tuple(map(int, version.split(".")[:2])) >= (2, 35)
    assert applied == {
        "mmap_threshold": 1 << 30 if new else 32 << 20,
        "trim_threshold": 1 << 30,
    }
