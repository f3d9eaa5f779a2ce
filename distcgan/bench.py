"""`distcgan bench`: images/s of our training step against a plain reference loop.

Each variant runs in its own worker process (so process-wide settings such as glibc's malloc
thresholds apply to ours only), and the parent alternates timed windows between them, so that
both see the same machine conditions; it reports the median of the windows, the ratio, the
FLOPs of one step (counted by torch's FlopCounterMode), the machine's measured matmul
throughput in the step's precision (bf16 under --amp bf16, float32 otherwise), and the fraction
of it our step achieves. The last line printed is one JSON object.

"ours" is the production step (train/alone.AlonePair, the object the training loop steps: logits
+ BCEWithLogits, D on real and fake in one batch, channels_last, no host synchronisation, fused
Adam on GPUs, optional bf16 autocast, malloc thresholds raised). "reference" is the obvious
loop: sigmoid + BCELoss, `.item()` every step, default memory format, default Adam, G step then
D step as in the paper's reference code, in the same channels.

With --scaling, one more measurement: N copies of our step at one thread each, run at the same
time, against one copy alone (what N ranks on N cores each keep).

With --fuse K the two variants are K classes trained as one fused pair (train/fused.py) and the
same K classes trained one at a time, each step K x batch images: the ratio is what fusion
gains, with the fused step's fraction of the measured matmul peak (in bf16 with --amp bf16, on
a CPU too: one with AMX multiplies bf16 about 7x faster than float32) and, on GPUs, NVML's
utilisation of G's and D's device during each variant's windows.
--cuda-graphs replays the fused step from a CUDA graph (train/graphs.py), as `train` does on a
GPU (--cuda-graphs auto); without it bench times the fused step eager (train --cuda-graphs off).
The classes one at a time run eager, as training runs a class alone.

Bench times what training runs (its options included: --augment, --schedule async); the
designs of the fused step that were measured and not adopted (NHWC maps, the other linear
kernel, torch.compile, the K pairs on streams in one graph) are timed against the same fused
step by benchmarks/fused_alternatives.py. The worker processes: bench_worker.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

import torch

from distcgan.bench_flags import add_arguments, check_flags, each_device
from distcgan.bench_worker import ENTRY, Worker, gpu_util, timed, worker
from distcgan.config import Graphs, Schedule, TrainConfig
from distcgan.errors import UserError, say
from distcgan.mpi import context
from distcgan.plan import Task, one_device, physical_cores
from distcgan.train.alone import AlonePair
from distcgan.train.fused import FusedPairs
from distcgan.train.models import Discriminator, Generator, init_weights
from distcgan.train.pair import PairSpec, new_pair
from distcgan.train.perf import sync, tune_malloc
from distcgan.train.step import STAT_KEYS, Feed, Member

# ---- the two step implementations ---------------------------------------------------------------


@dataclasses.dataclass
class BenchMember:
    """A pair and its feed: what a step object (train/step.PairStep) steps, as the loop's
    TaskState is, without files."""

    pair: Any
    feed: Any


class Ours:
    """The production step: one class's pair stepped by train/alone.AlonePair, the object the
    training loop steps."""

    def __init__(
        self,
        args: argparse.Namespace,
        class_id: int = 0,
        augment: str = "none",
        schedule: Schedule = "sync",
    ) -> None:
        # what mallopt took (bytes per threshold; None where refused); not tuned for GPU steps
        self.malloc = tune_malloc() if args.device_g == "cpu" else None
        self.cfg = TrainConfig(
            resolution=args.resolution,
            batch_size=args.batch_size,
            amp=args.amp,
            data="bench",
            d_batch="joint",
            augment=augment,
            schedule=schedule,
            batch_size_d=args.batch_size_d if schedule == "async" else 0,
        )
        self.args = args
        C, R = args.channels, args.resolution
        task = Task(f"class_{class_id:03d}", (class_id,))
        pair = new_pair(PairSpec(self.cfg, task, C, 1), args.device_g, args.device_d)
        real = torch.rand(1000, C, R, R, device=args.device_d) * 2 - 1
        feed = Feed(
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
        self.member = BenchMember(pair, feed)
        self.pairs = AlonePair(self.cfg, self.member)
        self.sums = torch.zeros(len(STAT_KEYS), device=args.device_d)

    def batch(self) -> list[Any]:
        return self.pairs.batches()

    def step(self) -> None:
        self.sums += self.pairs.step()[0]


class Augmented(Ours):
    """Our step with D's real and fake images augmented (--augment POLICY, p 1)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, augment=args.augment)


