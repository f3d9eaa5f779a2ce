"""The fused step's alternatives that were measured and not adopted, each timed against the fused
step as training runs it, in alternating windows in one run: `distcgan bench --fuse K` (whose
flags this takes, and whose table and JSON line it prints) with one more arm per alternative.

- --streams: the K pairs unfused, captured in one CUDA graph with a stream each (one GPU, with
  --cuda-graphs, against the fused step graphed the same way)
- --channels-last: the fused step with its images and activations NHWC (parameters contiguous)
- --bmm-linear, --conv-linear: its two linear layers as batched matmuls, or as grouped
  convolutions (whichever is not the device's own kernel)
- --compile MODE: the eager fused update compiled by torch.compile

Each was slower on an H100 (docs/performance.md, "GPU figures"). Issue 80's candidates, for the
layout conversions cuDNN puts around its grouped convolutions (not yet timed on a GPU):

- --nhwc-weights: NHWC maps and inputs, and each grouped convolution's weight stored NHWC, class
  k's weight a slice of rows
- --compile-convs MODE: the grouped convolutions alone compiled by torch.compile (with
  --cuda-graphs: default or max-autotune-no-cudagraphs)
- --unfold-bmm: each grouped convolution as one batched matmul over its unfolded input

--profile with one of them profiles its eager step as benchmarks/gpu_profile.py profiles the
fused step. From the repository root:

    python benchmarks/fused_alternatives.py --fuse 10 --resolution 16 --batch-size 32 \\
        --channels 1 --channels-last --bmm-linear
    python benchmarks/fused_alternatives.py --device-g cuda:0 --fuse 32 --resolution 32 \\
        --batch-size 64 --channels 3 --amp bf16 --cuda-graphs --streams --conv-linear \\
        --windows 5 --steps 5
    python benchmarks/fused_alternatives.py --device-g cuda:0 --fuse 32 --resolution 32 \\
        --batch-size 64 --channels 3 --amp bf16 --cuda-graphs --nhwc-weights --unfold-bmm \\
        --compile-convs max-autotune-no-cudagraphs --windows 5 --steps 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

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


# ---- issue 80: the fused step without cuDNN's layout conversions --------------------------------


def grouped_convs(*nets: nn.Module | None) -> list[nn.Conv2d]:
    """The fused networks' grouped convolutions (groups = F: G's three, D's four; G is
    upsampling then convolution, so there is no transposed convolution to cover)."""
    return [
        m
        for net in nets
        if net is not None
        for m in net.modules()
        if isinstance(m, nn.Conv2d) and m.groups > 1
    ]


def nhwc_weights(fp: Any) -> list[torch.Tensor]:
    """--nhwc-weights: every grouped convolution's weight (F*out, in, kh, kw) stored as
    (F*out, kh, kw, in), contiguous, and given to the convolution as its permuted view, which is
    the weight channels_last: cuDNN need not convert it at each call. Class k's weight is then
    the rows [k*out, (k+1)*out) in NHWC order (a slice by rows, still a plain view), and its Adam
    moments (permuted alike) and G's average follow it element for element, so FusedAdam and
    update_ema step it unchanged. Bench only: FusedPairs.load/store copy flat slices, so a
    training run would permute each class's rows there. The weights given back."""
    convs = grouped_convs(fp.G, fp.D, fp.G_ema)
    with torch.no_grad():
        for conv in convs:
            for opt in (fp.opt_g, fp.opt_d):
                for i, p in enumerate(opt.params):
                    if p is conv.weight:
                        opt.exp_avg[i] = opt.exp_avg[i].permute(0, 2, 3, 1).contiguous()
                        opt.exp_avg_sq[i] = opt.exp_avg_sq[i].permute(0, 2, 3, 1).contiguous()
            conv.weight.data = conv.weight.data.permute(0, 2, 3, 1).contiguous()
            conv.forward = _nhwc_forward.__get__(conv)  # type: ignore[method-assign]
    return [conv.weight for conv in convs]


