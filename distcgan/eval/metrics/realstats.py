"""Feature statistics of the real data for FID: computed once, over ranks, cached by content.

The cache is an HDF5 file named after what it depends on, in the first writable of: the folder
given by `--stats-dir`; else the data file's folder, then the user's cache folder
($XDG_CACHE_HOME or ~/.cache, then distcgan/fid), so a data set on a read-only shared folder is
still scored. A valid cache is read from any of those folders (an administrator may leave one
beside a read-only data set):
  DATA_STEM.fid-NETWORK-NETSHA-DATASHA.h5   (NETSHA, DATASHA: the first 16 hex digits of the
                                              SHA-256 of the network's file and of the data file)
  class_n          int64 (K,)         real images per class
  class_mean       float64 (K, D)     per-class mean feature
  class_cov_sqrt   float32 (K, D, D)  per-class symmetric square root S_k of the unbiased
                                      covariance (covariance = S_k S_k): a per-class FID then
                                      costs one eigendecomposition, not two. One chunk per class,
                                      so a rank reads only its classes; float32 keeps a 10-class
                                      Inception cache at 160 MB
  n, mean, cov, cov_sqrt   all classes together (float64), summed in class order
  (every dataset but the scalar n carries a fletcher32 checksum, checked by HDF5 as it reads)
  attributes       format_version, data_sha256, network, network_sha256, class_names
A changed data file or network gives another name, so a stale cache is never read. Computing it:
the data classes are split over the ranks in contiguous blocks; each rank runs its classes
through the network, takes the square roots of their covariances and writes them, with the
float64 sums, to a part file; rank 0 merges the parts in class order (so the cache does not
depend on the number of ranks) and writes the cache atomically. Leaves out: the fake side and
the scores (evaluate.py, scores.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from distcgan.data import DatasetInfo, fixed_string, load_class
from distcgan.errors import UserError
from distcgan.eval.metrics.networks import Network, sha256_file
from distcgan.eval.metrics.scores import FeatureSums, from_moments, sqrt_psd
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree
from distcgan.run.atomic import atomic_path

CACHE_VERSION = 2  # 2: its strings of fixed length (no global heap, see _write_attrs)


@dataclass(frozen=True)
class RealStats:
    """Count, mean and covariance square root of real features: one side of an FID."""

    n: int
    mean: np.ndarray
    cov_sqrt: np.ndarray


class DeviceSums:
    """FeatureSums accumulated on the network's device (float64), for batches of features."""

    def __init__(self, dim: int, device: str) -> None:
        self.n = 0
        self.total = torch.zeros(dim, dtype=torch.float64, device=device)
        self.outer = torch.zeros(dim, dim, dtype=torch.float64, device=device)

    def add(self, features: torch.Tensor) -> None:
        f = features.double()
        self.n += f.shape[0]
        self.total += f.sum(0)
        self.outer.addmm_(f.T, f)

    def result(self) -> FeatureSums:
        return FeatureSums(float(self.n), self.total.cpu().numpy(), self.outer.cpu().numpy())


def batches(images: np.ndarray, size: int) -> Iterable[np.ndarray]:
    for lo in range(0, len(images), size):
        yield images[lo : lo + size]


def cache_name(data: str, network: Network, data_sha256: str) -> str:
    return f"{Path(data).stem}.fid-{network.key}-{data_sha256[:16]}.h5"


