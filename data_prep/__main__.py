"""python -m data_prep SOURCE --out FILE.h5 [--src PATH] [options]: write a class-partitioned HDF5
data file (layout: `distcgan.data`).

    python -m data_prep cifar10 --src cifar-10-python.tar.gz --out data/cifar10.h5
    mpiexec -n 8 python -m mpi4py -m data_prep imagenet --src ILSVRC2012/train --out in64.h5

`imagenet` and `folder` spread their classes over MPI ranks (`parallel.py`); the batch-file
sources (`mnist`, `fashion-mnist`, `cifar10`, `cifar100`, `imagenet-npz`, `digits`) run on one
process (`rows.py`). Exit codes: 0 written, 2 bad input (one line on stderr, nothing written),
1 a crash. Leaves out: the formats themselves (one module per source family).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distcgan.config import RESOLUTIONS
from distcgan.errors import AgreedError, UserError, say
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree
from distcgan.mpi.entry import Parser, run_mpi
from distcgan.mpi.exits import exit_process

SOURCES = {
    "mnist": "MNIST IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-*)",
    "fashion-mnist": "Fashion-MNIST, the same four IDX files",
    "cifar10": "CIFAR-10 python pickles: cifar-10-python.tar.gz or cifar-10-batches-py/",
    "cifar100": "CIFAR-100 python pickles: cifar-100-python.tar.gz or cifar-100-python/",
    "imagenet": "ILSVRC2012 train folder (wnid sub-folders of JPEGs; LOC_synset_mapping.txt)",
    "imagenet-npz": "downsampled ImageNet 32/64 px: train_data_batch_1..10.npz, val_data.npz",
    "folder": "your own images: a folder of class sub-folders of image files",
    "digits": "scikit-learn's 8x8 handwritten digits (embedded, no --src)",
}
# Default output side per source (imagenet-npz: the batches' own size).
DEFAULT_RESOLUTION = {
    "mnist": 32,
    "fashion-mnist": 32,
    "cifar10": 32,
    "cifar100": 32,
    "imagenet": 64,
    "folder": 64,
    "digits": 16,
}
PARALLEL = ("imagenet", "folder")  # sources that spread classes over MPI ranks
Log = Callable[[str], None]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m data_prep",
        description="Convert a dataset into distcgan's class-partitioned HDF5 layout.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="sources:\n" + "\n".join(f"  {k:<14} {v}" for k, v in SOURCES.items()),
    )
    p.add_argument("source", choices=list(SOURCES), metavar="SOURCE", help="see the list below")
    p.add_argument("--src", help="the source's file or folder, as downloaded (not for digits)")
    p.add_argument("--out", required=True, help="output HDF5 file (written atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--resolution", type=int, help="output side in px: 16, 32 or 64")
    p.add_argument("--split", choices=("train", "test"), help="mnist, cifar, npz (default train)")
    p.add_argument("--rgb", action="store_true", help="grayscale sources: 3 equal channels")
    p.add_argument("--classes", nargs="+", metavar="C", help="keep these (ids or names), in order")
    p.add_argument("--max-per-class", type=int, metavar="N", help="keep the first N per class")
    p.add_argument(
        "--long-tail",
        type=float,
        metavar="RATIO",
        help="long-tailed: class sizes fall geometrically by RATIO from the first class (as "
        "many as the smallest class has) to the last, each a seeded choice of its images",
    )
    p.add_argument(
        "--seed", type=int, metavar="S", help="--long-tail's choice of images (default 0)"
    )
    p.add_argument("--coarse", action="store_true", help="cifar100: the 20 coarse labels")
    p.add_argument(
        "--max-unreadable",
        type=float,
        metavar="F",
        help="imagenet/folder: fail a class when more than this fraction of its files cannot be "
        "decoded (default 0.01)",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        metavar="MB",
        help="batch-file sources: output images held per pass (default 1024; one class at least)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="imagenet/folder: no progress bar of the classes (none without a terminal)",
    )
    return p


def _check_args(args: argparse.Namespace) -> None:
    """Options that do not apply to the source are errors, not silently ignored."""
    if args.resolution is not None and args.resolution not in RESOLUTIONS:
        raise UserError(
            f"--resolution {args.resolution} is not supported: use one of {RESOLUTIONS} (the "
            "sizes the trainer takes)"
        )
    if args.source == "digits" and args.src:
        raise UserError("digits are embedded in scikit-learn: drop --src")
    if args.source != "digits" and not args.src:
        raise UserError(
            f"{args.source} needs --src: the downloaded file or folder ({SOURCES[args.source]})"
        )
    if args.split and args.source in (*PARALLEL, "digits"):
        raise UserError(
            f"--split does not apply to {args.source}: "
            + (
                "there is no split"
                if args.source == "digits"
                else "point --src at the split's folder"
            )
        )
    if args.coarse and args.source != "cifar100":
        raise UserError("--coarse applies to cifar100 only")
    if args.seed is not None and args.long_tail is None:
        raise UserError(
            "--seed applies to --long-tail only (the other options keep the first images)"
        )
    _check_limits(args)


def _check_limits(args: argparse.Namespace) -> None:
    """The options of how much is read and kept."""
    if args.long_tail is not None:
        from data_prep.select import check_ratio

        check_ratio(args.long_tail)
    if args.max_unreadable is not None:
        if args.source not in PARALLEL:
            raise UserError("--max-unreadable applies to imagenet and folder only")
        if not 0 <= args.max_unreadable < 1:
            raise UserError(f"--max-unreadable is a fraction in [0, 1), got {args.max_unreadable}")
    if args.memory_mb is not None:
        if args.source in PARALLEL:
            raise UserError("--memory-mb applies to batch-file sources (their memory is one class)")
        if args.memory_mb < 1:
            raise UserError(f"--memory-mb must be positive, got {args.memory_mb}")


def _open_rows(args: argparse.Namespace) -> Any:
    if args.source == "digits":  # embedded in scikit-learn: no --src
        from data_prep.digits import open_digits

        return open_digits()
    split = args.split or "train"
    src = Path(args.src)  # every other source has one (_check_args)
    if args.source in ("mnist", "fashion-mnist"):
        from data_prep.idx import open_idx

        return open_idx(src, split, fashion=args.source == "fashion-mnist")
    if args.source in ("cifar10", "cifar100"):
        from data_prep.cifar import open_cifar

        if not src.exists():
            raise UserError(
                f"--src {src} does not exist: give the downloaded {args.source}-python.tar.gz "
                "or the folder extracted from it"
            )
        return open_cifar(src, args.source, split, coarse=args.coarse)
    from data_prep.npz import open_npz  # imagenet-npz (imagenet and folder: _convert_folder)

    return open_npz(src, split)


def _convert_rows(args: argparse.Namespace, log: Log, made: dict[str, Any]) -> dict[str, Any]:
    """One process: open the batch-file source, select, write; returns what was written."""
    from data_prep.output import check_out_path
    from data_prep.rows import RowsOut, write_rows
    from data_prep.select import select_classes, with_long_tail

    check_out_path(args.out, args.overwrite)
    src = _open_rows(args)
    resolution = args.resolution or DEFAULT_RESOLUTION.get(args.source) or src.size
    if resolution not in RESOLUTIONS:
        raise UserError(
            f"{src.where} holds {src.size} px images: pass --resolution with one of {RESOLUTIONS}"
        )
    sel = select_classes(src.names, args.classes, args.max_per_class, where=src.where)
    sel = with_long_tail(sel, args.long_tail, args.seed or 0)
    budget = (args.memory_mb or 1024) << 20
    out = RowsOut(args.out, resolution, args.rgb, budget, made)
    counts = write_rows(src, sel, out, log)
    return {"counts": counts, "resolution": resolution, "channels": 3 if args.rgb else src.channels}


def _plan_folder(args: argparse.Namespace) -> dict[str, Any]:
    """Rank 0: list the classes, resolve the selection, check the output path."""
    from data_prep.folder import class_folders, class_images
    from data_prep.imagenet import imagenet_classes
    from data_prep.output import check_out_path
    from data_prep.select import select_classes, tail_sizes, with_long_tail

    check_out_path(args.out, args.overwrite)
    root = Path(args.src)
    if args.source == "imagenet":
        dirs, names, names_from = imagenet_classes(root)
    else:
        dirs = class_folders(root)
        names, names_from = dirs, "folder names"
    sel = select_classes(names, args.classes, args.max_per_class, keys=dirs, where=str(root))
    sel = with_long_tail(sel, args.long_tail, args.seed or 0)
    caps = None
    if sel.long_tail is not None:  # every class's files counted first: its size depends on all
        caps = tail_sizes(sel, [len(class_images(root / dirs[k])) for k in sel.keep])
    return {
        "dirs": [dirs[k] for k in sel.keep],
        "names": list(sel.names),
        "cap": sel.cap,
        "caps": caps,  # --long-tail: each class's size, its images chosen by tail_order
        "keep": list(sel.keep),
        "seed": sel.seed,
        "names_from": names_from,
    }


def _convert_folder(
    comm: Comm, args: argparse.Namespace, log: Log, made: dict[str, Any]
) -> dict[str, Any]:
    """Collective: classes spread over the ranks, rank 0 writes (`parallel.py`)."""
    from data_prep.folder import convert_class
    from data_prep.parallel import Target, convert_classes
    from distcgan.mpi.context import agree

    plan = agree(comm, lambda: _plan_folder(args), root=0)
    root, resolution = Path(args.src), args.resolution or DEFAULT_RESOLUTION[args.source]
    max_bad = 0.01 if args.max_unreadable is None else args.max_unreadable
    if comm.rank == 0:
        log(f"{len(plan['names'])} classes (names: {plan['names_from']}) on {comm.size} rank(s)")

    def convert(j: int):
        if plan["caps"] is None:
            return convert_class(root / plan["dirs"][j], resolution, plan["cap"], max_bad)
        order = (plan["seed"], plan["keep"][j])  # --long-tail: tail_order's seed and class
        return convert_class(root / plan["dirs"][j], resolution, plan["caps"][j], max_bad, order)

    source = f"{args.source}:{root.resolve().name}"
    target = Target(args.out, plan["names"], resolution, source, made)
    reports = convert_classes(comm, convert, target, log, not args.no_progress)
    skipped = [(plan["dirs"][j], r) for j, r in enumerate(reports) if r["skipped"]]
    counts = [r["images"] for r in reports]
    return {"counts": counts, "resolution": resolution, "channels": 3, "skipped": skipped}


def main(argv: list[str] | None = None) -> int:
    """`python -m data_prep ...` under mpi/entry.py's failure policy (errors say "data_prep:
    error: ..."; a crash names its rank)."""
    return run_mpi("data_prep", lambda comm: _run(comm, argv), rank_in_errors=False)