class Async(Ours):
    """Our step under --schedule async (train/schedule.py): D on the fakes of the step before,
    G through D's copy, the copy refreshed once a step."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, schedule="async")

    def copy_s(self, reps: int = 50) -> float:
        """Seconds of the refresh of D's copy alone, per step."""
        pair = self.member.pair
        sync(self.args.device_d, self.args.device_g)
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(reps):
                for c, d in zip(pair.D_copy.state_dict().values(), pair.D.state_dict().values()):
                    c.copy_(d, non_blocking=True)
        sync(self.args.device_d, self.args.device_g)
        return (time.perf_counter() - t0) / reps


class Reference:
    """The loop as most GAN code writes it (the paper's reference implementation's shape)."""

    def __init__(self, args: argparse.Namespace) -> None:
        dev_g, dev_d, C, R = args.device_g, args.device_d, args.channels, args.resolution
        self.G = Generator(100, C, R).apply(init_weights).to(dev_g)
        self.D = Discriminator(C, R).apply(init_weights).to(dev_d)
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.bce = torch.nn.BCELoss()
        self.real_all = (torch.rand(1000, C, R, R) * 2 - 1).to(dev_d)
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


class OneAtATime:
    """K classes trained one after another: a step of each in turn (K x batch images a step)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.classes = [Ours(args, k) for k in range(args.fuse)]
        self.malloc = self.classes[0].malloc

    def batch(self) -> list[Any]:
        return [b for c in self.classes for b in c.batch()]

    def step(self) -> None:
        for c in self.classes:
            c.step()


class Fused:
    """The same K classes as one fused pair: train/fused.FusedPairs, the object the training
    loop steps for a fused group, each class's batch drawn from its own feed."""

    count_per_class = True  # its FLOPs: K times one class's step (bench_worker._figures)

    def __init__(
        self, args: argparse.Namespace, schedule: Schedule = "sync", augment: str = "none"
    ) -> None:
        self.classes = [Ours(args, k, augment=augment, schedule=schedule) for k in range(args.fuse)]
        self.malloc = self.classes[0].malloc
        graphs: Graphs = "on" if args.cuda_graphs else "off"
        self.cfg = dataclasses.replace(self.classes[0].cfg, cuda_graphs=graphs)
        members: list[Member] = [c.member for c in self.classes]
        self.fp = FusedPairs(self.cfg, args.channels, members, (args.device_g, args.device_d))

    def batch(self) -> list[Any]:
        return self.fp.batches()

    def step(self) -> None:
        self.fp.step()  # captured at the first with --cuda-graphs


class FusedAugmented(Fused):
    """The fused pair with every class's real and fake images augmented (--augment POLICY with
    --fuse K, p 1), each class from its own stream, as a fused group trains with --augment."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, augment=args.augment)


class FusedAsync(Fused):
    """The K classes' fused pair under --schedule async: a fused D half and a fused G half."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, schedule="async")


VARIANTS = {
    "ours": Ours,
    "augmented": Augmented,
    "async": Async,
    "reference": Reference,
    "fused": Fused,
    "fused-async": FusedAsync,
    "fused-augmented": FusedAugmented,
    "one-at-a-time": OneAtATime,
}


def sig(x: float, digits: int = 3) -> float:
    """`x` to `digits` significant digits: a fraction or ratio that may be tiny (the data's share
    of a step on a fast CPU is 1e-5) keeps its figure instead of rounding to 0."""
    return float(f"{x:.{digits}g}")


def own_cores() -> int:
    """Physical cores in this process's affinity mask (hardware threads share a core's units)."""
    cpus = sorted(os.sched_getaffinity(0))
    return len(physical_cores(cpus, context.cpu_topology(cpus)))


