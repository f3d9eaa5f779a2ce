"""Sample the utilisation and memory of this rank's GPUs (G's and D's) while it trains.

A daemon thread asks NVML (through torch.cuda.utilization / device_memory_used, which use the
nvidia-ml-py package) every `interval_s` seconds and keeps running sums, so the summary can
report means per device: the paper's ranks kept their GPUs about 70% busy. On a CPU-only rank,
or without NVML, it does nothing. Leaves out: per-kernel profiling (use Nsight for that).
"""

from __future__ import annotations

import threading
from typing import Any

import torch


class GpuMonitor:
    def __init__(self, devices: dict[str, str], interval_s: float = 0.5) -> None:
        """`devices` maps a role ("g", "d") to a torch device string ("cuda:1", "cpu")."""
        self.devices = {role: dev for role, dev in devices.items() if dev.startswith("cuda")}
        self.interval_s = interval_s
        self.sums = {role: [0.0, 0.0] for role in self.devices}  # utilisation %, memory MiB
        self.samples = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GpuMonitor:
        if self.devices:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.devices and not self.samples and self.error is None:
            # A span shorter than the interval (a bench window of a few fast GPU steps) still
            # gets one reading, at its end; NVML's utilisation covers its own last period.
            self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self._sample():
            pass

    def _sample(self) -> bool:
        """One reading of every device; False (and the error kept) when NVML cannot answer."""
        try:
            for role, dev in self.devices.items():
                self.sums[role][0] += torch.cuda.utilization(dev)
                self.sums[role][1] += torch.cuda.device_memory_used(dev) / 2**20
        except Exception as exc:  # no NVML (nvidia-ml-py missing, no driver access)
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        self.samples += 1
        return True

    def report(self) -> dict[str, Any]:
        """Means over the samples: util_g, util_d (%), mem_g_mib, mem_d_mib; empty if none."""
        if not self.samples:
            return {"gpu_monitor_error": self.error} if self.error else {}
        out: dict[str, Any] = {"samples": self.samples}
        for role, (util, mem) in self.sums.items():
            out[f"util_{role}"] = round(util / self.samples, 1)
            out[f"mem_{role}_mib"] = round(mem / self.samples, 1)
        return out
