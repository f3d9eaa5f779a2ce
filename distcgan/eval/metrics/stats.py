"""The sufficient statistics of the classes `evaluate` scores: each class on its rank
(class_stats), then every rank's summed or gathered on rank 0 in one reduction (reduce_stats).

Every rank keeps, per split, the sums of the Inception Score and, over its classes, the feature
sums of FID. What crosses the network: one reduction of the per-split sums (splits x
(num_outputs + 2) numbers), one of the fake feature sums (1 + D + D^2 numbers), one of the
counts of the network's labels (num_outputs numbers), and a gather of a few numbers per class.
Never an image, never a per-sample vector, but for precision and recall, which need feature
vectors: every rank sends rank 0 a share of its classes' fake and real features, in proportion
to the classes' counts, about PR_MAX of each in all (features.pr_takes). With Inception's 2,048
float32 features that is 2 x 10,000 x 8 KiB = 164 MB gathered on rank 0 (the same at 10 or 1,000
classes), plus blocks of 1,024 x 10,000 float64 distances (82 MB).
Leaves out: the metrics of the reduced statistics (summary.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distcgan.eval.metrics.features import fid_against, pr_against, real_features, score_class
from distcgan.eval.metrics.networks import Network
from distcgan.eval.metrics.realstats import read_class
from distcgan.eval.metrics.scores import FeatureSums, ISSums
from distcgan.eval.sampling.source import Source
from distcgan.mpi.comm import Comm
from distcgan.options import EvalOptions


@dataclass(frozen=True)
class Scoring:
    """What every rank agreed on before scoring: the source, the network, the classes, the
    cached real statistics (None without real data), each sample's split, and each class's
    share of the overall precision/recall's rows."""

    opts: EvalOptions
    src: Source
    net: Network
    class_ids: list[int]
    stats_path: Path | None
    split_of: np.ndarray
    take_fake: dict[int, int]
    take_real: dict[int, int]

    @property
    def outputs_are_classes(self) -> bool:
        """Whether the network's outputs are the data's classes: a classifier of the data, or
        an ImageNet Inception on all of ImageNet-1k (data_prep's sorted-wnid order is its)."""
        return self.net.num_outputs == len(self.src.class_names)

    @property
    def accuracy_possible(self) -> bool:
        """Labelled samples and a network whose outputs are the data's classes."""
        return self.src.labelled and self.outputs_are_classes


@dataclass
class Stats:
    """The sufficient statistics of one rank's classes, or of all ranks' after `reduce_stats`:
    per-split Inception sums, the fake features' sums, one row per class, and the feature rows
    kept for the overall precision/recall."""

    is_sums: ISSums
    fake: FeatureSums
    rows: list[dict[str, Any]]
    pr_fake: list[np.ndarray]
    pr_real: list[np.ndarray]
    rank: int = 0  # the rank that scored the classes (before the reduction)
    score_s: float = 0.0
    # Per output of the network, how many samples it assigns to it (argmax), summed as the rest.
    labels: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


def class_stats(s: Scoring, k: int, images: np.ndarray, stats: Stats, bar: Any) -> None:
    """Class k's samples scored on this rank, into `stats`: its Inception and feature sums, its
    row (accuracy, FID, precision and recall against its own real images) and its share of the
    rows of the overall precision/recall."""
    t_class = time.perf_counter()
    opts, src, net, k_slice = s.opts, s.src, s.net, slice(s.src.offsets[k], s.src.offsets[k + 1])
    sums, predicted, feats = score_class(
        net, images, s.split_of[k_slice], stats.is_sums, opts.batch_size, bar
    )
    stats.fake = stats.fake + sums
    stats.labels += np.bincount(predicted, minlength=s.net.num_outputs)
    precision = recall = None
    stats.pr_fake.append(feats[: s.take_fake[k]].float().cpu().numpy())
    if src.data:
        real_feats = real_features(net, src.data, k, opts.seed, opts.batch_size)
        stats.pr_real.append(real_feats[: s.take_real[k]].float().cpu().numpy())
        if src.labelled:
            precision, recall = pr_against(real_feats, feats, net.device)
    real_k = read_class(s.stats_path, k) if s.stats_path else None
    fid = fid_against(sums, real_k) if src.labelled and real_k is not None and sums.n >= 2 else None
    stats.rows.append(
        {
            "class_id": k,
            "name": src.class_names[k],
            "n": len(images),
            "accuracy": float(np.mean(predicted == k)) if s.accuracy_possible else None,
            "correct": int(np.sum(predicted == k)),
            "fid": fid,
            "precision": precision,
            "recall": recall,
            "rank": stats.rank,
            "score_s": round(time.perf_counter() - t_class, 3),
        }
    )


def reduce_stats(comm: Comm, mine: Stats, feature_dim: int) -> Stats | None:
    """Collective, the one reduction: per-split sums and fake feature sums summed over ranks,
    the class rows and the precision/recall rows gathered (about PR_MAX of each in all), the
    slowest rank's scoring time; on rank 0 (None elsewhere)."""
    d = feature_dim
    is_total = _reduce(comm, mine.is_sums.pack())
    fake = mine.fake
    fake_total = _reduce(comm, np.concatenate([[fake.n], fake.total, fake.outer.ravel()]))
    labels = _reduce(comm, mine.labels.astype(np.float64))
    gathered = comm.gather(mine.rows, root=0)
    pr_parts = comm.gather((mine.pr_fake, mine.pr_real), root=0)
    score_s_max = comm.reduce(mine.score_s, op=_mpi().MAX, root=0)
    if comm.rank != 0:
        return None
    assert is_total is not None and fake_total is not None  # reduced and gathered on rank 0
    assert gathered is not None and pr_parts is not None and labels is not None
    return Stats(
        is_sums=ISSums.unpack(is_total),
        fake=FeatureSums(
            float(fake_total[0]), fake_total[1 : 1 + d], fake_total[1 + d :].reshape(d, d)
        ),
        rows=sorted((r for part in gathered for r in part), key=lambda r: r["class_id"]),
        pr_fake=[a for fakes, _ in pr_parts for a in fakes],
        pr_real=[a for _, reals in pr_parts for a in reals],
        score_s=score_s_max,
        labels=labels,
    )


def _reduce(comm: Comm, buf: np.ndarray) -> np.ndarray | None:
    """Collective: the element-wise sum over ranks of a float64 buffer, on rank 0 (None
    elsewhere)."""
    out = np.zeros_like(buf) if comm.rank == 0 else None
    comm.Reduce(np.ascontiguousarray(buf), out, op=_mpi().SUM, root=0)
    return out


def _mpi() -> Any:
    # Imported on the first reduction, not with the module: importing mpi4py.MPI initialises
    # MPI, which only a command's entry point does (mpi/entry.py); a test or a tool may import
    # this module in a process that never starts MPI.
    from mpi4py import MPI

    return MPI