# bench's flag, its worker variant, its key in the JSON: an alternative to the fused pair that
# training has as an option, timed against the fused pair as trained
# (benchmarks/fused_alternatives.py times the designs that training does not run so)
ALTERNATIVES = (("augment", "fused-augmented", "augmented"),)  # --augment POLICY with --fuse K


def run_fused(
    args: argparse.Namespace,
    alternatives: tuple[tuple[str, str, str], ...] = ALTERNATIVES,
    entry: tuple[str, ...] = ENTRY,
) -> dict[str, Any]:
    """K classes fused against the same K classes one at a time: images/s, ratio, peak; with
    --schedule async, the fused pair's asynchronous step too, and each alternative asked for,
    in the same windows."""
    threads = args.threads or own_cores()
    names = ["fused", "one-at-a-time"] + (["fused-async"] if args.schedule == "async" else [])
    names += [name for flag, name, _ in alternatives if asked(args, flag)]
    workers, windows = timed(names, args, threads, entry)
    fused, alone = workers[0], workers[1]
    fused_w, alone_w = windows[0], windows[1]
    fused_img_s, alone_img_s = statistics.median(fused_w), statistics.median(alone_w)
    step_s = args.batch_size * args.fuse / fused_img_s
    gflop = fused.info["gflop_per_step"]
    out = {
        "fuse": args.fuse,
        "resolution": args.resolution,
        "channels": args.channels,
        "batch_size": args.batch_size,
        "device_g": args.device_g,
        "device_d": args.device_d,
        "threads": threads,
        "amp": args.amp,
        "cuda_graphs": args.cuda_graphs,
        "fused_img_s": sig(fused_img_s, 4),
        "one_at_a_time_img_s": sig(alone_img_s, 4),
        "fuse_ratio": sig(fused_img_s / alone_img_s),
        "fused_windows": [sig(x, 4) for x in fused_w],
        "one_at_a_time_windows": [sig(x, 4) for x in alone_w],
        "gflop_per_step": sig(gflop, 4),
        "matmul_gflops": round(fused.info["matmul_gflops"], 1),
        "matmul_dtype": fused.info["matmul_dtype"],  # what the worker measured in
        "peak_fraction": sig(gflop / step_s / fused.info["matmul_gflops"]),
        # the K classes' batch draws and copies, timed alone, against the fused step
        "data_fraction": sig(fused.info["data_s_per_step"] / step_s),
        "gpu_fused": gpu_util(fused),
        "gpu_one_at_a_time": gpu_util(alone),
    }
    _versus_fused(out, args, dict(zip(names, zip(windows, workers))), alternatives)
    return out


def asked(args: argparse.Namespace, flag: str) -> bool:
    """Whether the command line asks for the alternative behind `flag` (--augment: not none)."""
    value = getattr(args, flag)
    return bool(value) and value != "none"


def _versus_fused(
    out: dict[str, Any],
    args: argparse.Namespace,
    timed: dict[str, tuple[list[float], Worker]],
    alternatives: tuple[tuple[str, str, str], ...],
) -> None:
    """Into `out`: each variant timed beside the fused pair (its async step, the alternatives),
    its images/s, windows and speed against the fused pair's, and NVML's utilisation."""
    fused_img_s = statistics.median(timed["fused"][0])
    keys = [("fused-async", "fused_async")] + [(name, key) for _, name, key in alternatives]
    for name, key in keys:
        if name in timed:
            windows, w = timed[name]
            img_s = statistics.median(windows)
            out[f"{key}_img_s"] = sig(img_s, 4)
            out[f"{key}_windows"] = [sig(x, 4) for x in windows]
            out[f"{key}_speedup"] = sig(img_s / fused_img_s)
            out[f"gpu_{key}"] = gpu_util(w)
    if args.schedule == "async":
        out["batch_size_d"] = args.batch_size_d or args.batch_size
    if "fused-augmented" in timed:  # as the one pair's figure: how much longer a step takes
        out["augment"] = args.augment
        out["augment_cost"] = sig(fused_img_s / statistics.median(timed["fused-augmented"][0]))


