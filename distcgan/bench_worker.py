"""Bench's worker processes: each sets up one variant (a step object) and times windows of its
steps on request, and the parent takes the windows from its workers in turn (so that every
variant sees the same machine conditions); with the figures a worker measures once: the FLOPs of
a step (torch's FlopCounterMode), the machine's matmul throughput and the time of the data alone.
Leaves out: which variants there are and what is reported (bench.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from distcgan.train.gpumon import GpuMonitor
from distcgan.train.perf import sync
from distcgan.train.schedule import copy_bytes


def matmul_gflops(device: str, seconds: float = 1.0, dtype: torch.dtype = torch.float32) -> float:
    """Measured dense matrix-product throughput (GFLOP/s) in `dtype` with the current thread
    count: the peak a step's fraction is taken of."""
    n = 1024 if device == "cpu" else 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
        if device != "cpu" and reps % 10:
            continue
        sync(device)
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def matmul_peak(device: str, amp: str) -> tuple[str, float]:
    """(the precision, the peak in GFLOP/s) that a step under `amp` is measured against: the
    precision its matrix products run in, bf16 under --amp bf16 on any device (on a CPU with AMX
    a float32 peak read a bf16 step as 152% of it)."""
    if amp == "bf16":
        return "bf16", matmul_gflops(device, dtype=torch.bfloat16)
    return "float32", matmul_gflops(device, dtype=torch.float32)


def step_gflop(model: Any) -> float:
    with FlopCounterMode(display=False) as counter:
        model.step()
    return counter.get_total_flops() / 1e9


def worker(args: argparse.Namespace, variants: dict[str, Any]) -> None:
    """A variant's process (variants[args.worker]): set up and warm up, say `ready` and its
    figures, then time one window for each `run STEPS` line on stdin, one JSON line each."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = variants[args.worker](args)
    for _ in range(args.warmup):
        model.step()
    sync(args.device_d)
    print("ready " + json.dumps(_figures(model, args)), flush=True)
    # a variant that steps K classes (`classes`) takes K x batch images a step
    per_step = args.batch_size * (args.fuse if hasattr(model, "classes") else 1)
    for line in sys.stdin:
        if not line.startswith("run"):
            break
        steps = int(line.split()[1])
        sync(args.device_d)
        with GpuMonitor({"g": args.device_g, "d": args.device_d}, interval_s=0.1) as monitor:
            t0 = time.perf_counter()
            for _ in range(steps):
                model.step()
            sync(args.device_g)
            sync(args.device_d)
            img_s = steps * per_step / (time.perf_counter() - t0)
        print(json.dumps({"img_s": img_s, "gpu": monitor.report()}), flush=True)


def _figures(model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What a worker says once set up: the FLOPs of a step, and for the variants the report
    takes them from, the async copy, the malloc tuning, the matmul peak and the data's time."""
    if getattr(model, "count_per_class", False):
        # F independent networks: F times one class's step. (torch's FlopCounterMode counts a
        # grouped convolution's backward as about twice its work: 22.4 GFLOP measured at F=3,
        # 16 px, batch 32, where three classes' steps are 3 x 3.74.)
        gflop = args.fuse * step_gflop(model.classes[0])
    else:
        gflop = step_gflop(model)
    info: dict[str, Any] = {"gflop_per_step": gflop}
    if hasattr(model, "copy_s"):  # bench.Async: the refresh of D's copy
        info["copy_bytes"] = copy_bytes(model.member.pair.D)
        info["copy_s_per_step"] = model.copy_s()
    if args.worker in ("ours", "augmented", "fused"):
        info["malloc_tuned"] = model.malloc
        info["matmul_dtype"], info["matmul_gflops"] = matmul_peak(args.device_g, args.amp)
        # Data handling alone (batch indices, gather on the device, noise), per step.
        sync(args.device_d)
        t0 = time.perf_counter()
        for _ in range(50):
            model.batch()
        sync(args.device_d)
        info["data_s_per_step"] = (time.perf_counter() - t0) / 50
    return info


# how a worker process is started: `python -m distcgan.bench --worker NAME ...`
ENTRY = ("-m", "distcgan.bench")


class Worker:
    """One variant's process (`entry` runs worker() with the flags forwarded)."""

    def __init__(
        self, variant: str, args: argparse.Namespace, threads: int, entry: tuple[str, ...] = ENTRY
    ) -> None:
        cmd = [sys.executable, *entry, "--worker", variant, "--threads", str(threads)]
        cmd += _forward(args)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        # Both are pipes (PIPE above); kept typed as such for the methods below.
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        line = self.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"bench worker {variant} failed to start")
        self.info = json.loads(line[len("ready ") :])
        self.gpu: list[dict[str, Any]] = []  # NVML means over each window (GPUs)

    def start(self, steps: int) -> None:
        self.stdin.write(f"run {steps}\n")
        self.stdin.flush()

    def result(self) -> float:
        line = json.loads(self.stdout.readline())
        self.gpu.append(line["gpu"])
        return float(line["img_s"])

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=60)


def _forward(args: argparse.Namespace) -> list[str]:
    """The flags a worker is started with (its variant and threads apart)."""
    flags = {
        "--resolution": args.resolution,
        "--batch-size": args.batch_size,
        "--device-g": args.device_g,
        "--device-d": args.device_d,
        "--amp": args.amp,
        "--warmup": args.warmup,
        "--channels": args.channels,
        "--fuse": args.fuse,
        "--augment": args.augment,
        "--schedule": args.schedule,
        "--batch-size-d": args.batch_size_d,
    }
    return [*(["--cuda-graphs"] if args.cuda_graphs else []), *_pairs(flags)]


def _pairs(flags: dict[str, Any]) -> list[str]:
    return [word for flag, value in flags.items() for word in (flag, str(value))]


def timed(
    names: list[str], args: argparse.Namespace, threads: int, entry: tuple[str, ...] = ENTRY
) -> tuple[list[Worker], list[list[float]]]:
    """A worker per variant in `names`, and each one's images/s in timed windows taken one
    worker at a time in turn, so that all see the same machine conditions."""
    workers = [Worker(name, args, threads, entry) for name in names]
    sinks: list[list[float]] = [[] for _ in workers]
    try:
        for _ in range(args.windows):
            for w, sink in zip(workers, sinks):
                w.start(args.steps)
                sink.append(w.result())
    finally:
        for w in workers:
            w.close()
    return workers, sinks


def gpu_util(w: Worker) -> dict[str, float]:
    """Mean NVML utilisation of G's and D's GPU over a worker's windows (GPUs only)."""
    out = {}
    for role in ("g", "d"):
        values = [g[f"util_{role}"] for g in w.gpu if f"util_{role}" in g]
        if values:
            out[f"util_{role}"] = round(statistics.mean(values), 1)
    return out
