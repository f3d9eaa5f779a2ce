"""The flags of `distcgan bench` (what it times and how), apart from bench.py so that building
the command line imports no torch: every command's parser is built at start, and a bad flag or
`--help` then answers without the seconds of loading torch (options.py holds the other commands'
options so). Leaves out: what bench does with them (bench.py).
"""

from __future__ import annotations

import argparse


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
    p.add_argument("--channels", type=int, default=1, help="1 (digits, MNIST) or 3 (RGB)")
    p.add_argument(
        "--fuse",
        type=int,
        default=1,
        help="K > 1: K classes trained as one fused pair against the same K one at a time",
    )
    _add_fused_arguments(p)
    p.add_argument(
        "--scaling",
        type=int,
        default=0,
        help="also time N one-thread copies of our step at once against one alone",
    )
    p.add_argument(
        "--augment",
        default="none",
        metavar="POLICY",
        help="also time our step with D's inputs augmented (color,translation,cutout), p 1; "
        "with --fuse K, the fused step so",
    )
    p.add_argument(
        "--schedule",
        choices=("sync", "async"),
        default="sync",
        help="async: also time our step under --schedule async (and the copy of D a step)",
    )
    p.add_argument(
        "--batch-size-d",
        type=int,
        default=0,
        help="with --schedule async: the images D sees per step (0: the batch)",
    )


def _add_fused_arguments(p: argparse.ArgumentParser) -> None:
    """With --fuse K: how the fused step runs, and the alternatives timed beside it."""
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="with --fuse K on one GPU: the fused step captured as a CUDA graph and replayed",
    )
    p.add_argument(
        "--streams",
        action="store_true",
        help="with --fuse K on one GPU: also time the K pairs unfused, captured in one CUDA graph "
        "with a stream each (no grouped kernels)",
    )
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="with --fuse K: also time the fused step with its images and activations "
        "channels_last (NHWC; the parameters stay contiguous)",
    )
    p.add_argument(
        "--bmm-linear",
        action="store_true",
        help="with --fuse K: also time the fused step with its two linear layers as batched "
        "matmuls over the K classes (a GPU's default; a CPU's are grouped convolutions)",
    )
    p.add_argument(
        "--conv-linear",
        action="store_true",
        help="with --fuse K: also time the fused step with its two linear layers as grouped "
        "convolutions (a CPU's default; a GPU's are batched matmuls)",
    )
    p.add_argument(
        "--compile",
        default="",
        choices=("", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        metavar="MODE",
        help="with --fuse K: also time the fused step compiled by torch.compile in MODE "
        "(default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)",
    )
