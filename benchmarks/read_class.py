"""How much of a data file does a rank read to load its own class? Bytes and seconds per rank.

    mpiexec -n 2 python -m mpi4py benchmarks/read_class.py --file /tmp/read_bench.h5
    python benchmarks/read_class.py --file /tmp/read_bench.h5 --classes 1000 --per-class 1300 \\
        --resolution 64          # an ImageNet-64-sized file (16 GB): mind the disk

Rank 0 first writes a synthetic data file through the real writer (`distcgan.data.
DatasetWriter`, the trainer's chunking): `--classes` classes of `--per-class` random RGB images
at `--resolution`, unless `--file` already has that shape. Then each rank loads one class (rank
r of P: class r*K//P, spread over the file) with `distcgan.data.load_class`, as the trainer does,
and prints: the bytes it read (the `rchar` delta of /proc/self/io around the call: every byte
that came through a read system call, page-cache hits included, HDF5 metadata included) against
the class's own bytes and the file's size, and the seconds of the first load (file open
included) and the median of `--repeats` more. The file was just written, so its pages are
likely cached: the seconds are a warm-cache figure; the bytes do not depend on the cache.
Prints figures; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np


def rchar() -> int:
    """Bytes this process has read through system calls so far (Linux /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def make_file(path: str, classes: int, per_class: int, resolution: int) -> None:
    from distcgan.data import DatasetWriter, read_info

    if Path(path).is_file():
        info = read_info(path)
        if info.counts == (per_class,) * classes and info.resolution == resolution:
            return
    rng = np.random.default_rng(0)
    names = [f"class{k:04d}" for k in range(classes)]
    with DatasetWriter(path, names, resolution, 3, "synthetic read benchmark") as w:
        for k in range(classes):
            w.add_class(k, rng.integers(0, 256, (per_class, resolution, resolution, 3), np.uint8))


def main() -> None:
    from mpi4py import MPI

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--file", default="/tmp/distcgan_read_bench.h5")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--per-class", type=int, default=500)
    p.add_argument("--resolution", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        make_file(args.file, args.classes, args.per_class, args.resolution)
    comm.Barrier()

    import h5py  # noqa: F401  (imported now: its own files would count as bytes read)

    from distcgan.data import load_class

    k = comm.rank * args.classes // comm.size
    before, t0 = rchar(), time.perf_counter()
    images = load_class(args.file, k)
    first_s = time.perf_counter() - t0
    read = rchar() - before
    again = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        load_class(args.file, k)
        again.append(time.perf_counter() - t0)
    size = os.path.getsize(args.file)
    row = (
        f"rank {comm.rank}/{comm.size}: class {k}, {images.shape[0]} images "
        f"({images.nbytes / 1e6:.2f} MB of pixels); read {read / 1e6:.2f} MB = "
        f"{read / images.nbytes:.3f} x the class, {100 * read / size:.2f}% of the "
        f"{size / 1e6:.1f} MB file; load {first_s * 1e3:.1f} ms first, "
        f"{statistics.median(again) * 1e3:.1f} ms median of {args.repeats} more"
    )
    rows = comm.gather(row, root=0)
    if comm.rank == 0:
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