def check_gpus(args: argparse.Namespace) -> None:
    """One line for a device this process does not see (cuda:N past the GPUs): the one check of
    bench's command line that needs torch, after bench_flags.check_flags."""
    each_device(args, lambda spec: one_device(spec, torch.cuda.device_count()))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Bench's measurement of `args`, which bench_flags.check_flags has passed."""
    check_gpus(args)
    if args.fuse > 1:
        return run_fused(args)
    threads = args.threads or own_cores()
    names = ["ours", "reference"] + (["augmented"] if args.augment != "none" else [])
    names += ["async"] if args.schedule == "async" else []
    workers, windows = timed(names, args, threads)  # alternate: all see the same machine
    ours, ref = workers[0], workers[1]
    ours_img_s = statistics.median(windows[0])
    ref_img_s = statistics.median(windows[1])
    gflop = ours.info["gflop_per_step"]
    step_s = args.batch_size / ours_img_s
    out: dict[str, Any] = {
        "resolution": args.resolution,
        "batch_size": args.batch_size,
        "device_g": args.device_g,
        "device_d": args.device_d,
        "threads": threads,
        "amp": args.amp,
        "ours_img_s": sig(ours_img_s, 4),
        "reference_img_s": sig(ref_img_s, 4),
        "ratio": sig(ours_img_s / ref_img_s),
        "ours_windows": [sig(x, 4) for x in windows[0]],
        "reference_windows": [sig(x, 4) for x in windows[1]],
        "gflop_per_step": sig(gflop, 4),
        "reference_gflop_per_step": sig(ref.info["gflop_per_step"], 4),
        "matmul_gflops": round(ours.info["matmul_gflops"], 1),
        "matmul_dtype": ours.info["matmul_dtype"],  # what the worker measured in
        "peak_fraction": sig(gflop / step_s / ours.info["matmul_gflops"]),
        "data_fraction": sig(ours.info["data_s_per_step"] / step_s),
        "malloc_tuned": ours.info["malloc_tuned"],
    }
    if args.augment != "none":  # the same step with D's inputs augmented, in the same windows
        aug_img_s = statistics.median(windows[2])
        out["augment"] = args.augment
        out["augmented_img_s"] = sig(aug_img_s, 4)
        out["augmented_windows"] = [sig(x, 4) for x in windows[2]]
        out["augment_cost"] = sig(ours_img_s / aug_img_s)
    if args.schedule == "async":  # sync (ours) against async, in the same windows
        w = workers[-1]
        async_img_s = statistics.median(windows[-1])
        out["async_img_s"] = sig(async_img_s, 4)
        out["async_windows"] = [sig(x, 4) for x in windows[-1]]
        out["async_speedup"] = sig(async_img_s / ours_img_s)
        out["batch_size_d"] = args.batch_size_d or args.batch_size
        out["copy_bytes"] = w.info["copy_bytes"]
        out["copy_s_per_step"] = sig(w.info["copy_s_per_step"])
        out["gpu_sync"], out["gpu_async"] = gpu_util(ours), gpu_util(w)
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
        "solo_img_s": sig(solo_img_s, 4),
        "concurrent_img_s": [sig(x, 4) for x in each],
        "scaling_retention": sig(min(each) / solo_img_s),
    }


