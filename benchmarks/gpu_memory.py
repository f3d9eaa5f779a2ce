"""`--fuse auto`'s memory count against what a fused pair really takes on a GPU.

For each preset shape and group size K, builds bench's fused pair (K classes, 1,000 real images
each on the device, as `bench` does), takes a few steps and prints one JSON line: the peak bytes
the caching allocator handed out (torch.cuda.max_memory_allocated, less what was allocated
before), the count train/fused.class_bytes gives for K classes, their ratio, and the K that
`--fuse auto` would pick on this GPU now. Run on a GPU machine from the repository root:

    python3 benchmarks/gpu_memory.py            # digits, imagenet32, imagenet64 at two K each
    python3 benchmarks/gpu_memory.py --at-auto  # imagenet32/64 at `--fuse auto`'s K, float32,
                                                # graphed as training steps them by default
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys

import torch

from distcgan.bench import Fused
from distcgan.config import TrainConfig
from distcgan.train.fused import _free_bytes, auto_fuse, class_bytes

# (name, resolution, channels, batch, group sizes, amp, graphs)
CASES = [
    ("digits", 16, 1, 32, (10, 40), "off", False),
    ("imagenet32", 32, 3, 64, (8, 32), "off", False),
    ("imagenet32", 32, 3, 64, (32,), "bf16", True),
    ("imagenet64", 64, 3, 64, (4, 16), "off", False),
]
IMAGES = 1000  # per class, as bench's feed holds


def measure(res: int, channels: int, batch: int, k: int, amp: str, graphs: bool) -> dict:
    dev = "cuda:0"
    args = argparse.Namespace(
        resolution=res, batch_size=batch, amp=amp, batch_size_d=0, device_g=dev, device_d=dev,
        channels=channels, fuse=k, cuda_graphs=graphs, augment="none",
    )  # fmt: skip
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model = Fused(args)
    for _ in range(4):
        model.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    reserved = torch.cuda.max_memory_reserved()
    del model
    cfg = dataclasses.replace(TrainConfig(), resolution=res, batch_size=batch)
    g, d = class_bytes(cfg, IMAGES, channels)
    gc.collect()
    torch.cuda.empty_cache()
    free = _free_bytes(dev)
    return {
        "fuse": k,
        "resolution": res,
        "channels": channels,
        "batch_size": batch,
        "amp": amp,
        "cuda_graphs": graphs,
        "peak_mib": round(peak / 2**20, 1),
        "max_reserved_mib": round(reserved / 2**20, 1),
        "counted_mib": round(k * (g + d) / 2**20, 1),
        "peak_over_count": round(peak / (k * (g + d)), 3),
        "free_mib": round(free / 2**20),
        "auto_fuse": auto_fuse(100_000, [(free, g + d)]),
    }


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_memory.py: no CUDA GPU here; run it on a GPU machine", file=sys.stderr)
        return 2
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    at_auto = "--at-auto" in sys.argv[1:]
    for name, res, channels, batch, sizes, amp, graphs in CASES:
        if at_auto:
            if amp != "off" or name == "digits":  # digits: 800 pairs take long to build
                continue
            cfg = dataclasses.replace(TrainConfig(), resolution=res, batch_size=batch)
            sizes = (
                auto_fuse(
                    100_000, [(_free_bytes("cuda:0"), sum(class_bytes(cfg, IMAGES, channels)))]
                ),
            )
        for k in sizes:
            # at auto's K a group is graphed, as --cuda-graphs auto steps it on one GPU
            out = {"preset": name, **measure(res, channels, batch, k, amp, graphs or at_auto)}
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
