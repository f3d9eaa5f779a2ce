"""GpuMonitor (train/gpumon.py) with NVML's two readings replaced, so it runs on any machine."""

from __future__ import annotations

import pytest
import torch

from distcgan.train.gpumon import GpuMonitor


@pytest.fixture
def nvml(monkeypatch):
    """torch.cuda's NVML readings for cuda:0 (G) and cuda:1 (D): 40% / 1 GiB and 80% / 2 GiB."""
    util = {"cuda:0": 40, "cuda:1": 80}
    monkeypatch.setattr(torch.cuda, "utilization", lambda dev: util[dev])
    monkeypatch.setattr(torch.cuda, "device_memory_used", lambda dev: util[dev] // 40 * 2**30)


def test_a_span_shorter_than_the_interval_still_gets_one_reading(nvml):
    # On a GPU a bench window of a few steps lasts milliseconds: with no reading at all its
    # utilisation was missing from bench's report (found on an H100, 2026-11-26).
    with GpuMonitor({"g": "cuda:0", "d": "cuda:1"}, interval_s=60) as monitor:
        pass
    report = monitor.report()
    assert report["samples"] == 1
    assert (report["util_g"], report["util_d"]) == (40, 80)
    assert (report["mem_g_mib"], report["mem_d_mib"]) == (1024, 2048)


def test_readings_are_averaged_over_the_span(nvml, monkeypatch):
    readings = iter([10, 30, 50, 70, 90, 110])
    monkeypatch.setattr(torch.cuda, "utilization", lambda dev: next(readings))
    monitor = GpuMonitor({"g": "cuda:0"}, interval_s=60)
    for _ in range(3):
        monitor._sample()
    assert monitor.report()["util_g"] == 30  # (10 + 30 + 50) / 3


def test_without_nvml_the_error_is_reported_and_no_reading_is_made_up(monkeypatch):
    def no_nvml(dev):
        raise ModuleNotFoundError("pynvml")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    with GpuMonitor({"g": "cuda:0"}, interval_s=60) as monitor:
        pass
    assert monitor.report() == {"gpu_monitor_error": "ModuleNotFoundError: pynvml"}


def test_a_cpu_rank_reads_nothing(nvml):
    with GpuMonitor({"g": "cpu", "d": "cpu"}, interval_s=0.01) as monitor:
        pass
    assert monitor.report() == {}
