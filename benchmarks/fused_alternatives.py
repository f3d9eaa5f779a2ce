"""The fused step's alternatives that were measured and not adopted, each timed against the fused
step as training runs it, in alternating windows in one run: `distcgan bench --fuse K` (whose
flags this takes, and whose table and JSON line it prints) with one more arm per alternative.

- --streams: the K pairs unfused, captured in one CUDA graph with a stream each (one GPU, with
  --cuda-graphs, against the fused step graphed the same way)
- --channels-last: the fused step with its images and activations NHWC (parameters contiguous)
- --bmm-linear, --conv-linear: its two linear layers as batched matmuls, or as grouped
  convolutions (whichever is not the device's own kernel)
- --compile MODE: the eager fused update compiled by torch.compile

Each was slower on an H100 (docs/performance.md, "GPU figures"). From the repository root:

    python benchmarks/fused_alternatives.py --fuse 10 --resolution 16 --batch-size 32 \\
        --channels 1 --channels-last --bmm-linear
    python benchmarks/fused_alternatives.py --device-g cuda:0 --fuse 32 --resolution 32 \\
        --batch-size 64 --channels 3 --amp bf16 --cuda-graphs --streams --conv-linear \\
        --windows 5 --steps 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distcgan import bench  # noqa: E402
from distcgan.bench import Fused, Ours  # noqa: E402
from distcgan.bench_flags import add_arguments, check_flags  # noqa: E402
from distcgan.bench_worker import worker  # noqa: E402
from distcgan.config import BMM_DEVICES  # noqa: E402
from distcgan.errors import UserError  # noqa: E402


class FusedChannelsLast(Fused):
    """The fused pair with its images and activations channels_last (NHWC; --channels-last):
    G's first feature maps and D's input images (real and fake) are made so, and every
    convolution after them keeps NHWC. The parameters stay contiguous (fused.py slices them
    per class), so each convolution's weight is converted anew in each call."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)

        def nhwc(_: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(
                x.contiguous(memory_format=torch.channels_last)
                if isinstance(x, torch.Tensor) and x.ndim == 4
                else x
                for x in inputs
            )

        self.fp.G.conv_blocks.register_forward_pre_hook(nhwc)
        self.fp.D.register_forward_pre_hook(nhwc)


class FusedLinearAs(Fused):
    """The fused pair with its two linear layers (G's first, D's last) computed one given way
    on every device: `models.linear_over_maps` (which picks by device) is swapped for the
    given function during each step only (a graph captured at the first step keeps it)."""

    def __init__(self, args: argparse.Namespace, how: str) -> None:
        super().__init__(args)
        self.how = how

    def step(self) -> None:
        from unittest import mock

        from distcgan.train import models

        with mock.patch.object(models, "linear_over_maps", getattr(models, self.how)):
            super().step()


class FusedBmm(FusedLinearAs):
    """--bmm-linear: the linear layers as batched matmuls over the F axis (a GPU's default)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, "linear_bmm")


class FusedConvLinear(FusedLinearAs):
    """--conv-linear: the linear layers as grouped convolutions (a CPU's default, and once the
    GPU's)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, "linear_conv")


class FusedCompiled(Fused):
    """The fused step (eager: no CUDA graph of ours) compiled by torch.compile in the mode
    --compile MODE names; compiled at the first step, in the worker's warm-up."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.fp.graphed = False
        compiled = torch.compile(self.fp.eager_update, mode=args.compile)
        self.fp.eager_update = compiled  # what update() calls


class Streams:
    """The same K classes as K unfused pairs (each a FusedPairs of one class) captured in one
    CUDA graph with a stream each (train/graphs.GraphedStreams): the graph's branches may run
    at once, and no kernel is grouped. Captured at the first step."""

    count_per_class = True  # K pairs: K times one class's FLOPs

    def __init__(self, args: argparse.Namespace) -> None:
        from distcgan.train.fused import FusedPairs

        self.classes = [Ours(args, k) for k in range(args.fuse)]
        self.malloc = self.classes[0].malloc
        devices = (args.device_g, args.device_d)
        self.fps = [FusedPairs(c.cfg, args.channels, [c.member], devices) for c in self.classes]
        self.graph: Any = None

    def batch(self) -> list[Any]:
        return [fp.batches() for fp in self.fps]

    def step(self) -> None:
        from distcgan.train.graphs import GraphedStreams

        batches = self.batch()
        if self.graph is None:
            self.graph = GraphedStreams(self.fps, batches)
        self.graph(batches)


VARIANTS = {
    **bench.VARIANTS,
    "streams": Streams,
    "fused-channels-last": FusedChannelsLast,
    "fused-bmm": FusedBmm,
    "fused-conv-linear": FusedConvLinear,
    "fused-compiled": FusedCompiled,
}

# the flag, its worker variant, its key in the JSON, as bench.ALTERNATIVES (whose --augment
# with --fuse K, an option of training, comes last, as it did in bench)
ALTERNATIVES = (
    ("streams", "streams", "streams"),  # the K pairs in one graph, a stream each
    ("channels_last", "fused-channels-last", "channels_last"),
    ("bmm_linear", "fused-bmm", "bmm_linear"),
    ("conv_linear", "fused-conv-linear", "conv_linear"),
    ("compile", "fused-compiled", "compiled"),
    *bench.ALTERNATIVES,
)


def add_alternatives(p: argparse.ArgumentParser) -> None:
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


def check(args: argparse.Namespace) -> None:
    """One line for an alternative this command line cannot time (after bench's own checks)."""
    if not any(bench.asked(args, flag) for flag, _, _ in ALTERNATIVES[:5]):
        raise UserError(
            "name an alternative to time against the fused step: --streams, --channels-last, "
            "--bmm-linear, --conv-linear or --compile MODE (`python -m distcgan bench --fuse K` "
            "times the fused step alone)"
        )
    if args.streams and not (
        args.fuse > 1 and args.device_g == args.device_d != "cpu" and args.schedule == "sync"
    ):
        raise UserError(
            f"--streams times K pairs in one CUDA graph on one GPU, and this asks for --fuse "
            f"{args.fuse} with G on {args.device_g} and D on {args.device_d}: give --fuse K "
            "(K > 1) and --device-g cuda:N without another --device-d or --schedule async"
        )
    for flag, what in (
        (args.channels_last, "--channels-last times the fused step with NHWC activations"),
        (args.bmm_linear, "--bmm-linear times the fused step with batched-matmul linear layers"),
        (
            args.conv_linear,
            "--conv-linear times the fused step with grouped-convolution linear layers",
        ),
        (args.compile, f"--compile {args.compile} times the fused step compiled"),
    ):
        if flag and not (args.fuse > 1 and args.schedule == "sync"):
            raise UserError(
                f"{what} against the fused step as trained, and this asks for --fuse "
                f"{args.fuse} --schedule {args.schedule}: give --fuse K (K > 1) without "
                "--schedule async"
            )
    check_linear_kernel(args)
    if args.streams and not args.cuda_graphs:
        raise UserError(
            "--streams replays the K pairs from a CUDA graph, against the fused step replayed "
            "the same way: add --cuda-graphs"
        )


def check_linear_kernel(args: argparse.Namespace) -> None:
    """One line for a linear-layer variant that is the fused step's own kernel on these devices
    (models.linear_over_maps picks by device): it would time the step against itself."""
    kinds = {args.device_g.split(":")[0], args.device_d.split(":")[0]}  # cpu, cuda (checked)
    bmm = set(BMM_DEVICES)
    for given, own, name, other, kernel in (
        (args.bmm_linear, kinds <= bmm, "--bmm-linear", "--conv-linear", "batched matmuls"),
        (
            args.conv_linear,
            not kinds & bmm,
            "--conv-linear",
            "--bmm-linear",
            "grouped convolutions",
        ),
    ):
        if given and own:
            raise UserError(
                f"{name}: the fused step with G on {args.device_g} and D on {args.device_d} "
                f"computes its linear layers as {kernel} already, so it would be timed against "
                f"itself: time the other kernel with {other}"
            )


def entry(args: argparse.Namespace) -> tuple[str, ...]:
    """How a worker process of this script is started: the script and the alternatives asked
    for (bench's own flags are forwarded by bench_worker)."""
    flags = [
        f"--{flag.replace('_', '-')}" for flag, _, _ in ALTERNATIVES[:4] if getattr(args, flag)
    ]
    return (
        str(Path(__file__).resolve()),
        *flags,
        *(["--compile", args.compile] * bool(args.compile)),
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fused_alternatives.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p, moved=False)  # bench's flags
    add_alternatives(p)
    p.add_argument("--worker", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    args.device_d = args.device_d or args.device_g
    if args.worker:  # a variant's process, started by bench.run_fused with checked flags
        worker(args, VARIANTS)
        return
    try:
        check_flags(args)
        check(args)
        bench.check_gpus(args)
        out = bench.run_fused(args, ALTERNATIVES, entry(args))
    except UserError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.compile:
        out["compile_mode"] = args.compile
    bench.print_fused(out, ALTERNATIVES)


if __name__ == "__main__":
    main()
