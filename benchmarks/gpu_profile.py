"""Where a fused step's time goes (issue #26): bench's fused pair (`distcgan bench --fuse K`),
stepped eagerly under torch.profiler; its kernels (on a CPU: its operators) summed by name over
the profiled steps, grouped into kinds by name, against the step's wall time. On a GPU, the
kernels' own time is what a CUDA graph's replay cannot go below (it removes the launches, not
the kernels): the kinds say which kernels bound the graphed step.

    python3 benchmarks/gpu_profile.py --device-g cuda:0 --fuse 32 --resolution 32 \\
        --batch-size 64 --channels 3 --amp bf16 [--channels-last] [--steps 10]

Prints a table and one JSON line (per step: wall ms, kernel ms, ms by kind; the top kernels).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fused_alternatives import FusedChannelsLast  # noqa: E402  (beside this script)

from distcgan.bench import Fused  # noqa: E402
from distcgan.bench_flags import add_arguments  # noqa: E402
from distcgan.train.perf import sync  # noqa: E402

# kind of a kernel (or CPU operator), by the first pattern its name matches
KINDS = [
    ("convolution", r"conv|cudnn|xmma|implicit|dgrad|wgrad|fprop|winograd|gemm|sm\d\d_"),
    ("batchnorm", r"batch_norm|batchnorm|bn_|welford"),
    ("reduction", r"reduce|sum|mean"),
    ("copy", r"copy|cat|memcpy|memset|fill|index"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|lerp|addcmul|mul|add|div|sqrt"),
]


def kind(name: str) -> str:
    low = name.lower()
    for k, pattern in KINDS:
        if re.search(pattern, low):
            return k
    return "other"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p, moved=False)
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="the fused step with NHWC maps and inputs (fused_alternatives.py's FusedChannelsLast)",
    )
    p.add_argument("--top", type=int, default=12, help="kernels listed")
    args = p.parse_args()
    args.device_d = args.device_d or args.device_g
    if args.fuse < 2:
        print(
            f"gpu_profile.py: --fuse {args.fuse} has no fused step to profile: give --fuse K "
            "with K > 1",
            file=sys.stderr,
        )
        sys.exit(2)
    args.cuda_graphs = False  # eager: each kernel launched, and seen, on its own
    torch.manual_seed(0)
    model = (FusedChannelsLast if args.channels_last else Fused)(args)
    for _ in range(args.warmup):
        model.step()
    sync(args.device_g)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        model.step()
    sync(args.device_g)
    wall_ms = (time.perf_counter() - t0) / args.steps * 1e3

    gpu = args.device_g.startswith("cuda")
    activities = [torch.profiler.ProfilerActivity.CPU]
    activities += [torch.profiler.ProfilerActivity.CUDA] if gpu else []
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            model.step()
        sync(args.device_g)
    per_name: dict[str, float] = collections.defaultdict(float)  # ms a step
    calls: dict[str, int] = collections.defaultdict(int)
    for e in prof.key_averages():
        if gpu:
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = e.self_device_time_total
        else:  # operators, each its own time (its children's not counted twice)
            if not e.key.startswith("aten::"):
                continue
            us = e.self_cpu_time_total
        per_name[e.key] += us / 1e3 / args.steps
        calls[e.key] += e.count // args.steps
    kernel_ms = sum(per_name.values())
    by_kind: dict[str, float] = collections.defaultdict(float)
    for name, ms in per_name.items():
        by_kind[kind(name)] += ms
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[: args.top]

    what = "kernels" if gpu else "operators"
    print(
        f"{args.fuse} classes fused, {args.resolution} px, {args.channels} channel(s), batch "
        f"{args.batch_size} a class, amp {args.amp}, channels_last {args.channels_last}, on "
        f"{args.device_g}: eager step {wall_ms:.3f} ms; its {what} {kernel_ms:.3f} ms "
        f"({sum(calls.values())} a step)"
    )
    for k, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {k:12s} {ms:8.3f} ms  {100 * ms / kernel_ms:5.1f}%")
    for name, ms in top:
        print(f"  {ms:8.3f} ms {calls[name]:4d}x  {name[:110]}")
    out = {
        "fuse": args.fuse,
        "resolution": args.resolution,
        "channels": args.channels,
        "batch_size": args.batch_size,
        "amp": args.amp,
        "channels_last": args.channels_last,
        "device": torch.cuda.get_device_name(args.device_g) if gpu else "cpu",
        "eager_step_ms": round(wall_ms, 4),
        f"{what}_ms": round(kernel_ms, 4),
        f"{what}_per_step": sum(calls.values()),
        "ms_by_kind": {k: round(v, 4) for k, v in by_kind.items()},
        "top": [[name[:200], round(ms, 4), calls[name]] for name, ms in top],
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
