"""The checks of `distcgan bench`'s flags (options.BenchOptions: what it times and how), apart
from bench.py so that neither imports torch: every command's parser is built at start, and a bad
flag, a flag bench cannot measure, or `--help` then answers without the seconds of loading torch.
The flags of the fused step's alternatives that training does not run are
benchmarks/fused_alternatives.py's: bench refuses them in one line that names that command
(MOVED). Leaves out: what bench does with its flags, and the check of cuda:N against the GPUs
seen (bench.py).
"""

from __future__ import annotations

import argparse
from argparse import SUPPRESS
from collections.abc import Callable
from typing import Any

from distcgan.config import parse_policy
from distcgan.errors import UserError
from distcgan.options import BenchOptions, add_options
from distcgan.plan import check_devices


def add_arguments(p: argparse.ArgumentParser, moved: bool = True) -> None:
    """Bench's flags (options.BenchOptions); with `moved`, the moved flags too (add_moved)."""
    add_options(p, BenchOptions)
    if moved:
        add_moved(p)


def add_moved(p: argparse.ArgumentParser) -> None:
    """The moved flags (MOVED): hidden, kept in `moved` for check_flags to refuse."""
    for flag, n in MOVED.items():
        p.add_argument(flag, nargs=n, action=_Moved, dest="moved", default=(), help=SUPPRESS)


# The flags of the fused step's alternatives that training does not run, timed now by
# benchmarks/fused_alternatives.py (which takes every flag of BenchOptions too): bench refuses
# them in one line that gives that command.
MOVED = {
    "--streams": 0,
    "--channels-last": 0,
    "--bmm-linear": 0,
    "--conv-linear": 0,
    "--compile": 1,
}


class _Moved(argparse.Action):
    """A moved flag (and its value), kept in `moved` for check_flags to refuse."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        namespace.moved = [*namespace.moved, option, *values]


def _moved_to(args: argparse.Namespace) -> str:
    """The command that times what `args` asks for: fused_alternatives.py with the same flags
    (those not at their default, and the moved ones)."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults, moved=False)
    words: list[str] = []
    for action in defaults._actions:
        value, flag = getattr(args, action.dest, None), action.option_strings[-1:]
        if not flag or value == action.default or flag == ["--help"]:
            continue
        if flag == ["--device-d"] and value == args.device_g:  # bench's default: G's device
            continue
        words += flag if value is True else [flag[0], str(value)]
    return " ".join(["python benchmarks/fused_alternatives.py", *words, *args.moved])


def each_device(args: argparse.Namespace, check: Callable[[str], str]) -> None:
    """--device-g and --device-d, each where given, replaced by check(value); a UserError from
    check is one line that names the flag, and names it where its advice gives a value (the
    check is train's, whose flag is --devices: bench has none)."""
    for name in ("device_g", "device_d"):
        value = getattr(args, name)
        if value is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        try:
            setattr(args, name, check(value))
        except UserError as exc:
            raise UserError(f"{flag}: {str(exc).replace('--devices', flag)}") from None


def _spelled(spec: str) -> str:
    """A device spelled as torch takes it; auto resolved (cuda:0 where a GPU is seen)."""
    check_devices(spec, pair=False)
    if spec != "auto":
        return spec
    import torch  # the one check that loads torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def _check_numbers(args: argparse.Namespace) -> None:
    """The counts, the channels and the devices' spelling: the command line alone."""
    # Each ended in a traceback (a worker "failed to start", no median of 0 windows, a division
    # by 0 steps, torch's list of device types) or timed something else (--warmup -1).
    least = {"batch_size": 1, "windows": 1, "steps": 1, "warmup": 0, "threads": 0, "scaling": 0}
    for name, lo in least.items():
        if getattr(args, name) < lo:
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} must be a whole number >= {lo}, got {getattr(args, name)}")
    each_device(args, _spelled)
    if args.channels not in (1, 3):
        raise UserError(f"--channels must be 1 (grey) or 3 (RGB), got {args.channels}")


def check_flags(args: argparse.Namespace) -> None:
    """One line for what bench cannot measure, from the command line alone: the same with or
    without a GPU. A device given as auto is resolved first (cuda:0 where a GPU is seen), which
    loads torch; bench.check_gpus then checks cuda:N against the GPUs seen."""
    if getattr(args, "moved", ()):
        raise UserError(
            f"{args.moved[0]} times an alternative to the fused step that training does not "
            f"run, now apart from bench: run `{_moved_to(args)}` from the repository root"
        )
    _check_numbers(args)
    try:
        parse_policy(args.augment)
    except ValueError as exc:
        raise UserError(
            f"--augment {args.augment}: {exc} is not a policy; use a comma list of color, "
            "translation, cutout"
        ) from None
    if args.schedule == "async" and (args.augment != "none" or args.cuda_graphs):
        raise UserError(
            "--schedule async times the step sync against async (with --fuse K, the fused "
            "pair's): drop --augment and --cuda-graphs"
        )
    if args.batch_size_d and args.schedule != "async":
        raise UserError("--batch-size-d goes with --schedule async")
    if not 0 <= args.batch_size_d <= args.batch_size:
        raise UserError(
            f"--batch-size-d must be in [0, --batch-size {args.batch_size}], got "
            f"{args.batch_size_d}"
        )
    if args.fuse < 1:
        raise UserError(f"--fuse must be a number of classes >= 1, got {args.fuse}")
    if args.cuda_graphs and not (args.fuse > 1 and args.device_g == args.device_d != "cpu"):
        raise UserError(
            f"--cuda-graphs times a fused step on one GPU, and this asks for --fuse {args.fuse}"
            f" with G on {args.device_g} and D on {args.device_d}: give --fuse K (K > 1) and"
            " --device-g cuda:N without another --device-d, or drop --cuda-graphs"
        )