def print_report(out: dict[str, Any]) -> None:
    if "fuse" in out:
        print_fused(out)
        return
    print(
        f"training step, {out['resolution']} px, batch {out['batch_size']}, G on "
        f"{out['device_g']}, D on {out['device_d']}, {out['threads']} thread(s), amp "
        f"{out['amp']}"
    )
    print(f"  ours       {out['ours_img_s']:9.1f} img/s  windows {out['ours_windows']}")
    print(f"  reference  {out['reference_img_s']:9.1f} img/s  windows {out['reference_windows']}")
    print(
        f"  ratio {out['ratio']:.2f}x; {out['gflop_per_step']:.2f} GFLOP per step "
        f"(reference {out['reference_gflop_per_step']:.2f}); measured "
        f"{out['matmul_dtype']} matmul {out['matmul_gflops']:.1f} GFLOP/s; our step reaches "
        f"{100 * out['peak_fraction']:.3g}% of it; data handling "
        f"{100 * out['data_fraction']:.3g}% of a step"
    )
    if "augment" in out:
        print(
            f"  augmented  {out['augmented_img_s']:9.1f} img/s  windows "
            f"{out['augmented_windows']}: --augment {out['augment']} makes our step "
            f"{out['augment_cost']:.2f}x as long"
        )
    if "async_img_s" in out:
        print(
            f"  async      {out['async_img_s']:9.1f} img/s  windows {out['async_windows']}: "
            f"{out['async_speedup']:.2f}x our sync step (D sees {out['batch_size_d']} a step); "
            f"D's copy {out['copy_bytes']:,} bytes, {1e3 * out['copy_s_per_step']:.3g} ms a step"
            + (
                f"; GPU busy sync {out['gpu_sync']}, async {out['gpu_async']}"
                if out["gpu_sync"]
                else ""
            )
        )
    if "scaling_ranks" in out:
        print(
            f"  {out['scaling_ranks']} copies at once, one thread each: "
            f"{out['concurrent_img_s']} img/s vs {out['solo_img_s']} alone "
            f"(keeps {100 * out['scaling_retention']:.0f}%)"
        )
    print(json.dumps(out), flush=True)


def print_fused(
    out: dict[str, Any], alternatives: tuple[tuple[str, str, str], ...] = ALTERNATIVES
) -> None:
    print(
        f"{out['fuse']} classes fused vs one at a time, {out['resolution']} px, "
        f"{out['channels']} channel(s), batch {out['batch_size']} a class, G on "
        f"{out['device_g']}, D on {out['device_d']}, {out['threads']} thread(s), amp {out['amp']}"
        + (", the fused step a CUDA graph" if out["cuda_graphs"] else "")
    )
    print(f"  fused          {out['fused_img_s']:9.1f} img/s  windows {out['fused_windows']}")
    print(
        f"  one at a time  {out['one_at_a_time_img_s']:9.1f} img/s  windows "
        f"{out['one_at_a_time_windows']}"
    )
    print(
        f"  ratio {out['fuse_ratio']:.2f}x; {out['gflop_per_step']:.2f} GFLOP per fused step; "
        f"measured {out['matmul_dtype']} matmul {out['matmul_gflops']:.1f} GFLOP/s; the fused "
        f"step reaches {100 * out['peak_fraction']:.3g}% of it; the classes' batches "
        f"{100 * out['data_fraction']:.3g}% of a fused step"
    )
    if "fused_async_img_s" in out:
        print(
            f"  fused async    {out['fused_async_img_s']:9.1f} img/s  windows "
            f"{out['fused_async_windows']}: {out['fused_async_speedup']:.2f}x the fused sync "
            f"step (D sees {out['batch_size_d']} a class a step)"
        )
    for _, _, key in alternatives:
        if f"{key}_img_s" in out:
            print(
                f"  {key.replace('_', ' '):14s} {out[f'{key}_img_s']:9.1f} img/s  windows "
                f"{out[f'{key}_windows']}: {out[f'{key}_speedup']:.2f}x the fused step"
            )
    if "augment_cost" in out:
        print(
            f"  --augment {out['augment']} makes the fused step {out['augment_cost']:.2f}x as long"
        )
    keys = ["fused", "one_at_a_time", "fused_async"] + [key for _, _, key in alternatives]
    for name in (f"gpu_{key}" for key in keys):
        if out.get(name):
            print(f"  NVML utilisation, {name[4:].replace('_', ' ')}: {out[name]}")
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m distcgan.bench")
    add_arguments(parser)
    parser.add_argument("--worker", choices=tuple(VARIANTS))
    args = parser.parse_args()
    args.device_d = args.device_d or args.device_g
    if args.worker:  # a variant's process, started by run() with flags it has checked
        worker(args, VARIANTS)
        return
    try:
        check_flags(args)
        out = run(args)
    except UserError as exc:  # one line, as `distcgan bench` says it
        say(f"{parser.prog}: error: {exc}")
        sys.exit(2)
    print_report(out)


if __name__ == "__main__":
    main()