def _run(comm: Comm, argv: list[str] | None) -> int:
    """Collective: parse, check, convert, and print the summary on rank 0."""
    from mpi4py import MPI

    log = (lambda m: print(m, flush=True)) if comm.rank == 0 else (lambda m: None)
    args = build_parser().parse_args(argv)
    agree(comm, lambda: _check_args(args))  # argv only: the same on every rank, said once
    t0 = time.perf_counter()
    # The file's record of what made it, unstamped (no time, no host: the same conversion gives
    # the same file; see env.provenance); rank 0 writes the file, and only it runs git for it.
    from distcgan.env import provenance

    line = ["python", "-m", "data_prep", *(sys.argv[1:] if argv is None else argv)]
    made = provenance("data_prep", args, argv=line, stamped=False) if comm.rank == 0 else {}
    if args.source in PARALLEL:
        done = _convert_folder(comm, args, log, made)
    elif comm.size > 1:
        raise AgreedError(
            f"{args.source} converts on one process: launch it without mpiexec (imagenet and "
            "folder spread classes over ranks)"
        )
    else:
        done = _convert_rows(args, log, made)
    seconds = time.perf_counter() - t0
    # ru_maxrss is in KiB on Linux: the largest rank's peak resident memory.
    peak = comm.allreduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, op=MPI.MAX)
    if comm.rank == 0:
        _print_summary(args.out, done, seconds, peak / 1024)
    return 0


def _print_summary(out: str, done: dict[str, Any], seconds: float, peak_mb: float) -> None:
    counts = done["counts"]
    n = sum(counts)
    print(
        f"wrote {out}: {n} images, {len(counts)} classes ({min(counts)}..{max(counts)} per "
        f"class), {done['resolution']} px, {done['channels']} channel(s), "
        f"{os.path.getsize(out) / 1e6:.1f} MB; {seconds:.1f} s, {n / max(seconds, 1e-9):.0f} "
        f"images/s, peak RSS {peak_mb:.0f} MB"
    )
    skipped = done.get("skipped") or []
    if skipped:
        total = sum(r["skipped"] for _, r in skipped)
        first = "; ".join(e for _, r in skipped[:3] for e in r["examples"][:1])
        say(
            f"data_prep: warning: skipped {total} unreadable image(s) in {len(skipped)} "
            f"class(es): {first}"
        )


if __name__ == "__main__":
    exit_process(main())
