"""`distcgan bench`: images/s of our training step against a plain reference loop.

Each variant runs in its own worker process (so process-wide settings such as glibc's malloc
thresholds apply to ours only), and the parent alternates timed windows between them, so that
both see the same machine conditions; it reports the median of the windows, the ratio, the
FLOPs of one step (counted by torch's FlopCounterMode), the machine's measured float32 matmul
throughput, and the fraction of it our step achieves. The last line printed is one JSON object.

"ours" is the production step (`step.gan_step`: logits + BCEWithLogits, D on real and fake in
one batch, channels_last, no host synchronisation, fused Adam on GPUs, optional bf16 autocast,
malloc thresholds raised). "reference" is the obvious loop: sigmoid + BCELoss, `.item()` every
step, default memory format, default Adam, G step then D step as in the paper's reference code.
With --scaling, one more measurement: N copies of our step at one thread each, run at the same
time, against one copy alone (what N ranks on N cores each keep).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from distcgan.train.perf import sync, tune_malloc


def matmul_gflops(device: str, seconds: float = 1.0) -> float:
    """Measured float32 matrix-product throughput (GFLOP/s) with the current thread count."""
    n = 1024 if device == "cpu" else 8192
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
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


# ---- the two step implementations ---------------------------------------------------------------


class Ours:
    def __init__(self, args: argparse.Namespace) -> None:
        from distcgan.config import TrainConfig
        from distcgan.plan import Task
        from distcgan.train.pair import PairSpec, new_pair
        from distcgan.train.step import STAT_KEYS, Feed, Nets

        # what mallopt took (bytes per threshold; None where refused); not tuned for GPU steps
        self.malloc = tune_malloc() if args.device_g == "cpu" else None
        self.cfg = TrainConfig(
            resolution=args.resolution,
            batch_size=args.batch_size,
            amp=args.amp,
            data="bench",
            d_batch="joint",
        )
        self.args = args
        task = Task("class_000", (0,))
        self.pair = new_pair(PairSpec(self.cfg, task, 1, 1), args.device_g, args.device_d)
        self.nets = Nets(G=self.pair.G, D=self.pair.D)
        real = torch.rand(1000, 1, args.resolution, args.resolution, device=args.device_d) * 2 - 1
        self.feed = Feed(
            real=real.contiguous(memory_format=torch.channels_last),
            labels=torch.zeros(1000, dtype=torch.long, device=args.device_d),
            task_classes=torch.tensor([0]),
            conditional=False,
            micro=args.batch_size,
            accum=1,
            group_rank=0,
            group_size=1,
            shard=False,
            data_seed=1,
            z_dim=self.cfg.z_dim,
            device_g=args.device_g,
        )
        self.sums = torch.zeros(len(STAT_KEYS), device=args.device_d)
        self.step_no = 0

    def batch(self) -> list[Any]:
        return self.feed.batches(self.step_no, self.pair.noise)

    def step(self) -> None:
        from distcgan.train.pair import update_ema
        from distcgan.train.step import gan_step

        self.sums += gan_step(
            self.pair,
            self.nets,
            self.batch(),
            joint=True,
            amp=self.cfg.amp == "bf16",
        )
        if self.pair.G_ema is not None:
            update_ema(self.pair.G_ema, self.pair.G, self.cfg.ema_decay, self.pair.step)
        self.pair.step += 1
        self.step_no += 1


class Reference:
    """The loop as most GAN code writes it (the paper's reference implementation's shape)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from distcgan.train.models import Discriminator, Generator, init_weights

        dev_g, dev_d = args.device_g, args.device_d
        self.G = Generator(100, 1, args.resolution).apply(init_weights).to(dev_g)
        self.D = Discriminator(1, args.resolution).apply(init_weights).to(dev_d)
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.bce = torch.nn.BCELoss()
        self.real_all = (torch.rand(1000, 1, args.resolution, args.resolution) * 2 - 1).to(dev_d)
        self.args = args

    def step(self) -> None:
        B, dev_g, dev_d = self.args.batch_size, self.args.device_g, self.args.device_d
        real = self.real_all[torch.randint(0, 1000, (B,))]
        valid = torch.ones(B, 1, device=dev_d)
        fake = torch.zeros(B, 1, device=dev_d)
        z = torch.randn(B, 100, device=dev_g)

        self.opt_g.zero_grad()
        gen = self.G(z).to(dev_d)
        g_loss = self.bce(torch.sigmoid(self.D(gen)), valid)
        g_loss.backward()
        self.opt_g.step()

        self.opt_d.zero_grad()
        real_loss = self.bce(torch.sigmoid(self.D(real)), valid)
        fake_loss = self.bce(torch.sigmoid(self.D(gen.detach())), fake)
        d_loss = (real_loss + fake_loss) / 2
        d_loss.backward()
        self.opt_d.step()
        g_loss.item(), d_loss.item()  # logged every step: a host synchronisation each time