def _nhwc_forward(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return conv._conv_forward(x, conv.weight.permute(0, 3, 1, 2), conv.bias)  # (F*out, in, kh, kw)


class FusedNhwcWeights(FusedChannelsLast):
    """--nhwc-weights: --channels-last's NHWC maps and inputs, and every grouped convolution's
    weight stored NHWC (`nhwc_weights`), so that cuDNN gets NHWC weights and inputs."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.nhwc = nhwc_weights(self.fp)


def conv_as_bmm(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """A grouped convolution (F groups) as one batched matrix product over the F groups of the
    unfolded input: (F, out, in*kh*kw) times (F, in*kh*kw, B*L) for L output positions, autograd
    taking its backward (the fold of the gradient: col2im). Under autocast the input is cast
    first, so the unfolded copy (kh*kw times the input) is in the autocast precision."""
    f, (kh, kw), (sh, sw) = conv.groups, conv.kernel_size, conv.stride
    ph, pw = (int(p) for p in conv.padding)  # a tuple: the fused networks pad by numbers
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    b, _, h, w = x.shape
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    cols = nn.functional.unfold(x, (kh, kw), padding=(ph, pw), stride=(sh, sw))  # (B, F*K, L)
    cols = cols.view(b, f, -1, ho * wo).permute(1, 2, 0, 3).reshape(f, -1, b * ho * wo)
    weight = conv.weight.view(f, conv.out_channels // f, -1)  # (F, out, K), K = in*kh*kw
    bias = conv.bias.view(f, -1, 1) if conv.bias is not None else None
    out = torch.bmm(weight, cols) if bias is None else torch.baddbmm(bias, weight, cols)
    # laid out as the convolution lays out its output (NHWC for an NHWC input), which D's
    # dropout masks follow
    nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    out = out.view(f, -1, b, ho, wo).permute(2, 0, 1, 3, 4).reshape(b, -1, ho, wo)
    return out.contiguous(memory_format=torch.channels_last if nhwc else torch.contiguous_format)


class FusedUnfoldBmm(Fused):
    """--unfold-bmm: every grouped convolution of the fused G and D (`grouped_convs`) computed
    as a batched matrix product over its unfolded input (`conv_as_bmm`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        for conv in grouped_convs(self.fp.G, self.fp.D, self.fp.G_ema):
            conv.forward = conv_as_bmm.__get__(conv)  # type: ignore[method-assign]


def _conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    groups: int,
) -> torch.Tensor:
    return nn.functional.conv2d(x, weight, bias, stride, padding, 1, groups)


def compile_convs(fp: Any, mode: str, backend: str = "inductor") -> None:
    """--compile-convs MODE: each grouped convolution of the fused step (`grouped_convs`, forward
    and the backward autograd derives) run by one torch.compile'd function, the rest of the
    update eager (or in our CUDA graph: compiled at its warm-up, before capture). Static shapes:
    each convolution at each batch (D sees 2B, then B) is its own compiled kernel, so the limit
    of recompilations is raised to hold them all (past it dynamo would run them eager)."""
    import torch._dynamo

    convs = grouped_convs(fp.G, fp.D, fp.G_ema)
    for name in ("recompile_limit", "cache_size_limit"):  # torch's name, then its older one
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, 4 * len(convs)))
    mode_or_none = mode if backend == "inductor" else None  # a mode is inductor's
    compiled = torch.compile(_conv, backend=backend, dynamic=False, mode=mode_or_none)

    def forward(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        return compiled(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.groups)

    for conv in convs:
        conv.forward = forward.__get__(conv)  # type: ignore[method-assign]


class FusedCompiledConvs(Fused):
    """--compile-convs MODE: the fused step with its grouped convolutions compiled by
    torch.compile in MODE (`compile_convs`; with --cuda-graphs, a mode without CUDA graphs of
    its own: the step is captured whole)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        compile_convs(self.fp, args.compile_convs)


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
    "fused-nhwc-weights": FusedNhwcWeights,
    "fused-compiled-convs": FusedCompiledConvs,
    "fused-unfold-bmm": FusedUnfoldBmm,
}

# the flag, its worker variant, its key in the JSON, as bench.ALTERNATIVES (whose --augment
# with --fuse K, an option of training, comes last, as it did in bench)
OWN = (
    ("streams", "streams", "streams"),  # the K pairs in one graph, a stream each
    ("channels_last", "fused-channels-last", "channels_last"),
    ("bmm_linear", "fused-bmm", "bmm_linear"),
    ("conv_linear", "fused-conv-linear", "conv_linear"),
    ("compile", "fused-compiled", "compiled"),
    # issue 80's candidates
    ("nhwc_weights", "fused-nhwc-weights", "nhwc_weights"),
    ("compile_convs", "fused-compiled-convs", "compiled_convs"),
    ("unfold_bmm", "fused-unfold-bmm", "unfold_bmm"),
)
ALTERNATIVES = (*OWN, *bench.ALTERNATIVES)
WITH_VALUE = ("compile", "compile_convs")  # the flags that take a MODE
# compile modes whose own CUDA graphs cannot run inside the step's graph (--cuda-graphs)
GRAPHING_MODES = ("reduce-overhead", "max-autotune")


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
    p.add_argument(
        "--nhwc-weights",
        action="store_true",
        help="with --fuse K: also time the fused step with NHWC maps and inputs and its grouped "
        "convolutions' weights stored NHWC (each class's weight a slice of rows)",
    )
    p.add_argument(
        "--compile-convs",
        default="",
        choices=("", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        metavar="MODE",
        help="with --fuse K: also time the fused step with its grouped convolutions alone "
        "compiled by torch.compile in MODE (with --cuda-graphs: default or "
        "max-autotune-no-cudagraphs)",
    )
    p.add_argument(
        "--unfold-bmm",
        action="store_true",
        help="with --fuse K: also time the fused step with its grouped convolutions as batched "
        "matrix products over the unfolded inputs",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="with one alternative: profile its eager step (benchmarks/gpu_profile.py's table "
        "and JSON line) instead of timing it",
    )
    p.add_argument("--top", type=int, default=12, help="with --profile: kernels listed")


def check(args: argparse.Namespace) -> None:
    """One line for an alternative this command line cannot time (after bench's own checks)."""
    if not any(bench.asked(args, flag) for flag, _, _ in OWN):
        raise UserError(
            "name an alternative to time against the fused step: --streams, --channels-last, "
            "--bmm-linear, --conv-linear, --compile MODE, --nhwc-weights, --compile-convs MODE "
            "or --unfold-bmm (`python -m distcgan bench --fuse K` times the fused step alone)"
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
        (args.nhwc_weights, "--nhwc-weights times the fused step with NHWC weights"),
        (
            args.compile_convs,
            f"--compile-convs {args.compile_convs} times the fused step's convolutions compiled",
        ),
        (args.unfold_bmm, "--unfold-bmm times the fused step's convolutions as batched matmuls"),
    ):
        if flag and not (args.fuse > 1 and args.schedule == "sync"):
            raise UserError(
                f"{what} against the fused step as trained, and this asks for --fuse "
                f"{args.fuse} --schedule {args.schedule}: give --fuse K (K > 1) without "
                "--schedule async"
            )
    check_linear_kernel(args)
    check_issue80(args)
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


def check_issue80(args: argparse.Namespace) -> None:
    """One line for a compile mode that would capture CUDA graphs of its own inside the step's
    (--cuda-graphs), or a --profile that does not name exactly one alternative."""
    if args.cuda_graphs and args.compile_convs in GRAPHING_MODES:
        raise UserError(
            f"--compile-convs {args.compile_convs} captures CUDA graphs of its own, and "
            "--cuda-graphs captures the whole step in one: give --compile-convs "
            "max-autotune-no-cudagraphs (or default)"
        )
    named = [flag for flag, _, _ in OWN if bench.asked(args, flag)]
    if args.profile and (len(named) != 1 or args.streams):
        raise UserError(
            f"--profile profiles one alternative's eager step, and this names "
            f"{' and '.join('--' + n.replace('_', '-') for n in named)}: give one other than "
            "--streams, e.g. --unfold-bmm (benchmarks/gpu_profile.py profiles the fused step)"
        )


def profile(args: argparse.Namespace, argv: list[str]) -> None:
    """--profile: benchmarks/gpu_profile.py's table and JSON line for the one alternative asked
    for, stepped eagerly in place of the fused step it profiles (its `channels_last` field says
    only whether --channels-last was given), on bench's flags from `argv`."""
    import gpu_profile  # beside this script

    (flag, name) = next((f, n) for f, n, _ in OWN if bench.asked(args, f))
    args.cuda_graphs = False  # eager, as gpu_profile steps the fused pair
    # what gpu_profile.main builds and profiles: the alternative, on this command's flags
    gpu_profile.Fused = lambda _: VARIANTS[name](args)  # type: ignore[misc,assignment]
    ours = {f"--{f.replace('_', '-')}" for f, _, _ in OWN} | {"--profile"}
    words, skip = [], False
    for word in argv:
        if not skip and word.split("=")[0] not in ours:
            words.append(word)
        skip = word in ("--compile", "--compile-convs")  # its MODE follows
    print(
        f"profile of --{flag.replace('_', '-')}: gpu_profile.py with it as the fused step",
        flush=True,
    )
    sys.argv = [gpu_profile.__file__, *words]
    gpu_profile.main()


def entry(args: argparse.Namespace) -> tuple[str, ...]:
    """How a worker process of this script is started: the script and the alternatives asked
    for (bench's own flags are forwarded by bench_worker)."""
    words: list[str] = []
    for flag, _, _ in OWN:
        value = getattr(args, flag)
        if value:
            words += [f"--{flag.replace('_', '-')}"] + ([value] if flag in WITH_VALUE else [])
    return (str(Path(__file__).resolve()), *words)


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
        if args.profile:
            profile(args, sys.argv[1:])
            return
        out = bench.run_fused(args, ALTERNATIVES, entry(args))
    except UserError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.compile:
        out["compile_mode"] = args.compile
    if args.compile_convs:
        out["compile_convs_mode"] = args.compile_convs
    bench.print_fused(out, ALTERNATIVES)


if __name__ == "__main__":
    main()