def user_cache() -> Path:
    """The user's own cache folder for statistics (the XDG base-directory convention)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "distcgan" / "fid"


def cache_folders(data: str, stats_dir: str | None) -> tuple[list[Path], list[Path]]:
    """(the folders a valid cache is read from, in order; the folders one is written to, the
    first writable one taken). A --stats-dir given is the only place written to."""
    here, user = Path(data).parent, user_cache()
    if stats_dir:
        return [Path(stats_dir), here, user], [Path(stats_dir)]
    return [here, user], [here, user]


def _parts_folder(name: str, folders: list[Path], data: str) -> tuple[Path, Path]:
    """(the cache path, a new parts folder beside it) in the first folder that can be written."""
    reasons = []
    for folder in folders:
        parts = folder / f".{name}.parts-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            parts.mkdir()
            return folder / name, parts
        except OSError as exc:
            reasons.append(f"{folder} ({exc.strerror})")
    raise UserError(
        f"cannot write the FID statistics of {data} in {' nor '.join(reasons)}: pass "
        "--stats-dir DIR, a folder you can write"
    )


def _valid(path: Path, network: Network, data_sha256: str) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return (
                int(f.attrs["format_version"]) == CACHE_VERSION
                and f.attrs["data_sha256"] == fixed_string(data_sha256)
                and f.attrs["network_sha256"] == fixed_string(network.sha256)
                and "cov_sqrt" in f
            )
    except (OSError, KeyError):  # truncated or foreign file: compute it again
        return False


def ensure_real_stats(
    comm: Comm,
    data: DatasetInfo,
    network: Network,
    batch_size: int,
    log: Callable[[str], None] = print,
    stats_dir: str | None = None,
) -> Path:
    """Collective: the path of the real statistics of `data` under `network`, computing them
    (over all ranks) when no valid cache exists in the folders `cache_folders` names."""

    def locate() -> tuple[Path, Path | None, str]:
        """Rank 0: (cache path, None when the cache is valid else a new parts folder, data SHA)."""
        sha = sha256_file(data.path)
        name = cache_name(data.path, network, sha)
        read_from, write_to = cache_folders(data.path, stats_dir)
        for folder in read_from:
            if _valid(folder / name, network, sha):
                return folder / name, None, sha
        path, parts = _parts_folder(name, write_to, data.path)
        return path, parts, sha

    path, parts, sha = agree(comm, locate, root=0)
    if parts is None:
        if comm.rank == 0:
            log(f"real statistics: {path} (cached)")
        return path
    if comm.rank == 0:
        log(
            f"real statistics: computing them for {sum(data.counts)} images of {data.path} on "
            f"{comm.size} rank(s), once; cached in {path}"
        )
    blocks = np.array_split(np.arange(data.num_classes), comm.size)
    try:
        agree(
            comm, lambda: _compute_part(data, network, blocks[comm.rank], batch_size, parts, comm)
        )
        agree(comm, lambda: _merge(data, network, blocks, parts, path, sha), root=0)
    finally:
        if comm.rank == 0:
            shutil.rmtree(parts, ignore_errors=True)
    return path


def _compute_part(
    data: DatasetInfo,
    network: Network,
    classes: np.ndarray,
    batch_size: int,
    parts: Path,
    comm: Comm,
) -> None:
    """This rank's classes: float64 sums of their features and the square roots of their
    covariances (the costly part, done here in parallel), written to parts/rankN.h5."""
    with atomic_path(parts / f"rank{comm.rank}.h5") as tmp, h5py.File(tmp, "w") as f:
        for k in (int(c) for c in classes):
            sums = DeviceSums(network.feature_dim, network.device)
            if data.counts[k] > 0:
                for batch in batches(load_class(data.path, k), batch_size):
                    sums.add(network(batch)[1])
            s = sums.result()
            f[f"n_{k}"], f[f"total_{k}"], f[f"outer_{k}"] = s.n, s.total, s.outer
            if s.n >= 2:
                f[f"sqrt_{k}"] = sqrt_psd(s.moments()[1]).astype(np.float32)


def _merge(
    data: DatasetInfo,
    network: Network,
    blocks: list[np.ndarray],
    parts: Path,
    path: Path,
    data_sha256: str,
) -> None:
    """Rank 0: read the parts in class order, write the cache (one class in memory at a time)."""
    k_total, d = data.num_classes, network.feature_dim
    everything = FeatureSums.zeros(d)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as out:
        # fletcher32: HDF5 checks each chunk's checksum as it reads it, so a flipped byte in
        # the statistics is an error (_cache_read), not a wrong FID (tests/faults/
        # test_damaged_anywhere.py); a cache written without it is read unchecked.
        sum32 = {"fletcher32": True}
        class_n = out.create_dataset("class_n", (k_total,), dtype=np.int64, **sum32)
        class_mean = out.create_dataset("class_mean", (k_total, d), dtype=np.float64, **sum32)
        class_sqrt = out.create_dataset(
            "class_cov_sqrt", (k_total, d, d), dtype=np.float32, chunks=(1, d, d), **sum32
        )
        for rank, block in enumerate(blocks):
            if len(block) == 0:
                continue
            with h5py.File(parts / f"rank{rank}.h5", "r") as part:
                for k in (int(c) for c in block):
                    s = FeatureSums(
                        float(part[f"n_{k}"][()]), part[f"total_{k}"][...], part[f"outer_{k}"][...]
                    )
                    everything = everything + s
                    class_n[k] = int(s.n)
                    if s.n >= 2:
                        class_mean[k], class_sqrt[k] = s.moments()[0], part[f"sqrt_{k}"][...]
        mean, cov = everything.moments()
        out["n"] = int(everything.n)
        for name, value in (("mean", mean), ("cov", cov), ("cov_sqrt", sqrt_psd(cov))):
            out.create_dataset(name, data=value, **sum32)
        # Strings of fixed length: HDF5 keeps variable-length ones in a global heap, and loops
        # for ever reading one from a damaged heap (docs/reliability.md). _valid reads the
        # version first, so a version 1 cache (variable-length strings) is computed again unread.
        out.attrs["format_version"] = CACHE_VERSION
        out.attrs["data_sha256"] = fixed_string(data_sha256)
        out.attrs["network"] = fixed_string(network.name)
        out.attrs["network_sha256"] = fixed_string(network.sha256)
        out.attrs["class_names"] = np.array([fixed_string(n) for n in data.class_names])


@contextlib.contextmanager
def _cache_read(path: Path) -> Iterator[None]:
    """h5py's errors on a damaged cache (a chunk whose checksum fails, a damaged header) as one
    line naming it, with the command that lets the next evaluate compute it again."""
    try:
        yield
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise UserError(
            f"the real statistics' cache {path} is damaged ({exc}): delete it (rm {path}) and "
            "evaluate again, which computes it anew"
        ) from exc


def read_class(path: Path, class_id: int) -> RealStats | None:
    """The real statistics of one class (None when it has fewer than two images)."""
    with _cache_read(path), h5py.File(path, "r") as f:
        n = int(f["class_n"][class_id])
        if n < 2:
            return None
        return RealStats(n, f["class_mean"][class_id], f["class_cov_sqrt"][class_id])


def read_real(path: Path, class_ids: Iterable[int]) -> RealStats:
    """The real statistics of the classes `class_ids`: the stored float64 ones when they are
    every class with images, else combined from the per-class ones (a square root to take)."""
    class_ids = sorted(set(class_ids))
    with _cache_read(path), h5py.File(path, "r") as f:
        present = [int(k) for k in np.flatnonzero(f["class_n"][...] > 0)]
        if set(present) <= set(class_ids):
            return RealStats(int(f["n"][()]), f["mean"][...], f["cov_sqrt"][...])
    total = None
    for k in class_ids:
        r = read_class(path, k)
        if r is not None:
            sqrt = r.cov_sqrt.astype(np.float64)
            s = from_moments(r.n, r.mean, sqrt @ sqrt)
            total = s if total is None else total + s
    if total is None:
        raise UserError(f"the real data has fewer than two images in each scored class: {path}")
    mean, cov = total.moments()
    return RealStats(int(total.n), mean, sqrt_psd(cov))