def step_gflop(model: Ours | Reference) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model.step()
    return counter.get_total_flops() / 1e9


# ---- worker process: set up one variant, then time windows on request -------------------------


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Ours(args) if args.worker == "ours" else Reference(args)
    for _ in range(args.warmup):
        model.step()
    sync(args.device_d)
    info: dict[str, Any] = {"gflop_per_step": step_gflop(model)}
    if args.worker == "ours":
        info["malloc_tuned"] = model.malloc
        info["matmul_gflops"] = matmul_gflops(args.device_g)
        # Data handling alone (batch indices, gather on the device, noise), per step.
        sync(args.device_d)
        t0 = time.perf_counter()
        for _ in range(50):
            model.batch()
        sync(args.device_d)
        info["data_s_per_step"] = (time.perf_counter() - t0) / 50
    print("ready " + json.dumps(info), flush=True)
    for line in sys.stdin:
        if not line.startswith("run"):
            break
        steps = int(line.split()[1])
        sync(args.device_d)
        t0 = time.perf_counter()
        for _ in range(steps):
            model.step()
        sync(args.device_g)
        sync(args.device_d)
        print(
            json.dumps({"img_s": steps * args.batch_size / (time.perf_counter() - t0)}), flush=True
        )


class Worker:
    def __init__(self, variant: str, args: argparse.Namespace, threads: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "distcgan.bench",
            "--worker",
            variant,
            "--threads",
            str(threads),
            *_forward(args),
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"bench worker {variant} failed to start")
        self.info = json.loads(line[len("ready ") :])

    def start(self, steps: int) -> None:
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()

    def result(self) -> float:
        return float(json.loads(self.proc.stdout.readline())["img_s"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _forward(args: argparse.Namespace) -> list[str]:
    return [
        "--resolution",
        str(args.resolution),
        "--batch-size",
        str(args.batch_size),
        "--device-g",
        args.device_g,
        "--device-d",
        args.device_d,
        "--amp",
        args.amp,
        "--warmup",
        str(args.warmup),
    ]


@dataclasses.dataclass
class Report:
    ours: list[float]
    reference: list[float]


def own_cores() -> int:
    """Physical cores in this process's affinity mask (hardware threads share a core's units)."""
    from distcgan.mpi.context import cpu_topology
    from distcgan.plan import physical_cores

    cpus = sorted(os.sched_getaffinity(0))
    return len(physical_cores(cpus, cpu_topology(cpus)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    threads = args.threads or own_cores()
    ours, ref = Worker("ours", args, threads), Worker("reference", args, threads)
    report = Report([], [])
    try:
        for _ in range(args.windows):  # alternate, one at a time: both see the same machine
            for w, sink in ((ours, report.ours), (ref, report.reference)):
                w.start(args.steps)
                sink.append(w.result())
    finally:
        ours.close()
        ref.close()
    ours_img_s = statistics.median(report.ours)
    ref_img_s = statistics.median(report.reference)
    gflop = ours.info["gflop_per_step"]
    step_s = args.batch_size / ours_img_s
    out: dict[str, Any] = {
        "resolution": args.resolution,
        "batch_size": args.batch_size,
        "device_g": args.device_g,
        "device_d": args.device_d,
        "threads": threads,
        "amp": args.amp,
        "ours_img_s": round(ours_img_s, 1),
        "reference_img_s": round(ref_img_s, 1),
        "ratio": round(ours_img_s / ref_img_s, 3),
        "ours_windows": [round(x, 1) for x in report.ours],
        "reference_windows": [round(x, 1) for x in report.reference],
        "gflop_per_step": round(gflop, 3),
        "reference_gflop_per_step": round(ref.info["gflop_per_step"], 3),
        "matmul_gflops": round(ours.info["matmul_gflops"], 1),
        "peak_fraction": round(gflop / step_s / ours.info["matmul_gflops"], 3),
        "data_fraction": round(ours.info["data_s_per_step"] / step_s, 4),
        "malloc_tuned": ours.info["malloc_tuned"],
    }
    if args.scaling > 1:
        out.update(scaling(args))
    return out


def scaling(args: argparse.Namespace) -> dict[str, Any]:
    """Images/s of one copy of our step alone on one core, then of N copies at once."""
    workers = [Worker("ours", args, 1) for _ in range(args.scaling)]
    try:
        solo = []
        for _ in range(args.windows):
            workers[0].start(args.steps)
            solo.append(workers[0].result())
        together: list[list[float]] = [[] for _ in workers]
        for _ in range(args.windows):
            for w in workers:
                w.start(args.steps)
            for w, sink in zip(workers, together):
                sink.append(w.result())
    finally:
        for w in workers:
            w.close()
    solo_img_s = statistics.median(solo)
    each = [statistics.median(t) for t in together]
    return {
        "scaling_ranks": args.scaling,
        "solo_img_s": round(solo_img_s, 1),
        "concurrent_img_s": [round(x, 1) for x in each],
        "scaling_retention": round(min(each) / solo_img_s, 3),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resolution", type=int, default=32, choices=(16, 32, 64))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--windows", type=int, default=7, help="timed windows per variant")
    p.add_argument("--steps", type=int, default=10, help="steps per window")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="0: every core this process may use")
    p.add_argument("--device-g", default="cpu")
    p.add_argument("--device-d", default=None, help="default: G's device")
    p.add_argument("--amp", default="off", choices=("off", "bf16"))
    p.add_argument(
        "--scaling",
        type=int,
        default=0,
        help="also time N one-thread copies of our step at once against one alone",
    )


def print_report(out: dict[str, Any]) -> None:
    print(
        f"training step, {out['resolution']} px, batch {out['batch_size']}, G on "
        f"{out['device_g']}, D on {out['device_d']}, {out['threads']} thread(s), amp "
        f"{out['amp']}"
    )
    print(f"  ours       {out['ours_img_s']:9.1f} img/s  windows {out['ours_windows']}")
    print(f"  reference  {out['reference_img_s']:9.1f} img/s  windows {out['reference_windows']}")
    print(
        f"  ratio {out['ratio']:.2f}x; {out['gflop_per_step']:.2f} GFLOP per step "
        f"(reference {out['reference_gflop_per_step']:.2f}); measured matmul "
        f"{out['matmul_gflops']:.1f} GFLOP/s; our step reaches {100 * out['peak_fraction']:.0f}%"
        f" of it; data handling {100 * out['data_fraction']:.2f}% of a step"
    )
    if "scaling_ranks" in out:
        print(
            f"  {out['scaling_ranks']} copies at once, one thread each: "
            f"{out['concurrent_img_s']} img/s vs {out['solo_img_s']} alone "
            f"(keeps {100 * out['scaling_retention']:.0f}%)"
        )
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m distcgan.bench")
    add_arguments(parser)
    parser.add_argument("--worker", choices=("ours", "reference"))
    args = parser.parse_args()
    args.device_d = args.device_d or args.device_g
    if args.worker:
        worker(args)
    else:
        print_report(run(args))


if __name__ == "__main__":
    main()
